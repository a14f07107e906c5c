//! Model faults through the agent runtime: the offline model endpoint in its faulty modes (429
//! bursts with `Retry-After`, 500s, truncated JSON bodies, invalid tool arguments, endless tool
//! calling). Runs finish, or stop at their budgets with the reason recorded in the agent's state
//! database; `max_turns` is never exceeded; the daily spend guard holds.

mod support;

use std::time::Duration;

use picogent::offline_model::{Faults, OfflineModelHandle, OfflineModelOptions};
use picogent::runtime::AgentHandle;
use picogent::state::{RunRow, RunStatus};
use picogent::tracker::model::*;
use serde_json::{Value, json};
use support::TestBoard;
use support::fault_harness::{agent_config_json, eventually, start_agent_in_process};

async fn faulty_model(faults: Faults) -> OfflineModelHandle {
    picogent::offline_model::start(OfflineModelOptions { faults, ..OfflineModelOptions::planner() }).await.unwrap()
}

async fn agent_for(board: &TestBoard, model: &OfflineModelHandle, dir: &std::path::Path, extra: Value) -> AgentHandle {
    let agent = start_agent_in_process(agent_config_json(dir, &board.url(), &model.url(), "picogent", extra)).await;
    eventually(Duration::from_secs(10), "agent caught up", || async { agent.status.caught_up().then_some(()) }).await;
    agent
}

async fn assign(board: &TestBoard, title: &str) -> TaskOut {
    board
        .client("alice")
        .create_task(
            &CreateTask {
                project_slug: "team".into(),
                title: title.into(),
                description: Some("- first\n- second".into()),
                assignee_slug: Some("picogent".into()),
                ..CreateTask::default()
            },
            None,
        )
        .await
        .unwrap()
}

/// The finished runs of `task`, once there is one and none is running.
async fn finished_runs(agent: &AgentHandle, task: &TaskOut) -> Vec<RunRow> {
    let session = format!("task:{}", task.id);
    eventually(Duration::from_secs(60), &format!("the run of {}", task.key), || async {
        let runs: Vec<_> = agent
            .state
            .list_runs(100)
            .await
            .ok()?
            .into_iter()
            .filter(|r| r.session_key.to_string() == session)
            .collect();
        (!runs.is_empty() && runs.iter().all(|r| r.finished_at.is_some())).then_some(runs)
    })
    .await
}

