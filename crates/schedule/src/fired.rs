//! What became of a firing a person asked for now: the answer the scheduler gives, the
//! inspector's "run now" sends as JSON, and `picogent schedules run` reads.

/// What became of one firing, as the scheduler tells whoever asked for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Fired {
    /// Queued as this run, which posts and records how it ended.
    Queued { run_id: String },
    /// Nothing to say: no model call, nothing posted.
    Idle { detail: String },
    /// Not run, on purpose.
    Skipped { detail: String },
    /// It could not read the board or its prompt; a notice went where it would have posted.
    Failed { detail: String },
    /// Handled before: by another replica, or before a restart.
    Handled,
    /// Not now (the agent is stopping, or the state did not answer): considered again later.
    NotNow { detail: String },
}

impl Fired {
    /// Whether the firing is settled, so the job's watermark may move past it.
    pub fn settled(&self) -> bool {
        !matches!(self, Fired::NotNow { .. })
    }
}

/// Why a firing asked for now did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunNowError {
    #[error("there is no schedule {name:?}; the schedules are: {known}")]
    Unknown { name: String, known: String },
    #[error("the agent is stopping")]
    Stopping,
}
