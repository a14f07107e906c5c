//! One active copy per agent identity, across machines. The operating system's lock on the state
//! file keeps a second copy off one machine and one state file; this keeps a copy with *other*
//! state (another machine, another folder) from answering everything a second time as the same
//! tracker member.
//!
//! Each copy has an id, made once and kept in its state file (so a restart of the same copy is
//! not taken for another copy), and keeps a marker with that id and a beat count at the end of
//! its member status on the tracker (`tracker::presence`), moved on every `presence.heartbeat_ms`.
//! Replicas sharing one PostgreSQL state (`replicas.enabled`) are one copy: they share its id
//! (the first to start made it), each beats the same marker, and none leaves a stopped marker
//! when it stops, since the others go on.
//!
//! At start, before the event stream connects or anything is done ([`claim`]):
//! - its own marker (a restart of this copy) lets it go on at once;
//! - another copy's marker is watched for [`Timing::watch`]: if it moves, that copy is alive and
//!   this one refuses to start ([`PresenceError::AnotherCopy`], exit code [`EXIT_ANOTHER_COPY`]);
//!   if it does not, that copy died, and this one takes over;
//! - then (and when there was no marker, or a stopped one) it writes its own marker, waits
//!   [`Timing::settle`] and reads again: another copy's marker there means another copy started
//!   at the same moment and wrote last, and this one refuses — the last writer wins.
//!
//! While running ([`Heartbeat`]), every beat reads the status before it moves the marker on.
//! Another copy's marker there means a newer copy took over (this one was paused or cut off for
//! longer than the watch): this copy stops acting at once — its write gate refuses every write,
//! its event stream stops, `/readyz` says why — and `picogent run` exits with
//! [`EXIT_ANOTHER_COPY`] a moment later.
//!
//! Why two copies never act at once: a copy's writes pass its [`WriteGate`], which a beat opens
//! for [`Timing::lease`] from the moment it read no other copy's marker. A starting copy acts only
//! after it wrote its marker, waited out that lease ([`Timing::settle`]) and found its marker still
//! there. Any other copy either read the new marker in that time (and stopped), or overwrote it
//! (and the starting copy refuses), or renewed its lease last from a read made before the marker
//! was written, and that lease ran out before the wait did. Nothing here relies on the clocks of
//! two machines agreeing: each measures its own intervals.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::status::StatusBoard;
use picogent_config::{Config, PresenceConfig, TrackerConfig};
use picogent_state::{State, StateError};
use picogent_support::retry::{RetryDecision, Retryable};
use picogent_tracker::model::StatusOut;
use picogent_tracker::presence::{
    Beat, Marker, MemberStatus, StatusChange, compose, is_copy_id, new_copy_id, parse_status,
};
use picogent_tracker::{TrackerClient, TrackerError, WriteGate};

/// `picogent run`'s exit code when another copy of the agent is active: at start, or when a newer
/// copy took over from this one.
pub const EXIT_ANOTHER_COPY: u8 = 3;

/// The name under which the state database keeps this copy's id.
const COPY_ID: &str = "presence.copy_id";

/// The intervals of the protocol, all counted in heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat: Duration,
}

impl Timing {
    pub fn from_config(config: &PresenceConfig) -> Timing {
        Timing { heartbeat: Duration::from_millis(config.heartbeat_ms) }
    }

    /// How long one confirmation lets this copy write: two beats, one to spare for a slow tracker.
    pub fn lease(self) -> Duration {
        self.heartbeat * 2
    }

    /// How long a starting copy watches another copy's marker before it calls that copy dead: a
    /// live one moves it within one beat, this waits two and a half.
    pub fn watch(self) -> Duration {
        self.heartbeat * 5 / 2
    }

    /// How long a copy that wrote its marker waits before it acts: a whole lease, so any copy that
    /// has not seen the marker has stopped writing by then.
    pub fn settle(self) -> Duration {
        self.lease()
    }

    /// How long a superseded copy goes on saying why on `/readyz` before it exits.
    pub fn linger(self) -> Duration {
        self.heartbeat.clamp(Duration::from_secs(1), Duration::from_secs(10))
    }

    /// The longest one request of the heartbeat may take, retries included: about a beat, so a
    /// slow answer delays the next beat instead of holding the lease back for long.
    fn request_budget_ms(self) -> u64 {
        (self.heartbeat.as_millis() as u64).max(1_000)
    }
}

/// The tracker settings of the heartbeat's own client: those of `tracker`, with each request and
/// its retries bounded by about one beat.
pub fn tracker_config(config: &Config) -> TrackerConfig {
    let budget = Timing::from_config(&config.presence).request_budget_ms();
    let mut tracker = config.tracker.clone();
    tracker.timeout_ms = tracker.timeout_ms.min(budget);
    tracker.retry.max_elapsed_ms = tracker.retry.max_elapsed_ms.min(budget);
    tracker
}

