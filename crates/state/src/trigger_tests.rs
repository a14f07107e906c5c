//! A trigger's text and its typed value say the same, both ways, for every kind; a text no
//! trigger writes is an error naming it.

use serde_json::json;

use super::{Trigger, UnknownTrigger};

/// 2026-03-02T09:00:00Z, in milliseconds.
const STANDUP_MS: i64 = 1_772_442_000_000;

/// Every kind of trigger, and its text as the run's row keeps it.
fn every_trigger() -> Vec<(Trigger, &'static str)> {
    let scheduled = |job: &str, fire_at_ms, manual| Trigger::Scheduled { job: job.to_string(), fire_at_ms, manual };
    vec![
        (Trigger::Assigned { task_key: "TE-4".to_string() }, "task.assigned TE-4"),
        (Trigger::Message { message_id: "m-17".to_string() }, "message.new m-17"),
        (Trigger::StartRun { task_key: "TE-7".to_string() }, "start_run TE-7"),
        (Trigger::StartPrompt, "start_run prompt"),
        (Trigger::FollowUp { run_id: "run-0a1b".to_string() }, "follow-up of run-0a1b"),
        (scheduled("standup", STANDUP_MS, false), "schedule standup 2026-03-02T09:00:00Z"),
        (scheduled("standup", STANDUP_MS, true), "schedule standup 2026-03-02T09:00:00Z (run now)"),
        (
            scheduled("daily standup", STANDUP_MS + 250, true),
            "schedule daily standup 2026-03-02T09:00:00.25Z (run now)",
        ),
        (scheduled("early", -1, false), "schedule early 1969-12-31T23:59:59.999Z"),
        // Times RFC 3339 cannot write are written, and read, as milliseconds.
        (scheduled("far", i64::MAX, false), "schedule far 9223372036854775807"),
        (scheduled("far", i64::MIN, true), "schedule far -9223372036854775808 (run now)"),
    ]
}

#[test]
fn each_trigger_reads_back_from_its_text_and_its_json() {
    for (trigger, text) in every_trigger() {
        assert_eq!(trigger.to_string(), text);
        assert_eq!(text.parse::<Trigger>(), Ok(trigger.clone()), "{text}");
        let stored = serde_json::to_value(&trigger).unwrap();
        assert_eq!(serde_json::from_value::<Trigger>(stored.clone()).unwrap(), trigger, "{stored}");
    }
    let stored = serde_json::to_value(Trigger::Scheduled { job: "standup".into(), fire_at_ms: 5, manual: true });
    assert_eq!(stored.unwrap(), json!({"kind": "scheduled", "job": "standup", "fire_at_ms": 5, "manual": true}));
    assert_eq!(serde_json::to_value(Trigger::StartPrompt).unwrap(), json!({"kind": "start_prompt"}));
}

#[test]
fn a_text_no_trigger_writes_is_an_error_naming_it() {
    let unknown = [
        "",
        "manual",
        "test",
        "task.assigned",
        "task.assigned ",
        "message.new ",
        "reconcile TE-4",
        "follow-up run-1",
        "follow-up of ",
        "schedule standup",
        "schedule standup tomorrow",
        "schedule  2026-03-02T09:00:00Z",
        "schedule standup 2026-03-02T09:00:00Z (run later)",
        // The same instant, written as the trigger never writes it.
        "schedule standup 2026-03-02T11:00:00+02:00",
        "schedule standup 2026-03-02T09:00:00.250Z",
        "schedule standup 1772442000000",
    ];
    for text in unknown {
        let error = text.parse::<Trigger>().expect_err(text);
        assert_eq!(error, UnknownTrigger { text: text.to_string() });
        assert_eq!(error.to_string(), format!("{text:?} names no trigger this version knows"));
    }
}
