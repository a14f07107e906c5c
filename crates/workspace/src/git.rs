//! picogent's own git commands (clone, fetch, worktrees, commit, push): the `git` program, run
//! with every argument passed as one (no shell), a `--` before paths and branches wherever git
//! takes one, no prompt for credentials, and a timeout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::child::{self, Group};

/// How long one git command may take (a clone or a push over the network included).
pub const GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// A git command that failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git (is it installed?): {0}")]
    Spawn(std::io::Error),
    #[error("`git {args}` failed ({status}): {stderr}")]
    Failed { args: String, status: String, stderr: String },
    #[error("`git {args}` took longer than {}s", GIT_TIMEOUT.as_secs())]
    TimedOut { args: String },
}

/// Runs git in one folder, as picogent: its own `HOME` (git's user settings and credentials are
/// the operator's, so `HOME` is picogent's), plus an ssh agent if picogent has one.
#[derive(Debug, Clone)]
pub struct Git {
    home: PathBuf,
    env: BTreeMap<String, String>,
}

impl Git {
    /// Commits are made as `name <email>`.
    pub fn new(name: &str, email: &str) -> Git {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
        let mut env = BTreeMap::from([
            ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
            ("GIT_AUTHOR_NAME".to_string(), name.to_string()),
            ("GIT_AUTHOR_EMAIL".to_string(), email.to_string()),
            ("GIT_COMMITTER_NAME".to_string(), name.to_string()),
            ("GIT_COMMITTER_EMAIL".to_string(), email.to_string()),
        ]);
        for name in ["SSH_AUTH_SOCK", "GIT_SSH_COMMAND"] {
            if let Ok(value) = std::env::var(name) {
                env.insert(name.to_string(), value);
            }
        }
        Git { home, env }
    }

    /// `git ARGS` in `dir`; its standard output, trimmed at the end.
    pub async fn run(&self, dir: &Path, args: &[&str]) -> Result<String, GitError> {
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let shown = args.join(" ");
        let command = child::command("git", &args, dir, &self.home, &self.env);
        let mut group = Group::spawn(command).map_err(GitError::Spawn)?;
        let stdout = group.child.stdout.take();
        let stderr = group.child.stderr.take();
        let read = async {
            let (out, err) = tokio::join!(read_all(stdout), read_all(stderr));
            (group.child.wait().await, out, err)
        };
        let (status, out, err) = match tokio::time::timeout(GIT_TIMEOUT, read).await {
            Ok(done) => done,
            Err(_) => {
                group.stop().await;
                return Err(GitError::TimedOut { args: shown });
            }
        };
        let status = status.map_err(GitError::Spawn)?;
        if status.success() {
            Ok(out.trim_end().to_string())
        } else {
            let status = match status.code() {
                Some(code) => format!("exit {code}"),
                None => "killed by a signal".to_string(),
            };
            Err(GitError::Failed { args: shown, status, stderr: last_lines(&err, 6) })
        }
    }

    /// Whether `git ARGS` succeeds (for questions git answers by its exit code).
    pub async fn succeeds(&self, dir: &Path, args: &[&str]) -> Result<bool, GitError> {
        match self.run(dir, args).await {
            Ok(_) => Ok(true),
            Err(GitError::Failed { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

async fn read_all(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> String {
    use tokio::io::AsyncReadExt;
    let mut bytes = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut bytes).await;
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The last `n` non-empty lines of `text`, joined with " / ": what a notice shows of stderr.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}
