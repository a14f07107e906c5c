//! A git workspace per task: a worktree of the repository's mirror, at
//! `<root>/<repository>/<KEY>`, on the branch `picogent/<KEY>`.
//!
//! - `<root>/.mirrors/<repository>.git` is a bare clone of the repository's `url`, fetched before
//!   a workspace is made; the base branch is read from its `refs/remotes/origin/`.
//! - A workspace is made at its task's first run and found again at the next (a follow-up, a run
//!   resumed after a restart): the same folder, the same branch, the work so far.
//! - One coding agent at a time per workspace ([`Workspaces::lock`]).
//! - The end of the work: everything committed on the branch (`KEY: …` in the message) and pushed
//!   to the repository's push target, to `refs/heads/picogent/<KEY>` and nowhere else. A push the
//!   remote already has is not sent again, and a commit is made only when something changed, so a
//!   run resumed after a crash makes no second commit and no second push.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::config::{Repository, WorkspacesConfig};
use crate::git::{Git, GitError};
use crate::hooks::{HookPoint, HookReport, run_hook};
use crate::names::TaskKey;

/// Why a workspace could not be made, found, finished or removed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("no repository {0:?} under workspaces.repositories")]
    UnknownRepository(String),
    #[error(transparent)]
    Key(#[from] crate::names::BadTaskKey),
    #[error("cannot make the folder {}: {source}", path.display())]
    Folder { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{0}; the workspace was removed again")]
    Hook(String),
    #[error(
        "the workspaces take {used_mb} MiB, past workspaces.max_disk_mb ({limit_mb} MiB): remove finished \
         workspaces or raise the limit"
    )]
    Full { used_mb: u64, limit_mb: u64 },
    #[error("the folder {} is not the workspace of {branch} (it is on {found:?}); move it away", path.display())]
    NotOurs { path: PathBuf, branch: String, found: String },
    #[error("refusing to push {branch}: only branches under picogent/ are pushed, never the base branch {base}")]
    WouldPushBase { branch: String, base: String },
}

/// One task's workspace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workspace {
    pub repository: String,
    pub key: TaskKey,
    pub path: PathBuf,
    pub branch: String,
    pub base: String,
    /// Where the coding agent's `HOME` is: beside the workspace, not in it.
    pub home: PathBuf,
}

impl Serialize for TaskKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// What `workspace_status` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceStatus {
    pub branch: String,
    pub base: String,
    /// `git status --porcelain` lines: changes not committed yet.
    pub changed: Vec<String>,
    /// The branch's commits beyond the base, newest first (`sha subject`).
    pub commits: Vec<String>,
    pub diff: DiffStat,
}

/// Files changed and lines added and removed, on the branch against its base (committed or not).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DiffStat {
    pub files: Vec<String>,
    pub insertions: u64,
    pub deletions: u64,
}

impl DiffStat {
    pub fn describe(&self) -> String {
        format!("{} file(s) changed, +{} −{}", self.files.len(), self.insertions, self.deletions)
    }
}

/// The end of the work on a branch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finished {
    pub branch: String,
    /// The branch's tip; `None` when it has no commit beyond the base (nothing was done).
    pub commit: Option<String>,
    /// Whether this call made a commit (what the coding agent left uncommitted).
    pub committed: bool,
    /// Whether this call pushed (`false`: the remote had it already, or there was nothing).
    pub pushed: bool,
    pub diff: DiffStat,
}

/// The workspaces as `/readyz` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkspacesView {
    pub present: usize,
    /// On disk under `workspaces.root`, the repositories' mirrors included.
    pub bytes: u64,
    /// `workspaces.max_disk_mb`: no new workspace is made past it.
    pub max_bytes: u64,
}

/// Every task's workspace, under `workspaces.root`.
pub struct Workspaces {
    config: Arc<WorkspacesConfig>,
    git: Git,
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

impl Workspaces {
    /// Commits are made as `author <email>`.
    pub fn new(config: Arc<WorkspacesConfig>, author: &str, email: &str) -> Workspaces {
        Workspaces { config, git: Git::new(author, email), locks: Mutex::new(HashMap::new()) }
    }

    pub fn config(&self) -> &WorkspacesConfig {
        &self.config
    }

    fn repository(&self, name: &str) -> Result<&Repository, WorkspaceError> {
        self.config.repositories.get(name).ok_or_else(|| WorkspaceError::UnknownRepository(name.to_string()))
    }

