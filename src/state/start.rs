//! Where the event stream stands, told apart from "nowhere yet": a first start (nothing recorded)
//! begins at the tracker's head instead of replaying its whole log.

use super::{State, StateError, now_ms, to_i64};

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
        let mut transaction = self.pool.begin().await?;
        sqlx::query("UPDATE stream_position SET last_seq = MAX(last_seq, ?) WHERE singleton = 1")
            .bind(seq_value)
            .execute(&mut *transaction)
            .await?;
        sqlx::query(
            "INSERT INTO named_values (name, value, updated_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(STREAM_HEAD)
        .bind(seq.to_string())
        .bind(now_ms())
        .execute(&mut *transaction)
        .await?;
        transaction.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::State;

    #[tokio::test]
    async fn a_fresh_state_has_no_position_until_an_event_or_a_head_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let state = State::open(&path).await.unwrap();
        assert_eq!(state.stream_position().await.unwrap(), None);
        // The head of an empty log is a position too.
        state.record_stream_head(0).await.unwrap();
        assert_eq!(state.stream_position().await.unwrap(), Some(0));
        state.record_stream_head(40).await.unwrap();
        assert_eq!(state.stream_position().await.unwrap(), Some(40));
        // Events past the head move it on; a head behind it never moves it back.
        assert!(state.record_event("e41", 41, "message.new").await.unwrap());
        state.record_stream_head(7).await.unwrap();
        state.close().await;
        let state = State::open(&path).await.unwrap();
        assert_eq!(state.stream_position().await.unwrap(), Some(41));

        let other = State::open(&dir.path().join("other.db")).await.unwrap();
        assert!(other.record_event("e1", 1, "task.assigned").await.unwrap());
        assert_eq!(other.stream_position().await.unwrap(), Some(1));
    }
}
