//! The presence marker a copy of the agent keeps at the end of its member status, and the gate
//! that holds that copy's writes while it cannot be sure it is the one active copy.
//!
//! The marker, `[picogent copy 3f9c2a1b7e4d #42]` (`[picogent copy 3f9c2a1b7e4d stopped]` after
//! a clean stop), names the copy (an id kept in its state file) and counts its heartbeats; the
//! text before it is the status a person or the model wrote, and is kept. `runtime::presence`
//! reads and moves it; this module alone knows its shape. A copy whose `capabilities` hold plain
//! words says them in its marker, `[picogent copy 3f9c2a1b7e4d #42 can review,coding]`: the board
//! then shows what each agent can do, and another agent finds a reviewer there (only a member's
//! own token writes its status, so the words are that agent's own).
//!
//! Invariants:
//! - no caller of [`TrackerClient::update_my_status`](crate::TrackerClient::update_my_status)
//!   (the model's tool, `/mcp`, the command line) can write a marker: anything shaped like one is
//!   stripped from the text first, so no prompt can make the agent look like another copy, or
//!   make it stop itself;
//! - with a gate, `update_my_status` hands the new text to the heartbeat ([`StatusChange`]), the
//!   one writer of the member status in a running copy: the text lands before this copy's marker,
//!   in a beat that checked for another copy's marker first, and no beat undoes it with the text
//!   it read a moment before;
//! - every write of a gated client (any method but GET) passes [`WriteGate::admit`] before each
//!   attempt: at once while the lease is valid, after a wait while it is being renewed, and never
//!   once another copy has taken over; the writes waiting so are counted ([`WriteGate::held`],
//!   `picogent_tracker_writes_held` on `/metrics`).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use regex::Regex;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::TrackerError;
use crate::model::{StatusOut, limits};

/// `[picogent copy <12 hex digits> #<beat>]` or `[picogent copy <12 hex digits> stopped]`, with
/// ` can <word>,<word>` before the `]` when the copy says what it can do.
static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\[picogent copy ([0-9a-f]{12}) (?:#([0-9]{1,20})|(stopped))(?: can ([a-z0-9-]{1,30}(?:,[a-z0-9-]{1,30}){0,7}))?\]")
        .expect("the marker pattern is valid")
});

/// The most capability words a marker says.
const MAX_CAPABILITY_WORDS: usize = 8;
/// The longest capability word a marker says.
const MAX_CAPABILITY_CHARS: usize = 30;

/// How many hex digits a copy id has.
const COPY_ID_DIGITS: usize = 12;

/// A copy's marker, as found in a member status or about to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub copy_id: String,
    pub beat: Beat,
    /// What the copy says it can do ([`capability_words`]); empty: it says nothing.
    pub can: Vec<String>,
}

/// Where a copy's heartbeat stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// Alive as of this many heartbeats (it moves on every beat).
    Count(u64),
    /// Stopped cleanly: whoever starts next may take over without watching.
    Stopped,
}

impl std::fmt::Display for Marker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.beat {
            Beat::Count(beat) => write!(f, "[picogent copy {} #{beat}", self.copy_id)?,
            Beat::Stopped => write!(f, "[picogent copy {} stopped", self.copy_id)?,
        }
        match self.can.is_empty() {
            true => write!(f, "]"),
            false => write!(f, " can {}]", self.can.join(",")),
        }
    }
}

/// A member status taken apart: the text people and the model wrote, and the marker, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    pub text: String,
    pub marker: Option<Marker>,
}

/// Splits `status` into its text and its last marker (any others are dropped with it).
pub fn parse_status(status: &str) -> MemberStatus {
    let marker = MARKER
        .captures_iter(status)
        .filter_map(|captures| {
            let beat = match captures.get(2) {
                // Past u64: shaped like a marker (and stripped), but no copy wrote it.
                Some(beat) => Beat::Count(beat.as_str().parse().ok()?),
                None => Beat::Stopped,
            };
            let can = captures.get(4).map(|words| words.as_str().split(',').map(str::to_string).collect());
            Some(Marker { copy_id: captures[1].to_string(), beat, can: can.unwrap_or_default() })
        })
        .last();
    MemberStatus { text: strip_markers(status), marker }
}