    fn mirror(&self, repository: &str) -> PathBuf {
        self.config.root.join(".mirrors").join(format!("{repository}.git"))
    }

    /// Where the workspace of `key` in `repository` is, made or not.
    pub fn describe(&self, repository: &str, key: &TaskKey) -> Result<Workspace, WorkspaceError> {
        let repo = self.repository(repository)?;
        Ok(Workspace {
            repository: repository.to_string(),
            key: key.clone(),
            path: self.config.root.join(repository).join(key.as_str()),
            branch: key.branch(),
            base: repo.base.clone(),
            home: self.config.root.join(".homes").join(repository).join(key.as_str()),
        })
    }

    /// The workspace of `key` in `repository`: found where an earlier run left it, or made (the
    /// mirror fetched, a worktree on `branch` (default `picogent/<KEY>`) from the base, then
    /// `after_create`). The hooks that ran are returned for the run's record. A workspace found
    /// keeps the branch it was made on; asking for another one is an error.
    pub async fn open(
        &self,
        repository: &str,
        key: &TaskKey,
        branch: Option<&str>,
    ) -> Result<(Workspace, Vec<HookReport>), WorkspaceError> {
        let mut workspace = self.describe(repository, key)?;
        let repo = self.repository(repository)?;
        make_dir(&workspace.home)?;
        if workspace.path.join(".git").exists() {
            let found = self.git.run(&workspace.path, &["rev-parse", "--abbrev-ref", "HEAD"]).await?;
            let wanted = branch.unwrap_or(&workspace.branch);
            let ours = found.starts_with(crate::names::BRANCH_PREFIX) && (branch.is_none() || found == wanted);
            if !ours {
                return Err(WorkspaceError::NotOurs {
                    path: workspace.path.clone(),
                    branch: wanted.to_string(),
                    found,
                });
            }
            workspace.branch = found;
            return Ok((workspace, Vec::new()));
        }
        if let Some(branch) = branch {
            workspace.branch = branch.to_string();
        }
        let limit_mb = self.config.max_disk_mb;
        let used_mb = self.disk_usage() / (1024 * 1024);
        if used_mb >= limit_mb {
            return Err(WorkspaceError::Full { used_mb, limit_mb });
        }
        let mirror = self.fetch_mirror(repository, repo).await?;
        if let Some(parent) = workspace.path.parent() {
            make_dir(parent)?;
        }
        let path = workspace.path.to_string_lossy().into_owned();
        let branch = workspace.branch.as_str();
        let local = format!("refs/heads/{branch}");
        let pushed = format!("refs/remotes/origin/{branch}");
        let base = format!("refs/remotes/origin/{}", repo.base);
        // Made before and its folder gone (or pushed from another machine): the work goes on.
        if self.git.succeeds(&mirror, &["rev-parse", "--verify", "--quiet", &local]).await? {
            self.git.run(&mirror, &["worktree", "prune"]).await?;
            self.git.run(&mirror, &["worktree", "add", "--", &path, branch]).await?;
        } else if self.git.succeeds(&mirror, &["rev-parse", "--verify", "--quiet", &pushed]).await? {
            self.git.run(&mirror, &["worktree", "add", "-b", branch, "--", &path, &pushed]).await?;
        } else {
            self.git.run(&mirror, &["worktree", "add", "--no-track", "-b", branch, "--", &path, &base]).await?;
        }
        let mut hooks = Vec::new();
        if let Some(report) = self.hook(HookPoint::AfterCreate, &workspace).await {
            let failed = !report.succeeded();
            let why = report.describe();
            hooks.push(report);
            if failed {
                let _ = self.git.run(&mirror, &["worktree", "remove", "--force", "--", &path]).await;
                return Err(WorkspaceError::Hook(why));
            }
        }
        Ok((workspace, hooks))
    }

    /// The mirror of `repository`, cloned if missing, fetched: its `refs/remotes/origin/*` are the
    /// repository's branches now.
    async fn fetch_mirror(&self, name: &str, repo: &Repository) -> Result<PathBuf, WorkspaceError> {
        let mirror = self.mirror(name);
        let parent = mirror.parent().unwrap_or(&self.config.root).to_path_buf();
        make_dir(&parent)?;
        if !mirror.join("HEAD").exists() {
            let target = mirror.to_string_lossy().into_owned();
            self.git.run(&parent, &["clone", "--bare", "--quiet", "--", &repo.url, &target]).await?;
        }
        self.git
            .run(&mirror, &["fetch", "--quiet", "--prune", "--", &repo.url, "+refs/heads/*:refs/remotes/origin/*"])
            .await?;
        Ok(mirror)
    }

