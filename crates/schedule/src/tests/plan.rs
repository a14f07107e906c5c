use std::time::Duration;

use super::at;
use crate::plan::{MAX_SEARCHES, MAX_SKIPPED_KEPT, SkipReason, SkippedFiring, human, plan};
use crate::timing::Cadence;

const HOUR: Duration = Duration::from_secs(3600);
const HOUR_MS: i64 = 3_600_000;

fn daily_nine() -> Cadence {
    Cadence::parse("0 9 * * *", "UTC").unwrap()
}

fn hourly() -> Cadence {
    Cadence::parse("0 * * * *", "UTC").unwrap()
}

#[test]
fn a_job_never_seen_runs_nothing_from_the_past() {
    let now = at("2025-03-28T10:00:00Z");
    let planned = plan(&daily_nine(), None, now, HOUR);
    assert_eq!((planned.run, planned.skipped.len(), planned.skipped_more), (None, 0, 0));
    assert_eq!(planned.through, now);
    assert_eq!(planned.next, Some(at("2025-03-29T09:00:00Z")));
}

#[test]
fn a_firing_the_live_loop_wakes_for_runs() {
    let nine = at("2025-03-28T09:00:00Z");
    let planned = plan(&daily_nine(), Some(nine - 60_000), nine + 1, HOUR);
    assert_eq!(planned.run, Some(nine));
    assert!(planned.skipped.is_empty());
    assert_eq!((planned.through, planned.next), (nine + 1, Some(at("2025-03-29T09:00:00Z"))));
    // Even when missed firings never run: a millisecond late is on time.
    let planned = plan(&daily_nine(), Some(nine - 60_000), nine + 1, Duration::ZERO);
    assert_eq!(planned.run, Some(nine));
}

#[test]
fn a_firing_missed_within_catch_up_runs_at_start() {
    let nine = at("2025-03-28T09:00:00Z");
    let planned = plan(&daily_nine(), Some(nine - 12 * HOUR_MS), nine + 30 * 60_000, HOUR);
    assert_eq!(planned.run, Some(nine));
    assert!(planned.skipped.is_empty());
}

#[test]
fn of_several_missed_the_newest_runs_and_supersedes_the_others() {
    let now = at("2025-03-28T12:30:00Z");
    let planned = plan(&hourly(), Some(at("2025-03-28T09:30:00Z")), now, 4 * HOUR);
    let noon = at("2025-03-28T12:00:00Z");
    assert_eq!(planned.run, Some(noon));
    let superseded = |hour: &str| SkippedFiring {
        fire_at_ms: at(&format!("2025-03-28T{hour}:00:00Z")),
        reason: SkipReason::Superseded { by_ms: noon },
    };
    assert_eq!(planned.skipped, [superseded("10"), superseded("11")]);
    assert_eq!(
        planned.skipped[0].reason.to_string(),
        "missed while picogent was down; the later firing of 2025-03-28 12:00 UTC ran instead (a job catches up once)"
    );
}

#[test]
fn a_firing_missed_by_more_than_catch_up_is_skipped_as_too_late() {
    let nine = at("2025-03-28T09:00:00Z");
    let now = nine + 3 * HOUR_MS;
    let planned = plan(&daily_nine(), Some(nine - HOUR_MS), now, HOUR);
    assert_eq!(planned.run, None);
    let reason = SkipReason::TooLate { late_ms: 3 * HOUR_MS as u64, catch_up_ms: HOUR_MS as u64 };
    assert_eq!(planned.skipped, [SkippedFiring { fire_at_ms: nine, reason }]);
    assert_eq!(reason.to_string(), "missed while picogent was down, 3 h late (catch_up_ms allows 1 h)");
    assert_eq!((planned.through, planned.next), (now, Some(at("2025-03-29T09:00:00Z"))));
}

