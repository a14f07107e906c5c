use super::*;

fn members() -> Members {
    let member = |slug: &str, kind: &str, status: &str| -> picogent_tracker::model::MemberOut {
        serde_json::from_value(json!({"slug": slug, "name": slug, "kind": kind, "status": status})).unwrap()
    };
    Members::of(vec![
        member("alice", "human", "[picogent copy 000000000001 #3 can review]"),
        member("bob", "human", ""),
        member("picogent", "agent", "[picogent copy 000000000002 #9 can coding]"),
        member("old-reviewer", "agent", "[picogent copy 000000000003 stopped can review]"),
        member("reviewer", "agent", "busy [picogent copy 000000000004 #1 can review,coding]"),
    ])
}

fn arg(title: &str, assignee: Option<&str>, waits_for: &[i64]) -> SubtaskArgs {
    SubtaskArgs {
        title: title.to_string(),
        description: "do it".to_string(),
        assignee: assignee.map(str::to_string),
        waits_for: waits_for.to_vec(),
    }
}

fn task(key: &str, labels: &[&str]) -> TaskOut {
    serde_json::from_value(json!({
        "id": format!("id-{key}"), "key": key, "project_slug": "team", "title": "Export", "description": null,
        "type": "task", "status": "todo", "priority": "medium", "assignee_slug": "bob",
        "labels": labels, "watchers": [], "created_by": "picogent",
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
    }))
    .unwrap()
}

#[test]
fn an_assignee_is_me_by_default_or_a_member_and_nobody_else() {
    for named in [None, Some("me"), Some("ME"), Some(""), Some("@picogent")] {
        assert_eq!(subtask(arg("a", named, &[]), 0, "picogent", &members()).unwrap().assignee, "picogent", "{named:?}");
    }
    assert_eq!(subtask(arg("a", Some("@bob"), &[]), 0, "picogent", &members()).unwrap().assignee, "bob");
    let refused = subtask(arg("a", Some("mallory"), &[]), 1, "picogent", &members()).unwrap_err().to_string();
    assert!(refused.contains("`mallory` of sub-task 2 is not a member"), "{refused}");
}

#[test]
fn an_assignee_by_capability_is_an_agent_whose_marker_says_it_a_running_one_first() {
    let by = |named: &str| subtask(arg("a", Some(named), &[]), 0, "picogent", &members());
    assert_eq!(by("can:review").unwrap().assignee, "reviewer", "a person's status says nothing; a stopped one last");
    assert_eq!(by("can:coding").unwrap().assignee, "picogent");
    let refused = by("can:deploy").unwrap_err().to_string();
    assert!(refused.contains("no agent member of the board says it can `deploy` (sub-task 1)"), "{refused}");
    let only_stopped = Members::of(vec![serde_json::from_value(
        json!({"slug": "old", "name": "old", "kind": "agent", "status": "[picogent copy 000000000003 stopped can review]"}),
    )
    .unwrap()]);
    assert_eq!(subtask(arg("a", Some("can:review"), &[]), 0, "picogent", &only_stopped).unwrap().assignee, "old");
}

#[test]
fn a_subtask_waits_only_for_earlier_ones() {
    let third = subtask(arg("c", None, &[1, 2, 1]), 2, "picogent", &members()).unwrap();
    assert_eq!(third.waits_for, vec![0, 1], "each once, 0-based");
    for (index, waits) in [(0, 1), (1, 2), (1, 3), (2, 0), (2, -1)] {
        let refused = subtask(arg("x", None, &[waits]), index, "picogent", &members()).unwrap_err().to_string();
        assert!(refused.contains("waits_for names only earlier sub-tasks"), "{index} {waits}: {refused}");
    }
    assert_eq!(subtask(arg("  ", None, &[]), 0, "picogent", &members()), Err(BadSubtask::NoTitle { number: 1 }));
}

#[test]
fn titles_are_one_clean_line_that_fits_a_step() {
    let long = format!("Add <!-- hidden -->CSV\nexport {}", "x".repeat(400));
    let title = subtask(arg(&long, None, &[]), 0, "picogent", &members()).unwrap().title;
    assert!(title.starts_with("Add CSV export xx"), "{title}");
    assert_eq!(title.chars().count(), MAX_TITLE_CHARS);
    let step = step_title(&TaskOut { title, ..task("TEAMPROJECT-123456789", &[]) });
    assert!(step.chars().count() <= MAX_STEP_CHARS, "{step}");
}

#[test]
fn a_reply_is_yes_no_or_the_changes_asked_for() {
    assert_eq!(verdict("@picogent yes"), Some(Verdict::Yes));
    assert_eq!(verdict("Yes!"), Some(Verdict::Yes));
    assert_eq!(verdict("no."), Some(Verdict::No));
    assert_eq!(verdict("@picogent"), None);
    assert_eq!(
        verdict("@picogent no, drop the docs part"),
        Some(Verdict::Changes("no, drop the docs part".to_string()))
    );
}

#[test]
fn the_question_numbers_each_subtask_with_who_and_what_it_waits_for() {
    let plan = [
        subtask(arg("Backend", None, &[]), 0, "picogent", &members()).unwrap(),
        subtask(arg("Ping @bob", Some("bob"), &[]), 1, "picogent", &members()).unwrap(),
        subtask(arg("Docs", Some("alice"), &[1, 2]), 2, "picogent", &members()).unwrap(),
    ];
    let text = plan_text(&task("TE-1", &[]), &plan, "CSV export", "picogent", 30);
    assert!(text.starts_with("Plan for TE-1, in 3 sub-tasks: CSV export\n1. Backend (for me)\n"), "{text}");
    assert!(text.contains("\n2. Ping ＠bob (for bob)\n3. Docs (for alice, waits for 1, 2)\n"), "{text}");
    assert!(text.ends_with("Reply yes to create them, no to drop the plan, or say what to change, within 30 minutes."));
}

#[test]
fn a_subtask_at_the_depth_limit_is_not_offered_the_tool() {
    let config = DelegationConfig::default();
    assert!(offered_for(&task("TE-1", &["epic"]), &config));
    assert!(!offered_for(&task("TE-2", &["parent:TE-1"]), &config));
    assert!(offered_for(&task("TE-2", &["parent:TE-1"]), &DelegationConfig { max_depth: 2, ..config.clone() }));
    assert!(!offered_for(&task("TE-1", &[]), &DelegationConfig { enabled: false, ..config }));
}

#[test]
fn the_schema_names_every_field_and_requires_the_plan() {
    let schema = crate::schema::input_schema_for::<PlanArgs>();
    assert_eq!(schema["required"], json!(["subtasks"]));
    let item = &schema["properties"]["subtasks"]["items"];
    assert_eq!(item["required"], json!(["title", "description"]));
    for field in ["title", "description", "assignee", "waits_for"] {
        assert!(item["properties"][field]["description"].is_string(), "{field}: {schema:#}");
    }
}