    /// Runs the hook configured for `point`, if any, in the workspace.
    pub async fn hook(&self, point: HookPoint, workspace: &Workspace) -> Option<HookReport> {
        let hooks = &self.config.hooks;
        let script = match point {
            HookPoint::AfterCreate => &hooks.after_create,
            HookPoint::BeforeRun => &hooks.before_run,
            HookPoint::AfterRun => &hooks.after_run,
            HookPoint::BeforeRemove => &hooks.before_remove,
        };
        let script = script.as_deref()?;
        let vars = BTreeMap::from([
            ("PICOGENT_WORKSPACE".to_string(), workspace.path.to_string_lossy().into_owned()),
            ("PICOGENT_TASK_KEY".to_string(), workspace.key.to_string()),
            ("PICOGENT_BRANCH".to_string(), workspace.branch.clone()),
            ("PICOGENT_REPOSITORY".to_string(), workspace.repository.clone()),
        ]);
        let timeout = Duration::from_millis(hooks.timeout_ms);
        Some(run_hook(point, script, &workspace.path, &workspace.home, &vars, timeout).await)
    }

    /// Held while a coding agent works in `workspace`: a second waits for the first.
    pub async fn lock(&self, workspace: &Workspace) -> tokio::sync::OwnedMutexGuard<()> {
        self.lock_of(workspace).lock_owned().await
    }

    fn lock_of(&self, workspace: &Workspace) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        locks.entry(workspace.path.clone()).or_default().clone()
    }

    /// The branch, what is not committed yet, the commits beyond the base, and the diff stat.
    pub async fn status(&self, workspace: &Workspace) -> Result<WorkspaceStatus, WorkspaceError> {
        let dir = &workspace.path;
        let porcelain =
            self.git.run(dir, &["--no-optional-locks", "status", "--porcelain", "--untracked-files=all"]).await?;
        let base = self.merge_base(workspace).await?;
        let log = self.git.run(dir, &["log", "--format=%h %s", "-n", "20", &format!("{base}..HEAD")]).await?;
        Ok(WorkspaceStatus {
            branch: workspace.branch.clone(),
            base: workspace.base.clone(),
            changed: porcelain.lines().map(str::to_string).collect(),
            commits: log.lines().map(str::to_string).collect(),
            diff: self.diff_stat(workspace, &base, true).await?,
        })
    }

    async fn merge_base(&self, workspace: &Workspace) -> Result<String, WorkspaceError> {
        let base = format!("refs/remotes/origin/{}", workspace.base);
        Ok(self.git.run(&workspace.path, &["merge-base", "HEAD", &base]).await?)
    }

    /// Lines and files changed since `base`; with `working_tree`, what is not committed counts too,
    /// new files included (their lines counted from the file: this only reads, the index is left as
    /// it is).
    async fn diff_stat(
        &self,
        workspace: &Workspace,
        base: &str,
        working_tree: bool,
    ) -> Result<DiffStat, WorkspaceError> {
        let dir = &workspace.path;
        let numstat = if working_tree {
            self.git.run(dir, &["diff", "--numstat", base]).await?
        } else {
            self.git.run(dir, &["diff", "--numstat", base, "HEAD"]).await?
        };
        let mut stat = DiffStat::default();
        for line in numstat.lines() {
            let mut parts = line.splitn(3, '\t');
            let (added, removed, file) = (parts.next(), parts.next(), parts.next());
            stat.insertions += added.and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            stat.deletions += removed.and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            if let Some(file) = file {
                stat.files.push(file.to_string());
            }
        }
        if working_tree {
            let untracked = self.git.run(dir, &["ls-files", "--others", "--exclude-standard", "-z"]).await?;
            for file in untracked.split('\0').filter(|file| !file.is_empty()) {
                stat.insertions += text_lines(&dir.join(file));
                stat.files.push(file.to_string());
            }
        }
        Ok(stat)
    }

