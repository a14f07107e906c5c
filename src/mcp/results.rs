//! What an MCP server's answer becomes for the model: one text block it can read.
//!
//! Invariants:
//! - binary data (images, audio, blobs) never enters the context: it is saved as an artifact
//!   under `<state dir>/artifacts/<run>/<server>/<tool>/` and the model gets its id, size, path;
//! - text longer than `limits.max_tool_result_bytes` is saved whole as an artifact and the model
//!   gets the first lines and where the rest is;
//! - `structuredContent` is shown as formatted JSON (a text block repeating it is dropped);
//!   a `resource_link` is one line with its URI and MIME type;
//! - `is_error` is kept.

use std::path::{Path, PathBuf};

use base64::Engine;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

/// Lines of a large result shown inline before the pointer to its artifact.
const PREVIEW_LINES: usize = 20;

/// Where artifacts go, and how much text may stay inline.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    root: PathBuf,
    max_inline_bytes: usize,
}

/// One saved artifact.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub id: String,
    pub path: PathBuf,
    pub size: usize,
}

impl ArtifactStore {
    /// `root` is the artifacts folder itself (`<state dir>/artifacts`).
    pub fn new(root: PathBuf, max_inline_bytes: usize) -> ArtifactStore {
        ArtifactStore { root, max_inline_bytes: max_inline_bytes.max(1) }
    }

    /// `<parent of state.path>/artifacts`, inline limit `limits.max_tool_result_bytes`.
    pub fn from_config(config: &crate::config::Config) -> ArtifactStore {
        let state_dir = config.state.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        ArtifactStore::new(state_dir.join("artifacts"), config.limits.max_tool_result_bytes)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn max_inline_bytes(&self) -> usize {
        self.max_inline_bytes
    }

    /// Saves `bytes` as `<root>/<run>/<server>/<tool>/<id>.<ext>`.
    pub fn save(
        &self,
        run: Option<&str>,
        server: &str,
        tool: &str,
        mime_type: Option<&str>,
        bytes: &[u8],
    ) -> std::io::Result<Artifact> {
        let id = format!("art-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let folder =
            self.root.join(path_segment(run.unwrap_or("no-run"))).join(path_segment(server)).join(path_segment(tool));
        std::fs::create_dir_all(&folder)?;
        let path = folder.join(format!("{id}.{}", extension(mime_type)));
        std::fs::write(&path, bytes)?;
        Ok(Artifact { id, path, size: bytes.len() })
    }

    /// Turns a `tools/call` result into one text block for the model.
    pub fn shape_tool_result(
        &self,
        result: CallToolResult,
        run: Option<&str>,
        server: &str,
        tool: &str,
    ) -> CallToolResult {
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
        if result.is_error == Some(true) {
            CallToolResult::error(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(text)])
        }
    }

    /// Turns a `resources/read` result into one text block for the model.
    pub fn shape_resource(&self, contents: Vec<ResourceContents>, run: Option<&str>, server: &str) -> CallToolResult {
        let parts: Vec<String> =
            contents.into_iter().map(|c| self.describe_contents(c, run, server, "read_mcp_resource")).collect();
        let text = if parts.is_empty() { "the resource is empty".to_string() } else { parts.join("\n") };
        CallToolResult::success(vec![ContentBlock::text(self.fit(text, run, server, "read_mcp_resource"))])
    }

    /// Keeps `text` inline when small; otherwise saves it and returns the preview.
    fn fit(&self, text: String, run: Option<&str>, server: &str, tool: &str) -> String {
        if text.len() <= self.max_inline_bytes {
            return text;
        }
        let artifact = match self.save(run, server, tool, Some("text/plain"), text.as_bytes()) {
            Ok(artifact) => artifact,
            Err(error) => {
                tracing::warn!(server, tool, %error, "cannot save a large tool result as an artifact; cutting it");
                return format!(
                    "{}\n[cut at {} of {} bytes; the rest could not be saved: {error}]",
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
            Err(error) => format!("[{kind} ({mime}, {} bytes) omitted: it could not be saved: {error}]", bytes.len()),
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

    fn text_of(result: &CallToolResult) -> &str {
        &result.content[0].as_text().unwrap().text
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
        assert_eq!(shaped.is_error, Some(true));
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
