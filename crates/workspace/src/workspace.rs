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
//!
//! What the coding agent left is untrusted ([`crate::git`], [`crate::files`], [`crate::scan`]):
//! - git reaches a worktree only through picogent's record of it in the mirror ([`Workspaces::pinned`]);
//!   a worktree whose `.git` is not the one picogent made is refused, and made anew from its
//!   branch at the next run;
//! - nothing is committed that is over `workspaces.max_file_bytes` or a link out of the worktree,
//!   and nothing is pushed that holds one of picogent's secrets or a credential's shape: the push
//!   is refused, naming the file and the rule, and the commit stays in the workspace;
//! - the push is made from the mirror, with the operator's git settings, never from the worktree;
//! - the mirror is made, fetched, and given or rid of worktrees by one run at a time per
//!   repository (and cloned under a name of its own, then renamed, so two processes can race).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use picogent_support::secret::Secret;

use crate::config::{Repository, WorkspacesConfig};
use crate::git::{Git, GitError, Pinned};
use crate::hooks::{HookEnd, HookPoint, HookReport, run_hook};
use crate::names::TaskKey;
use crate::scan::{Finding, PushScan};

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
    #[error(
        "the workspace {} was tampered with: {why}; nothing was committed or pushed from it, and it is made anew \
         from its branch at the next run",
        path.display()
    )]
    Tampered { path: PathBuf, why: String },
    #[error("{}", refused(branch, findings, *committed))]
    PushRefused { branch: String, findings: Vec<Finding>, committed: bool },
    #[error("cannot read what the coding agent left: {0}")]
    File(#[from] crate::files::FileError),
}

/// The words of [`WorkspaceError::PushRefused`]: each file and rule, never a secret itself.
fn refused(branch: &str, findings: &[Finding], committed: bool) -> String {
    let shown: Vec<String> = findings.iter().take(10).map(Finding::to_string).collect();
    let more = match findings.len().saturating_sub(10) {
        0 => String::new(),
        more => format!("; and {more} more"),
    };
    let kept = match committed {
        true => "the commit stays in the workspace for a person to look at",
        false => "nothing was committed; the files stay in the workspace for a person to look at",
    };
    format!("I did not push {branch}: {}{more}; {kept}", shown.join("; "))
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
    /// The repository's mirror, which holds the workspace's git folder (read-only in the sandbox).
    pub mirror: PathBuf,
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
    /// One per repository: held while its mirror is made, fetched, or given or rid of a worktree.
    mirrors: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// picogent's own secrets, by what they are: never pushed.
    secrets: Vec<(String, Secret)>,
}

impl Workspaces {
    /// Commits are made as `author <email>`.
    pub fn new(config: Arc<WorkspacesConfig>, author: &str, email: &str) -> Workspaces {
        Workspaces {
            config,
            git: Git::new(author, email),
            locks: Mutex::new(HashMap::new()),
            mirrors: Mutex::new(HashMap::new()),
            secrets: Vec::new(),
        }
    }

    /// The secrets picogent holds (the tracker's token, the model's key, the MCP token), each
    /// with what it is: a push that carries one is refused. The values the coding agents'
    /// entries name (`${VAR}`) are added from the environment as each push is scanned.
    pub fn with_secrets(mut self, secrets: Vec<(String, Secret)>) -> Workspaces {
        self.secrets = secrets;
        self
    }

    pub fn config(&self) -> &WorkspacesConfig {
        &self.config
    }

