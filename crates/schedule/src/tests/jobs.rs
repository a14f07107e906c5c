use std::path::Path;
use std::time::Duration;

use crate::config::SchedulesConfig;
use crate::jobs::{JobBudget, JobKind, JobProblem, check, jobs};

fn section(json: &str) -> Result<SchedulesConfig, serde_json::Error> {
    serde_json::from_str(json)
}

/// The problem of a one-job section `{"j": {…}}` whose config file is in `dir`.
fn problem_of(entry: &str, dir: &Path) -> JobProblem {
    let config = section(&format!("{{\"j\": {{{entry}}}}}")).expect("the section parses");
    jobs(&config, dir).expect_err("a mistake")
}

#[test]
fn a_typo_or_a_wrong_kind_is_refused_when_read() {
    let error = section(r#"{"j": {"cron": "0 9 * * *", "kind": "stale", "dayz": 3}}"#).unwrap_err().to_string();
    assert!(error.contains("unknown field `dayz`"), "{error}");
    let error = section(r#"{"j": {"cron": "0 9 * * *", "kind": "standups"}}"#).unwrap_err().to_string();
    assert!(error.contains("\"standups\" is not one of \"standup\", \"stale\", \"prompt\""), "{error}");
    let error = section(r#"{"j": {"kind": "stale", "days": 3}}"#).unwrap_err().to_string();
    assert!(error.contains("missing field `cron`"), "{error}");
}

#[test]
fn each_mistake_names_its_field_and_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#""cron": "0 9 * * *", "kind": "standup", "project": "b", "days": 3"#,
            "days",
            "`days` is for stale jobs only, and this is a standup job: remove it (or change `kind`)",
        ),
        (r#""cron": "0 9 * * *", "kind": "stale", "days": 3, "prompt": "p.md""#, "prompt", "is for prompt jobs only"),
        (r#""cron": "0 9 * * *", "kind": "stale", "days": 3, "session": "s""#, "session", "is for prompt jobs only"),
        (
            r#""cron": "0 9 * * *", "kind": "prompt", "prompt": "p.md", "blocked_labels": []"#,
            "blocked_labels",
            "`blocked_labels` is for standup jobs only, and this is a prompt job",
        ),
        (
            r#""cron": "0 9 * * *", "kind": "stale", "days": 3, "due_within_days": 1"#,
            "due_within_days",
            "standup jobs only",
        ),
        (r#""cron": "0 9 * * *", "kind": "standup""#, "project", "a standup job needs the project"),
        (r#""cron": "0 9 * * *", "kind": "stale", "days": 3, "project": "bill ing""#, "project", "not a project slug"),
        (
            r#""cron": "0 9 * * *", "kind": "standup", "project": "b", "blocked_labels": [" "]"#,
            "blocked_labels",
            "not empty",
        ),
        (
            r#""cron": "0 9 * * *", "kind": "standup", "project": "b", "due_within_days": 400"#,
            "due_within_days",
            "at most 365",
        ),
        (r#""cron": "0 9 * * *", "kind": "stale""#, "days", "a stale job needs `days`"),
        (r#""cron": "0 9 * * *", "kind": "stale", "days": 0"#, "days", "expected from 1 to 3650 days, got 0"),
        (r#""cron": "0 9 * * *", "kind": "prompt""#, "prompt", "a prompt job needs `prompt`"),
        (
            r#""cron": "0 9 * * *", "kind": "prompt", "prompt": "p.md", "session": "a/b""#,
            "session",
            "not a session name",
        ),
        (
            r#""cron": "0 9 * *", "kind": "stale", "days": 3"#,
            "cron",
            "\"0 9 * *\" is not a cron pattern (it has 4 fields): expected 5 fields, minute hour day month weekday, like \"0 9 * * 1-5\" (09:00 Monday to Friday)",
        ),
        (r#""cron": "0 0 31 2 *", "kind": "stale", "days": 3"#, "cron", "never fires"),
        (
            r#""cron": "0 9 * * *", "timezone": "Europe/Berln", "kind": "stale", "days": 3"#,
            "timezone",
            "unknown time zone \"Europe/Berln\": expected an IANA name like Europe/Berlin",
        ),
        (
            r#""cron": "0 9 * * *", "kind": "stale", "days": 3, "catch_up_ms": 604800001"#,
            "catch_up_ms",
            "at most 604800000 (7 days)",
        ),
        (r#""cron": "0 9 * * *", "kind": "stale", "days": 3, "max_turns": 0"#, "max_turns", "limits.max_turns"),
        (
            r#""cron": "0 9 * * *", "kind": "stale", "days": 3, "max_tokens": 0"#,
            "max_tokens",
            "limits.max_tokens_per_run",
        ),
    ];
    for (entry, field, says) in cases {
        let problem = problem_of(entry, dir.path());
        assert_eq!(problem.field, format!("schedules.j.{field}"), "{entry}: {problem}");
        assert!(problem.message.contains(says), "{entry}: {problem}");
        assert_eq!(check(&section(&format!("{{\"j\": {{{entry}}}}}")).unwrap(), dir.path()), Err(problem));
    }
}

#[test]
fn the_prompt_file_must_be_readable_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("folder")).unwrap();
    std::fs::write(dir.path().join("binary.md"), [0xff, 0xfe, 0x00]).unwrap();
    std::fs::write(dir.path().join("empty.md"), "\n").unwrap();
    let cases = [
        ("missing.md", "cannot read the prompt file of job \"j\", "),
        ("folder", "is a folder: expected a file"),
        ("binary.md", "is not UTF-8 text"),
        ("empty.md", "is empty: write the prompt in it"),
    ];
    for (file, says) in cases {
        let problem = problem_of(&format!(r#""cron": "0 9 * * *", "kind": "prompt", "prompt": "{file}""#), dir.path());
        assert_eq!(problem.field, "schedules.j.prompt");
        let path = dir.path().join(file);
        assert!(problem.message.contains(says) && problem.message.contains(&path.display().to_string()), "{problem}");
    }
}

#[test]
fn job_names_are_safe_for_labels_claims_and_urls() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(65);
    for name in ["daily standup", "a.b", "", long.as_str()] {
        let config = section(&format!(r#"{{"{name}": {{"cron": "0 9 * * *", "kind": "stale", "days": 3}}}}"#)).unwrap();
        let problem = jobs(&config, dir.path()).unwrap_err();
        assert_eq!(problem.field, format!("schedules.{name}"));
        assert!(problem.message.contains("expected letters, digits, '-' or '_', at most 64 characters"), "{problem}");
    }
    let many: Vec<String> =
        (0..65).map(|n| format!(r#""j{n}": {{"cron": "0 9 * * *", "kind": "stale", "days": 3}}"#)).collect();
    let problem = jobs(&section(&format!("{{{}}}", many.join(","))).unwrap(), dir.path()).unwrap_err();
    assert_eq!(problem.field, "schedules");
    assert!(problem.message.contains("65 jobs, and at most 64"), "{problem}");
}

#[test]
fn a_good_section_becomes_typed_jobs_with_their_defaults() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("prompts")).unwrap();
    std::fs::write(dir.path().join("prompts/weekly.md"), "Summarise the week.").unwrap();
    let config = section(
        r#"{
            "standup-daily": {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "kind": "standup", "project": "billing"},
            "nudge": {"cron": "0 10 * * 1", "kind": "stale", "days": 5, "catch_up_ms": 0, "max_turns": 4},
            "weekly": {"cron": "0 16 * * 5", "kind": "prompt", "prompt": "prompts/weekly.md", "max_tokens": 9000}
        }"#,
    )
    .unwrap();
    assert_eq!(check(&config, dir.path()), Ok(()));
    let jobs = jobs(&config, dir.path()).unwrap();
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    assert_eq!(names, ["nudge", "standup-daily", "weekly"]);
    let [nudge, standup, weekly] = &jobs[..] else { unreachable!() };

    assert_eq!(nudge.kind, JobKind::Stale { project: None, days: 5 });
    assert_eq!((nudge.catch_up, nudge.budget), (Duration::ZERO, JobBudget { max_turns: Some(4), max_tokens: None }));
    assert_eq!(nudge.cadence.describe(), "0 10 * * 1 (UTC)");
    assert_eq!(nudge.kind.project(), None);

    let blocked = vec!["blocked".to_string()];
    assert_eq!(
        standup.kind,
        JobKind::Standup { project: "billing".into(), blocked_labels: blocked, due_within_days: 2 }
    );
    assert_eq!((standup.kind.name(), standup.kind.project()), ("standup", Some("billing")));
    assert_eq!(standup.catch_up, Duration::from_secs(3600));
    assert_eq!(standup.cadence.describe(), "0 9 * * 1-5 (Europe/Berlin)");

    let JobKind::Prompt { prompt, project, session } = &weekly.kind else { panic!("{:?}", weekly.kind) };
    assert!(prompt.is_absolute() && prompt.ends_with("prompts/weekly.md"), "{}", prompt.display());
    assert_eq!((project, session.as_str()), (&None, "weekly"));
    assert_eq!(weekly.budget.max_tokens, Some(9000));
    assert_eq!(weekly.kind.reads(), "nothing: it always runs its prompt");
    assert!(standup.kind.reads().starts_with("the project's tasks"));
}
