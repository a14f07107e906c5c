//! Signed-in browsers ([`Sessions`]) and how often anyone may sign in ([`SignInRate`]), for the
//! board's page and the run inspector.
//!
//! Invariants:
//! - a session id is 256 random bits, kept by the browser in an `HttpOnly`, `SameSite=Strict`
//!   cookie; the server keeps who it is, in memory (a restarted server asks people to sign in
//!   again);
//! - at most [`SessionLimits::max_sessions`] are kept; a new one past it puts out the session
//!   used longest ago, one at a time, so a flood of sign-ins never signs everyone out at once
//!   (and, with the rate below, takes hours to reach someone who uses their page);
//! - a session ends when it was not used for [`SessionLimits::idle`] or is older than
//!   [`SessionLimits::lifetime`] (when set), or at sign-out: it is then gone on the server, so
//!   its cookie, replayed, opens nothing;
//! - sign-in attempts are counted per listener: past [`SignInRate`]'s cap in any minute, an
//!   attempt is answered `429` with the seconds to wait, and no session is made. Memory stays
//!   bounded: the rate keeps one instant per attempt allowed, the sessions their cap.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How many sessions are kept and how long one lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    pub max_sessions: usize,
    /// A session not used this long ends; `None`: it never idles out.
    pub idle: Option<Duration>,
    /// A session this old ends, used or not; `None`: it lasts until put out or signed out.
    pub lifetime: Option<Duration>,
}

impl SessionLimits {
    /// The board's default cap, and the inspector's.
    pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits { max_sessions: Self::DEFAULT_MAX_SESSIONS, idle: None, lifetime: None }
    }
}

/// Signed-in browsers: a random session id → who it is (see the module's invariants).
#[derive(Debug)]
pub struct Sessions<T> {
    limits: SessionLimits,
    kept: Mutex<Kept<T>>,
}

#[derive(Debug)]
struct Kept<T> {
    by_id: HashMap<String, Session<T>>,
    /// Session ids by when they were last used (a number that grows with every use), oldest
    /// first: the order they are put out in.
    by_use: BTreeMap<u64, String>,
    uses: u64,
}

#[derive(Debug)]
struct Session<T> {
    who: T,
    opened: Instant,
    used: Instant,
    /// Its key in `by_use`.
    turn: u64,
}

impl<T: Clone> Sessions<T> {
    pub fn new(limits: SessionLimits) -> Sessions<T> {
        let kept = Kept { by_id: HashMap::new(), by_use: BTreeMap::new(), uses: 0 };
        Sessions { limits, kept: Mutex::new(kept) }
    }

    /// A new session for `who`: its id, 256 random bits in hex. Sessions that ended are forgotten
    /// first; past the cap, the one used longest ago is put out.
    pub fn open(&self, who: T) -> String {
        let id = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        let now = Instant::now();
        let mut kept = self.lock();
        // Idle ones are at the front of the use order.
        while let Some((_, oldest)) = kept.by_use.first_key_value() {
            let ended = kept.by_id.get(oldest).is_none_or(|session| self.ended(session, now));
            if !ended && kept.by_id.len() < self.limits.max_sessions.max(1) {
                break;
            }
            if let Some((_, oldest)) = kept.by_use.pop_first() {
                kept.by_id.remove(&oldest);
            }
        }
        kept.uses += 1;
        let turn = kept.uses;
        kept.by_use.insert(turn, id.clone());
        kept.by_id.insert(id.clone(), Session { who, opened: now, used: now, turn });
        id
    }

    /// Who the session `id` is, if it is kept and has not ended; finding it counts as a use.
    pub fn find(&self, id: &str) -> Option<T> {
        let now = Instant::now();
        let mut kept = self.lock();
        let session = kept.by_id.get(id)?;
        if self.ended(session, now) {
            kept.remove(id);
            return None;
        }
        let old_turn = session.turn;
        kept.uses += 1;
        let turn = kept.uses;
        kept.by_use.remove(&old_turn);
        kept.by_use.insert(turn, id.to_string());
        let session = kept.by_id.get_mut(id)?;
        session.used = now;
        session.turn = turn;
        Some(session.who.clone())
    }

