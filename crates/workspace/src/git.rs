//! picogent's own git commands (clone, fetch, worktrees, commit, push): the `git` program, run
//! with every argument passed as one (no shell), a `--` before paths and branches wherever git
//! takes one, no prompt for credentials, a timeout, and at most [`MAX_OUTPUT`] bytes of output.
//!
//! A task's worktree is written by a coding agent, so nothing in it is obeyed:
//! - git is told where the repository is ([`Pinned`]: `--git-dir` from picogent's own record in
//!   the mirror, `--work-tree`), never left to find it from the worktree's `.git`;
//! - every command overrides the configuration that runs a program or reads a file
//!   ([`HARDENED`], passed as `-c`, which wins over every file and reaches the git processes git
//!   itself starts), and a command in a worktree reads no system or global configuration;
//! - the same pinning and overrides are handed to the hooks as git's own variables
//!   ([`Pinned::hook_env`]), so a `git` a hook runs obeys them too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::child::{self, Group};

/// How long one git command may take (a clone or a push over the network included).
pub const GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// How much of a git command's output is read; past it the command is an error (a worktree with
/// millions of files the agent made is not read into memory).
pub const MAX_OUTPUT: usize = 16 * 1024 * 1024;

/// The configuration every git command of picogent's runs with: each key that can run a program,
/// read a file or reach the network of its own accord, set to do nothing. The repository's
/// `filter.<driver>` and `merge.<driver>` keys cannot be listed: a driver is only defined in a
/// configuration file, and the only one read for a worktree is the mirror's, which is picogent's
/// (read-only inside the sandbox; see docs/coding-agents.md).
pub const HARDENED: [(&str, &str); 16] = [
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.attributesFile", "/dev/null"),
    ("core.untrackedCache", "false"),
    ("diff.external", ""),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("gpg.program", "false"),
    ("protocol.ext.allow", "never"),
];

/// Where a command on a worktree reads `.gitattributes` from (`GIT_ATTR_SOURCE`, git 2.40 and
/// later): the empty tree, so no attribute the agent wrote names a filter or a diff driver, and
/// picogent commits the bytes the agent left as they are.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// The oldest git that honours [`EMPTY_TREE`] as `GIT_ATTR_SOURCE`; an older one ignores the
/// variable and reads the attributes the agent wrote (`picogent check` warns).
pub const MIN_VERSION: (u32, u32) = (2, 40);

/// The `major.minor` of the git on `PATH`, and the line it printed (`git version 2.47.3`).
pub fn version() -> Result<((u32, u32), String), GitError> {
    let out = std::process::Command::new("git").arg("--version").output().map_err(GitError::Spawn)?;
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut parts = line.strip_prefix("git version ").unwrap_or("").split('.').map(|part| part.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Ok(((major, minor), line)),
        _ => Err(GitError::Failed { args: "--version".into(), status: out.status.to_string(), stderr: line }),
    }
}

/// Added to [`HARDENED`] for a command in a worktree, which never needs the network nor the
/// operator's credentials (the commands that do, clone, fetch and push, run on the mirror).
const LOCAL_ONLY: [(&str, &str); 5] = [
    ("core.sshCommand", "false"),
    ("core.gitProxy", ""),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
];

/// A git command that failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git (is it installed?): {0}")]
    Spawn(std::io::Error),
    #[error("`git {args}` failed ({status}): {stderr}")]
    Failed { args: String, status: String, stderr: String },
    #[error("`git {args}` took longer than {}s", GIT_TIMEOUT.as_secs())]
    TimedOut { args: String },
    #[error("`git {args}` printed more than {} MiB", MAX_OUTPUT / (1024 * 1024))]
    TooMuchOutput { args: String },
}

/// A task's worktree as picogent's git reaches it: the repository from picogent's own record
/// (the mirror's `worktrees/<id>`), never from the worktree's `.git`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// `<mirror>/worktrees/<id>`.
    pub git_dir: PathBuf,
    pub work_tree: PathBuf,
}

