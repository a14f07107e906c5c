//! What an MCP server's answer becomes for the model: one text it can read, a [`ToolResult`].
//!
//! Invariants:
//! - binary data (images, audio, blobs) never enters the context: it is saved as an artifact
//!   under `<state dir>/artifacts/<run>/<server>/<tool>/` and the model gets its id, size, path;
//! - text longer than `limits.max_tool_result_bytes` is saved whole as an artifact and the model
//!   gets the first lines and where the rest is;
//! - artifacts are private (`0600` files in `0700` folders, [`picogent_support::private_files`]) and within
//!   two quotas: `limits.max_artifact_bytes_per_run` for one run's, `limits.max_artifact_bytes` for
//!   the whole folder. What would pass one is not saved, and the model is told so and why; the
//!   quotas are counted from the disk, under one lock, so concurrent saves cannot pass them
//!   together;
//! - a run's artifacts go with it: retention removes `<run>/` when the run is past
//!   `retention.runs_ms` (`runtime/retention.rs`);
//! - `structuredContent` is shown as formatted JSON (a text block repeating it is dropped);
//!   a `resource_link` is one line with its URI and MIME type;
//! - `is_error` is kept.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine;
use picogent_tools::ToolResult;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

use picogent_support::private_files::{self, PrivateFileError};

/// Lines of a large result shown inline before the pointer to its artifact.
const PREVIEW_LINES: usize = 20;
/// The folder of the artifacts of calls made outside a run.
const NO_RUN: &str = "no-run";

/// Where artifacts go, how much text may stay inline, and how much may be saved.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    root: PathBuf,
    max_inline_bytes: usize,
    max_run_bytes: u64,
    max_total_bytes: u64,
    /// Held while a save counts the quotas and writes, so two saves cannot pass them together.
    saving: Arc<Mutex<()>>,
}

/// One saved artifact.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub id: String,
    pub path: PathBuf,
    pub size: usize,
}

/// Why an artifact was not saved. The messages are read by the model.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error(
        "this run's artifacts would pass their quota of {limit} bytes (limits.max_artifact_bytes_per_run; \
         {used} bytes saved already): ask for less, or a part at a time"
    )]
    RunQuota { limit: u64, used: u64 },
    #[error(
        "the artifacts folder would pass its quota of {limit} bytes (limits.max_artifact_bytes; {used} bytes \
         kept): ask for less; older runs' artifacts go with their runs (retention.runs_ms)"
    )]
    TotalQuota { limit: u64, used: u64 },
    #[error(transparent)]
    File(#[from] PrivateFileError),
}

impl ArtifactStore {
    /// `root` is the artifacts folder itself (`<state dir>/artifacts`). The quotas are those of
    /// the default `limits` until [`ArtifactStore::with_quotas`].
    pub fn new(root: PathBuf, max_inline_bytes: usize) -> ArtifactStore {
        let limits = picogent_agent::Limits::default();
        ArtifactStore {
            root,
            max_inline_bytes: max_inline_bytes.max(1),
            max_run_bytes: limits.max_artifact_bytes_per_run,
            max_total_bytes: limits.max_artifact_bytes,
            saving: Arc::new(Mutex::new(())),
        }
    }

    /// The quotas: bytes one run may save, and bytes the whole folder may hold.
    pub fn with_quotas(self, max_run_bytes: u64, max_total_bytes: u64) -> ArtifactStore {
        ArtifactStore { max_run_bytes, max_total_bytes, ..self }
    }

