//! Tools the model can call. The tracker's tools are in the registry; other sources (external
//! MCP servers) implement the same [`ToolSource`] trait, so the LLM loop sees one shape, and one
//! permission policy wraps them all.
//!
//! - [`kernel`]: what a tracker tool is ([`kernel::TrackerTool`], its output and errors);
//! - [`schema`]: argument and answer schemas, and the check of a call's arguments;
//! - [`registry`]: the catalog of the 23 tools, the presets, and [`Registry`], which runs them;
//! - one file per group of tools: [`tasks`], [`steps`], [`messages`], [`projects`], [`members`],
//!   [`files`], with [`format`](mod@format) for their text;
//! - [`policy`]: the permission policy over every tool, as a [`ToolSource`] wrapper; a source
//!   tells it what a call would do ([`CallEffect`]), so `ask` mode asks only when it matters;
//! - [`scope`]: how far a run's writes reach (`permissions.scope`): each tracker tool names
//!   what a call changes, the scope resolves it against the run's task or thread;
//! - [`combined`]: several sources offered as one.
//!
//! Tool definitions and results are picogent's own ([`definition`]: [`ToolDefinition`],
//! [`ToolResult`]), shaped as MCP's are; the MCP crate translates them at its edge, the only
//! place MCP's wire types appear.
//!
//! Invariants:
//! - a call never fails at the Rust level: a bad argument, a refusal or a tracker error is a
//!   result with `is_error: true` whose text tells the model what to do ([`registry`]);
//! - one permission policy wraps every source wherever tools are used, and what it refuses never
//!   reaches the source ([`policy`]);
//! - a run's writes reach only its own task or thread unless `permissions.scope` widens them, and
//!   a call whose reach cannot be judged is refused ([`scope`]).
//!
//! Where things are: `lib.rs` (`ToolSource`, `ToolContext`); `definition.rs` (`ToolDefinition`,
//! `ToolHints`, `ToolOrigin`, `ToolResult`); `kernel.rs` (`TrackerTool`,
//! `ToolOutput`, `ToolError`, `ToolEntry`); `registry.rs` (the list, `Catalog`, `Registry`, the
//! presets), each group's file importing only `kernel` and `format`; `schema.rs`; `policy/`
//! (`Policy`, globs, `PolicySource`, `governed`, `ScopeRule`; `approval.rs`: ask mode through the
//! tracker); `scope.rs` (`Target`, `judge`: a key or id, a message's thread, a chat's project
//! against the run's task or thread, reached through `ToolSource::reach`); what needs a yes in
//! `ask` mode is each tool's own `TrackerTool::effect` (`tasks.rs`: closing, reassigning,
//! rejecting, rewriting), reached through `ToolSource::effect`; `permissions.rs` (the `permissions`
//! section, `PermissionsConfig`); `person.rs` (asking a person in the run's thread and waiting for
//! the reply: `PersonAsker`, the `Waits` hook, `WaitClock`, `Questions`), used by approvals,
//! elicitation, `question.rs` (`ask_person`) and `plan.rs` (`plan_subtasks`: a breakdown of the
//! run's task into sub-tasks, made on a person's yes); `delegation.rs` (the `delegation` section,
//! `DelegationConfig`); `combined.rs` (`CombinedSource`).

pub mod combined;
pub mod definition;
pub mod delegation;
pub mod error;
pub mod files;
pub mod format;
pub mod kernel;
pub mod members;
pub mod messages;
pub mod permissions;
pub mod person;
pub mod plan;
pub mod policy;
pub mod projects;
pub mod question;
pub mod registry;
pub mod schema;
pub mod scope;
pub mod steps;
pub mod tasks;

pub use combined::CombinedSource;
pub use definition::{JsonObject, ToolDefinition, ToolHints, ToolOrigin, ToolResult};
pub use delegation::DelegationConfig;
pub use kernel::{ToolError, ToolGroup};
pub use permissions::{PermissionMode, PermissionsConfig, RunScope, default_ask_tools};
pub use policy::{Policy, PolicySource, governed};
pub use registry::{CHAT_REPLY_TOOLS, Catalog, Registry, RegistryError, TASK_RUN_TOOLS};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// The two tools the MCP host offers when any external server lists resources (`mcp::host`).
/// Named here, below both the host and the permission policy that matches them.
pub const LIST_RESOURCES_TOOL: &str = "list_mcp_resources";
pub const READ_RESOURCE_TOOL: &str = "read_mcp_resource";
/// The two tools the MCP host offers when any external server has a skill (`skill://…`).
pub const LIST_SKILLS_TOOL: &str = "list_mcp_skills";
pub const USE_SKILL_TOOL: &str = "use_mcp_skill";
/// Every tool the MCP host offers besides the servers' own (`mcp__…`).
pub const HOST_TOOLS: [&str; 4] = [LIST_RESOURCES_TOOL, READ_RESOURCE_TOOL, LIST_SKILLS_TOOL, USE_SKILL_TOOL];