/// `text` without anything shaped like a marker; the pieces around one are joined by a space.
pub fn strip_markers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for piece in MARKER.split(text).map(str::trim).filter(|piece| !piece.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(piece);
    }
    out
}

/// `text` (markers stripped) followed by `marker`, within the tracker's status limit: the text
/// is shortened to make room, never the marker.
pub fn compose(text: &str, marker: &Marker) -> String {
    let marker = marker.to_string();
    let text = strip_markers(text);
    let room = limits::STATUS.saturating_sub(marker.chars().count() + 1);
    let text: String = text.chars().take(room).collect();
    let text = text.trim_end();
    if text.is_empty() { marker } else { format!("{text} {marker}") }
}

/// The capabilities a marker says: each of `capabilities` that is one plain word (lowercase
/// letters, digits and `-`, at most 30), at most 8 of them; a phrase (`"answering questions"`)
/// is left to the agent's profile.
pub fn capability_words(capabilities: &[String]) -> Vec<String> {
    capabilities
        .iter()
        .filter(|word| {
            (1..=MAX_CAPABILITY_CHARS).contains(&word.len())
                && word.bytes().all(|byte| matches!(byte, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        })
        .take(MAX_CAPABILITY_WORDS)
        .cloned()
        .collect()
}

/// The agent members whose markers say they can do `capability`, in the board's order, the
/// running ones before the stopped ones: how a worker finds a reviewer, and a plan an assignee
/// by capability.
pub fn able_agents<'a>(members: &'a [crate::model::MemberOut], capability: &str) -> Vec<&'a str> {
    let mut able: Vec<(bool, &str)> = members
        .iter()
        .filter(|member| member.kind == crate::model::MemberKind::Agent)
        .filter_map(|member| {
            let marker = parse_status(&member.status).marker?;
            marker
                .can
                .iter()
                .any(|word| word == capability)
                .then_some((marker.beat == Beat::Stopped, member.slug.as_str()))
        })
        .collect();
    able.sort_by_key(|(stopped, _)| *stopped);
    able.into_iter().map(|(_, slug)| slug).collect()
}

/// A new random copy id.
pub fn new_copy_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..COPY_ID_DIGITS].to_string()
}

