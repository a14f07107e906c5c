//! What a push would carry out, looked at before it leaves: the worktree's files before they are
//! committed, then every commit the push adds (its files and its message). A push is refused for:
//!
//! - one of picogent's own secrets, exactly (the tracker's token, the model's key, the MCP
//!   token, every `${VAR}` a coding agent's entry names): no heuristics needed;
//! - a well-known credential's shape ([`SHAPES`]: private keys, cloud and forge tokens);
//! - a file over `workspaces.max_file_bytes`;
//! - a link that points out of the worktree (an absolute target, or one that climbs out);
//! - a pipe, socket or device.
//!
//! A finding names the file and the rule, never the secret. Nothing here reads more than
//! `max_file_bytes` of a file, or follows a link.

use std::fmt;
use std::path::{Component, Path};
use std::sync::LazyLock;

use regex::bytes::RegexSet;
use serde::Serialize;

use crate::git::{Git, GitError, Pinned};

/// Credential shapes: what each looks like, and its pattern.
pub const SHAPES: [(&str, &str); 11] = [
    ("a private key", r"-----BEGIN ((RSA|DSA|EC|OPENSSH|PGP|ENCRYPTED) )?PRIVATE KEY( BLOCK)?-----"),
    ("an AWS access key", r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("a GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{36,}"),
    ("a GitHub token", r"\bgithub_pat_[A-Za-z0-9_]{60,}"),
    ("a GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("an OpenAI or Anthropic key", r"\bsk-(proj-|ant-[a-z0-9]+-)?[A-Za-z0-9_-]{32,}"),
    ("a Stripe key", r"\b[rs]k_live_[0-9A-Za-z]{24,}"),
    ("an npm token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("a PyPI token", r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}"),
];

static PATTERNS: LazyLock<Option<RegexSet>> = LazyLock::new(|| RegexSet::new(SHAPES.iter().map(|(_, p)| p)).ok());

/// How many commits one push may add: a push of more is refused unread.
const MAX_COMMITS: usize = 1000;

/// A secret shorter than this is not looked for (it would match by chance).
const MIN_SECRET: usize = 8;

/// Why a file may not be pushed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "rule")]
pub enum Rule {
    /// One of picogent's secrets; what it is (`the tracker's token (TEAMBOARD_TOKEN)`).
    Secret {
        what: String,
    },
    /// A credential's shape; which.
    Credential {
        what: String,
    },
    TooLarge {
        bytes: u64,
        limit: u64,
    },
    LinkOutside,
    NotAFile,
    TooManyCommits,
}

/// One file (or commit message) a push may not carry, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub file: String,
    #[serde(flatten)]
    pub rule: Rule,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = &self.file;
        match &self.rule {
            Rule::Secret { what } => write!(f, "{file} holds {what}"),
            Rule::Credential { what } => write!(f, "{file} holds what looks like {what}"),
            Rule::TooLarge { bytes, limit } => {
                write!(f, "{file} is {bytes} bytes, over workspaces.max_file_bytes ({limit})")
            }
            Rule::LinkOutside => write!(f, "{file} is a link out of the worktree"),
            Rule::NotAFile => write!(f, "{file} is not a file (a pipe, a socket or a device)"),
            Rule::TooManyCommits => write!(f, "{file}: the branch adds more than {MAX_COMMITS} commits"),
        }
    }
}

/// The rules of one push: the secrets looked for, by what they are, and the size limit.
pub struct PushScan {
    pub secrets: Vec<(String, String)>,
    pub max_file_bytes: u64,
}

impl PushScan {
    /// What in `text` may not leave: a secret, or a credential's shape.
    fn content(&self, file: &str, text: &[u8]) -> Option<Finding> {
        for (what, secret) in &self.secrets {
            if secret.len() >= MIN_SECRET && contains(text, secret.as_bytes()) {
                return Some(Finding { file: file.to_string(), rule: Rule::Secret { what: what.clone() } });
            }
        }
        let matched = PATTERNS.as_ref()?.matches(text).into_iter().next()?;
        let what = SHAPES[matched].0.to_string();
        Some(Finding { file: file.to_string(), rule: Rule::Credential { what } })
    }