#[test]
fn too_late_and_superseded_firings_are_told_apart() {
    let now = at("2025-03-28T12:30:00Z");
    let planned = plan(&hourly(), Some(at("2025-03-28T07:30:00Z")), now, 2 * HOUR);
    assert_eq!(planned.run, Some(at("2025-03-28T12:00:00Z")));
    let reasons: Vec<&str> = planned
        .skipped
        .iter()
        .map(|skipped| match skipped.reason {
            SkipReason::TooLate { .. } => "too late",
            SkipReason::Superseded { .. } => "superseded",
        })
        .collect();
    // 08:00, 09:00 and 10:00 are more than 2 h before 12:30; 11:00 is within.
    assert_eq!(reasons, ["too late", "too late", "too late", "superseded"]);
}

#[test]
fn with_catch_up_zero_a_missed_firing_never_runs() {
    let nine = at("2025-03-28T09:00:00Z");
    let planned = plan(&daily_nine(), Some(nine - HOUR_MS), nine + 5 * 60_000, Duration::ZERO);
    assert_eq!(planned.run, None);
    assert_eq!(
        planned.skipped[0].reason.to_string(),
        "missed while picogent was down, 5 min late (catch_up_ms is 0: a missed firing never runs)"
    );
}

#[test]
fn a_per_minute_job_down_for_thirty_days_is_counted_and_bounded() {
    let every_minute = Cadence::parse("* * * * *", "UTC").unwrap();
    let now = at("2025-03-28T12:00:30Z");
    let through = now - 30 * 24 * HOUR_MS;
    let planned = plan(&every_minute, Some(through), now, HOUR);
    assert_eq!(planned.run, Some(at("2025-03-28T12:00:00Z")));
    assert_eq!(planned.skipped.len(), MAX_SKIPPED_KEPT);
    assert!(planned.counted_all);
    assert_eq!(planned.skipped_more + MAX_SKIPPED_KEPT as u64 + 1, 30 * 24 * 60);
    // The kept ones are the newest, oldest first: those of the last hour superseded (11:01 to
    // 11:59), the 41 before them too late.
    assert!(planned.skipped.windows(2).all(|pair| pair[0].fire_at_ms < pair[1].fire_at_ms));
    assert_eq!(planned.skipped.last().unwrap().fire_at_ms, at("2025-03-28T11:59:00Z"));
    let superseded =
        planned.skipped.iter().filter(|skipped| matches!(skipped.reason, SkipReason::Superseded { .. })).count();
    assert_eq!(superseded, 59);
    assert_eq!(planned.skipped[0].fire_at_ms, at("2025-03-28T10:20:00Z"));
}

#[test]
fn a_per_minute_job_down_for_a_year_stops_counting_but_still_runs_the_newest() {
    let every_minute = Cadence::parse("* * * * *", "UTC").unwrap();
    let now = at("2025-03-28T12:00:30Z");
    let planned = plan(&every_minute, Some(now - 365 * 24 * HOUR_MS), now, HOUR);
    assert_eq!(planned.run, Some(at("2025-03-28T12:00:00Z")));
    assert!(!planned.counted_all);
    assert!(planned.skipped_more < MAX_SEARCHES as u64, "{}", planned.skipped_more);
    assert_eq!(planned.skipped.len(), MAX_SKIPPED_KEPT);
    assert_eq!(planned.skipped.last().unwrap().fire_at_ms, at("2025-03-28T11:59:00Z"));
}

#[test]
fn a_clock_set_back_runs_nothing_twice() {
    let nine = at("2025-03-28T09:00:00Z");
    let watermark = nine + 60_000;
    let planned = plan(&daily_nine(), Some(watermark), nine - HOUR_MS, HOUR);
    assert_eq!((planned.run, planned.through), (None, watermark));
    assert_eq!(planned.next, Some(at("2025-03-29T09:00:00Z")));
    let planned = plan(&daily_nine(), Some(watermark), watermark, HOUR);
    assert_eq!((planned.run, planned.through), (None, watermark));
}

#[test]
fn spans_read_in_their_two_largest_units() {
    let cases = [(0, "0 ms"), (999, "999 ms"), (45_000, "45 s"), (90_000, "1 min 30 s"), (3_600_000, "1 h")];
    for (ms, says) in cases.into_iter().chain([(5_400_000, "1 h 30 min"), (97_200_000, "1 d 3 h")]) {
        assert_eq!(human(ms), says);
    }
}