    /// Ends the session `id` (sign-out).
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }

    fn ended(&self, session: &Session<T>, now: Instant) -> bool {
        let idle = self.limits.idle.is_some_and(|idle| now.duration_since(session.used) >= idle);
        let old = self.limits.lifetime.is_some_and(|lifetime| now.duration_since(session.opened) >= lifetime);
        idle || old
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept<T>> {
        self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<T> Kept<T> {
    fn remove(&mut self, id: &str) {
        if let Some(session) = self.by_id.remove(id) {
            self.by_use.remove(&session.turn);
        }
    }
}

/// Sign-in attempts allowed per listener in any minute.
#[derive(Debug)]
pub struct SignInRate {
    per_minute: usize,
    /// When each attempt of the last minute came, oldest first; at most `per_minute`.
    recent: Mutex<VecDeque<Instant>>,
}

impl SignInRate {
    /// The board's default, and the inspector's.
    pub const DEFAULT_PER_MINUTE: usize = 30;
    const WINDOW: Duration = Duration::from_secs(60);

    pub fn new(per_minute: usize) -> SignInRate {
        SignInRate { per_minute: per_minute.max(1), recent: Mutex::new(VecDeque::new()) }
    }

    pub fn per_minute(&self) -> usize {
        self.per_minute
    }

    /// Counts one attempt, or refuses it with how long until the next is allowed.
    pub fn take(&self) -> Result<(), Duration> {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while recent.front().is_some_and(|at| now.duration_since(*at) >= Self::WINDOW) {
            recent.pop_front();
        }
        if recent.len() >= self.per_minute {
            let oldest = recent.front().copied().unwrap_or(now);
            return Err(Self::WINDOW.saturating_sub(now.duration_since(oldest)).max(Duration::from_secs(1)));
        }
        recent.push_back(now);
        Ok(())
    }
}

/// Whole seconds to wait, rounded up, for a `Retry-After` header and the words of a refusal.
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(max_sessions: usize, idle_ms: Option<u64>, lifetime_ms: Option<u64>) -> Sessions<&'static str> {
        Sessions::new(SessionLimits {
            max_sessions,
            idle: idle_ms.map(Duration::from_millis),
            lifetime: lifetime_ms.map(Duration::from_millis),
        })
    }

    #[test]
    fn past_the_cap_the_session_used_longest_ago_goes_first() {
        let kept = sessions(3, None, None);
        let (a, b, c) = (kept.open("a"), kept.open("b"), kept.open("c"));
        assert_eq!(kept.find(&a), Some("a")); // a is now the freshest
        let d = kept.open("d");
        assert_eq!(kept.find(&b), None, "b, used longest ago, was put out");
        assert_eq!((kept.find(&a), kept.find(&c), kept.find(&d)), (Some("a"), Some("c"), Some("d")));
        // A flood of new sessions puts them out one by one, never all at once.
        for _ in 0..2 {
            kept.open("flood");
        }
        assert_eq!(kept.find(&d), Some("d"), "the last used is still there");
        assert_eq!(kept.lock().by_id.len(), 3);
        assert_eq!(kept.lock().by_use.len(), 3);
    }

    #[test]
    fn a_closed_session_opens_nothing() {
        let kept = sessions(10, None, None);
        let a = kept.open("a");
        kept.close(&a);
        assert_eq!(kept.find(&a), None);
        assert!(kept.lock().by_use.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_ends_when_idle_or_too_old_used_or_not() {
        let kept = sessions(10, Some(1_000), Some(3_000));
        let idle = kept.open("idle");
        let busy = kept.open("busy");
        for _ in 0..5 {
            tokio::time::advance(Duration::from_millis(500)).await;
            assert_eq!(kept.find(&busy), Some("busy"), "used every half second");
        }
        assert_eq!(kept.find(&idle), None, "not used for 2.5 s, past its second of idle");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(kept.find(&busy), None, "3 s old: past its lifetime, however used");
        // Ended sessions are forgotten when a new one opens.
        let fresh = kept.open("fresh");
        tokio::time::advance(Duration::from_millis(1_500)).await;
        kept.open("later");
        assert!(!kept.lock().by_id.contains_key(&fresh), "an idle session is forgotten at the next sign-in");
    }

    #[tokio::test(start_paused = true)]
    async fn sign_ins_past_the_rate_wait_for_the_minute_to_move_on() {
        let rate = SignInRate::new(3);
        for _ in 0..3 {
            assert!(rate.take().is_ok());
        }
        let wait = rate.take().unwrap_err();
        assert_eq!(retry_after_secs(wait), 60);
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(retry_after_secs(rate.take().unwrap_err()), 40, "refusals are not counted");
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(rate.take().is_ok(), "a minute after the first, one more");
        assert!(rate.take().is_ok());
        assert!(rate.take().is_ok());
        assert!(rate.take().is_err());
    }
}
