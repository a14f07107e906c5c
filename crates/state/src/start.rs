//! Where the event stream stands, told apart from "nowhere yet": a first start (nothing recorded)
//! begins at the tracker's head instead of replaying its whole log.

use futures::future::BoxFuture;
use picogent_tracker::stream::ResumePosition;

use crate::{State, StateError, now_ms, to_i64};

/// The named value that says the stream began at the tracker's head, with the seq it began at.
const STREAM_HEAD: &str = "stream_head";

impl State {
    /// The resume point, or `None` when nothing was ever recorded: no event processed and no
    /// start at the head (a fresh state file).
    pub async fn stream_position(&self) -> Result<Option<u64>, StateError> {
        let last_seq = self.last_seq().await?;
        if last_seq > 0 || self.get_value(STREAM_HEAD).await?.is_some() {
            return Ok(Some(last_seq));
        }
        Ok(None)
    }

    /// Records that the stream began at the tracker's head `seq`: the resume point moves there
    /// (never back), and the position counts as recorded from now on, even at 0 (an empty log).
    pub async fn record_stream_head(&self, seq: u64) -> Result<(), StateError> {
        let seq_value = to_i64("stream_position.last_seq", seq)?;
        on_store!(self, record_stream_head(seq_value, STREAM_HEAD, now_ms()))
    }
}

/// The event stream resumes from what the router recorded here.
impl ResumePosition for State {
    type Error = StateError;

    fn last_processed_seq(&self) -> BoxFuture<'_, Result<u64, StateError>> {
        Box::pin(self.last_seq())
    }

    fn recorded_position(&self) -> BoxFuture<'_, Result<Option<u64>, StateError>> {
        Box::pin(self.stream_position())
    }

    fn record_head(&self, seq: u64) -> BoxFuture<'_, Result<(), StateError>> {
        Box::pin(self.record_stream_head(seq))
    }
}
