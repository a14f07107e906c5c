//! What a job does about the firings due since it last looked: the catch-up plan, a pure
//! function of the cadence, the watermark, the time and the job's `catch_up`.
//!
//! The live loop and a start after downtime take the same path: a firing the live loop wakes for
//! is milliseconds late and runs; firings missed while picogent was down run once, the newest,
//! if it is recent enough, and the others are recorded as skipped with the reason.
//!
//! Invariants:
//! - a firing at or before the watermark is never planned again, so nothing runs twice, even when
//!   the wall clock is set back;
//! - at most one firing runs per plan;
//! - the work is bounded: at most [`MAX_SEARCHES`] firings are looked at, whatever the downtime,
//!   and at most [`MAX_SKIPPED_KEPT`] skipped firings are kept, the rest counted.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::MAX_CATCH_UP_MS;
use crate::timing::Cadence;

/// The most skipped firings a plan lists (the newest); older ones are counted in
/// [`Plan::skipped_more`].
pub const MAX_SKIPPED_KEPT: usize = 100;
/// The most firings one plan looks at: a per-minute job down for a year must not hold up the
/// start. Past it the older firings are no longer counted ([`Plan::counted_all`] is false).
pub const MAX_SEARCHES: usize = 100_000;
/// Firings kept for the catch-up window, out of [`MAX_SEARCHES`]: the most a per-minute
/// pattern fires in [`MAX_CATCH_UP_MS`] (7 days, 10 080), with room to spare.
const WINDOW_SEARCHES: usize = 11_000;
/// How late a firing may be and still be on time, whatever `catch_up` says: the live loop's own
/// lateness (a busy machine, a slow wake). `catch_up` is about firings missed while down.
pub const ON_TIME: Duration = Duration::from_secs(10);

/// What to do about the firings due since the watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The firing to run now (its scheduled time, ms since the epoch), if any.
    pub run: Option<i64>,
    /// The newest firings not run, oldest first, at most [`MAX_SKIPPED_KEPT`].
    pub skipped: Vec<SkippedFiring>,
    /// How many more firings were skipped, older than those in `skipped`.
    pub skipped_more: u64,
    /// Whether `skipped_more` counts them all; false when the downtime held more firings than
    /// one plan looks at ([`MAX_SEARCHES`]), and it is a lower bound.
    pub counted_all: bool,
    /// The new watermark: every firing up to it has been run or skipped. It is `now`, or the old
    /// watermark when the wall clock was set back before it.
    pub through: i64,
    /// The next firing after `through`, to sleep until.
    pub next: Option<i64>,
}

/// A firing that did not run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFiring {
    /// When it was due, in ms since the epoch.
    pub fire_at_ms: i64,
    pub reason: SkipReason,
}

/// Why a firing did not run, in words a person reads in the inspector (its `Display`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Missed while down, and later than `catch_up` allows.
    TooLate { late_ms: u64, catch_up_ms: u64 },
    /// Missed while down, and a newer missed firing ran instead: a job catches up once, not once
    /// per firing missed.
    Superseded { by_ms: i64 },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SkipReason::TooLate { late_ms, catch_up_ms: 0 } => write!(
                f,
                "missed while picogent was down, {} late (catch_up_ms is 0: a missed firing never runs)",
                human(late_ms)
            ),
            SkipReason::TooLate { late_ms, catch_up_ms } => write!(
                f,
                "missed while picogent was down, {} late (catch_up_ms allows {})",
                human(late_ms),
                human(catch_up_ms)
            ),
            SkipReason::Superseded { by_ms } => write!(
                f,
                "missed while picogent was down; the later firing of {} ran instead (a job catches up once)",
                utc(by_ms)
            ),
        }
    }
}