    /// `<parent of state.path>/artifacts`, inline limit `limits.max_tool_result_bytes`, quotas
    /// `limits.max_artifact_bytes_per_run` and `limits.max_artifact_bytes`.
    pub fn from_config(state: &picogent_state::StateConfig, limits: &picogent_agent::Limits) -> ArtifactStore {
        let state_dir = state.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        ArtifactStore::new(state_dir.join("artifacts"), limits.max_tool_result_bytes)
            .with_quotas(limits.max_artifact_bytes_per_run, limits.max_artifact_bytes)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn max_inline_bytes(&self) -> usize {
        self.max_inline_bytes
    }

    /// Saves `bytes` as `<root>/<run>/<server>/<tool>/<id>.<ext>`, within the quotas.
    pub fn save(
        &self,
        run: Option<&str>,
        server: &str,
        tool: &str,
        mime_type: Option<&str>,
        bytes: &[u8],
    ) -> Result<Artifact, SaveError> {
        let id = format!("art-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let run_folder = self.root.join(path_segment(run.unwrap_or(NO_RUN)));
        let folder = run_folder.join(path_segment(server)).join(path_segment(tool));
        let size = bytes.len() as u64;
        let _saving = self.saving.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let used = disk_usage(&run_folder);
        if used.saturating_add(size) > self.max_run_bytes {
            return Err(SaveError::RunQuota { limit: self.max_run_bytes, used });
        }
        let used = disk_usage(&self.root);
        if used.saturating_add(size) > self.max_total_bytes {
            return Err(SaveError::TotalQuota { limit: self.max_total_bytes, used });
        }
        private_files::create_private_dir_all(&folder)?;
        let path = folder.join(format!("{id}.{}", extension(mime_type)));
        private_files::write_new_private(&path, bytes)?;
        Ok(Artifact { id, path, size: bytes.len() })
    }

    /// The run ids that have artifacts (their folders' names), not the folder of calls made
    /// outside a run.
    pub fn runs(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.root) else { return Vec::new() };
        entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name != NO_RUN)
            .collect()
    }

    /// Removes the artifacts of `run`; answers the bytes they took.
    pub fn remove_run(&self, run: &str) -> std::io::Result<u64> {
        let folder = self.root.join(path_segment(run));
        let _saving = self.saving.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let size = disk_usage(&folder);
        match std::fs::remove_dir_all(&folder) {
            Ok(()) => Ok(size),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(error) => Err(error),
        }
    }

    /// Removes the artifacts of calls made outside a run that were saved before `before`;
    /// answers how many went.
    pub fn remove_runless_before(&self, before: std::time::SystemTime) -> u64 {
        fn walk(folder: &Path, before: std::time::SystemTime, removed: &mut u64) {
            let Ok(entries) = std::fs::read_dir(folder) else { return };
            for entry in entries.filter_map(Result::ok) {
                let Ok(metadata) = entry.metadata() else { continue };
                if metadata.is_dir() {
                    walk(&entry.path(), before, removed);
                } else if metadata.modified().is_ok_and(|at| at < before) && std::fs::remove_file(entry.path()).is_ok()
                {
                    *removed += 1;
                }
            }
        }
        let _saving = self.saving.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut removed = 0;
        walk(&self.root.join(NO_RUN), before, &mut removed);
        removed
    }

    /// Turns a `tools/call` result into one text block for the model.
    pub fn shape_tool_result(&self, result: CallToolResult, run: Option<&str>, server: &str, tool: &str) -> ToolResult {
        let mut parts: Vec<String> = Vec::new();
        let mut texts: Vec<String> = Vec::new();
        for block in result.content {
            match block {
                ContentBlock::Text(text) => {
                    texts.push(text.text.clone());
                    parts.push(text.text);
                }
                ContentBlock::Image(image) => {
                    parts.push(self.save_base64("image", &image.data, &image.mime_type, run, server, tool));
                }
                ContentBlock::Audio(audio) => {
                    parts.push(self.save_base64("audio", &audio.data, &audio.mime_type, run, server, tool));
                }
                ContentBlock::Resource(embedded) => {
                    parts.push(self.describe_contents(embedded.resource, run, server, tool))
                }
                ContentBlock::ResourceLink(link) => parts.push(format!(
                    "[resource link] {} (MIME type {}){}{}",
                    link.uri,
                    link.mime_type.as_deref().unwrap_or("unknown"),
                    if link.name.is_empty() { String::new() } else { format!(" — {}", link.name) },
                    link.description.as_deref().map(|d| format!(": {d}")).unwrap_or_default(),
                )),
                other => parts.push(format!("[unsupported content omitted: {}]", content_kind(&other))),
            }
        }
        if let Some(structured) = result.structured_content {
            // Servers often repeat the structured value as text; show it once.
            parts.retain(|part| {
                !(texts.contains(part)
                    && serde_json::from_str::<serde_json::Value>(part).ok().as_ref() == Some(&structured))
            });
            let pretty = serde_json::to_string_pretty(&structured).unwrap_or_else(|_| structured.to_string());
            parts.push(format!("structured content:\n{pretty}"));
        }
        let text = self.fit(parts.join("\n"), run, server, tool);
        ToolResult { text, structured: None, is_error: result.is_error == Some(true) }
    }