    /// The worktree's changes before they are committed: links out of it, files too large, and
    /// what is neither a file nor a link. Read with `lstat` only.
    pub async fn worktree(&self, git: &Git, pinned: &Pinned) -> Result<Vec<Finding>, GitError> {
        let status = git
            .in_worktree(
                pinned,
                &[
                    "--no-optional-locks",
                    "status",
                    "--porcelain=v1",
                    "-z",
                    "--untracked-files=all",
                    "--ignore-submodules=all",
                ],
            )
            .await?;
        let mut findings = Vec::new();
        let mut entries = status.split('\0').filter(|entry| !entry.is_empty());
        while let Some(entry) = entries.next() {
            let (code, file) = (entry.get(..2).unwrap_or(""), entry.get(3..).unwrap_or(""));
            if code.contains('R') || code.contains('C') {
                entries.next(); // the name it had
            }
            if file.is_empty() || code.ends_with('D') || code == "D " {
                continue;
            }
            let path = pinned.work_tree.join(file);
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let kind = meta.file_type();
            let rule = if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap_or_default();
                link_outside(Path::new(file), &target).then_some(Rule::LinkOutside)
            } else if kind.is_file() {
                (meta.len() > self.max_file_bytes)
                    .then_some(Rule::TooLarge { bytes: meta.len(), limit: self.max_file_bytes })
            } else if kind.is_dir() {
                None
            } else {
                Some(Rule::NotAFile)
            };
            if let Some(rule) = rule {
                findings.push(Finding { file: file.to_string(), rule });
            }
        }
        Ok(findings)
    }

    /// Every commit in `base..head` in the mirror: the files each adds or changes (read from the
    /// object store, by size first) and its message.
    pub async fn commits(&self, git: &Git, mirror: &Path, base: &str, head: &str) -> Result<Vec<Finding>, GitError> {
        let range = format!("{base}..{head}");
        let limit = format!("--max-count={}", MAX_COMMITS + 1);
        let listed = git.run(mirror, &["rev-list", &limit, &range]).await?;
        let commits: Vec<&str> = listed.lines().filter(|line| !line.is_empty()).collect();
        if commits.len() > MAX_COMMITS {
            return Ok(vec![Finding { file: range, rule: Rule::TooManyCommits }]);
        }
        let mut findings = Vec::new();
        let mut blobs: Vec<(String, String, String)> = Vec::new();
        for commit in &commits {
            let raw =
                git.run(mirror, &["diff-tree", "-r", "-m", "-z", "--no-renames", "--root", "--raw", commit]).await?;
            let mut parts = raw.split('\0');
            while let Some(part) = parts.next() {
                let Some(fields) = part.strip_prefix(':') else { continue };
                let Some(file) = parts.next() else { break };
                let fields: Vec<&str> = fields.split(' ').collect();
                let [_, mode, _, sha, status] = fields[..] else { continue };
                if status.starts_with('D') || mode == "160000" {
                    continue;
                }
                if !blobs.iter().any(|(seen, seen_mode, _)| seen == sha && seen_mode == mode) {
                    blobs.push((sha.to_string(), mode.to_string(), file.to_string()));
                }
            }
            let message = git.run(mirror, &["log", "-1", "--format=%B", commit]).await?;
            let short = commit.get(..10).unwrap_or(commit);
            findings.extend(self.content(&format!("the message of commit {short}"), message.as_bytes()));
        }
        let input: String = blobs.iter().map(|(sha, _, _)| format!("{sha}\n")).collect();
        let sizes =
            git.run_with_input(mirror, &["cat-file", "--batch-check=%(objectname) %(objectsize)"], &input).await?;
        let sizes: Vec<u64> = sizes
            .lines()
            .map(|line| line.split(' ').nth(1).and_then(|size| size.parse().ok()).unwrap_or(u64::MAX))
            .collect();
        let mut batch: Vec<(&str, &str, &str)> = Vec::new();
        let mut batch_bytes = 0u64;
        for ((sha, mode, file), size) in blobs.iter().zip(sizes.iter().copied()) {
            if mode == "120000" {
                let target = git.run(mirror, &["cat-file", "blob", sha]).await?;
                if link_outside(Path::new(file), Path::new(&target)) {
                    findings.push(Finding { file: file.clone(), rule: Rule::LinkOutside });
                }
                continue;
            }
            if size > self.max_file_bytes {
                findings.push(Finding {
                    file: file.clone(),
                    rule: Rule::TooLarge { bytes: size, limit: self.max_file_bytes },
                });
                continue;
            }
            if batch_bytes + size > BATCH_BYTES && !batch.is_empty() {
                findings.extend(self.read_batch(git, mirror, &batch).await?);
                (batch, batch_bytes) = (Vec::new(), 0);
            }
            batch.push((sha, file, mode));
            batch_bytes += size;
        }
        if !batch.is_empty() {
            findings.extend(self.read_batch(git, mirror, &batch).await?);
        }
        Ok(findings)
    }

    /// The contents of `batch` (sha, file, mode) from one `cat-file --batch`, each looked at.
    async fn read_batch(
        &self,
        git: &Git,
        mirror: &Path,
        batch: &[(&str, &str, &str)],
    ) -> Result<Vec<Finding>, GitError> {
        let input: String = batch.iter().map(|(sha, _, _)| format!("{sha}\n")).collect();
        let output = git.bytes_with_input(mirror, &["cat-file", "--batch"], &input).await?;
        let mut findings = Vec::new();
        let mut rest = output.as_slice();
        for (_, file, _) in batch {
            // `<sha> <type> <size>\n<content>\n`
            let Some(end) = rest.iter().position(|byte| *byte == b'\n') else { break };
            let header = String::from_utf8_lossy(&rest[..end]).into_owned();
            let size: usize = header.rsplit(' ').next().and_then(|size| size.parse().ok()).unwrap_or(0);
            let start = end + 1;
            let content = rest.get(start..start + size).unwrap_or(&[]);
            findings.extend(self.content(file, content));
            rest = rest.get(start + size + 1..).unwrap_or(&[]);
        }
        Ok(findings)
    }
}

