//! Where the stream begins: [`StreamStart`] (what this process was asked for), [`StartMode`]
//! (how it began, reported once as [`LinkStatus::Began`]), where each connection begins
//! (`plan_start`), and the report itself (`begin`).

use super::{LinkStatus, ResumePosition, StreamItem};

/// Where the stream begins the first time this process connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamStart {
    /// At the recorded position; with none recorded (a fresh state file), at the tracker's head:
    /// the log is read through to learn where it ends, and nothing in it is passed on.
    #[default]
    Recorded,
    /// At seq 0, whatever is recorded: the whole log is replayed and passed on
    /// (`picogent run --from-start`). Later reconnects resume from the recorded position.
    FromStart,
}

/// How the stream began, reported once ([`LinkStatus::Began`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartMode {
    /// Nothing was recorded: the stream began at the tracker's head, past events not acted on.
    Head,
    /// From the recorded position: everything after it was replayed.
    Resume,
    /// From seq 0 (`--from-start`): the whole log was replayed.
    FromStart,
}

impl StartMode {
    pub fn as_str(self) -> &'static str {
        match self {
            StartMode::Head => "head",
            StartMode::Resume => "resume",
            StartMode::FromStart => "from_start",
        }
    }
}

/// How a process's connections began.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Opening {
    /// The first connection's start: the one the process reports, even if that connection was
    /// lost before `resumed`.
    pub(super) first: Option<Start>,
    /// Whether [`LinkStatus::Began`] went out (a connection got `resumed`).
    pub(super) reported: bool,
}

/// Where one connection begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Start {
    pub(super) mode: StartMode,
    /// Sent in `resume`.
    pub(super) after_seq: u64,
}

/// Where a connection begins: at seq 0 for the first connection with `--from-start`; at the
/// recorded position; with none, at the head (`resume` from 0 to read where the log ends, its
/// events not passed on) — or from 0 again with `--from-start`, which never skips. A replay cut
/// off by a lost connection goes on from what was processed of it: the position moves only as
/// events are recorded.
pub(super) async fn plan_start<R: ResumePosition>(
    start: StreamStart,
    first_connection: bool,
    resume: &R,
) -> Result<Start, R::Error> {
    let recorded = resume.recorded_position().await?;
    Ok(match (start, recorded) {
        (StreamStart::FromStart, None) => Start { mode: StartMode::FromStart, after_seq: 0 },
        (StreamStart::FromStart, Some(_)) if first_connection => Start { mode: StartMode::FromStart, after_seq: 0 },
        (_, Some(seq)) => Start { mode: StartMode::Resume, after_seq: seq },
        (StreamStart::Recorded, None) => Start { mode: StartMode::Head, after_seq: 0 },
    })
}

/// The `last_seq` of the `resumed` among `items`, if there is one.
pub(super) fn caught_up_at(items: &[StreamItem]) -> Option<u64> {
    items.iter().find_map(|item| match item {
        StreamItem::Status(LinkStatus::CaughtUp { last_seq }) => Some(*last_seq),
        _ => None,
    })
}

/// The stream begins, on this connection's `resumed` at `last_seq`: at the head, the head is
/// recorded as the position (a failure is logged and the next connection starts at the head
/// again; nothing is lost, since nothing was passed on). Returns the [`LinkStatus::Began`] to
/// report, which tells how the process's `first` connection began.
pub(super) async fn begin(
    start: Start,
    first: Start,
    last_seq: u64,
    skipped: u64,
    resume: &impl ResumePosition,
) -> StreamItem {
    if start.mode == StartMode::Head
        && let Err(error) = resume.record_head(last_seq).await
    {
        tracing::warn!(%error, head = last_seq, "cannot record the tracker's head as the stream position");
    }
    let from_seq = match first.mode {
        StartMode::Head => last_seq,
        StartMode::Resume | StartMode::FromStart => first.after_seq,
    };
    tracing::debug!(mode = first.mode.as_str(), from_seq, skipped, "event stream began");
    StreamItem::Status(LinkStatus::Began { mode: first.mode, from_seq, skipped })
}