impl Pinned {
    /// The arguments before the command: where the repository is, and the overrides.
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            format!("--git-dir={}", self.git_dir.display()),
            format!("--work-tree={}", self.work_tree.display()),
            "--no-pager".to_string(),
        ];
        for (key, value) in HARDENED.iter().chain(&LOCAL_ONLY) {
            args.extend(["-c".to_string(), format!("{key}={value}")]);
        }
        args
    }

    /// The same, as the variables git reads (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_CONFIG_COUNT`…):
    /// what a hook's environment gets, so the `git` it runs is pinned and hardened too.
    pub fn hook_env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([
            ("GIT_DIR".to_string(), self.git_dir.display().to_string()),
            ("GIT_WORK_TREE".to_string(), self.work_tree.display().to_string()),
            ("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string()),
            ("GIT_CONFIG_GLOBAL".to_string(), "/dev/null".to_string()),
            ("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()),
            ("GIT_ATTR_SOURCE".to_string(), EMPTY_TREE.to_string()),
        ]);
        let all: Vec<&(&str, &str)> = HARDENED.iter().chain(&LOCAL_ONLY).collect();
        env.insert("GIT_CONFIG_COUNT".to_string(), all.len().to_string());
        for (index, (key, value)) in all.into_iter().enumerate() {
            env.insert(format!("GIT_CONFIG_KEY_{index}"), key.to_string());
            env.insert(format!("GIT_CONFIG_VALUE_{index}"), value.to_string());
        }
        env
    }
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

    /// `git ARGS` in `dir` (the mirror or its parent: picogent's own folders), with the
    /// [`HARDENED`] overrides; its standard output, trimmed at the end.
    pub async fn run(&self, dir: &Path, args: &[&str]) -> Result<String, GitError> {
        let mut full = Vec::new();
        for (key, value) in HARDENED {
            full.extend(["-c".to_string(), format!("{key}={value}")]);
        }
        full.extend(args.iter().map(|arg| arg.to_string()));
        let out = self.spawn(dir, full, args.join(" "), &self.env, None).await?;
        Ok(String::from_utf8_lossy(&out).trim_end().to_string())
    }

    /// As [`Git::run`], with `input` on git's standard input.
    pub async fn run_with_input(&self, dir: &Path, args: &[&str], input: &str) -> Result<String, GitError> {
        let out = self.bytes_with_input(dir, args, input).await?;
        Ok(String::from_utf8_lossy(&out).trim_end().to_string())
    }

    /// As [`Git::run_with_input`], the output as git wrote it (`cat-file --batch`).
    pub async fn bytes_with_input(&self, dir: &Path, args: &[&str], input: &str) -> Result<Vec<u8>, GitError> {
        let mut full = Vec::new();
        for (key, value) in HARDENED {
            full.extend(["-c".to_string(), format!("{key}={value}")]);
        }
        full.extend(args.iter().map(|arg| arg.to_string()));
        self.spawn(dir, full, args.join(" "), &self.env, Some(input.as_bytes().to_vec())).await
    }

    /// `git ARGS` on a task's worktree, pinned: the repository from picogent's record, the
    /// overrides, no system or global configuration, no network.
    pub async fn in_worktree(&self, pinned: &Pinned, args: &[&str]) -> Result<String, GitError> {
        let mut full = pinned.args();
        full.extend(args.iter().map(|arg| arg.to_string()));
        let mut env = self.env.clone();
        env.insert("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string());
        env.insert("GIT_CONFIG_GLOBAL".to_string(), "/dev/null".to_string());
        env.insert("GIT_ATTR_SOURCE".to_string(), EMPTY_TREE.to_string());
        env.remove("GIT_SSH_COMMAND");
        env.remove("SSH_AUTH_SOCK");
        let out = self.spawn(&pinned.work_tree, full, args.join(" "), &env, None).await?;
        Ok(String::from_utf8_lossy(&out).trim_end().to_string())
    }

    /// Whether `git ARGS` on a worktree succeeds (for questions git answers by its exit code).
    pub async fn succeeds_in_worktree(&self, pinned: &Pinned, args: &[&str]) -> Result<bool, GitError> {
        match self.in_worktree(pinned, args).await {
            Ok(_) => Ok(true),
            Err(GitError::Failed { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn spawn(
        &self,
        dir: &Path,
        args: Vec<String>,
        shown: String,
        env: &BTreeMap<String, String>,
        input: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, GitError> {
        let mut command = child::command("git", &args, dir, &self.home, env);
        if input.is_some() {
            command.stdin(std::process::Stdio::piped());
        }
        let mut group = Group::spawn(command).map_err(GitError::Spawn)?;
        if let (Some(input), Some(mut stdin)) = (input, group.child.stdin.take()) {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = stdin.write_all(&input).await;
            });
        }
        let stdout = group.child.stdout.take();
        let stderr = group.child.stderr.take();
        let read = async {
            let (out, err) = tokio::join!(read_all(stdout, MAX_OUTPUT), read_all(stderr, 64 * 1024));
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
        let Some(out) = out else { return Err(GitError::TooMuchOutput { args: shown }) };
        if status.success() {
            Ok(out)
        } else {
            let status = match status.code() {
                Some(code) => format!("exit {code}"),
                None => "killed by a signal".to_string(),
            };
            let err = String::from_utf8_lossy(&err.unwrap_or_default()).into_owned();
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

/// What `pipe` gives, up to `limit` bytes; `None` past it (the rest is read and dropped, so the
/// child is not left blocked on a full pipe).
async fn read_all(pipe: Option<impl tokio::io::AsyncRead + Unpin>, limit: usize) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut bytes = Vec::new();
    let mut over = false;
    if let Some(mut pipe) = pipe {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match pipe.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) if bytes.len() + read <= limit => bytes.extend_from_slice(&buffer[..read]),
                Ok(_) => over = true,
            }
        }
    }
    (!over).then_some(bytes)
}

/// The last `n` non-empty lines of `text`, joined with " / ": what a notice shows of stderr.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}
