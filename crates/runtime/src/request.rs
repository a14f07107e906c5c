//! What the router and a run say to each other: the request a run starts from ([`RunRequest`],
//! [`RunKind`]), what every run shares ([`RunServices`]), and how it ends ([`RunDone`],
//! [`RunError`]). The router, the run and the parts of a run (its prompt, its answer) read these
//! words here, so none of them needs another's module to speak.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::guard::{Asked, Asker, ReplyCap, Steering};
use crate::metrics::Metrics;
use crate::status::StatusBoard;
use picogent_config::Config;
use picogent_prompts::{PromptError, Prompts};
use picogent_state::{ClaimKind, RunStatus, State, StateError};
use picogent_tools::ToolSource;
use picogent_tracker::model::{MessageOut, TaskOut};
use picogent_tracker::session::SessionKey;
use picogent_tracker::{TrackerClient, TrackerError};

/// What every run needs, shared by all of them.
pub struct RunServices {
    pub config: Arc<Config>,
    /// The agent's own tracker connection.
    pub client: TrackerClient,
    pub state: State,
    pub metrics: Arc<Metrics>,
    pub status: Arc<StatusBoard>,
    pub prompts: Arc<Prompts>,
    pub tools: Arc<dyn ToolSource>,
    pub model: Arc<dyn picogent_llm::ChatModel>,
    /// The agent's shutdown: a run cancelled by it stays `running` and resumes at the next start.
    pub shutdown: CancellationToken,
    /// The external MCP servers: their instructions and prompt commands.
    pub host: Arc<picogent_mcp::host::McpHost>,
    /// The loop guard, and what tells where each post lands and what it answers (asked before
    /// every post of a run).
    pub post_guard: Arc<ReplyCap>,
    /// The coding tools, when `workspaces` names a repository: a task's workspace and its coding
    /// agent, and what each run's coding agent printed and pushed.
    pub coding: Option<Arc<picogent_workspace::CodingTools>>,
    /// This process's run slots, and the runs waiting for a person, which hold none.
    pub slots: Arc<crate::waits::RunSlots>,
}

/// What a run is for.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunKind {
    /// Work a task assigned to the agent.
    Task { task: Box<TaskOut>, assigned_by: String },
    /// Answer a message that addressed the agent.
    Message { message: Box<MessageOut> },
    /// Answer a prompt given over MCP or the command line.
    Prompt { text: String },
    /// Carry out a firing of a scheduled job (`schedules`): what it read and decided when it
    /// fired travels with it, so a resumed run does the same work.
    Schedule { firing: Box<picogent_schedule::firing::Firing> },
}

pub use picogent_state::{Trigger, UnknownTrigger};

/// The trigger a run of `kind` would have been started by, for a run whose own cannot be read.
pub fn trigger_of(kind: &RunKind) -> Trigger {
    match kind {
        RunKind::Task { task, .. } => Trigger::Assigned { task_key: task.key.clone() },
        RunKind::Message { message } => Trigger::Message { message_id: message.id.clone() },
        RunKind::Prompt { .. } => Trigger::StartPrompt,
        RunKind::Schedule { firing } => {
            Trigger::Scheduled { job: firing.job.clone(), fire_at_ms: firing.fire_at_ms, manual: firing.manual }
        }
    }
}

#[derive(Debug)]
pub struct RunRequest {
    pub session: SessionKey,
    /// What started it, recorded with the run.
    pub trigger: Trigger,
    pub kind: RunKind,
    /// Input that arrived before the run started; handed to it at its first turn boundary.
    pub steering: Vec<Steering>,
    /// The messages `steering` came from: the prompt does not show them again.
    pub steering_message_ids: Vec<String>,
    /// Set when continuing a run interrupted by a crash or restart.
    pub resume_run_id: Option<String>,
    /// The request itself, when it is given rather than rendered from `kind`: a follow-up run's
    /// prompt is the first input that came too late for the run before it, never that run's
    /// prompt again.
    pub prompt: Option<String>,
    /// A claim (kind, key) written in the same transaction as the run's start, so the thing is
    /// handled once and a crash between deciding and starting loses nothing.
    pub claim: Option<(ClaimKind, String)>,
    /// Who asked for the run: the member who wrote its message or assigned its task (the router
    /// sets it as it starts the run). The loop guard counts only what answers a bot.
    pub asker: Asker,
    /// The message a given `prompt` came from (a follow-up's first late input): what the run
    /// answers instead of its kind's message.
    pub prompt_from: Option<Asked>,
    /// The coding agent and branch MCP's `start_run` asked for (checked there).
    pub coding: Option<picogent_workspace::CodingChoice>,
}

impl RunRequest {
    /// A fresh run of `kind` for `session`, with no steering and no claim.
    pub fn new(session: SessionKey, trigger: Trigger, kind: RunKind) -> RunRequest {
        RunRequest {
            session,
            trigger,
            kind,
            steering: Vec::new(),
            steering_message_ids: Vec::new(),
            resume_run_id: None,
            prompt: None,
            claim: None,
            asker: Asker::Person,
            prompt_from: None,
            coding: None,
        }
    }
}

/// A run's end, as the router hears it.
#[derive(Debug)]
pub struct RunDone {
    pub run_id: String,
    pub session: SessionKey,
    pub kind: RunKind,
    /// How it ended. [`RunStatus::Interrupted`]: cut short by the shutdown; its row stays
    /// `running` in the database, so the next start resumes it.
    pub status: RunStatus,
    /// The one short comment to leave where the run was asked, for a run that failed or did
    /// nothing. A stopped run's notice is the router's to write: it knows who stopped it.
    pub notice: Option<String>,
    pub duration: Duration,
    /// How many steering inputs the loop took in; the router hands the rest to a follow-up run.
    pub steering_consumed: usize,
}

/// Why a run could not get as far as its model loop.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the state database failed: {0}")]
    State(#[from] StateError),
    #[error("reading the task failed: {0}")]
    ReadTask(#[source] TrackerError),
    #[error("the prompt could not be built: {0}")]
    Prompt(#[from] PromptError),
    /// A prompt or skill command a person called (`/mcp__…`, `$server:skill`) cannot run.
    #[error("the command failed: {0}")]
    Command(#[source] picogent_mcp::host::CommandError),
    #[error("the run's start could not be stored: {0}")]
    Unstorable(#[from] serde_json::Error),
}