    /// Commits what is left uncommitted (`message` names the task key) and pushes the branch to
    /// the repository's push target, unless it already has this commit.
    pub async fn finish(&self, workspace: &Workspace, message: &str) -> Result<Finished, WorkspaceError> {
        let repo = self.repository(&workspace.repository)?;
        let branch = &workspace.branch;
        if !branch.starts_with(crate::names::BRANCH_PREFIX) || branch == &repo.base {
            return Err(WorkspaceError::WouldPushBase { branch: branch.clone(), base: repo.base.clone() });
        }
        let dir = &workspace.path;
        self.git.run(dir, &["add", "--all"]).await?;
        let committed = !self.git.succeeds(dir, &["diff", "--cached", "--quiet"]).await?;
        if committed {
            self.git.run(dir, &["commit", "--quiet", "--no-verify", "-m", message]).await?;
        }
        let base = self.merge_base(workspace).await?;
        let head = self.git.run(dir, &["rev-parse", "HEAD"]).await?;
        let diff = self.diff_stat(workspace, &base, false).await?;
        if head == base {
            return Ok(Finished { branch: branch.clone(), commit: None, committed, pushed: false, diff });
        }
        let target = format!("refs/heads/{branch}");
        let remote_has = self.git.run(dir, &["ls-remote", "--", repo.push_url(), &target]).await?;
        let pushed = remote_has.split_whitespace().next() != Some(head.as_str());
        if pushed {
            let refspec = format!("{head}:{target}");
            self.git.run(dir, &["push", "--quiet", "--", repo.push_url(), &refspec]).await?;
        }
        Ok(Finished { branch: branch.clone(), commit: Some(head), committed, pushed, diff })
    }

    /// Runs `before_remove` and removes the workspace (its branch stays in the mirror and, if
    /// pushed, on the remote), once no coding agent works in it.
    pub async fn remove(&self, workspace: &Workspace) -> Result<Vec<HookReport>, WorkspaceError> {
        let _held = self.lock(workspace).await;
        self.remove_held(workspace).await
    }

    /// As [`Workspaces::remove`], unless a coding agent works in it now: then `None`, and it stays.
    pub async fn remove_if_idle(&self, workspace: &Workspace) -> Result<Option<Vec<HookReport>>, WorkspaceError> {
        let Ok(_held) = self.lock_of(workspace).try_lock_owned() else { return Ok(None) };
        self.remove_held(workspace).await.map(Some)
    }

    async fn remove_held(&self, workspace: &Workspace) -> Result<Vec<HookReport>, WorkspaceError> {
        let mut hooks = Vec::new();
        if workspace.path.exists() {
            hooks.extend(self.hook(HookPoint::BeforeRemove, workspace).await);
            let path = workspace.path.to_string_lossy().into_owned();
            let mirror = self.mirror(&workspace.repository);
            self.git.run(&mirror, &["worktree", "remove", "--force", "--", &path]).await?;
        }
        let _ = std::fs::remove_dir_all(&workspace.home);
        Ok(hooks)
    }

    /// The workspaces present: (repository, task key, folder).
    pub fn present(&self) -> Vec<(String, String, PathBuf)> {
        let mut found = Vec::new();
        for repository in self.config.repositories.keys() {
            let Ok(entries) = std::fs::read_dir(self.config.root.join(repository)) else { continue };
            for entry in entries.flatten() {
                if entry.path().join(".git").exists() {
                    found.push((repository.clone(), entry.file_name().to_string_lossy().into_owned(), entry.path()));
                }
            }
        }
        found.sort();
        found
    }

    /// How many workspaces there are and the disk they take, for `/readyz`.
    pub fn view(&self) -> WorkspacesView {
        WorkspacesView {
            present: self.present().len(),
            bytes: self.disk_usage(),
            max_bytes: self.config.max_disk_mb.saturating_mul(1024 * 1024),
        }
    }

    /// Bytes on disk under `workspaces.root` (mirrors included), for `/readyz` and the limit.
    pub fn disk_usage(&self) -> u64 {
        dir_size(&self.config.root)
    }
}

fn make_dir(path: &Path) -> Result<(), WorkspaceError> {
    std::fs::create_dir_all(path).map_err(|source| WorkspaceError::Folder { path: path.to_path_buf(), source })
}

/// The size of the files under `path`, links not followed.
fn dir_size(path: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

/// The lines of a new file as git counts them: none for a binary file (one holding a NUL byte)
/// or one that cannot be read.
fn text_lines(path: &Path) -> u64 {
    let Ok(bytes) = std::fs::read(path) else { return 0 };
    if bytes.contains(&0) {
        return 0;
    }
    let newlines = bytes.iter().filter(|byte| **byte == b'\n').count() as u64;
    newlines + u64::from(!bytes.is_empty() && !bytes.ends_with(b"\n"))
}