/// The plan for the firings `t` with `through < t <= now`. `through` is the watermark up to
/// which firings were already considered; `None` (a job never seen): nothing in the past runs or
/// is recorded. Of the due firings at most `catch_up` late (or [`ON_TIME`]), the newest runs and
/// the others are superseded by it; those later are too late. `catch_up` above 7 days counts as
/// 7 days.
pub fn plan(cadence: &Cadence, through: Option<i64>, now: i64, catch_up: Duration) -> Plan {
    let catch_up_ms = u64::try_from(catch_up.as_millis()).unwrap_or(u64::MAX).min(MAX_CATCH_UP_MS);
    let window_ms = catch_up_ms.max(ON_TIME.as_millis() as u64) as i64;
    let Some(through) = through.filter(|&through| through < now) else {
        // Never seen, or nothing is due (the clock stands, or was set back): the watermark never
        // goes back, so a firing already considered waits for the clock to pass it again.
        let through = through.map_or(now, |through| through.max(now));
        return Plan {
            run: None,
            skipped: Vec::new(),
            skipped_more: 0,
            counted_all: true,
            through,
            next: cadence.next_after(through),
        };
    };
    let window_start = now.saturating_sub(window_ms);
    let mut due = Due::default();
    // The firings before the window can only be too late: counted, the newest kept.
    let mut cursor = through;
    let mut searches = 0;
    while let Some(at) = cadence.next_after(cursor).filter(|&at| at < window_start) {
        if searches == MAX_SEARCHES - WINDOW_SEARCHES {
            // Too many to count: go on at the window, where what runs is decided.
            due.counted_all = false;
            cursor = cursor.max(window_start.saturating_sub(1));
            break;
        }
        due.push(at);
        cursor = at;
        searches += 1;
    }
    while let Some(at) = cadence.next_after(cursor).filter(|&at| at <= now) {
        if searches == MAX_SEARCHES {
            due.counted_all = false;
            break;
        }
        due.push(at);
        cursor = at;
        searches += 1;
    }
    due.into_plan(cadence, now, window_start, catch_up_ms)
}

/// The due firings as they are found, oldest first: the newest kept, the older counted.
struct Due {
    /// The newest firings, one more than are listed: the newest of them may run.
    kept: VecDeque<i64>,
    dropped: u64,
    counted_all: bool,
}

impl Default for Due {
    fn default() -> Self {
        Due { kept: VecDeque::with_capacity(MAX_SKIPPED_KEPT + 1), dropped: 0, counted_all: true }
    }
}

impl Due {
    fn push(&mut self, at: i64) {
        if self.kept.len() == MAX_SKIPPED_KEPT + 1 {
            self.kept.pop_front();
            self.dropped += 1;
        }
        self.kept.push_back(at);
    }

    fn into_plan(mut self, cadence: &Cadence, now: i64, window_start: i64, catch_up_ms: u64) -> Plan {
        let run = self.kept.back().copied().filter(|&newest| newest >= window_start);
        if run.is_some() {
            self.kept.pop_back();
        } else if self.kept.len() > MAX_SKIPPED_KEPT {
            self.kept.pop_front();
            self.dropped += 1;
        }
        let skipped = self
            .kept
            .into_iter()
            .map(|fire_at_ms| SkippedFiring {
                fire_at_ms,
                reason: match run {
                    Some(by_ms) if fire_at_ms >= window_start => SkipReason::Superseded { by_ms },
                    _ => SkipReason::TooLate { late_ms: now.abs_diff(fire_at_ms), catch_up_ms },
                },
            })
            .collect();
        Plan {
            run,
            skipped,
            skipped_more: self.dropped,
            counted_all: self.counted_all,
            through: now,
            next: cadence.next_after(now),
        }
    }
}

/// A span as a person reads it: the two largest units, `3 h`, `1 h 30 min`, `2 d 4 h`, `45 s`.
pub fn human(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s")];
    let Some(first) = UNITS.iter().position(|&(size, _)| ms >= size) else {
        return format!("{ms} ms");
    };
    let (size, unit) = UNITS[first];
    let mut shown = format!("{} {unit}", ms / size);
    if let Some(&(next_size, next_unit)) = UNITS.get(first + 1) {
        let rest = ms % size / next_size;
        if rest > 0 {
            shown.push_str(&format!(" {rest} {next_unit}"));
        }
    }
    shown
}

/// An instant as a person reads it, in UTC: `2025-03-28 08:00 UTC`.
fn utc(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map_or_else(|| format!("{ms} ms"), |at| at.format("%Y-%m-%d %H:%M UTC").to_string())
}