    pub(crate) fn repository(&self, name: &str) -> Result<&Repository, WorkspaceError> {
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
            mirror: self.mirror(repository),
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
        crate::files::ensure_dir(&workspace.home)?;
        let mirror_held = self.mirror_lock(repository).lock_owned().await;
        let found_one = match std::fs::symlink_metadata(workspace.path.join(".git")) {
            Ok(_) => match self.pinned(&workspace) {
                Ok(pinned) => Some(pinned),
                Err(error) => {
                    tracing::warn!(%error, "making the workspace anew from its branch");
                    self.discard(&workspace).await?;
                    None
                }
            },
            Err(_) => None,
        };
        if let Some(pinned) = found_one {
            let found = self.git.in_worktree(&pinned, &["rev-parse", "--abbrev-ref", "HEAD"]).await?;
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
        // A folder left without its `.git` (a crash mid-way, or the agent's doing) is not reused.
        if std::fs::symlink_metadata(&workspace.path).is_ok() {
            self.discard(&workspace).await?;
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
        drop(mirror_held);
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
    pub(crate) async fn fetch_mirror(&self, name: &str, repo: &Repository) -> Result<PathBuf, WorkspaceError> {
        let mirror = self.mirror(name);
        let parent = mirror.parent().unwrap_or(&self.config.root).to_path_buf();
        make_dir(&parent)?;
        if !mirror.join("HEAD").exists() {
            // Cloned under a name of its own, then renamed: another process making the same
            // mirror at the same time loses the rename, not its clone.
            let fresh = parent.join(format!(".{name}.{}.{}.tmp", std::process::id(), fresh_suffix()));
            let target = fresh.to_string_lossy().into_owned();
            self.git.run(&parent, &["clone", "--bare", "--quiet", "--", &repo.url, &target]).await?;
            if std::fs::rename(&fresh, &mirror).is_err() {
                let _ = std::fs::remove_dir_all(&fresh);
                if !mirror.join("HEAD").exists() {
                    return Err(WorkspaceError::Folder {
                        path: mirror.clone(),
                        source: std::io::Error::other("the fresh clone could not be put in its place"),
                    });
                }
            }
        }
        secure_mirror(&mirror)?;
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
        // The git a hook runs is pinned and hardened as picogent's own; in a workspace that is
        // not the one picogent made, the hook does not run at all.
        let mut vars = match self.pinned(workspace) {
            Ok(pinned) => pinned.hook_env(),
            Err(error) => {
                let reason = error.to_string();
                return Some(HookReport {
                    point,
                    end: HookEnd::NotStarted { reason },
                    output: String::new(),
                    duration_ms: 0,
                });
            }
        };
        vars.extend([
            ("PICOGENT_WORKSPACE".to_string(), workspace.path.to_string_lossy().into_owned()),
            ("PICOGENT_TASK_KEY".to_string(), workspace.key.to_string()),
            ("PICOGENT_BRANCH".to_string(), workspace.branch.clone()),
            ("PICOGENT_REPOSITORY".to_string(), workspace.repository.clone()),
        ]);
        let timeout = Duration::from_millis(hooks.timeout_ms);
        Some(run_hook(point, script, &workspace.path, &workspace.home, &vars, timeout).await)
    }

    /// The rules a push is held to: picogent's secrets, and the values of the `${VAR}`s the
    /// coding agents' entries name, read now.
    fn push_scan(&self) -> PushScan {
        let mut secrets: Vec<(String, String)> =
            self.secrets.iter().map(|(what, secret)| (what.clone(), secret.expose().to_string())).collect();
        for (name, entry) in &self.config.agents {
            let values = entry.env.iter().flat_map(|env| env.values());
            for variable in values.flat_map(|value| crate::scan::named_variables(value)) {
                if let Ok(value) = std::env::var(&variable)
                    && !value.trim().is_empty()
                {
                    let what = format!("the value of {variable} (workspaces.agents.{name}.env)");
                    secrets.push((what, value.trim().to_string()));
                }
            }
        }
        PushScan { secrets, max_file_bytes: self.config.max_file_bytes }
    }

    /// Held while a coding agent works in `workspace`: a second waits for the first.
    pub async fn lock(&self, workspace: &Workspace) -> tokio::sync::OwnedMutexGuard<()> {
        self.lock_of(workspace).lock_owned().await
    }

    fn lock_of(&self, workspace: &Workspace) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        locks.entry(workspace.path.clone()).or_default().clone()
    }

    pub(crate) fn mirror_lock(&self, repository: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut mirrors = self.mirrors.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        mirrors.entry(repository.to_string()).or_default().clone()
    }

    /// The mirror's own folder for a workspace (`<mirror>/worktrees/<id>`), from picogent's
    /// record: the one whose `gitdir` names this workspace's `.git`.
    fn admin_dir(&self, workspace: &Workspace) -> Result<PathBuf, WorkspaceError> {
        let tampered = |why: String| WorkspaceError::Tampered { path: workspace.path.clone(), why };
        let dot_git = workspace.path.join(".git");
        let wanted = std::fs::canonicalize(&workspace.path).map_err(|error| tampered(error.to_string()))?.join(".git");
        let worktrees = self.mirror(&workspace.repository).join("worktrees");
        let entries =
            std::fs::read_dir(&worktrees).map_err(|error| tampered(format!("{}: {error}", worktrees.display())))?;
        for entry in entries.flatten() {
            let Ok(named) = crate::files::read_bounded(&entry.path().join("gitdir"), 4096) else { continue };
            let named = PathBuf::from(String::from_utf8_lossy(&named).trim_end());
            let named = named.parent().and_then(|dir| std::fs::canonicalize(dir).ok()).map(|dir| dir.join(".git"));
            if named.as_deref() == Some(wanted.as_path()) {
                return Ok(entry.path());
            }
        }
        Err(tampered(format!("the mirror has no worktree at {}", dot_git.display())))
    }

    /// How picogent's git reaches `workspace`: its `.git` checked to be the file picogent made,
    /// naming the mirror's record of it; anything else is [`WorkspaceError::Tampered`].
    pub fn pinned(&self, workspace: &Workspace) -> Result<Pinned, WorkspaceError> {
        let tampered = |why: String| WorkspaceError::Tampered { path: workspace.path.clone(), why };
        let dot_git = workspace.path.join(".git");
        secure_mirror(&workspace.mirror)?;
        let git_dir = self.admin_dir(workspace)?;
        let common = crate::files::read_bounded(&git_dir.join("commondir"), 4096)
            .map_err(|error| tampered(format!("its record in the mirror cannot be read: {error}")))?;
        if String::from_utf8_lossy(&common).trim_end() != "../.." {
            return Err(tampered("its record in the mirror names another repository".into()));
        }
        let text = match crate::files::read_bounded(&dot_git, 4096) {
            Ok(text) => text,
            Err(crate::files::FileError::NotRegular(_)) => {
                return Err(tampered("its .git is not the file picogent made (a folder or a link is there)".into()));
            }
            Err(error) => return Err(tampered(format!("its .git cannot be read: {error}"))),
        };
        let text = String::from_utf8_lossy(&text);
        let named = text.trim_end().strip_prefix("gitdir: ").map(PathBuf::from);
        let named = named.and_then(|path| std::fs::canonicalize(path).ok());
        if named.as_deref() != std::fs::canonicalize(&git_dir).ok().as_deref() {
            return Err(tampered("its .git names another repository than the one picogent made".into()));
        }
        Ok(Pinned { git_dir, work_tree: workspace.path.clone() })
    }

    /// Removes a workspace's folder and the mirror's record of it, whatever is in it; its branch
    /// stays in the mirror, so it is made anew from there.
    async fn discard(&self, workspace: &Workspace) -> Result<(), WorkspaceError> {
        let path = &workspace.path;
        let removed = match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
            Ok(_) => std::fs::remove_file(path),
            Err(_) => Ok(()),
        };
        removed.map_err(|source| WorkspaceError::Folder { path: path.clone(), source })?;
        let mirror = self.mirror(&workspace.repository);
        if mirror.join("HEAD").exists() {
            self.git.run(&mirror, &["worktree", "prune"]).await?;
        }
        Ok(())
    }

    /// The branch, what is not committed yet, the commits beyond the base, and the diff stat.
    pub async fn status(&self, workspace: &Workspace) -> Result<WorkspaceStatus, WorkspaceError> {
        let pinned = self.pinned(workspace)?;
        let porcelain = self
            .git
            .in_worktree(&pinned, &["--no-optional-locks", "status", "--porcelain", "--untracked-files=all"])
            .await?;
        let base = self.merge_base(&pinned, workspace).await?;
        let log =
            self.git.in_worktree(&pinned, &["log", "--format=%h %s", "-n", "20", &format!("{base}..HEAD")]).await?;
        Ok(WorkspaceStatus {
            branch: workspace.branch.clone(),
            base: workspace.base.clone(),
            changed: porcelain.lines().map(str::to_string).collect(),
            commits: log.lines().map(str::to_string).collect(),
            diff: self.diff_stat(&pinned, &base, true).await?,
        })
    }

    async fn merge_base(&self, pinned: &Pinned, workspace: &Workspace) -> Result<String, WorkspaceError> {
        let base = format!("refs/remotes/origin/{}", workspace.base);
        Ok(self.git.in_worktree(pinned, &["merge-base", "HEAD", &base]).await?)
    }

    /// Lines and files changed since `base`; with `working_tree`, what is not committed counts too,
    /// new files included (their lines counted from the file: this only reads, the index is left as
    /// it is).
    async fn diff_stat(&self, pinned: &Pinned, base: &str, working_tree: bool) -> Result<DiffStat, WorkspaceError> {
        let dir = &pinned.work_tree;
        let plain = ["diff", "--no-ext-diff", "--no-textconv", "--numstat", base];
        let numstat = if working_tree {
            self.git.in_worktree(pinned, &plain).await?
        } else {
            self.git.in_worktree(pinned, &[&plain[..], &["HEAD"]].concat()).await?
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
            let untracked = self.git.in_worktree(pinned, &["ls-files", "--others", "--exclude-standard", "-z"]).await?;
            for file in untracked.split('\0').filter(|file| !file.is_empty()) {
                stat.insertions += crate::files::count_lines(&dir.join(file), LINE_COUNT_BYTES);
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
        let pinned = match self.pinned(workspace) {
            Ok(pinned) => pinned,
            Err(error) => {
                // Not reused: the next run makes it anew from its branch.
                let _ = self.discard(workspace).await;
                return Err(error);
            }
        };
        let scan = self.push_scan();
        let findings = scan.worktree(&self.git, &pinned).await?;
        if !findings.is_empty() {
            return Err(WorkspaceError::PushRefused { branch: branch.clone(), findings, committed: false });
        }
        self.git.in_worktree(&pinned, &["add", "--all"]).await?;
        let committed = !self.git.succeeds_in_worktree(&pinned, &["diff", "--cached", "--quiet"]).await?;
        if committed {
            self.git.in_worktree(&pinned, &["commit", "--quiet", "--no-verify", "-m", message]).await?;
        }
        let base = self.merge_base(&pinned, workspace).await?;
        let head = self.git.in_worktree(&pinned, &["rev-parse", "HEAD"]).await?;
        let diff = self.diff_stat(&pinned, &base, false).await?;
        if head == base {
            return Ok(Finished { branch: branch.clone(), commit: None, committed, pushed: false, diff });
        }
        // What the push adds, read from the mirror (picogent's own), before it leaves.
        let mirror = self.mirror(&workspace.repository);
        let findings = scan.commits(&self.git, &mirror, &base, &head).await?;
        if !findings.is_empty() {
            return Err(WorkspaceError::PushRefused { branch: branch.clone(), findings, committed: true });
        }
        let target = format!("refs/heads/{branch}");
        let remote_has = self.git.run(&mirror, &["ls-remote", "--", repo.push_url(), &target]).await?;
        let pushed = remote_has.split_whitespace().next() != Some(head.as_str());
        if pushed {
            let refspec = format!("{head}:{target}");
            self.git.run(&mirror, &["push", "--quiet", "--", repo.push_url(), &refspec]).await?;
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
        if std::fs::symlink_metadata(&workspace.path).is_ok() {
            hooks.extend(self.hook(HookPoint::BeforeRemove, workspace).await);
            let _mirror_held = self.mirror_lock(&workspace.repository).lock_owned().await;
            self.discard(workspace).await?;
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

/// Puts the mirror's own configuration back to picogent's (nothing but what a bare repository
/// needs: no filter, hook, program, proxy, URL rewrite or include), and removes its
/// `info/attributes`: a coding agent that ran without the sandbox may have written either, and
/// git reads both for every command on a worktree and for the push. Fetch and push name their
/// URL and refspec, so no remote is needed in it.
fn secure_mirror(mirror: &Path) -> Result<(), WorkspaceError> {
    let config = crate::files::read_bounded(&mirror.join("config"), 1024 * 1024).unwrap_or_default();
    let sha256 = String::from_utf8_lossy(&config).to_ascii_lowercase().contains("objectformat = sha256");
    let mut ours = String::from("[core]\n\trepositoryformatversion = ");
    ours.push_str(if sha256 { "1\n" } else { "0\n" });
    ours.push_str("\tfilemode = true\n\tbare = true\n");
    if sha256 {
        ours.push_str("[extensions]\n\tobjectformat = sha256\n");
    }
    if config != ours.as_bytes() {
        crate::files::write_fresh(mirror, "config", ours.as_bytes())?;
    }
    let attributes = mirror.join("info").join("attributes");
    if std::fs::symlink_metadata(&attributes).is_ok() {
        let _ = std::fs::remove_file(&attributes);
    }
    Ok(())
}

/// How much of a new file is read to count its lines for the diff stat.
const LINE_COUNT_BYTES: u64 = 8 * 1024 * 1024;

/// A few characters no two calls in this process share, for a temporary name.
fn fresh_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