/// What a tool call knows about who is calling and why.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The agent's own member slug: tools that take `agent_slug` default to it and refuse others.
    pub agent_slug: String,
    /// Used as the `Idempotency-Key` of the tracker write this call makes, so the same logical
    /// call (for example replayed after a restart) acts once. `None`: a fresh key per call.
    pub idempotency_key: Option<String>,
    /// Cancelled when the run is stopped; long calls give up promptly.
    pub cancel: CancellationToken,
    /// Asked before every message the agent posts; `None` lets every post through (the MCP
    /// server and the command line act for a person, not for the agent's loop).
    pub post_guard: Option<std::sync::Arc<dyn PostGuard>>,
    /// The run's session (set by the runtime): the permission policy asks a human there.
    pub session: Option<picogent_tracker::session::SessionKey>,
    /// The run's id (set by the runtime): large tool results are saved under it as artifacts.
    pub run_id: Option<String>,
    /// The run's fence (set by the runtime, stored with the run): the agent's loop puts every
    /// tool result, external tool description and steering input inside it. A fresh random one
    /// where no run sets it.
    pub fence: picogent_prompts::Fence,
    /// How many steering inputs the loop has taken in so far (the loop sets it at each turn
    /// boundary): the post guard names what a post answers from it.
    pub steering_taken: u32,
    /// Whether the run's one notice about calls refused for its scope went out (shared by the
    /// clones of a run's context; each new context starts a run of its own).
    pub scope_notice: scope::NoticeOnce,
    /// Where the run records that it waits for a person and gives its slot back meanwhile (set
    /// by the runtime; `None`: nothing records it).
    pub waits: Option<std::sync::Arc<dyn person::Waits>>,
    /// The person the run works for (who asked, or assigned the task), when one did: a question
    /// of the run (an approval, an elicitation, `ask_person`) mentions them, and only their reply
    /// answers it (any human's when this is a bot, or `None`).
    pub requester: Option<String>,
    /// The time the run waited for people, which its wall-clock budget does not count.
    pub wait_clock: person::WaitClock,
    /// How many questions each call of the run asked so far: each question's idempotency key
    /// numbers it (shared by the clones of a run's context).
    pub questions: person::Questions,
}

/// Where a message is about to be posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostPlace {
    /// A reply to this message (the tracker attaches it to that message's thread).
    Reply { parent_id: String },
    /// A new comment on this task.
    Task { task_id: String },
    /// A new top-level message in this chat.
    Chat { chat_id: String },
}

/// The runtime's hook into the message tools: before every post it may refuse it (the loop
/// guard), with a reason the model reads, or clear it, naming the message the post answers (its
/// `reply_to`, which the tool sends); and it hears of every post that landed. Each run
/// implements it with what it answers and the per-thread reply cap (`runtime::answer::RunPosts`).
pub trait PostGuard: Send + Sync {
    /// `steering_taken`: the steering inputs the loop had taken in when the post was made.
    fn before_post<'a>(
        &'a self,
        place: &'a PostPlace,
        steering_taken: u32,
    ) -> BoxFuture<'a, Result<Option<String>, PostRefused>>;

    /// Told after a post landed, with the message as the tracker stored it.
    fn posted(&self, _message: &picogent_tracker::model::MessageOut) {}
}

/// Why a post was refused.
#[derive(Debug, thiserror::Error)]
pub enum PostRefused {
    #[error(
        "the agent has answered bots here {count} times in the last hour, the limit \
         (limits.max_replies_per_thread_per_hour); do not post here again, finish with a short final answer"
    )]
    ReplyCap { count: u32 },
    #[error("cannot check the reply cap: {0}")]
    State(#[from] picogent_state::StateError),
}

impl std::fmt::Debug for dyn PostGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostGuard")
    }
}

impl ToolContext {
    pub fn new(agent_slug: impl Into<String>) -> ToolContext {
        ToolContext {
            agent_slug: agent_slug.into(),
            idempotency_key: None,
            cancel: CancellationToken::new(),
            post_guard: None,
            session: None,
            run_id: None,
            fence: picogent_prompts::Fence::random(),
            steering_taken: 0,
            scope_notice: scope::NoticeOnce::default(),
            waits: None,
            requester: None,
            wait_clock: person::WaitClock::default(),
            questions: person::Questions::default(),
        }
    }
}

/// What one call would do, as the tool that runs it judges from its arguments: how `ask` mode
/// decides whether a tool listed in `permissions.ask_tools` needs a human's yes for this call,
/// and what the question says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEffect {
    /// Nothing a human is asked about: a title typo, a move to `in_progress`.
    Routine,
    /// What the call would do, in plain words for the question: "move task TE-3 to done".
    Consequential(String),
    /// The source will refuse the call without acting (its arguments do not fit the tool): there
    /// is nothing to ask about, and the source's own error tells the model what is wrong.
    Refused,
}

/// Anything that offers tools: the tracker registry, an external MCP server, or several combined.
pub trait ToolSource: Send + Sync {
    /// The tools offered, in a fixed order (so prompts stay byte-identical across turns).
    fn tools(&self) -> Vec<ToolDefinition>;

    /// The definition of one offered tool, `None` if no tool of that name is offered. The
    /// default looks through [`ToolSource::tools`]; a source that can find one tool without
    /// building every definition overrides it (it is asked on every call).
    fn tool(&self, name: &str) -> Option<ToolDefinition> {
        self.tools().into_iter().find(|tool| tool.name == name)
    }

    /// What calling `name` with `arguments` would do, if the source can tell; `None` (the
    /// default, and every external MCP tool) means it cannot, and a listed tool then always asks.
    fn effect(&self, _name: &str, _arguments: &serde_json::Value, _context: &ToolContext) -> Option<CallEffect> {
        None
    }

    /// How far calling `name` with `arguments` reaches from the run of `context`
    /// ([`scope::Judgement`]), if the source can tell; `None` (the default, and every external MCP
    /// tool) lets the policy judge from the tool's annotations: a destructive tool reaches past
    /// any run. `Some(Err)`: the source could not judge; the policy refuses the call.
    fn reach<'a>(
        &'a self,
        _name: &'a str,
        _arguments: &'a serde_json::Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Option<Result<scope::Judgement, scope::ReachError>>> {
        Box::pin(async { None })
    }

    /// Calls one tool. Never fails at the Rust level: every failure, an unknown name included, is
    /// a result with `is_error: Some(true)` and a message the model can act on.
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult>;
}
