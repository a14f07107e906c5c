//! When a job fires: a cron pattern read in a time zone ([`Cadence`]), and the next firing after
//! an instant. croner does the pattern and the calendar; the zones are the IANA database's
//! (`crate::zone`).
//!
//! Invariants:
//! - a pattern has 5 fields (minute hour day month weekday) or is one of croner's nicknames
//!   (`@daily`, `@hourly`, …), so a job fires at most once a wall-clock minute;
//! - [`Cadence::next_after`] is strictly after its argument and moves forward: asked again from
//!   what it answered, it never answers the same firing, nor one before it;
//! - a wall-clock time fires once, whatever the daylight-saving transitions do (see
//!   [`Cadence::next_after`]).

use chrono::{DateTime, Utc};
use croner::Cron;

use crate::zone::Zone;
use croner::parser::{CronParser, Seconds, Year};

/// An example of a pattern, for the errors that ask for one.
const CRON_EXAMPLE: &str = "\"0 9 * * 1-5\" (09:00 Monday to Friday)";

/// How many times croner is asked again when its answer is not after the instant asked about
/// (a wall-clock time repeated by a fall-back): once a minute for two hours at most, the longest
/// repeated span of any zone, with room to spare.
const MAX_REPEATED_STEPS: usize = 256;

/// A job's timing: a cron pattern read in one time zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Cadence {
    /// The pattern as written, for [`Cadence::describe`].
    pattern: String,
    cron: Cron,
    tz: Zone,
}

/// Why a pattern or a zone is refused. Each message says what was expected, with an example.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CadenceError {
    #[error(
        "{cron:?} is not a cron pattern ({reason}): expected 5 fields, minute hour day month weekday, like {CRON_EXAMPLE}"
    )]
    Cron { cron: String, reason: String },
    #[error("{cron:?} never fires (no date matches it): expected a pattern like {CRON_EXAMPLE}")]
    Never { cron: String },
    #[error("unknown time zone {name:?}: expected an IANA name like {example}")]
    Zone { name: String, example: String },
}

impl Cadence {
    /// Reads a pattern of 5 fields in the zone named `timezone` (an IANA name such as
    /// `Europe/Berlin`, or `UTC`). Seconds are refused: a job of the tracker has no business
    /// firing more than once a minute, and a sixth field is more often a mistake than a wish.
    pub fn parse(cron: &str, timezone: &str) -> Result<Cadence, CadenceError> {
        let tz = Zone::get(timezone)
            .ok_or_else(|| CadenceError::Zone { name: timezone.to_string(), example: nearest_zone(timezone) })?;
        let refused = |reason: String| CadenceError::Cron { cron: cron.to_string(), reason };
        let fields = cron.split_whitespace().count();
        if !cron.trim_start().starts_with('@') && fields != 5 {
            return Err(refused(match fields {
                0 => "it is empty".to_string(),
                1 => "it has 1 field".to_string(),
                6 => "it has 6 fields, and seconds are not supported".to_string(),
                n => format!("it has {n} fields"),
            }));
        }
        let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
        let parsed = parser.parse(cron).map_err(|error| refused(reason(&error.to_string())))?;
        let cadence = Cadence { pattern: cron.trim().to_string(), cron: parsed, tz };
        // A pattern whose days never come (`0 0 30 2 *`) is refused now, not found out by a job
        // that silently never runs. 2000-01-01 is before any firing that matters, and a leap day
        // comes soon after it.
        if cadence.next_after(946_684_800_000).is_none() {
            return Err(CadenceError::Never { cron: cron.to_string() });
        }
        Ok(cadence)
    }

    /// The first firing strictly after `after_ms` (milliseconds since the Unix epoch), in
    /// milliseconds; `None` when croner finds none (past the year 5000).
    ///
    /// Daylight-saving transitions, as croner handles them (Europe/Berlin, a `30 2 * * *` job):
    /// - spring forward (02:00 becomes 03:00, 2025-03-30): 02:30 does not exist, and croner fires
    ///   at the first time after the gap, 03:00 (01:00 UTC). A pattern of ranges or steps
    ///   (`*/30 * * * *`) skips the times in the gap and goes on at 03:00;
    /// - fall back (03:00 becomes 02:00, 2025-10-26): 02:30 happens twice, and the job fires at
    ///   the first one (00:30 UTC), not again an hour later. croner picks the first instance of a
    ///   repeated wall-clock time; asked from inside the repeated hour it answers that earlier
    ///   instant, which is before the question, so this asks again from it. The same then holds
    ///   for every pattern: a per-minute job runs through 02:00–02:59 once, in the first pass,
    ///   and goes on at 03:00.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        // Firings fall on whole seconds (on second 0 of a minute): the first after `after_ms`
        // is after the whole second at or before it, which is what croner searches from.
        let second = after_ms.div_euclid(1000);
        let mut from = DateTime::<Utc>::from_timestamp(second, 0)?.with_timezone(&self.tz);
        for _ in 0..MAX_REPEATED_STEPS {
            let found = match self.cron.find_next_occurrence(&from, false) {
                Ok(found) => found,
                Err(error) => {
                    tracing::debug!(cadence = %self.describe(), after_ms, %error, "no next firing");
                    return None;
                }
            };
            let found_ms = found.timestamp_millis();
            if found_ms > after_ms {
                return Some(found_ms);
            }
            from = found;
        }
        tracing::warn!(cadence = %self.describe(), after_ms, "no next firing: croner kept answering the past");
        None
    }

    /// The pattern and its zone, as a person reads them: `0 9 * * 1-5 (Europe/Berlin)`.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.pattern, self.tz.name())
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The zone the pattern is read in.
    pub fn timezone(&self) -> &Zone {
        &self.tz
    }

    /// The calendar day of `at_ms` in the job's zone: what "today" means for its firing.
    pub fn local_date(&self, at_ms: i64) -> Option<time::Date> {
        use chrono::Datelike;
        let local = DateTime::<Utc>::from_timestamp_millis(at_ms)?.with_timezone(&self.tz);
        let month = time::Month::try_from(u8::try_from(local.month()).ok()?).ok()?;
        time::Date::from_calendar_date(local.year(), month, u8::try_from(local.day()).ok()?).ok()
    }

    /// `at_ms` as a person in the job's zone reads it: `Mon 7 Dec 09:00 CET`.
    pub fn local_time(&self, at_ms: i64) -> String {
        match DateTime::<Utc>::from_timestamp_millis(at_ms) {
            Some(at) => at.with_timezone(&self.tz).format("%a %-d %b %H:%M %Z").to_string(),
            None => at_ms.to_string(),
        }
    }
}

/// croner's reason, worded like this project's errors: without croner's own heading
/// (`Component error: `), lowercase, no full stop.
fn reason(croner_says: &str) -> String {
    let trimmed = croner_says.trim().trim_end_matches('.');
    let trimmed = trimmed.split_once(": ").map_or(trimmed, |(_, rest)| rest);
    let mut chars = trimmed.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The zone nearest to a mistyped name, to show as the example; a sensible one when nothing was
/// typed.
fn nearest_zone(name: &str) -> String {
    if name.trim().is_empty() {
        return "Europe/Berlin or UTC".to_string();
    }
    let names = Zone::names();
    picogent_support::closest::closest(name, names.iter().map(String::as_str))
        .first()
        .map_or_else(|| "Europe/Berlin".to_string(), |n| n.to_string())
}