/// Why the presence check stopped the start.
#[derive(Debug, thiserror::Error)]
pub enum PresenceError {
    #[error(
        "another copy of this agent is active on the tracker: copy {other} keeps its marker in the status of \
         member `{slug}`, so this copy (copy {mine}, state {state}) does not start; stop the other copy, or give \
         this one its own agent member and token (several copies sharing one state are not supported yet)"
    )]
    AnotherCopy { other: String, mine: String, slug: String, state: String },
    #[error("cannot check on the tracker that no other copy of this agent is active: {source}; {hint}")]
    Tracker {
        #[source]
        source: TrackerError,
        hint: &'static str,
    },
    #[error("cannot keep this copy's id in the state database: {0}")]
    State(#[from] StateError),
}

/// What a beat found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    /// No other copy's marker: this copy's marker moved on (the status as stored) and its lease
    /// was renewed.
    Held(String),
    /// Another copy's marker is there.
    Another(Marker),
}

/// This copy's standing on the tracker, from [`claim`] until it is handed to [`Presence::spawn`].
pub struct Presence {
    /// Ungated, with short requests: the heartbeat's writes renew the lease and pass no gate.
    client: TrackerClient,
    gate: Arc<WriteGate>,
    /// What `update_my_status` asks of a gated client; the heartbeat carries it out.
    status_changes: tokio::sync::mpsc::Receiver<StatusChange>,
    copy_id: String,
    beats: AtomicU64,
    timing: Timing,
    slug: String,
    /// Where this copy's state lives, as `State::location` says it.
    state_location: String,
    /// `tracker.url`, as it may be shown.
    tracker_url: String,
    /// What the marker says this agent can do (`capabilities`, its plain words).
    can: Vec<String>,
    /// Leave a stopped marker at a clean stop. Not for a replica: the others go on under the same
    /// copy id, and a stopped marker would let a copy with other state take over without watching.
    signs_off: bool,
}

/// Makes sure this copy is the one active copy of the agent before it acts (see the module
/// docs); on `Ok`, this copy's marker is on the tracker and its writes may go out.
pub async fn claim(config: &Config, client: TrackerClient, state: &State) -> Result<Presence, PresenceError> {
    let timing = Timing::from_config(&config.presence);
    let (gate, status_changes) = WriteGate::new(timing.lease());
    let presence = Presence {
        client,
        gate: Arc::new(gate),
        status_changes,
        copy_id: copy_id(state).await?,
        beats: AtomicU64::new(0),
        timing,
        slug: config.slug.clone(),
        state_location: state.location(),
        tracker_url: picogent_support::secret::shown_url(&config.tracker.url),
        signs_off: !config.replicas.enabled,
        can: picogent_tracker::presence::capability_words(&config.capabilities),
    };
    let found = presence.patiently(|| presence.read()).await?;
    match found.marker {
        Some(marker) if marker.copy_id == presence.copy_id => {
            tracing::info!(copy = %presence.copy_id, "this copy's own marker is on the tracker: going on");
        }
        marker => {
            if let Some(marker) = marker.filter(|marker| marker.beat != Beat::Stopped) {
                presence.watch(&marker).await?;
            }
            presence.patiently(|| presence.mark()).await?;
            tracing::info!(
                copy = %presence.copy_id,
                settle_ms = timing.settle().as_millis() as u64,
                "marked this copy on the tracker; waiting for any other copy starting at the same moment"
            );
            tokio::time::sleep(timing.settle()).await;
        }
    }
    match presence.patiently(|| presence.beat(None)).await? {
        Found::Held(_) => Ok(presence),
        Found::Another(marker) => Err(presence.another_copy(marker)),
    }
}

/// This copy's id, made and kept in the state database at its first start. Replicas sharing one
/// state are one copy: they share its id, whichever of them made it.
async fn copy_id(state: &State) -> Result<String, PresenceError> {
    match state.get_value(COPY_ID).await? {
        Some(id) if is_copy_id(&id) => Ok(id),
        None => {
            let id = state.value_or_insert(COPY_ID, &new_copy_id()).await?;
            state.sync().await?;
            Ok(id)
        }
        Some(stored) => {
            tracing::warn!(stored, "the state database holds a malformed copy id; this copy takes a new one");
            let id = new_copy_id();
            state.set_value(COPY_ID, &id).await?;
            // Kept before the id is written to the tracker, so the next start knows it as its own.
            state.sync().await?;
            Ok(id)
        }
    }
}

