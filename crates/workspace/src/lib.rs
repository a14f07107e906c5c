//! Coding work: a git workspace per task and a coding agent CLI working in it.
//!
//! - [`config`]: the `workspaces` section (repositories, coding agents, hooks, limits), owned here
//!   and embedded by the configuration, with its ready-made coding agent entries
//!   ([`config::presets`]);
//! - [`names`]: the task key, branch and repository names checked before git or a folder sees them;
//! - [`workspace`]: [`Workspaces`], the worktrees under `workspaces.root`, made, found again,
//!   finished (commit and push) and removed; [`hooks`]: the operator's hooks around them;
//! - [`coding`]: one run of a coding agent in a workspace; [`child`]: child processes in a group
//!   of their own; [`git`]: picogent's own git commands; [`files`]: files in the agent's reach,
//!   written and read safely; [`scan`]: what a push may not carry; [`sandbox`]: bubblewrap;
//! - [`tools`]: `run_coding_agent` and `workspace_status`, offered on a run of a task with a
//!   repository, and [`tools::CodingRuns`], each run's coding agent output and work;
//! - [`review`]: review handed to another agent: the `review` section, the worker's hand-off of
//!   its pushed branch, and the reviewer's `review_diff` and `review_verdict`.
//!
//! Invariants:
//! - nothing from a task reaches a shell: the task key is checked ([`names::TaskKey`]), every
//!   placeholder is filled inside one argument, hooks see the task only through variables;
//! - a child's environment holds `PATH`, `LANG`, `TZ`, its own `HOME` and what its entry names:
//!   never the tracker's token, the MCP token or the model key unless the entry passes it;
//! - no child outlives what started it: each runs in its own process group, killed on stop,
//!   timeout or drop ([`child::Group`]);
//! - only `picogent/<KEY>` branches are pushed, never the base, and a push the remote already has
//!   is not sent again;
//! - the coding agent is hostile ([`git`], [`files`], [`scan`], [`sandbox`]; docs/coding-agents.md,
//!   "Threat model"): picogent's git obeys nothing the workspace holds, its own files in the
//!   agent's reach are never written through a link, what it reads back is bounded, and a push
//!   that carries a secret, a credential's shape, a file too large or a link out is refused.
//!
//! Where things are: `config/presets.rs` (the ready-made coding agent entries); `names.rs`
//! (`TaskKey`, branch and repository names); `coding.rs` (one run: its output streamed, timed out,
//! stopped; `coding/reading.rs` reads each CLI's own output for its progress, answer and failure); `child.rs` (process groups, the environment a child gets); `sandbox.rs` (bubblewrap,
//! on by default where installed: only the system, the CLI's installation (`install_roots`), the
//! worktree and a private home, no network but the model's address, carried by the binary's hidden
//! `sandbox-relay` command); `git.rs` (picogent's own git, pinned to the mirror's record of a
//! worktree, `Pinned`, every program-running setting overridden, `HARDENED`); `files.rs` (writes
//! that never follow a link, bounded reads); `scan.rs` (`PushScan`); `tools/` (`CodingTools` in
//! `mod.rs`, with the task's steps ticked from the CLI's to-do list; `source.rs`: the two tools as
//! the model sees them; `runs.rs`: `CodingRuns`, each run's output and work while it runs, and a
//! run's `CodingChoice`; `outcome.rs`: what a delegation did). The runtime offers these tools on a
//! task with a repository (`run.rs`, `offered_tools`) and runs direct mode (`direct.rs`);
//! docs/coding-agents.md.

pub mod child;
pub mod coding;
pub mod config;
pub mod files;
pub mod git;
pub mod hooks;
pub mod names;
pub mod review;
pub mod sandbox;
pub mod scan;
pub mod tools;
pub mod workspace;

pub use coding::{AgentEnd, AgentReport, Invocation};
pub use config::{CodingAgent, CodingAgentConfig, Repository, WorkspacesConfig};
pub use names::TaskKey;
pub use review::{ReviewConfig, ReviewTools};
pub use tools::{CODING_TOOLS, CodingChoice, CodingError, CodingRecord, CodingRuns, CodingTools, WorkDone};
pub use workspace::{DiffStat, Finished, Workspace, WorkspaceError, WorkspaceStatus, Workspaces, WorkspacesView};
