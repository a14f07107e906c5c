//! Delegation, first part: a plan of sub-tasks, asked before it is made. A task labelled `epic`
//! is broken down by `plan_subtasks`: the plan is asked once in the task's comments, a yes makes
//! each sub-task once (`Part of KEY`, `parent:`/`blocked_by:` labels, the planned assignee,
//! watched by the agent, a step each on the parent), words go back to the model as changes, a no
//! makes nothing, a plan past its bounds is refused before anything is posted, and a SIGKILL
//! while the sub-tasks are made leaves each of them once. Over loopback: the reference board, a
//! scripted offline model endpoint, the agent in process or as a child (`picogent run`).

mod support;

#[path = "support/agent.rs"]
mod agent_support;

use std::time::Duration;

use agent_support::*;
use picogent::offline_model::script::Script;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use serde_json::{Value, json};
use support::fault_harness::{AgentProcess, FaultHarness, FaultRates, Release};

const WAIT: Duration = Duration::from_secs(30);

async fn scripted(turns: Value) -> OfflineModelHandle {
    let script = Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

/// A model turn calling `plan_subtasks` with `subtasks`.
fn plan_call(subtasks: Value) -> Value {
    json!({"expect": {"tools_include": ["plan_subtasks"]},
           "reply": {"tool_calls": [{"name": "plan_subtasks",
                                     "arguments": {"summary": "backend, page and docs", "subtasks": subtasks}}]}})
}

/// The plan of the tests: the third sub-task waits for the first.
fn three(first: Option<&str>) -> Value {
    let mut backend = json!({"title": "CSV endpoint", "description": "Serve the report as CSV at /reports.csv."});
    if let Some(assignee) = first {
        backend["assignee"] = json!(assignee);
    }
    json!([
        backend,
        {"title": "Export button", "description": "A button on the reports page.", "assignee": "alice"},
        {"title": "Docs page", "description": "Say how to export.", "assignee": "bob", "waits_for": [1]}
    ])
}

/// A task labelled `epic` that alice assigns to the agent.
async fn epic(alice: &TrackerClient, title: &str, description: &str) -> TaskOut {
    let body = CreateTask {
        project_slug: "team".into(),
        title: title.into(),
        description: Some(description.into()),
        assignee_slug: Some("picogent".into()),
        labels: Some(vec!["epic".into()]),
        ..CreateTask::default()
    };
    alice.create_task(&body, None).await.unwrap()
}

async fn said(alice: &TrackerClient, task: &TaskOut) -> Vec<MessageOut> {
    comments(alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect()
}

async fn plan_questions(alice: &TrackerClient, task: &TaskOut) -> Vec<MessageOut> {
    said(alice, task).await.into_iter().filter(|m| m.content.contains(&format!("Plan for {}", task.key))).collect()
}

/// Waits for the `n`th plan question on `task`.
async fn question(alice: &TrackerClient, task: &TaskOut, n: usize) -> MessageOut {
    eventually(WAIT, &format!("plan question {n} on {}", task.key), || async {
        plan_questions(alice, task).await.into_iter().nth(n - 1)
    })
    .await
}

async fn answer(alice: &TrackerClient, task: &TaskOut, starts: &str) -> MessageOut {
    eventually(WAIT, &format!("the answer {starts:?} on {}", task.key), || async {
        said(alice, task).await.into_iter().find(|m| m.content.starts_with(starts))
    })
    .await
}

/// The tasks labelled `parent:KEY`, in the order they were made.
async fn subtasks(alice: &TrackerClient, key: &str) -> Vec<TaskOut> {
    let query = TaskQuery { labels: Some(format!("parent:{key}")), limit: Some(200), ..TaskQuery::default() };
    let mut tasks = alice.list_tasks(&query).await.unwrap().items;
    tasks.sort_by_key(|task| task.key.rsplit_once('-').unwrap().1.parse::<u32>().unwrap());
    tasks
}

async fn project_keys(alice: &TrackerClient) -> Vec<String> {
    let query = TaskQuery { project_id: Some("team".into()), limit: Some(200), ..TaskQuery::default() };
    let mut keys: Vec<String> = alice.list_tasks(&query).await.unwrap().items.into_iter().map(|t| t.key).collect();
    keys.sort();
    keys
}

async fn step_titles(alice: &TrackerClient, task: &TaskOut) -> Vec<String> {
    alice.list_steps(&task.id).await.unwrap().into_iter().map(|step| step.title).collect()
}

/// What the board shows once the plan of [`three`] for TE-1 is made, the first sub-task taken by
/// `first`.
async fn three_made(alice: &TrackerClient, parent: &TaskOut, first: &str) {
    let made = subtasks(alice, &parent.key).await;
    let keys: Vec<&str> = made.iter().map(|task| task.key.as_str()).collect();
    assert_eq!(keys, ["TE-2", "TE-3", "TE-4"], "{made:#?}");
    assert_eq!(project_keys(alice).await, ["TE-1", "TE-2", "TE-3", "TE-4"], "nothing else made");
    let titles: Vec<&str> = made.iter().map(|task| task.title.as_str()).collect();
    assert_eq!(titles, ["CSV endpoint", "Export button", "Docs page"]);
    let assignees: Vec<&str> = made.iter().map(|task| task.assignee_slug.as_deref().unwrap()).collect();
    assert_eq!(assignees, [first, "alice", "bob"]);
    assert_eq!(made[0].description.as_deref(), Some("Part of TE-1\n\nServe the report as CSV at /reports.csv."));
    assert_eq!(made[0].labels, ["parent:TE-1"]);
    assert_eq!(made[1].labels, ["parent:TE-1"]);
    assert_eq!(made[2].labels, ["parent:TE-1", "blocked_by:TE-2"]);
    for task in &made {
        assert!(task.description.as_deref().unwrap().starts_with("Part of TE-1\n"), "{task:#?}");
        assert!(task.watchers.iter().any(|w| w == "picogent"), "the agent watches {}: {:?}", task.key, task.watchers);
        assert_eq!(task.project_slug, parent.project_slug);
    }
    assert_eq!(
        step_titles(alice, parent).await,
        ["TE-2: CSV endpoint", "TE-3: Export button", "TE-4: Docs page"],
        "one step per sub-task, once"
    );
}

async fn metrics(agent: &picogent::runtime::AgentHandle) -> String {
    reqwest::get(format!("http://{}/metrics", agent.http_addr.unwrap())).await.unwrap().text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epic_is_planned_asked_once_and_made_once_on_a_yes() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"tools_include": ["plan_subtasks"],
                    "messages_contain": "labelled for a breakdown: before working it, propose its sub-tasks with plan_subtasks"},
         "reply": {"tool_calls": [{"name": "plan_subtasks",
                                   "arguments": {"summary": "backend, page and docs", "subtasks": three(None)}}]}},
        {"expect": {"last_tool_result_contains": "Created 3 sub-tasks of TE-1"}, "reply": {"content": "Planned TE-1."}},
        // TE-2 is the agent's own: it is worked once TE-1's run gave the one slot back, and is
        // not broken down again.
        {"expect": {"messages_contain": "Part of TE-1", "tools_exclude": ["plan_subtasks"]},
         "reply": {"tool_calls": [{"name": "update_task", "arguments": {"task_id": "TE-2", "status": "in_review"}}]}},
        {"reply": {"content": "Serving the CSV."}}
    ]))
    .await;
    let extra = json!({"limits": {"max_concurrent_runs": 1}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let parent = epic(&alice, "Add CSV export to the reports page", "Backend, a button and a docs page.").await;
    let asked = question(&alice, &parent, 1).await;
    assert!(
        asked.content.starts_with("@alice Plan for TE-1, in 3 sub-tasks: backend, page and docs\n"),
        "{}",
        asked.content
    );
    for line in ["1. CSV endpoint (for me)", "2. Export button (for alice)", "3. Docs page (for bob, waits for 1)"] {
        assert!(asked.content.contains(line), "{line}: {}", asked.content);
    }
    assert!(asked.content.contains("Reply yes to create them, no to drop the plan, or say what to change"));
    let waiting = eventually(WAIT, "the run awaiting the plan's answer", || async {
        runs_for(&agent, &format!("task:{}", parent.id)).await.into_iter().find_map(|run| run.waiting)
    })
    .await;
    assert_eq!(waiting.kind, picogent::state::WaitKind::Plan);
    assert_eq!(waiting.what, "may I create 3 sub-tasks of TE-1?");
    assert!(subtasks(&alice, &parent.key).await.is_empty(), "nothing made before the yes");

    comment(&alice, &parent.id, "yes").await;
    answer(&alice, &parent, "Planned TE-1.").await;
    let second = alice.get_task("TE-2").await.unwrap();
    answer(&alice, &second, "Serving the CSV.").await;
    wait_settled(&agent).await;

    three_made(&alice, &parent, "picogent").await;
    let notes = said(&alice, &parent).await;
    assert_eq!(plan_questions(&alice, &parent).await.len(), 1, "asked once: {notes:#?}");
    assert_eq!(notes.len(), 2, "the question and the answer, nothing twice: {notes:#?}");
    assert!(metrics(&agent).await.contains(r#"picogent_waits_total{kind="plan",end="answered"} 1"#));
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_in_words_reach_the_model_and_a_no_makes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let two = json!([
        {"title": "CSV endpoint", "description": "Serve the report as CSV.", "assignee": "bob"},
        {"title": "Export button", "description": "A button on the reports page.", "assignee": "alice"}
    ]);
    let model = scripted(json!([
        plan_call(three(Some("bob"))),
        {"expect": {"last_tool_result_contains": "Their words: \"drop the docs part\""}, "reply": {"tool_calls": [
            {"name": "plan_subtasks", "arguments": {"summary": "backend and page", "subtasks": two}}]}},
        {"expect": {"last_tool_result_contains": "Created 2 sub-tasks of TE-1"}, "reply": {"content": "Planned in two."}},
        // TE-4, the next epic: alice says no.
        plan_call(three(Some("bob"))),
        {"expect": {"last_tool_result_contains": "@alice declined the plan: no sub-task was created"},
         "reply": {"content": "Working it whole."}}
    ]))
    .await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let parent = epic(&alice, "Add CSV export", "Backend, a button and a docs page.").await;
    question(&alice, &parent, 1).await;
    comment(&alice, &parent.id, "@picogent drop the docs part").await;
    let again = question(&alice, &parent, 2).await;
    assert!(again.content.starts_with("@alice Plan for TE-1, in 2 sub-tasks: backend and page\n"), "{}", again.content);
    assert!(subtasks(&alice, &parent.key).await.is_empty(), "nothing made for a plan changed in words");
    comment(&alice, &parent.id, "yes").await;
    answer(&alice, &parent, "Planned in two.").await;
    let made: Vec<String> = subtasks(&alice, &parent.key).await.into_iter().map(|t| t.key).collect();
    assert_eq!(made, ["TE-2", "TE-3"]);
    assert_eq!(step_titles(&alice, &parent).await, ["TE-2: CSV endpoint", "TE-3: Export button"]);
    assert_eq!(said(&alice, &parent).await.len(), 3, "two questions and the answer");

    let declined = epic(&alice, "Add PDF export", "Backend, a button and a docs page.").await;
    assert_eq!(declined.key, "TE-4");
    question(&alice, &declined, 1).await;
    comment(&alice, &declined.id, "no").await;
    answer(&alice, &declined, "Working it whole.").await;
    wait_settled(&agent).await;
    assert!(subtasks(&alice, &declined.key).await.is_empty());
    assert!(step_titles(&alice, &declined).await.is_empty());
    assert_eq!(project_keys(&alice).await, ["TE-1", "TE-2", "TE-3", "TE-4"], "nothing made for the no");
    assert_eq!(said(&alice, &declined).await.len(), 2, "the question and the answer");
    let counted = metrics(&agent).await;
    assert!(counted.contains(r#"picogent_waits_total{kind="plan",end="answered"} 2"#), "{counted}");
    assert!(counted.contains(r#"picogent_waits_total{kind="plan",end="declined"} 1"#), "{counted}");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// What a hostile task gets its model to call: 500 sub-tasks, a stranger as assignee, a
/// sub-task waiting for itself or a later one. Each is refused naming why; nothing is posted
/// or made. A sub-task of a task (depth 1) is not offered the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_past_its_bounds_is_refused_before_anything_is_posted_or_made() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let many: Vec<Value> =
        (1..=500).map(|n| json!({"title": format!("Part {n}"), "description": "One line of the report."})).collect();
    let refused = |contains: &str| json!({"last_tool_result_contains": contains, "last_tool_result_is_error": true});
    let stranger = json!([
        {"title": "CSV endpoint", "description": "Serve it."},
        {"title": "Export button", "description": "A button.", "assignee": "mallory"}
    ]);
    let itself = json!([
        {"title": "CSV endpoint", "description": "Serve it."},
        {"title": "Export button", "description": "A button.", "waits_for": [2]}
    ]);
    let later = json!([
        {"title": "CSV endpoint", "description": "Serve it.", "waits_for": [2]},
        {"title": "Export button", "description": "A button."}
    ]);
    let model = scripted(json!([
        plan_call(Value::Array(many)),
        {"expect": refused("a plan has 1 to 8 sub-tasks (delegation.max_subtasks), this one has 500"),
         "reply": {"tool_calls": [{"name": "plan_subtasks", "arguments": {"subtasks": stranger}}]}},
        {"expect": refused("the assignee `mallory` of sub-task 2 is not a member of the board"),
         "reply": {"tool_calls": [{"name": "plan_subtasks", "arguments": {"subtasks": itself}}]}},
        {"expect": refused("sub-task 2 waits for 2: waits_for names only earlier sub-tasks of this list (1 to 1)"),
         "reply": {"tool_calls": [{"name": "plan_subtasks", "arguments": {"subtasks": later}}]}},
        {"expect": refused("sub-task 1 waits for 2: waits_for names only earlier sub-tasks of this list (none"),
         "reply": {"content": "I could not plan it within the limits."}},
        // TE-2, a sub-task of TE-1 assigned to the agent: not offered the tool.
        {"expect": {"tools_exclude": ["plan_subtasks"], "tools_include": ["update_task"]},
         "reply": {"tool_calls": [{"name": "plan_subtasks", "arguments": {"subtasks": three(None)}}]}},
        {"expect": refused("tool `plan_subtasks` is not offered in this run"), "reply": {"content": "Worked as it is."}}
    ]))
    .await;
    // Room for the model to write all 500 in one call.
    let extra = json!({"llm": {"max_output_tokens": 32_000}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let parent = epic(&alice, "Export everything", "Break this into 500 sub-tasks, one per line of the report.").await;
    answer(&alice, &parent, "I could not plan it within the limits.").await;
    wait_settled(&agent).await;
    assert!(plan_questions(&alice, &parent).await.is_empty(), "no plan posted");
    assert_eq!(said(&alice, &parent).await.len(), 1, "the answer alone");
    assert!(step_titles(&alice, &parent).await.is_empty());
    assert_eq!(project_keys(&alice).await, ["TE-1"], "nothing made");

    let sub = CreateTask {
        project_slug: "team".into(),
        title: "Part of the export".into(),
        assignee_slug: Some("picogent".into()),
        labels: Some(vec!["parent:TE-1".into(), "epic".into()]),
        ..CreateTask::default()
    };
    let sub = alice.create_task(&sub, None).await.unwrap();
    answer(&alice, &sub, "Worked as it is.").await;
    wait_settled(&agent).await;
    assert!(plan_questions(&alice, &sub).await.is_empty());
    assert_eq!(project_keys(&alice).await, ["TE-1", "TE-2"], "nothing made");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// With `delegation.max_depth` 2 a sub-task is offered the tool, and a sub-task of a sub-task
/// that calls it is refused naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_as_deep_as_max_depth_allows_is_not_broken_down_again() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        plan_call(three(None)),
        {"expect": {"last_tool_result_contains":
                    "TE-3 is itself a sub-task (part of TE-2), and tasks are broken down no deeper than delegation.max_depth (2)"},
         "reply": {"content": "Worked as it is."}}
    ]))
    .await;
    let extra = json!({"delegation": {"max_depth": 2}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let mut parent = None;
    for (title, label) in [("Root", None), ("Middle", Some("parent:TE-1")), ("Leaf", Some("parent:TE-2"))] {
        let body = CreateTask {
            project_slug: "team".into(),
            title: title.into(),
            assignee_slug: (title == "Leaf").then(|| "picogent".to_string()),
            labels: Some(label.into_iter().map(str::to_string).collect()),
            ..CreateTask::default()
        };
        parent = Some(alice.create_task(&body, None).await.unwrap());
    }
    let leaf = parent.unwrap();
    answer(&alice, &leaf, "Worked as it is.").await;
    wait_settled(&agent).await;
    assert!(plan_questions(&alice, &leaf).await.is_empty());
    assert_eq!(project_keys(&alice).await, ["TE-1", "TE-2", "TE-3"], "nothing made");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// `picogent run` as a child is SIGKILLed after the yes, while the plan is being made: the first
/// sub-task is on the board and the create of the second is held in the proxy. `release` says
/// what becomes of that create: lost with the process, or landing on the board after it died.
/// The restarted agent resumes the run, makes the same call, and the board ends with each
/// sub-task, the question and the steps once.
async fn killed_while_the_plan_is_made(release: Release) {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let proxy = FaultHarness::start(board.addr(), FaultRates::none(46)).await;
    let model = scripted(json!([
        plan_call(three(Some("bob"))),
        // The resumed run sends its stored request again; the model asks for the same plan.
        plan_call(three(Some("bob"))),
        {"expect": {"last_tool_result_contains": "Created 3 sub-tasks of TE-1"}, "reply": {"content": "Planned TE-1."}}
    ]))
    .await;
    let config = agent_config(dir.path(), &proxy.url(), &model.url(), "picogent", json!({}));
    let config_path = write_config(dir.path(), &config);
    // The agent's second create of a task waits in the proxy.
    proxy.hold("POST", "/api/tasks", 1);
    let mut agent = AgentProcess::start(&config_path, "tok-picogent", &dir.path().join("agent.log"));
    let alice = client(&board, "tok-alice");

    let parent = epic(&alice, "Add CSV export to the reports page", "Backend, a button and a docs page.").await;
    question(&alice, &parent, 1).await;
    comment(&alice, &parent.id, "yes").await;
    eventually(WAIT, "the second sub-task's create held", || async { (proxy.held() == 1).then_some(()) }).await;
    let first: Vec<String> = subtasks(&alice, &parent.key).await.into_iter().map(|t| t.key).collect();
    assert_eq!(first, ["TE-2"], "killed with the first sub-task made");
    agent.kill();
    proxy.release(release);
    if release == Release::Forward {
        eventually(WAIT, "the held create on the board", || async {
            (subtasks(&alice, &parent.key).await.len() == 2).then_some(())
        })
        .await;
    }

    agent.restart();
    answer(&alice, &parent, "Planned TE-1.").await;
    let state = picogent::state::State::open(&config.state.path).await.unwrap();
    let head = board_head(&dir.path().join("board.db"), "picogent").await;
    eventually(WAIT, "every event handled and every run ended", || async {
        let handled = state.last_seq().await.ok()? >= head;
        let runs = state.list_runs(50).await.ok()?;
        (handled && runs.iter().all(|run| run.finished_at.is_some())).then_some(runs)
    })
    .await;
    let runs = state.list_runs(50).await.unwrap();
    state.close().await;
    assert_eq!(runs.len(), 1, "the killed run was resumed, not started again: {runs:#?}");

    three_made(&alice, &parent, "bob").await;
    let notes = said(&alice, &parent).await;
    assert_eq!(plan_questions(&alice, &parent).await.len(), 1, "asked once: {notes:#?}");
    assert_eq!(notes.len(), 2, "the question and the answer: {notes:#?}");
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.kill();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_while_subtasks_are_made_leaves_each_once_when_the_cut_create_is_lost() {
    killed_while_the_plan_is_made(Release::Drop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_while_subtasks_are_made_leaves_each_once_when_the_cut_create_lands_after_it() {
    killed_while_the_plan_is_made(Release::Forward).await;
}
