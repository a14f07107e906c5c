use super::{at, shown};
use crate::timing::{Cadence, CadenceError};

fn next(cron: &str, timezone: &str, after: &str) -> String {
    let cadence = Cadence::parse(cron, timezone).expect("a valid cadence");
    shown(cadence.next_after(at(after)))
}

#[test]
fn berlin_nine_on_weekdays_stays_nine_across_both_changes() {
    let weekdays = |after| next("0 9 * * 1-5", "Europe/Berlin", after);
    // Friday 28 March 2025 in winter time (UTC+1), then Monday 31 March in summer time (UTC+2):
    // the clocks went forward on Sunday the 30th.
    assert_eq!(weekdays("2025-03-27T12:00:00Z"), "2025-03-28T08:00:00+00:00");
    assert_eq!(weekdays("2025-03-28T08:00:00Z"), "2025-03-31T07:00:00+00:00");
    // Friday 24 October in summer time, Monday 27 October in winter time (back on the 26th).
    assert_eq!(weekdays("2025-10-23T12:00:00Z"), "2025-10-24T07:00:00+00:00");
    assert_eq!(weekdays("2025-10-24T07:00:00Z"), "2025-10-27T08:00:00+00:00");
}

#[test]
fn a_job_at_half_past_two_fires_once_on_both_transition_days() {
    let half_past_two = |after| next("30 2 * * *", "Europe/Berlin", after);
    // Spring forward: 02:30 does not exist on 30 March 2025; it fires at 03:00 CEST, the first
    // time after the gap, and the day after at 02:30 CEST again.
    assert_eq!(half_past_two("2025-03-29T23:00:00Z"), "2025-03-30T01:00:00+00:00");
    assert_eq!(half_past_two("2025-03-30T01:00:00Z"), "2025-03-31T00:30:00+00:00");
    // Fall back: 02:30 happens twice on 26 October 2025; it fires at the first (CEST) only.
    assert_eq!(half_past_two("2025-10-25T23:00:00Z"), "2025-10-26T00:30:00+00:00");
    assert_eq!(half_past_two("2025-10-26T00:30:00Z"), "2025-10-27T01:30:00+00:00");
    // Asked from inside the repeated hour (02:10 CET), croner's answer would be the first 02:30,
    // an hour in the past: the answer is after the question all the same.
    assert_eq!(half_past_two("2025-10-26T01:10:00Z"), "2025-10-27T01:30:00+00:00");
}

#[test]
fn patterns_of_steps_skip_the_gap_and_run_a_repeated_hour_once() {
    // Every half hour: 01:30 CET, then 03:00 CEST (02:00 and 02:30 do not exist).
    assert_eq!(next("*/30 * * * *", "Europe/Berlin", "2025-03-30T00:30:00Z"), "2025-03-30T01:00:00+00:00");
    // Every minute: from 02:59 CEST on to 03:00 CET, not through 02:00–02:59 a second time, and
    // from inside the second pass on to 03:00 CET too.
    let every_minute = |after| next("* * * * *", "Europe/Berlin", after);
    assert_eq!(every_minute("2025-10-26T00:59:00Z"), "2025-10-26T02:00:00+00:00");
    assert_eq!(every_minute("2025-10-26T01:10:00Z"), "2025-10-26T02:00:00+00:00");
}

#[test]
fn the_next_firing_is_strictly_after_to_the_millisecond() {
    let daily = |after| next("0 9 * * *", "UTC", after);
    assert_eq!(daily("2025-03-28T08:59:59.999Z"), "2025-03-28T09:00:00+00:00");
    assert_eq!(daily("2025-03-28T09:00:00Z"), "2025-03-29T09:00:00+00:00");
    assert_eq!(daily("2025-03-28T09:00:00.001Z"), "2025-03-29T09:00:00+00:00");
    // Before the epoch too (whole seconds are taken downwards).
    assert_eq!(next("0 0 * * *", "UTC", "1969-12-31T12:00:00.500Z"), "1970-01-01T00:00:00+00:00");
}

#[test]
fn a_cadence_describes_itself_with_its_zone() {
    let cadence = Cadence::parse(" 0 9 * * 1-5 ", "Europe/Berlin").unwrap();
    assert_eq!(cadence.describe(), "0 9 * * 1-5 (Europe/Berlin)");
    assert_eq!(cadence.pattern(), "0 9 * * 1-5");
    assert_eq!(Cadence::parse("@daily", "UTC").unwrap().describe(), "@daily (UTC)");
    assert_eq!(next("0 9 * * MON-FRI", "UTC", "2025-03-29T00:00:00Z"), "2025-03-31T09:00:00+00:00");
}

#[test]
fn a_bad_pattern_says_why_and_shows_one_that_works() {
    let example = "expected 5 fields, minute hour day month weekday, like \"0 9 * * 1-5\" (09:00 Monday to Friday)";
    let cases = [
        ("0 9 * *", "\"0 9 * *\" is not a cron pattern (it has 4 fields)"),
        ("0 0 9 * * *", "(it has 6 fields, and seconds are not supported)"),
        ("", "\"\" is not a cron pattern (it is empty)"),
        ("0 25 * * *", "\"0 25 * * *\" is not a cron pattern (number out of bounds)"),
        ("0 9 * * 8", "(number out of bounds)"),
    ];
    for (cron, says) in cases {
        let error = Cadence::parse(cron, "UTC").unwrap_err();
        assert!(matches!(error, CadenceError::Cron { .. }), "{cron}: {error:?}");
        let message = error.to_string();
        assert!(message.contains(says) && message.ends_with(example), "{cron}: {message}");
    }
    let never = Cadence::parse("0 0 30 2 *", "UTC").unwrap_err();
    assert_eq!(never, CadenceError::Never { cron: "0 0 30 2 *".into() });
    assert!(never.to_string().starts_with("\"0 0 30 2 *\" never fires"), "{never}");
}

#[test]
fn an_unknown_zone_names_the_nearest_one() {
    let error = Cadence::parse("0 9 * * *", "Europe/Berln").unwrap_err();
    assert_eq!(error.to_string(), "unknown time zone \"Europe/Berln\": expected an IANA name like Europe/Berlin");
    // A name in another case is the zone, spelled as the database does.
    let found = Cadence::parse("0 9 * * *", "america/new_york").unwrap();
    assert_eq!(found.describe(), "0 9 * * * (America/New_York)");
    let error = Cadence::parse("0 9 * * *", "America/New_Yrok").unwrap_err();
    assert!(error.to_string().ends_with("like America/New_York"), "{error}");
    let error = Cadence::parse("0 9 * * *", "").unwrap_err();
    assert!(error.to_string().ends_with("like Europe/Berlin or UTC"), "{error}");
}

#[test]
fn a_firing_is_shown_and_dated_in_its_zone() {
    let berlin = Cadence::parse("0 9 * * *", "Europe/Berlin").unwrap();
    // 23:30 UTC on 6 December is already the 7th in Berlin.
    let late = at("2026-12-06T23:30:00Z");
    assert_eq!(berlin.local_date(late), time::Date::from_calendar_date(2026, time::Month::December, 7).ok());
    assert_eq!(berlin.local_time(late), "Mon 7 Dec 00:30 CET");
    let utc = Cadence::parse("0 9 * * *", "UTC").unwrap();
    assert_eq!(utc.local_date(late), time::Date::from_calendar_date(2026, time::Month::December, 6).ok());
}