impl Presence {
    /// The gate the agent's client writes through.
    pub fn gate(&self) -> Arc<WriteGate> {
        self.gate.clone()
    }

    pub fn copy_id(&self) -> &str {
        &self.copy_id
    }

    /// Keeps the marker moving until [`Heartbeat::finish`]; when a beat finds another copy's
    /// marker, stops this copy acting: the gate refuses every write, `stream` and `superseded`
    /// are cancelled and `status` says why.
    pub fn spawn(
        self,
        status: Arc<StatusBoard>,
        stream: CancellationToken,
        superseded: CancellationToken,
    ) -> Heartbeat {
        let stop = CancellationToken::new();
        let timing = self.timing;
        let task = tokio::spawn(self.keep(status, stream, stop.clone(), superseded));
        Heartbeat { stop, timing, task }
    }

    async fn keep(
        mut self,
        status: Arc<StatusBoard>,
        stream: CancellationToken,
        stop: CancellationToken,
        superseded: CancellationToken,
    ) {
        let mut wait = self.timing.heartbeat;
        // Whether the beats are failing: a tracker that stays down is warned of once, not at
        // every beat (the later failures at debug), and its return said once.
        let mut failing = false;
        loop {
            // A status change is a beat of its own, at once.
            let change = tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(wait) => None,
                Some(change) = self.status_changes.recv() => Some(change),
            };
            let (text, answer) = match change {
                Some(StatusChange { text, answer }) => (Some(text), Some(answer)),
                None => (None, None),
            };
            let beat = self.beat(text.as_deref()).await;
            let answered = match beat {
                Ok(Found::Held(stored)) => {
                    wait = self.timing.heartbeat;
                    if std::mem::take(&mut failing) {
                        tracing::info!("the presence heartbeat gets through again; writes go on");
                    }
                    Ok(StatusOut { status: stored })
                }
                Ok(Found::Another(marker)) => {
                    let reason = format!(
                        "another copy of this agent (copy {}) took over member `{}` on the tracker; this copy \
                         (copy {}) writes nothing more and exits: run one copy per agent member, or give each \
                         copy its own member and token",
                        marker.copy_id, self.slug, self.copy_id
                    );
                    self.gate.supersede(&reason);
                    tracing::error!(other = %marker.copy_id, copy = %self.copy_id, "{reason}");
                    status.set_superseded(reason.clone());
                    stream.cancel();
                    superseded.cancel();
                    if let Some(answer) = answer {
                        let _ = answer.send(Err(TrackerError::Superseded { message: reason }));
                    }
                    return;
                }
                Err(error) if failing => {
                    tracing::debug!(%error, "the presence heartbeat still does not get through");
                    wait = self.timing.heartbeat / 2;
                    Err(error)
                }
                Err(error) => {
                    failing = true;
                    tracing::warn!(
                        %error,
                        "the presence heartbeat did not get through; writes wait until it does (said once until it does)"
                    );
                    wait = self.timing.heartbeat / 2;
                    Err(error)
                }
            };
            if let Some(answer) = answer {
                let _ = answer.send(answered);
            }
        }
        if self.signs_off {
            self.sign_off().await;
        }
    }

    /// Reads the status, and unless another copy's marker is there, writes `text` (or the text
    /// read) with this copy's marker moved on; the lease then runs from the read. Nothing is
    /// written on a read more than a beat old (the process was paused, or the tracker slow): a
    /// newer copy may have written its marker meanwhile, and the status has no compare-and-set
    /// to keep it from being overwritten. A newer copy writes its marker only after a marker
    /// stood still for [`Timing::watch`], well over a beat.
    async fn beat(&self, text: Option<&str>) -> Result<Found, TrackerError> {
        let read_at = Instant::now();
        let status = self.read().await?;
        if let Some(marker) = status.marker
            && marker.copy_id != self.copy_id
        {
            return Ok(Found::Another(marker));
        }
        let marker = self.next_marker();
        let composed = compose(text.unwrap_or(&status.text), &marker);
        let stored = self.client.write_my_status_before(&composed, Some(read_at + self.timing.heartbeat)).await?;
        self.gate.renew(read_at + self.timing.lease());
        Ok(Found::Held(stored.status))
    }

    /// Writes this copy's marker over whatever is there (a start that found no live copy); opens
    /// no lease.
    async fn mark(&self) -> Result<(), TrackerError> {
        let read_at = Instant::now();
        let status = self.read().await?;
        let composed = compose(&status.text, &self.next_marker());
        self.client.write_my_status_before(&composed, Some(read_at + self.timing.heartbeat)).await?;
        Ok(())
    }

    /// Watches another copy's marker: `Err(AnotherCopy)` as soon as it moves, `Ok` when it stood
    /// still for the whole watch (that copy is gone) or was signed off.
    async fn watch(&self, seen: &Marker) -> Result<(), PresenceError> {
        tracing::info!(
            other = %seen.copy_id,
            watch_ms = self.timing.watch().as_millis() as u64,
            "the tracker shows another copy of this agent; watching its marker before taking over"
        );
        let deadline = Instant::now() + self.timing.watch();
        while Instant::now() < deadline {
            tokio::time::sleep(self.timing.heartbeat / 2).await;
            let status = match self.read().await {
                Ok(status) => status,
                Err(error) if error.retry_decision() != RetryDecision::Stop => {
                    tracing::warn!(%error, "cannot read this agent's member status; watching on");
                    continue;
                }
                Err(error) => return Err(tracker_error(error)),
            };
            match status.marker {
                Some(marker) if marker == *seen => {}
                Some(marker) if marker.beat == Beat::Stopped => {
                    tracing::info!(other = %marker.copy_id, "the other copy stopped cleanly");
                    return Ok(());
                }
                Some(marker) => return Err(self.another_copy(marker)),
                // A person cleared the status: a live copy marks it again within a beat.
                None => {}
            }
        }
        tracing::warn!(
            other = %seen.copy_id,
            watched_ms = self.timing.watch().as_millis() as u64,
            "the other copy of this agent has not moved its marker: it is not running; taking over from it"
        );
        Ok(())
    }

    /// At a clean stop: leaves a stopped marker, so the next copy to start need not watch.
    async fn sign_off(&self) {
        let signed = async {
            let read_at = Instant::now();
            let status = self.read().await?;
            if status.marker.as_ref().is_some_and(|marker| marker.copy_id != self.copy_id) {
                return Ok(());
            }
            let marker = Marker { copy_id: self.copy_id.clone(), beat: Beat::Stopped, can: self.can.clone() };
            let composed = compose(&status.text, &marker);
            self.client.write_my_status_before(&composed, Some(read_at + self.timing.heartbeat)).await?;
            Ok::<(), TrackerError>(())
        };
        if let Err(error) = signed.await {
            tracing::warn!(%error, "cannot leave a stopped marker on the tracker; the next copy watches for a while");
        }
    }

    async fn read(&self) -> Result<MemberStatus, TrackerError> {
        Ok(parse_status(&self.client.get_member("me").await?.status))
    }

    fn next_marker(&self) -> Marker {
        let beat = self.beats.fetch_add(1, Ordering::Relaxed) + 1;
        Marker { copy_id: self.copy_id.clone(), beat: Beat::Count(beat), can: self.can.clone() }
    }

    fn another_copy(&self, marker: Marker) -> PresenceError {
        PresenceError::AnotherCopy {
            other: marker.copy_id,
            mine: self.copy_id.clone(),
            slug: self.slug.clone(),
            state: self.state_location.clone(),
        }
    }

    /// Runs `step` until the tracker answers: a tracker that is down for a while delays the
    /// start (as it would delay the event stream); one that refuses stops it.
    async fn patiently<T, F, Fut>(&self, mut step: F) -> Result<T, PresenceError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, TrackerError>>,
    {
        loop {
            match step().await {
                Ok(value) => return Ok(value),
                Err(error) if error.retry_decision() != RetryDecision::Stop => {
                    tracing::warn!(
                        %error,
                        retry_in_ms = self.timing.heartbeat.as_millis() as u64,
                        "cannot reach the tracker at {} (tracker.url) to check that no other copy of this agent is \
                         active; trying again (/readyz says not ready meanwhile)",
                        self.tracker_url
                    );
                    tokio::time::sleep(self.timing.heartbeat).await;
                }
                Err(error) => return Err(tracker_error(error)),
            }
        }
    }
}

fn tracker_error(source: TrackerError) -> PresenceError {
    let hint = match source {
        TrackerError::Unauthorized { .. } => "check the token in the environment variable named by tracker.token_env",
        TrackerError::Invalid { .. } | TrackerError::Forbidden { .. } | TrackerError::NotFound { .. } => {
            "the tracker does not keep this member's status as docs/tracker-api.md says; set presence.check to \
             false only if you make sure yourself that one copy of the agent runs"
        }
        _ => "check tracker.url and that the tracker is up",
    };
    PresenceError::Tracker { source, hint }
}

/// The running heartbeat of [`Presence::spawn`].
pub struct Heartbeat {
    stop: CancellationToken,
    timing: Timing,
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeat {
    /// How long a superseded copy goes on answering `/readyz` before it exits.
    pub fn linger(&self) -> Duration {
        self.timing.linger()
    }

    /// Stops the beats and, unless superseded, leaves a stopped marker: call it once the runs are
    /// done, since writes need the lease until then.
    pub async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
