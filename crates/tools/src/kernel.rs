//! What a tracker tool is: the [`TrackerTool`] trait a tool implements, what it returns
//! ([`ToolOutput`], [`ToolError`]), its group and annotations, and [`ToolEntry`], the tool with
//! its type erased, as the catalog stores it.
//!
//! Tool files import this module (and `format`), never the catalog: the catalog imports them.
//!
//! Invariant: the tracker token never reaches a result. Results are built from answers and from
//! [`TrackerError`] messages, which never carry it.

pub use crate::definition::{ToolHints, ToolResult};
pub use crate::error::{ArgumentProblem, ToolError};
use std::future::Future;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::schema::input_schema_for;
pub use crate::scope::Target;
use crate::{CallEffect, ToolContext};
use picogent_tracker::TrackerClient;

/// Tools name the shape of their structured content with it, beside [`read_only`] and [`write()`].
pub use crate::schema::output_schema_for;

/// The group a tool belongs to: `picogent tools list` shows it, and a catalog can be narrowed to groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolGroup {
    Tasks,
    Steps,
    Messages,
    Projects,
    Members,
    Files,
}

impl ToolGroup {
    pub const ALL: [ToolGroup; 6] = [
        ToolGroup::Tasks,
        ToolGroup::Steps,
        ToolGroup::Messages,
        ToolGroup::Projects,
        ToolGroup::Members,
        ToolGroup::Files,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolGroup::Tasks => "tasks",
            ToolGroup::Steps => "steps",
            ToolGroup::Messages => "messages",
            ToolGroup::Projects => "projects",
            ToolGroup::Members => "members",
            ToolGroup::Files => "files",
        }
    }
}

/// What a tool produced: short text for the model and the full answer as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    /// The full answer; always a JSON object, so MCP clients can take it as `structuredContent`.
    pub structured: Value,
}

impl ToolOutput {
    pub fn new(text: impl Into<String>, structured: &impl Serialize) -> Result<ToolOutput, ToolError> {
        let structured = serde_json::to_value(structured)
            .map_err(|e| ToolError::Internal { message: format!("cannot serialize the answer: {e}") })?;
        Ok(ToolOutput { text: text.into(), structured })
    }
}

/// The error result of a call refused before it ran, its text exactly `message` (what the
/// permission policy answers), its structured content shaped like every tool error's.
pub fn refusal(message: String) -> ToolResult {
    ToolResult::error(message.clone()).with_structured(json!({ "error": {"code": "refused", "message": message} }))
}

/// One tool of the tracker: its name, words, argument type and behaviour.
pub trait TrackerTool: Send + Sync + 'static {
    /// The arguments; `deny_unknown_fields` and a `///` line per field (the schema's words).
    type Args: DeserializeOwned + JsonSchema + Send;
    const NAME: &'static str;
    const TITLE: &'static str;
    const DESCRIPTION: &'static str;
    const GROUP: ToolGroup;
    /// How to ask for the rest when the text is cut.
    const PAGING_HINT: &'static str = "ask for fewer items (a smaller limit, or one item by id)";
    /// How to find the right id when the tracker knows none by the one given (a model that made
    /// one up reads this).
    const NOT_FOUND_HINT: &'static str = "check the id or key: the list_* tools show them";

    /// The MCP hints; use [`read_only`] or [`write()`].
    fn annotations() -> ToolHints;

    /// The shape of the structured content, when it is stable.
    fn output_schema() -> Option<Value> {
        None
    }

    /// What a call would do, judged from its arguments before it runs: in `ask` mode a tool
    /// listed in `permissions.ask_tools` asks a human only for a [`CallEffect::Consequential`]
    /// call, whose words are the question ("move task TE-3 to done"). The default: every call
    /// matters, named by the tool's title. A tool whose calls differ (a move to `done` against a
    /// title typo) says which ones do.
    fn effect(args: &Self::Args, context: &ToolContext) -> CallEffect {
        let _ = (args, context);
        CallEffect::Consequential(Self::TITLE.to_lowercase())
    }

    /// What a call would change on the board, judged from its arguments: the run's scope
    /// (`permissions.scope`, [`crate::scope`]) lets it run only when this target is the
    /// run's own task or thread. Asked only of tools that write; the default, a target the tool
    /// cannot name, runs only under `scope: any`.
    fn target(args: &Self::Args, context: &ToolContext) -> Target {
        let _ = (args, context);
        Target::Unknown
    }

    fn run(
        args: Self::Args,
        client: &TrackerClient,
        context: &ToolContext,
    ) -> impl Future<Output = Result<ToolOutput, ToolError>> + Send;
}

/// The hints of a tool that only reads.
pub fn read_only() -> ToolHints {
    ToolHints::read_only()
}

/// The hints of a tool that writes.
pub fn write(destructive: bool, idempotent: bool) -> ToolHints {
    ToolHints::write(destructive, idempotent)
}

pub(super) type RunFn =
    for<'a> fn(Value, &'a TrackerClient, &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;

/// [`TrackerTool::effect`] with the type erased: it takes arguments already checked against the
/// tool's schema.
pub(super) type EffectFn = fn(Value, &ToolContext) -> CallEffect;

/// [`TrackerTool::target`] with the type erased, on checked arguments; `None` when they do not
/// parse (the run refuses the call then, so it changes nothing).
pub(super) type TargetFn = fn(Value, &ToolContext) -> Option<Target>;

/// A tool with its type erased: what the catalog compiles and stores.
pub struct ToolEntry {
    pub(super) name: &'static str,
    pub(super) title: &'static str,
    pub(super) description: &'static str,
    pub(super) group: ToolGroup,
    pub(super) paging_hint: &'static str,
    pub(super) not_found_hint: &'static str,
    pub(super) annotations: fn() -> ToolHints,
    pub(super) output_schema: fn() -> Option<Value>,
    pub(super) input_schema: fn() -> Value,
    pub(super) run: RunFn,
    pub(super) effect: EffectFn,
    pub(super) target: TargetFn,
}

impl ToolEntry {
    pub fn of<T: TrackerTool>() -> ToolEntry {
        ToolEntry {
            name: T::NAME,
            title: T::TITLE,
            description: T::DESCRIPTION,
            group: T::GROUP,
            paging_hint: T::PAGING_HINT,
            not_found_hint: T::NOT_FOUND_HINT,
            annotations: T::annotations,
            output_schema: T::output_schema,
            input_schema: input_schema_for::<T::Args>,
            run: run_erased::<T>,
            effect: effect_erased::<T>,
            target: target_erased::<T>,
        }
    }
}

fn run_erased<'a, T: TrackerTool>(
    arguments: Value,
    client: &'a TrackerClient,
    context: &'a ToolContext,
) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(async move {
        // The schema was checked first, so this only fails where the schema and the type disagree.
        let args: T::Args = serde_json::from_value(arguments)
            .map_err(|e| ToolError::invalid("", "arguments matching the tool's schema", e.to_string()))?;
        T::run(args, client, context).await
    })
}

fn effect_erased<T: TrackerTool>(arguments: Value, context: &ToolContext) -> CallEffect {
    // As in `run_erased`: the schema was checked first; a call that still does not parse is
    // refused by the run the same way, so it does nothing to ask about.
    match serde_json::from_value::<T::Args>(arguments) {
        Ok(args) => T::effect(&args, context),
        Err(_) => CallEffect::Refused,
    }
}

fn target_erased<T: TrackerTool>(arguments: Value, context: &ToolContext) -> Option<Target> {
    serde_json::from_value::<T::Args>(arguments).ok().map(|args| T::target(&args, context))
}