    /// Turns a `resources/read` result into one text block for the model.
    pub fn shape_resource(&self, contents: Vec<ResourceContents>, run: Option<&str>, server: &str) -> ToolResult {
        let parts: Vec<String> =
            contents.into_iter().map(|c| self.describe_contents(c, run, server, "read_mcp_resource")).collect();
        let text = if parts.is_empty() { "the resource is empty".to_string() } else { parts.join("\n") };
        ToolResult::success(self.fit(text, run, server, "read_mcp_resource"))
    }

    /// Keeps `text` inline when small; otherwise saves it and returns the preview.
    fn fit(&self, text: String, run: Option<&str>, server: &str, tool: &str) -> String {
        if text.len() <= self.max_inline_bytes {
            return text;
        }
        let artifact = match self.save(run, server, tool, Some("text/plain"), text.as_bytes()) {
            Ok(artifact) => artifact,
            Err(error) => {
                tracing::warn!(server, tool, %error, "a large tool result was not saved as an artifact; cutting it");
                return format!(
                    "{}\n[cut at {} of {} bytes: the rest was not saved, because {error}]",
                    cut(&text, self.max_inline_bytes / 2),
                    self.max_inline_bytes / 2,
                    text.len()
                );
            }
        };
        let head: String = text.lines().take(PREVIEW_LINES).collect::<Vec<_>>().join("\n");
        let head = cut(&head, self.max_inline_bytes / 2);
        format!(
            "[the result is {} bytes, over the {}-byte inline limit: saved as artifact {} at {}]\nfirst lines:\n{}\n[...]",
            artifact.size,
            self.max_inline_bytes,
            artifact.id,
            artifact.path.display(),
            head
        )
    }

    fn describe_contents(&self, contents: ResourceContents, run: Option<&str>, server: &str, tool: &str) -> String {
        match contents {
            ResourceContents::TextResourceContents { uri, mime_type, text, .. } => {
                format!("[resource {uri} ({})]\n{text}", mime_type.as_deref().unwrap_or("text"))
            }
            ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                format!("[resource {uri}] {}", self.save_base64("blob", &blob, mime, run, server, tool))
            }
            _ => "[resource contents of an unknown kind omitted]".to_string(),
        }
    }

    fn save_base64(&self, kind: &str, data: &str, mime: &str, run: Option<&str>, server: &str, tool: &str) -> String {
        let bytes = match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
            Ok(bytes) => bytes,
            Err(error) => return format!("[{kind} ({mime}) omitted: its base64 data is invalid: {error}]"),
        };
        match self.save(run, server, tool, Some(mime), &bytes) {
            Ok(artifact) => format!(
                "[{kind} saved as artifact {}: {mime}, {} bytes, at {}]",
                artifact.id,
                artifact.size,
                artifact.path.display()
            ),
            Err(error) => {
                format!("[{kind} ({mime}, {} bytes) omitted: it was not saved, because {error}]", bytes.len())
            }
        }
    }
}

fn content_kind(block: &ContentBlock) -> String {
    serde_json::to_value(block)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The bytes of the files under `folder` (0 when it is missing); links are not followed.
fn disk_usage(folder: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(folder) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => disk_usage(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |metadata| metadata.len()),
            _ => 0,
        })
        .sum()
}

/// A file-name-safe version of a name from a server or the model.
fn path_segment(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(80)
        .collect();
    if cleaned.is_empty() { "_".to_string() } else { cleaned }
}

