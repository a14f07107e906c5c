//! Why a tool call failed ([`ToolError`]), and what is wrong with its arguments
//! ([`ArgumentProblem`]): the words the kernel, the schema checks and the policy share.

use crate::definition::ToolResult;
use serde_json::json;

use picogent_tracker::TrackerError;

/// One field of the arguments that is wrong, in words a model can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentProblem {
    /// The field's path, `status` or `labels[2]`; empty for the arguments as a whole.
    pub field: String,
    /// What the field accepts; for an unknown field, the fields there are.
    pub expected: String,
    pub got: String,
    /// The field is not one of the tool's.
    pub unknown_field: bool,
}

impl std::fmt::Display for ArgumentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.unknown_field {
            write!(f, "field `{}` is not a field of this tool; {}", self.field, self.expected)
        } else if self.field.is_empty() {
            write!(f, "expected {} (got {})", self.expected, self.got)
        } else {
            write!(f, "field `{}`: expected {} (got {})", self.field, self.expected, self.got)
        }
    }
}

/// Why a tool call failed. Each becomes an error result; none is a protocol error.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema, or break a rule the schema cannot say.
    #[error("invalid arguments: {}", join_problems(.0))]
    InvalidArguments(Vec<ArgumentProblem>),
    /// The call is not allowed: a tool not offered for this run, or acting as another member.
    #[error("refused: {message}")]
    Refused { message: String },
    /// No tool has this name.
    #[error("unknown tool `{name}`; the closest tools are: {}", .suggestions.join(", "))]
    UnknownTool { name: String, suggestions: Vec<String> },
    #[error(transparent)]
    Tracker(#[from] TrackerError),
    /// The tracker knows nothing by the id given; `hint` says how to find the right one.
    #[error("not found: {message}")]
    NotFound { message: String, hint: &'static str },
    #[error("cancelled: the run was stopped before the call finished")]
    Cancelled,
    #[error("internal error: {message}")]
    Internal { message: String },
}

fn join_problems(problems: &[ArgumentProblem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl ToolError {
    /// One argument problem found by the tool itself (a rule the schema does not express).
    pub fn invalid(field: &str, expected: impl Into<String>, got: impl Into<String>) -> ToolError {
        ToolError::InvalidArguments(vec![ArgumentProblem {
            field: field.to_string(),
            expected: expected.into(),
            got: got.into(),
            unknown_field: false,
        }])
    }

    /// A short machine-readable name of the failure, put in the result's structured content.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::InvalidArguments(_) => "invalid_arguments",
            ToolError::Refused { .. } => "refused",
            ToolError::UnknownTool { .. } => "unknown_tool",
            ToolError::NotFound { .. } => "not_found",
            ToolError::Tracker(error) => match error {
                TrackerError::NotFound { .. } => "not_found",
                TrackerError::Conflict { .. } => "conflict",
                TrackerError::Invalid { .. } => "invalid",
                TrackerError::Unauthorized { .. } => "unauthorized",
                TrackerError::Forbidden { .. } => "forbidden",
                TrackerError::RateLimited { .. } => "rate_limited",
                TrackerError::Server { .. } => "tracker_error",
                TrackerError::Transport { timed_out: true, .. } => "timeout",
                TrackerError::Transport { .. } => "unreachable",
                TrackerError::Decode { .. } => "bad_answer",
                TrackerError::Superseded { .. } => "superseded",
            },
            ToolError::Cancelled => "cancelled",
            ToolError::Internal { .. } => "internal",
        }
    }

    /// The message the model reads: what went wrong and what to do next.
    pub fn message_for_model(&self) -> String {
        match self {
            ToolError::InvalidArguments(_) => format!("{self}; fix the arguments and call again"),
            ToolError::NotFound { hint, .. } => format!("{self}; {hint}"),
            ToolError::Tracker(error) => match error {
                TrackerError::NotFound { .. } => {
                    format!("{error}; check the id or key (the list_* tools show them)")
                }
                TrackerError::Conflict { .. } => {
                    format!("{error}; the task's current state forbids this, get_task shows it")
                }
                TrackerError::Invalid { field: Some(field), .. } => {
                    format!("{error}; fix field `{field}` and call again")
                }
                TrackerError::Unauthorized { .. } => {
                    "the tracker refused the agent's credentials; a tool call cannot fix this, tell a human".to_string()
                }
                TrackerError::RateLimited { .. } => format!("{error}; wait before calling again"),
                TrackerError::Transport { timed_out: true, .. } => {
                    format!("{error}; a write may or may not have happened, check before repeating it")
                }
                TrackerError::Server { .. } | TrackerError::Transport { .. } => {
                    format!("{error}; try again later")
                }
                TrackerError::Superseded { .. } => {
                    format!("{error}; no tool call can change this, end the run without posting anything")
                }
                _ => error.to_string(),
            },
            _ => self.to_string(),
        }
    }

    /// A tracker's not-found answer, with `hint` on how to find the right id.
    pub(super) fn with_not_found_hint(self, hint: &'static str) -> ToolError {
        match self {
            ToolError::Tracker(TrackerError::NotFound { message }) => ToolError::NotFound { message, hint },
            other => other,
        }
    }

    /// The error result the caller receives; its structured content names the failure.
    pub fn into_result(self) -> ToolResult {
        let mut detail = json!({"code": self.code(), "message": self.message_for_model()});
        if let ToolError::NotFound { .. } = &self {
            detail["status"] = json!(404);
        }
        if let ToolError::Tracker(error) = &self {
            if let Some(status) = error.status() {
                detail["status"] = json!(status);
            }
            if let TrackerError::Invalid { field: Some(field), .. } = error {
                detail["field"] = json!(field);
            }
        }
        if let ToolError::InvalidArguments(problems) = &self {
            detail["fields"] = problems.iter().map(|p| json!(p.field)).collect();
        }
        if let ToolError::UnknownTool { suggestions, .. } = &self {
            detail["suggestions"] = json!(suggestions);
        }
        let mut result = ToolResult::error(self.message_for_model());
        result.structured = Some(json!({ "error": detail }));
        result
    }
}