/// Whether `text` is a copy id as [`new_copy_id`] makes them (a stored one is checked before use).
pub fn is_copy_id(text: &str) -> bool {
    text.len() == COPY_ID_DIGITS && text.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether this copy may write to the tracker now.
#[derive(Debug, Clone)]
enum Lease {
    /// Not confirmed yet, or not renewed in time: writes wait.
    Until(Instant),
    /// Another copy took over: writes fail, for good.
    Superseded(Arc<str>),
}

/// Holds a client's writes to what `runtime::presence` last confirmed: that this copy is the one
/// active copy of its agent. Shared by every clone of the gated client.
#[derive(Debug)]
pub struct WriteGate {
    lease: watch::Sender<Lease>,
    /// How long one write attempt waits for a renewal before it fails as a transport error (and
    /// is retried under `tracker.retry` like one).
    max_wait: Duration,
    /// Status texts to set, carried out by the heartbeat in its next beat (at once).
    status_changes: mpsc::Sender<StatusChange>,
    /// The writes [`WriteGate::admit`] holds now, waiting for a renewal.
    held: picogent_support::gauge::Gauge,
}

/// A new status text asked for by `update_my_status`; the heartbeat writes it with this copy's
/// marker and answers with the status as stored.
#[derive(Debug)]
pub struct StatusChange {
    pub text: String,
    pub answer: oneshot::Sender<Result<StatusOut, TrackerError>>,
}

impl WriteGate {
    /// A gate that holds every write until the first [`renew`](Self::renew), and the receiving
    /// end of its status changes, for the heartbeat.
    pub fn new(max_wait: Duration) -> (WriteGate, mpsc::Receiver<StatusChange>) {
        let (status_changes, changes) = mpsc::channel(16);
        let lease = watch::Sender::new(Lease::Until(Instant::now()));
        (WriteGate { lease, max_wait, status_changes, held: Default::default() }, changes)
    }

    /// Lets writes through until `until`, unless another copy took over.
    pub fn renew(&self, until: Instant) {
        self.lease.send_if_modified(|lease| match lease {
            Lease::Superseded(_) => false,
            Lease::Until(_) => {
                *lease = Lease::Until(until);
                true
            }
        });
    }

    /// Refuses every write from now on, saying `reason`.
    pub fn supersede(&self, reason: &str) {
        self.lease.send_replace(Lease::Superseded(reason.into()));
    }

    /// Why writes are refused, once another copy took over.
    pub fn superseded(&self) -> Option<String> {
        match &*self.lease.borrow() {
            Lease::Superseded(reason) => Some(reason.to_string()),
            Lease::Until(_) => None,
        }
    }

    /// How many writes wait now for this copy to confirm that it is the one active copy.
    pub fn held(&self) -> usize {
        self.held.get()
    }

    /// Has the heartbeat set the status text to `text` (with this copy's marker after it).
    pub(super) async fn change_status(&self, text: String) -> Result<StatusOut, TrackerError> {
        let refused = |gate: &WriteGate| match gate.superseded() {
            Some(message) => TrackerError::Superseded { message },
            None => TrackerError::Transport {
                message: "not sent: this copy's presence heartbeat is not running".to_string(),
                timed_out: false,
            },
        };
        if let Some(message) = self.superseded() {
            return Err(TrackerError::Superseded { message });
        }
        let (answer, answered) = oneshot::channel();
        if self.status_changes.send(StatusChange { text, answer }).await.is_err() {
            return Err(refused(self));
        }
        answered.await.unwrap_or_else(|_| Err(refused(self)))
    }

    /// Waits until a write may go out: `Ok` while the lease is valid; an error once another copy
    /// took over, or when no renewal came within `max_wait`.
    pub(super) async fn admit(&self) -> Result<(), TrackerError> {
        let mut lease = self.lease.subscribe();
        let deadline = Instant::now() + self.max_wait;
        // Counted in `held` from its first wait for a renewal until it goes out or fails.
        let mut holding = None;
        loop {
            let current = lease.borrow_and_update().clone();
            match current {
                Lease::Until(until) if Instant::now() < until => return Ok(()),
                Lease::Superseded(reason) => return Err(TrackerError::Superseded { message: reason.to_string() }),
                Lease::Until(_) => {}
            }
            holding.get_or_insert_with(|| self.held.enter());
            // The sender lives in `self`, so `changed` ends only with a new lease or the deadline.
            if tokio::time::timeout_at(deadline, lease.changed()).await.is_err() {
                return Err(TrackerError::Transport {
                    message: format!(
                        "not sent: for {} ms this copy of the agent could not confirm on the tracker that it is \
                         the only active one (its presence heartbeat got no answer)",
                        self.max_wait.as_millis()
                    ),
                    timed_out: false,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(copy_id: &str, beat: Beat) -> Marker {
        Marker { copy_id: copy_id.into(), beat, can: Vec::new() }
    }

    #[test]
    fn statuses_are_taken_apart_into_text_and_marker() {
        let id = "3f9c2a1b7e4d";
        let cases = [
            ("", "", None),
            ("reviewing TE-3", "reviewing TE-3", None),
            ("[picogent copy 3f9c2a1b7e4d #42]", "", Some(marker(id, Beat::Count(42)))),
            ("reviewing TE-3 [picogent copy 3f9c2a1b7e4d #7]", "reviewing TE-3", Some(marker(id, Beat::Count(7)))),
            ("off [picogent copy 3f9c2a1b7e4d stopped]", "off", Some(marker(id, Beat::Stopped))),
            // A person typed after the marker: the text is both sides, the marker still found.
            ("a [picogent copy 3f9c2a1b7e4d #1] b", "a b", Some(marker(id, Beat::Count(1)))),
            // Two markers: the last one counts, both are gone from the text.
            (
                "[picogent copy 000000000000 #1] x [picogent copy 3f9c2a1b7e4d #2]",
                "x",
                Some(marker(id, Beat::Count(2))),
            ),
            // Near misses are text, not markers.
            ("[picogent copy 3F9C2A1B7E4D #1]", "[picogent copy 3F9C2A1B7E4D #1]", None),
            ("[picogent copy 3f9c2a1b7e4 #1]", "[picogent copy 3f9c2a1b7e4 #1]", None),
            ("[picogent copy 3f9c2a1b7e4d #]", "[picogent copy 3f9c2a1b7e4d #]", None),
            (
                "[picogent copy 3f9c2a1b7e4d #999999999999999999999]",
                "[picogent copy 3f9c2a1b7e4d #999999999999999999999]",
                None,
            ),
            // Shaped like one but past any count: stripped, and no marker.
            ("x [picogent copy 3f9c2a1b7e4d #99999999999999999999]", "x", None),
        ];
        for (status, text, expected) in cases {
            let parsed = parse_status(status);
            assert_eq!(parsed.text, text, "{status:?}");
            assert_eq!(parsed.marker, expected, "{status:?}");
        }
    }

    #[test]
    fn a_composed_status_keeps_the_marker_whole_within_the_limit() {
        let mine = marker("3f9c2a1b7e4d", Beat::Count(18_446_744_073_709_551_615));
        assert_eq!(compose("", &mine), mine.to_string());
        assert_eq!(compose("planning TE-1", &mine), format!("planning TE-1 {mine}"));
        // A marker the model tried to write is replaced by this copy's own.
        let forged = "busy [picogent copy 000000000000 #9]";
        assert_eq!(compose(forged, &mine), format!("busy {mine}"));
        for length in [150, 200, 500] {
            let text = "é".repeat(length);
            let composed = compose(&text, &mine);
            assert!(composed.chars().count() <= limits::STATUS, "{length}");
            assert_eq!(parse_status(&composed).marker, Some(mine.clone()), "{length}");
        }
    }

    #[test]
    fn a_marker_says_the_plain_words_of_what_its_copy_can_do() {
        let words = |list: &[&str]| list.iter().map(|word| word.to_string()).collect::<Vec<_>>();
        let can = capability_words(&words(&["review", "answering questions", "Coding", "rust-2024", &"x".repeat(31)]));
        assert_eq!(can, words(&["review", "rust-2024"]));
        assert_eq!(capability_words(&words(&["a", "b", "c", "d", "e", "f", "g", "h", "i"])).len(), 8);
        let mine = Marker { copy_id: "3f9c2a1b7e4d".into(), beat: Beat::Count(3), can: can.clone() };
        assert_eq!(mine.to_string(), "[picogent copy 3f9c2a1b7e4d #3 can review,rust-2024]");
        let parsed = parse_status(&compose("reviewing TE-2", &mine));
        assert_eq!((parsed.text.as_str(), parsed.marker), ("reviewing TE-2", Some(mine)));
        let stopped = Marker { copy_id: "3f9c2a1b7e4d".into(), beat: Beat::Stopped, can: words(&["review"]) };
        assert_eq!(parse_status(&stopped.to_string()).marker, Some(stopped));
        // Words a marker cannot hold are text, not a marker.
        let odd = "[picogent copy 3f9c2a1b7e4d #3 can Review]";
        assert_eq!(parse_status(odd).marker, None);
        assert_eq!(parse_status(odd).text, odd);
    }

    #[test]
    fn copy_ids_are_twelve_lowercase_hex_digits() {
        let id = new_copy_id();
        assert!(is_copy_id(&id), "{id}");
        assert_ne!(id, new_copy_id());
        for bad in ["", "3f9c2a1b7e4", "3F9C2A1B7E4D", "3f9c2a1b7e4dx", "3f9c2a1b7e4g"] {
            assert!(!is_copy_id(bad), "{bad}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn writes_wait_for_a_renewal_and_fail_for_good_once_superseded() {
        let gate = Arc::new(WriteGate::new(Duration::from_secs(5)).0);
        // Held before the first renewal; let through once renewed.
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.admit().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished());
        assert_eq!(gate.held(), 1, "the held write is counted");
        gate.renew(Instant::now() + Duration::from_secs(2));
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert_eq!(gate.held(), 0, "and counted no more once let through");
        assert_eq!(gate.admit().await, Ok(()));
        // A lease that ran out holds writes again, and a write nobody renews for gives up.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let started = Instant::now();
        assert!(matches!(gate.admit().await, Err(TrackerError::Transport { .. })));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert_eq!(gate.held(), 0, "nor once given up");
        // Superseded: refused at once, and no renewal opens it again.
        gate.supersede("copy 000000000000 took over");
        gate.renew(Instant::now() + Duration::from_secs(60));
        assert_eq!(gate.admit().await, Err(TrackerError::Superseded { message: "copy 000000000000 took over".into() }));
        assert_eq!(gate.superseded().as_deref(), Some("copy 000000000000 took over"));
    }
}
