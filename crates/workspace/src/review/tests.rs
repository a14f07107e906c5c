use super::*;

#[test]
fn the_round_is_the_highest_review_round_label_and_other_labels_are_not_rounds() {
    let labels = |names: &[&str]| names.iter().map(|name| name.to_string()).collect::<Vec<_>>();
    assert_eq!(round_of(&labels(&["bug", "review-round:1", "review-round:3"])), Some(3));
    assert_eq!(round_of(&labels(&["review-round:x", "review-round:", "parent:TE-1"])), None);
    assert_eq!(round_of(&[]), None);
}

#[test]
fn a_review_needs_the_capability_and_a_round() {
    let task: TaskOut = serde_json::from_value(serde_json::json!({
        "id": "t", "key": "TE-1", "project_slug": "team", "title": "x", "status": "todo",
        "labels": ["review-round:1"]
    }))
    .unwrap();
    assert!(is_review(&["coding".into(), "review".into()], &task));
    assert!(!is_review(&["coding".into()], &task));
    let plain = TaskOut { labels: Vec::new(), ..task };
    assert!(!is_review(&["review".into()], &plain));
}

#[test]
fn a_review_run_gets_the_review_tools_instead_of_the_coding_tools_and_no_other_run_gets_them() {
    let all: Vec<String> =
        ["get_task", "run_coding_agent", "workspace_status", "review_diff", "review_verdict"].map(String::from).into();
    assert_eq!(offered(true, all.clone()), ["get_task", "review_diff", "review_verdict"]);
    assert_eq!(offered(false, all), ["get_task", "run_coding_agent", "workspace_status"]);
}

#[test]
fn the_section_defaults_to_two_rounds_no_reviewer_and_approval_to_in_review() {
    let config: ReviewConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(config, ReviewConfig::default());
    assert_eq!(config.max_review_rounds, 2);
    assert_eq!(config.approve_to.status(), TaskStatus::InReview);
    let done: ReviewConfig = serde_json::from_str(r#"{"approve_to": "done", "reviewers": ["reviewer"]}"#).unwrap();
    assert_eq!(done.approve_to.status(), TaskStatus::Done);
    assert!(serde_json::from_str::<ReviewConfig>(r#"{"approve_to": "merged"}"#).is_err());
    assert!(serde_json::from_str::<ReviewConfig>(r#"{"rounds": 3}"#).is_err());
    // The round limit is `delegation.max_review_rounds`, not this section's.
    assert!(serde_json::from_str::<ReviewConfig>(r#"{"max_review_rounds": 3}"#).is_err());
}