/// How many bytes of files one `cat-file --batch` reads.
const BATCH_BYTES: u64 = 8 * 1024 * 1024;

/// Whether `haystack` holds `needle`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|window| window == needle)
}

/// Whether a link at `file` (relative to the worktree) to `target` points out of the worktree:
/// an absolute target, or a relative one that climbs above the worktree's top.
pub fn link_outside(file: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return true;
    }
    let mut depth: i64 = 0;
    let parent = file.parent().unwrap_or(Path::new(""));
    for part in parent.components().chain(target.components()) {
        match part {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => depth -= 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return true,
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// The `${NAME}` variables a value names.
pub fn named_variables(value: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = value;
    while let Some(open) = rest.find("${") {
        let after = &rest[open + 2..];
        let Some(close) = after.find('}') else { break };
        let name = after[..close].split(":-").next().unwrap_or("");
        if !name.is_empty() {
            names.push(name.to_string());
        }
        rest = &after[close + 1..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_out_of_the_worktree_are_told_from_links_within_it() {
        assert!(link_outside(Path::new("a"), Path::new("/etc/passwd")));
        assert!(link_outside(Path::new("a"), Path::new("../x")));
        assert!(link_outside(Path::new("d/a"), Path::new("../../x")));
        assert!(!link_outside(Path::new("d/a"), Path::new("../x")));
        assert!(!link_outside(Path::new("a"), Path::new("src/date.py")));
        assert!(link_outside(Path::new("a"), Path::new("src/../../x")));
    }

    #[test]
    fn a_secret_is_named_by_what_it_is_and_credential_shapes_are_found() {
        let scan = PushScan {
            secrets: vec![("the tracker's token (TEAMBOARD_TOKEN)".into(), "tok-very-secret".into())],
            max_file_bytes: 100,
        };
        let found = scan.content("leak.txt", b"x tok-very-secret y").unwrap();
        assert_eq!(found.to_string(), "leak.txt holds the tracker's token (TEAMBOARD_TOKEN)");
        assert!(!found.to_string().contains("tok-very-secret"));
        let key = b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n";
        assert_eq!(scan.content("id", key).unwrap().to_string(), "id holds what looks like a private key");
        let aws = b"aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n";
        assert_eq!(scan.content("cfg", aws).unwrap().rule, Rule::Credential { what: "an AWS access key".into() });
        assert!(scan.content("ok.py", b"def parse():\n    return 1\n").is_none());
        assert!(PATTERNS.is_some(), "every pattern compiles");
    }

    #[test]
    fn the_variables_an_entry_names_are_read_from_its_values() {
        assert_eq!(named_variables("${A} and ${B:-x} ${"), ["A", "B"]);
    }
}
