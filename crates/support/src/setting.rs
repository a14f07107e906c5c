//! A setting of agent.json that fails its section's check: the field as the file names it
//! (`limits.max_turns`, `schedules.standup.cron`) and what it should be. Every section's check
//! returns it, whichever crate owns the section; the config crate turns it into its error with
//! the file's path.

/// A field that is wrong, and what it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Problem {
    pub field: String,
    pub message: String,
}

/// The check's failure: `field` is wrong, `message` says what it should be.
pub fn problem(field: &str, message: &str) -> Result<(), Problem> {
    Err(Problem { field: field.to_string(), message: message.to_string() })
}