fn outcome(run: &RunRow) -> String {
    run.record.as_ref().and_then(|r| r["record"]["outcome"].as_str()).unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_429_500_and_truncated_bodies_are_retried_and_the_run_completes() {
    let board = TestBoard::start().await;
    let faults = Faults {
        rate_limit_burst: 2,
        retry_after_secs: 0,
        server_error_burst: 2,
        truncated_body_burst: 2,
        ..Faults::default()
    };
    let model = faulty_model(faults).await;
    let dir = tempfile::tempdir().unwrap();
    let retry = json!({"llm": {"retry": {"max_attempts": 8, "initial_delay_ms": 10, "max_delay_ms": 50, "max_elapsed_ms": 5000}}});
    let agent = agent_for(&board, &model, dir.path(), retry).await;
    let task = assign(&board, "Through the storm").await;
    let runs = finished_runs(&agent, &task).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].status, RunStatus::Completed, "{:#?}", runs[0]);
    assert_eq!(outcome(&runs[0]), "completed");
    // Six faulted requests came before the ones that were answered.
    assert!(model.request_count() >= 6 + runs[0].turns as usize, "{} requests", model.request_count());
    let task = board.client("alice").get_task(&task.id).await.unwrap();
    assert_eq!(task.status, TaskStatus::InReview);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_spent_on_a_failing_model_fail_the_run_with_the_reason_and_one_notice() {
    let board = TestBoard::start().await;
    let model = faulty_model(Faults { server_error_burst: 50, ..Faults::default() }).await;
    let dir = tempfile::tempdir().unwrap();
    let retry = json!({"llm": {"retry": {"max_attempts": 3, "initial_delay_ms": 10, "max_delay_ms": 20, "max_elapsed_ms": 2000}}});
    let agent = agent_for(&board, &model, dir.path(), retry).await;
    let task = assign(&board, "The model is down").await;
    let runs = finished_runs(&agent, &task).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Failed, "{:#?}", runs[0]);
    assert_eq!(outcome(&runs[0]), "model_error");
    assert_eq!(model.request_count(), 3, "max_attempts bounds the calls");
    let notices = eventually(Duration::from_secs(10), "the failure notice", || async {
        let query = MessageQuery { task_id: Some(task.id.clone()), ..MessageQuery::default() };
        let mine: Vec<_> = board
            .client("alice")
            .list_messages(&query)
            .await
            .ok()?
            .into_iter()
            .filter(|m| m.author_slug == "picogent")
            .collect();
        (!mine.is_empty()).then_some(mine)
    })
    .await;
    assert_eq!(notices.len(), 1, "{notices:#?}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_tool_arguments_go_back_to_the_model_and_the_run_completes() {
    let board = TestBoard::start().await;
    let model = faulty_model(Faults { invalid_arguments: 2, ..Faults::default() }).await;
    let dir = tempfile::tempdir().unwrap();
    let agent = agent_for(&board, &model, dir.path(), json!({})).await;
    let task = assign(&board, "Broken arguments").await;
    let runs = finished_runs(&agent, &task).await;
    assert_eq!(runs[0].status, RunStatus::Completed, "{:#?}", runs[0]);
    let calls = runs[0].record.as_ref().unwrap()["record"]["calls"].as_array().unwrap().clone();
    let failed = calls.iter().filter(|c| c.to_string().contains("invalid")).count();
    assert!(failed >= 2, "the broken calls were recorded as failed: {calls:#?}");
    let steps = board.client("alice").list_steps(&task.id).await.unwrap();
    // The planner may plan other steps when a broken call hid the description from it; what
    // matters is that no step was added twice and all were worked.
    let titles: std::collections::HashSet<_> = steps.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(titles.len(), steps.len(), "each step once, despite the broken calls: {steps:#?}");
    assert!(!steps.is_empty() && steps.iter().all(|s| s.done), "{steps:#?}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_tool_calling_stops_at_max_turns() {
    let board = TestBoard::start().await;
    let model = faulty_model(Faults { endless_tool_calls: true, ..Faults::default() }).await;
    let dir = tempfile::tempdir().unwrap();
    let max_turns = 5;
    let limits = json!({"limits": {"max_turns": max_turns, "max_tool_calls": 1000}});
    let agent = agent_for(&board, &model, dir.path(), limits).await;
    let task = assign(&board, "Never done").await;
    let runs = finished_runs(&agent, &task).await;
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(outcome(run), "budget_turns", "{run:#?}");
    assert!(run.turns <= max_turns, "{} turns", run.turns);
    assert!(model.request_count() <= max_turns as usize, "{} model requests", model.request_count());
    assert_ne!(run.status, RunStatus::Completed);
    assert!(run.outcome.as_deref().is_some_and(|o| !o.is_empty()), "the reason is recorded: {run:#?}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daily_spend_guard_holds_against_endless_tool_calling() {
    let board = TestBoard::start().await;
    let model = faulty_model(Faults { endless_tool_calls: true, ..Faults::default() }).await;
    let dir = tempfile::tempdir().unwrap();
    let limit = 6000;
    let limits = json!({"limits": {"max_turns": 100, "max_tool_calls": 1000, "max_tokens_per_day": limit}});
    let agent = agent_for(&board, &model, dir.path(), limits).await;
    let first = assign(&board, "Spend it all").await;
    let runs = finished_runs(&agent, &first).await;
    assert_eq!(outcome(&runs[0]), "budget_tokens", "{:#?}", runs[0]);
    let spent = agent.state.tokens_today().await.unwrap();
    assert!(spent <= limit, "spent {spent} of {limit}");
    // The day is spent (or nearly): a second task is refused, not run.
    agent.state.add_tokens(time::OffsetDateTime::now_utc().date(), limit - spent).await.unwrap();
    let before = model.request_count();
    let second = assign(&board, "One more").await;
    eventually(Duration::from_secs(20), "the spend guard", || async {
        (agent.metrics.event_count("run", "spend_guard") >= 1).then_some(())
    })
    .await;
    assert_eq!(model.request_count(), before, "no model call after the budget was spent");
    let session = format!("task:{}", second.id);
    assert!(agent.state.list_runs(100).await.unwrap().iter().all(|r| r.session_key.to_string() != session));
    assert!(agent.state.tokens_today().await.unwrap() <= limit);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}

/// A 500 that comes back with the same body three times is a blip, as hosted providers word it
/// the same every time, not a deterministic failure: retried with backoff within the retry limit,
/// the fourth request is answered and the person sees the answer in the thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_identical_500s_then_an_answer_complete_the_run() {
    use picogent::offline_model::script::Script;
    let board = TestBoard::start().await;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/llm/server_error_repeated.json");
    let script = Script::from_file(&fixture).unwrap();
    let model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let retry = json!({"llm": {"retry": {"max_attempts": 5, "initial_delay_ms": 10, "max_delay_ms": 40, "max_elapsed_ms": 5000}}});
    let agent = agent_for(&board, &model, dir.path(), retry).await;
    let alice = board.client("alice");
    let chat = alice.get_project("team").await.unwrap().chat_id;
    let body =
        SendMessage { content: "@picogent are you there?".into(), chat_id: Some(chat), ..SendMessage::default() };
    let question = alice.send_message(&body, None).await.unwrap();
    let replies = eventually(Duration::from_secs(30), "the answer in the thread", || async {
        let query = MessageQuery { parent_id: Some(question.id.clone()), ..MessageQuery::default() };
        let mine: Vec<_> =
            alice.list_messages(&query).await.ok()?.into_iter().filter(|m| m.author_slug == "picogent").collect();
        (!mine.is_empty()).then_some(mine)
    })
    .await;
    assert_eq!(replies.len(), 1, "{replies:#?}");
    assert!(replies[0].content.starts_with("Here, after three server errors."), "{}", replies[0].content);
    assert_eq!(replies[0].reply_to.as_deref(), Some(question.id.as_str()), "the answer names the question");
    let runs: Vec<_> = eventually(Duration::from_secs(10), "the run's end", || async {
        let runs = agent.state.list_runs(10).await.ok()?;
        runs.iter().all(|run| run.finished_at.is_some()).then_some(runs)
    })
    .await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].status, RunStatus::Completed, "{:#?}", runs[0]);
    assert_eq!(model.request_count(), 4, "three 500s, then the answer");
    assert_eq!(model.mismatches(), Vec::<String>::new());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
}
