//! One copy per state while `picogent run` runs: the operating system's lock on
//! `<state.path>.lock` for a SQLite file ([`picogent_state::lock_state`]), and the agent's advisory
//! lock for PostgreSQL. The file's lock lasts as long as the process. The
//! PostgreSQL lock lasts as long as its connection, which a restart of the server, a network cut
//! or a terminated backend ends without a word; [`LockKeeper`] asks the connection every
//! presence heartbeat and, when it went, takes the lock again. When another copy took it
//! meanwhile, this copy stops acting as when a newer copy takes over on the tracker: writes
//! refused, the event stream stopped, `/readyz` and the log saying why, exit code 3.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::status::StatusBoard;
use picogent_state::{Outage, PostgresLock, StateError};
use picogent_tracker::presence::WriteGate;

/// What keeps a second copy of the agent off its state while this one runs.
#[derive(Debug)]
#[allow(dead_code, reason = "held, never read: dropping it lets the lock go")]
pub(super) enum StateLock {
    /// The operating system's lock on `<state.path>.lock`.
    File(std::fs::File),
    /// The agent's advisory lock in the PostgreSQL database, kept by a task of its own.
    Postgres(LockKeeper),
}

/// The lock as taken at start, before the parts of the agent that a lost lock stops exist.
pub(super) enum TakenLock {
    File(std::fs::File),
    Postgres(PostgresLock),
}

impl TakenLock {
    /// Holds the lock while the agent runs: a PostgreSQL lock is asked after every `every`.
    pub(super) fn keep(self, every: Duration, stand_down: StandDown) -> StateLock {
        match self {
            TakenLock::File(file) => StateLock::File(file),
            TakenLock::Postgres(lock) => StateLock::Postgres(LockKeeper::spawn(lock, every, stand_down)),
        }
    }
}

/// How long a lock whose connection stopped answering (rather than closed) is tried again
/// before this copy concludes another copy has it: the server may hold it for the old
/// connection until it notices that connection is gone, within about 25 s by the keepalive
/// probes [`PostgresLock::take`] asks for. A closed connection's lock goes at once.
const RETAKE_FOR: Duration = Duration::from_secs(30);

/// How long the lock's connection may take to answer before it counts as gone.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// Keeps the agent's PostgreSQL lock while the agent runs; lets it go when dropped (at the end of
/// the agent's shutdown, after its runs).
#[derive(Debug)]
pub(super) struct LockKeeper {
    stop: CancellationToken,
}

impl Drop for LockKeeper {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What this copy does when another copy took its lock: the same as when a newer copy takes over
/// on the tracker.
pub(super) struct StandDown {
    pub gate: Option<Arc<WriteGate>>,
    pub status: Arc<StatusBoard>,
    pub stream: CancellationToken,
    pub superseded: CancellationToken,
}

impl LockKeeper {
    /// Starts asking `lock`'s connection every `every`.
    pub(super) fn spawn(lock: PostgresLock, every: Duration, stand_down: StandDown) -> LockKeeper {
        let stop = CancellationToken::new();
        tokio::spawn(keep(lock, every, stand_down, stop.clone()));
        LockKeeper { stop }
    }
}

async fn keep(mut lock: PostgresLock, every: Duration, stand_down: StandDown, stop: CancellationToken) {
    let mut outage = Outage::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
        // An error means the connection is closed, so the server let the lock go; no answer in
        // time means it may still hold it until it notices the connection is gone.
        let grace = match tokio::time::timeout(ANSWER_WITHIN, lock.answers()).await {
            Ok(true) => continue,
            Ok(false) => Duration::ZERO,
            Err(_) => RETAKE_FOR,
        };
        tracing::warn!("the agent's lock in PostgreSQL went with its connection; taking it again");
        // The old connection first, so a lock it may still hold is let go, not mistaken for
        // another copy's.
        let spec = lock.spec();
        let _ = tokio::time::timeout(ANSWER_WITHIN, lock.release()).await;
        let mut held_since: Option<tokio::time::Instant> = None;
        loop {
            match spec.take().await {
                Ok(again) => {
                    outage.answered();
                    tracing::info!("took the agent's lock in PostgreSQL again");
                    lock = again;
                    break;
                }
                Err(StateError::PostgresLocked { url, agent, .. }) => {
                    let since = *held_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= grace {
                        let reason = format!(
                            "another copy of agent `{agent}` took its lock in the PostgreSQL database {url} while this \
                             copy's connection was down; this copy writes nothing more and exits: run one copy per \
                             agent and database (or several with replicas.enabled)"
                        );
                        tracing::error!("{reason}");
                        stand_down.now(reason);
                        return;
                    }
                }
                Err(error) => {
                    held_since = None;
                    outage.failed("cannot take the agent's lock in PostgreSQL again", &error);
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every.min(Duration::from_secs(5))) => {}
            }
        }
    }
    lock.release().await;
}

impl StandDown {
    fn now(&self, reason: String) {
        if let Some(gate) = &self.gate {
            gate.supersede(&reason);
        }
        self.status.set_superseded(reason);
        self.stream.cancel();
        self.superseded.cancel();
    }
}