fn extension(mime_type: Option<&str>) -> &'static str {
    match mime_type.map(|m| m.split(';').next().unwrap_or("").trim().to_ascii_lowercase()).as_deref() {
        Some("image/png") => "png",
        Some("image/jpeg") => "jpg",
        Some("image/gif") => "gif",
        Some("image/webp") => "webp",
        Some("image/svg+xml") => "svg",
        Some("audio/wav") | Some("audio/x-wav") => "wav",
        Some("audio/mpeg") => "mp3",
        Some("application/json") => "json",
        Some("application/gzip") => "gz",
        Some("application/pdf") => "pdf",
        Some(m) if m.starts_with("text/") => "txt",
        _ => "bin",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(result: &ToolResult) -> &str {
        &result.text
    }

    #[test]
    fn small_text_stays_inline_and_large_text_becomes_an_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(dir.path().join("artifacts"), 100);
        let small = store.shape_tool_result(CallToolResult::success(vec![ContentBlock::text("hello")]), None, "s", "t");
        assert_eq!(text_of(&small), "hello");

        let big: String = (0..50).map(|i| format!("line {i}\n")).collect();
        let shaped = store.shape_tool_result(
            CallToolResult::success(vec![ContentBlock::text(big.clone())]),
            Some("run-1"),
            "s",
            "t",
        );
        let text = text_of(&shaped);
        assert!(text.contains("saved as artifact art-"), "{text}");
        assert!(text.contains("line 0"), "{text}");
        let path = text.split(" at ").nth(1).unwrap().split(']').next().unwrap();
        assert!(path.contains("/artifacts/run-1/s/t/"), "{path}");
        assert_eq!(std::fs::read_to_string(path).unwrap(), big);
    }

    #[test]
    fn images_are_saved_never_inlined_and_errors_stay_errors() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(dir.path().to_path_buf(), 8192);
        let data = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG-bytes");
        let mut result = CallToolResult::success(vec![ContentBlock::image(data.clone(), "image/png")]);
        result.is_error = Some(true);
        let shaped = store.shape_tool_result(result, None, "s", "t");
        let text = text_of(&shaped);
        assert!(
            text.contains("image saved as artifact") && text.contains("image/png") && text.contains(".png"),
            "{text}"
        );
        assert!(!text.contains(&data));
        assert!(shaped.is_error);
    }

    #[test]
    fn artifacts_are_private_and_within_their_quotas_and_go_with_their_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(dir.path().join("artifacts"), 10).with_quotas(100, 150);
        let saved = store.save(Some("run-a"), "s", "t", None, &[1; 60]).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let mode = |path: &Path| std::fs::metadata(path).unwrap().mode() & 0o777;
            assert_eq!(mode(&saved.path), 0o600);
            for folder in saved.path.ancestors().skip(1).take(4) {
                assert_eq!(mode(folder), 0o700, "{}", folder.display());
            }
        }
        let error = store.save(Some("run-a"), "s", "t", None, &[1; 60]).unwrap_err();
        assert!(matches!(error, SaveError::RunQuota { limit: 100, used: 60 }), "{error}");
        assert!(error.to_string().contains("limits.max_artifact_bytes_per_run"), "{error}");
        store.save(Some("run-b"), "s", "t", None, &[1; 60]).unwrap();
        let error = store.save(Some("run-c"), "s", "t", None, &[1; 60]).unwrap_err();
        assert!(matches!(error, SaveError::TotalQuota { limit: 150, used: 120 }), "{error}");

        // What the model reads when a large text cannot be saved: the start, and why.
        let big: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let shaped =
            store.shape_tool_result(CallToolResult::success(vec![ContentBlock::text(big)]), Some("run-c"), "s", "t");
        let text = text_of(&shaped);
        assert!(text.contains("was not saved") && text.contains("limits.max_artifact_bytes"), "{text}");

        let mut runs = store.runs();
        runs.sort();
        assert_eq!(runs, ["run-a", "run-b"]);
        assert_eq!(store.remove_run("run-a").unwrap(), 60);
        assert_eq!(store.runs(), ["run-b"]);
        store.save(Some("run-c"), "s", "t", None, &[1; 60]).unwrap();
        store.save(None, "s", "t", None, &[1; 10]).unwrap();
        assert_eq!(store.remove_runless_before(std::time::SystemTime::UNIX_EPOCH), 0, "too young");
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(1);
        assert_eq!(store.remove_runless_before(later), 1);
    }

    #[test]
    fn structured_content_is_pretty_json_shown_once() {
        let store = ArtifactStore::new(PathBuf::from("/nonexistent"), 8192);
        let mut result = CallToolResult::success(vec![ContentBlock::text(r#"{"a":1}"#)]);
        result.structured_content = Some(serde_json::json!({"a": 1}));
        let shaped = store.shape_tool_result(result, None, "s", "t");
        assert_eq!(text_of(&shaped), "structured content:\n{\n  \"a\": 1\n}");
    }
}
