//! picogent with models as they are, end to end: the reference board, `picogent run` in process,
//! and a scripted OpenAI-compatible model over loopback that answers the way real models do —
//! in plain text, with reasoning blocks, fenced or cut-off arguments, repeating itself — or that
//! fails the way real servers do. Every check reads the board as a person would.

#[path = "support/agent.rs"]
mod agent_support;

use std::time::Duration;

use agent_support::*;
use picogent::offline_model::script::Script;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::state::RunStatus;
use picogent::tracker::model::*;
use serde_json::{Value, json};

async fn scripted(turns: Value) -> OfflineModelHandle {
    let script = Script::from_json(&json!({ "turns": turns }).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

fn mine(messages: &[MessageOut]) -> Vec<&MessageOut> {
    messages.iter().filter(|m| m.author_slug == "picogent").collect()
}

/// The arguments of every tool call in every request the model received: what went back into
/// the conversation.
fn arguments_sent_back(model: &OfflineModelHandle) -> Vec<String> {
    model
        .requests()
        .iter()
        .flat_map(|request| request["messages"].as_array().cloned().unwrap_or_default())
        .flat_map(|message| message["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|call| call["function"]["arguments"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_text_chat_answer_appears_once_in_the_thread_without_its_reasoning() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"tools_include": ["reply_message"]},
         "reply": {"content": "<think>the user wants a count; I will not use a tool</think>There are 3 open tasks."}}
    ]))
    .await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let question = say(&alice, &chat_id(&alice).await, "@picogent how many tasks are open?").await;
    let session = format!("thread:{}", question.id);
    eventually(Duration::from_secs(20), "the run to end", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.status != RunStatus::Running)
    })
    .await;
    wait_idle(&agent).await;
    let thread = thread(&alice, &question.id).await;
    let replies = mine(&thread);
    assert_eq!(replies.len(), 1, "{thread:#?}");
    assert!(replies[0].content.starts_with("There are 3 open tasks."), "{}", replies[0].content);
    assert!(replies[0].content.contains("1 turn · 0 tool calls"), "the spend line: {}", replies[0].content);
    assert!(!replies[0].content.contains("think") && !replies[0].content.contains("I will not use"));
    // The reasoning is not fed back as the assistant's text either.
    let stored = agent.state.load_session(&session).await.unwrap().unwrap();
    assert!(!stored.messages.to_string().contains("the user wants a count"));
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_text_task_answer_is_posted_once_as_the_summary_comment() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = scripted(json!([
        {"expect": {"tools_include": ["add_step"]}, "reply": {"content": "Summary: the guide is written and checked."}}
    ]))
    .await;
    let extra = json!({"llm": {"price": {"input_per_million": 2.0, "output_per_million": 8.0}}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Write the guide", "- write\n- check").await;
    let session = format!("task:{}", task.id);
    let run = eventually(Duration::from_secs(20), "the run to end", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.status != RunStatus::Running)
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let posted = comments(&alice, &task.id).await;
    let summary = mine(&posted);
    assert_eq!(summary.len(), 1, "{posted:#?}");
    assert!(summary[0].content.starts_with("Summary: the guide is written and checked."));
    assert!(summary[0].content.contains("1 turn · 0 tool calls ·") && summary[0].content.contains("cost "));
    // A reconciliation finds the task again: nothing is posted twice.
    let caught_up = picogent::transport::LinkStatus::CaughtUp { last_seq: 0 };
    agent.inputs.send(picogent::transport::StreamItem::Status(caught_up).into()).await.unwrap();
    eventually(Duration::from_secs(10), "reconciled", || async { agent.status.caught_up().then_some(()) }).await;
    wait_idle(&agent).await;
    assert_eq!(mine(&comments(&alice, &task.id).await).len(), 1);
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_arguments_are_repaired_and_a_cut_off_call_never_runs_nor_poisons_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let task = alice
        .create_task(&CreateTask { project_slug: "team".into(), title: "Plan".into(), ..CreateTask::default() }, None)
        .await
        .unwrap();
    let model = scripted(json!([
        {"reply": {"tool_calls": [{"name": "get_task", "raw_arguments": format!("```json\n{{\"task_id\": \"{}\"}}\n```", task.key)}]}},
        {"expect": {"last_tool_result_is_error": false, "last_tool_result_contains": "Plan"},
         "reply": {"finish_reason": "length", "tool_calls": [
             {"name": "reply_message", "raw_arguments": "{\"parent_id\": \"x\", \"content\": \"Here is the pl"}]}},
        {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "cut off by the output limit"},
         "reply": {"content": "The plan is in the task."}},
        {"expect": {"messages_contain": "and the next step?"}, "reply": {"content": "Next: write it down."}}
    ]))
    .await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let question = say(&alice, &chat_id(&alice).await, &format!("@picogent what is the plan for {}?", task.key)).await;
    eventually(Duration::from_secs(20), "the answer", || async {
        (mine(&thread(&alice, &question.id).await).len() == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    // The next mention in the same thread gets a normal run: the history holds valid JSON.
    alice
        .reply_message(
            &question.id,
            &ReplyMessage { content: "@picogent and the next step?".into(), mentions: None },
            None,
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the second answer", || async {
        (mine(&thread(&alice, &question.id).await).len() == 2).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let replies: Vec<String> = mine(&thread(&alice, &question.id).await).iter().map(|m| m.content.clone()).collect();
    assert!(replies[0].starts_with("The plan is in the task.") && replies[1].starts_with("Next: write it down."));
    for arguments in arguments_sent_back(&model) {
        assert!(serde_json::from_str::<Value>(&arguments).is_ok_and(|v| v.is_object()), "{arguments}");
    }
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    // The run record keeps what the model wrote.
    let run = agent.state.list_runs(10).await.unwrap().into_iter().last().unwrap();
    let record = run.record.unwrap().to_string();
    assert!(record.contains("Here is the pl") && record.contains("```json"), "{record}");
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_repeats_itself_is_told_so_instead_of_running_the_call_again() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let alice = client(&board, "tok-alice");
    let task = alice
        .create_task(&CreateTask { project_slug: "team".into(), title: "Loop".into(), ..CreateTask::default() }, None)
        .await
        .unwrap();
    let call = json!({"tool_calls": [{"name": "list_steps", "arguments": {"task_id": task.key}}]});
    let model = scripted(json!([
        {"reply": call}, {"reply": call}, {"reply": call},
        {"expect": {"last_tool_result_is_error": false}, "reply": call},
        {"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "same arguments 3 times in a row"},
         "reply": {"content": "No steps yet."}}
    ]))
    .await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let question = say(&alice, &chat_id(&alice).await, &format!("@picogent steps of {}?", task.key)).await;
    eventually(Duration::from_secs(20), "the answer", || async {
        (mine(&thread(&alice, &question.id).await).len() == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert!(model.mismatches().is_empty(), "{:?}", model.mismatches());
    let run = agent.state.list_runs(10).await.unwrap().remove(0);
    let counts = &run.record.unwrap()["record"]["tool_calls_by_name"]["list_steps"];
    assert_eq!((counts["ok"].as_u64(), counts["refused"].as_u64()), (Some(3), Some(1)), "{counts}");
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_month_long_thread_is_still_answered_within_the_context_window() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = picogent::offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let context_tokens = 4_096;
    let extra = json!({"llm": {"context_tokens": context_tokens}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let question = say(&alice, &chat_id(&alice).await, "@picogent daily check-in, please").await;
    eventually(Duration::from_secs(20), "the first answer", || async {
        (mine(&thread(&alice, &question.id).await).len() == 1).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    // A month of daily check-ins in the stored session: far past the window.
    let session = format!("thread:{}", question.id);
    let mut history = agent.state.load_session(&session).await.unwrap().unwrap().messages.as_array().unwrap().clone();
    for day in 0..30 {
        history.push(json!({"role": "user", "content": format!("@alice wrote: day {day} check-in")}));
        history.push(json!({"role": "assistant", "tool_calls": [{"id": format!("c{day}"), "name": "list_tasks", "arguments": "{}"}]}));
        history.push(json!({"role": "tool", "tool_call_id": format!("c{day}"), "name": "list_tasks", "content": "TE-1 [todo] a task with a long description ".repeat(60), "is_error": false}));
        history.push(json!({"role": "assistant", "content": format!("Day {day}: nothing new.")}));
    }
    agent.state.save_session(&session, &Value::Array(history)).await.unwrap();
    let earlier = model.requests().len();

    alice
        .reply_message(&question.id, &ReplyMessage { content: "@picogent and today?".into(), mentions: None }, None)
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the answer on day 31", || async {
        (mine(&thread(&alice, &question.id).await).len() == 2).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let runs = runs_for(&agent, &session).await;
    assert!(runs.iter().all(|run| run.status == RunStatus::Completed), "{runs:#?}");
    let trims = &runs[0].record.as_ref().unwrap()["record"]["context_trims"];
    assert!(trims.as_array().is_some_and(|t| !t.is_empty()), "the session was shortened: {trims}");
    for request in &model.requests()[earlier..] {
        let tokens = picogent::llm::count_text_tokens(&request["messages"].to_string());
        assert!(tokens < context_tokens, "a request of {tokens} tokens, over the window of {context_tokens}");
    }
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_model_failure_leaves_a_notice_naming_the_cause_and_the_fix() {
    // (the server's answer, words the notice must have)
    let cases = [
        (json!({"status": 401, "message": "Incorrect API key provided"}), vec!["API key", "llm.api_key_env"]),
        (json!({"status": 404, "message": "The model `gpt-9` does not exist"}), vec!["does not know", "llm.model"]),
        (
            json!({"status": 400, "message": "Unsupported parameter: 'temperature' is not supported with this model."}),
            vec!["`temperature`", "llm.temperature"],
        ),
        (json!({"status": 400, "message": "this model does not support tools"}), vec!["tool calls", "tool calling"]),
        (json!({"status": 400, "code": "context_length_exceeded"}), vec!["context window", "llm.context_tokens"]),
    ];
    for (fault, words) in cases {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = scripted(json!([{"fault": fault}])).await;
        let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
        let notice = notice_for_a_mention(&agent, &board).await;
        for word in &words {
            assert!(notice.contains(word), "{fault}: {notice}");
        }
        assert!(!notice.contains("may be down"), "{fault}: {notice}");
        assert_eq!(model.request_count(), 1, "{fault}: a 4xx is not retried");
        agent.shutdown().await.unwrap();
        board.shutdown().await.unwrap();
    }
    // Nothing listens at the configured endpoint.
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = agent_config(dir.path(), &board.url(), &format!("http://{closed}/v1"), "picogent", json!({}));
    let agent = start_agent(config).await;
    let notice = notice_for_a_mention(&agent, &board).await;
    assert!(notice.contains("cannot be reached") && notice.contains("llm.base_url"), "{notice}");
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

/// Mentions the agent and returns the one notice it leaves in the thread.
async fn notice_for_a_mention(agent: &picogent::runtime::AgentHandle, board: &picogent::board::BoardHandle) -> String {
    wait_ready(agent).await;
    let alice = client(board, "tok-alice");
    let question = say(&alice, &chat_id(&alice).await, "@picogent what is open?").await;
    let notice = eventually(Duration::from_secs(20), "the notice", || async {
        mine(&thread(&alice, &question.id).await).first().map(|m| m.content.clone())
    })
    .await;
    wait_idle(agent).await;
    assert_eq!(mine(&thread(&alice, &question.id).await).len(), 1, "one notice");
    notice
}

/// `picogent check` against a scripted model: its report line about the tool-call probe.
async fn check_line(model: &OfflineModelHandle, extra: Value) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
    let config_path = dir.path().join("agent.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
            .args(["check", "--config"])
            .arg(&config_path)
            .env("TEAMBOARD_TOKEN", "tok-picogent")
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    board.shutdown().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let line = stdout.lines().find(|l| l.contains("model tool call")).unwrap_or_else(|| panic!("{stdout}"));
    (output.status.success(), line.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_asks_the_model_whether_it_calls_tools_and_which_parameters_it_refuses() {
    let calls = json!({"tool_calls": [{"name": "report_status", "arguments": {"status": "ready"}}]});
    let model = scripted(json!([{"expect": {"tools_include": ["report_status"]}, "reply": calls}])).await;
    let (ok, line) = check_line(&model, json!({})).await;
    assert!(ok && line.starts_with("ok") && line.contains("called the offered tool"), "{line}");

    let model = scripted(json!([{"reply": {"content": "I am ready."}}])).await;
    let (ok, line) = check_line(&model, json!({})).await;
    assert!(!ok && line.starts_with("FAIL") && line.contains("answered in text"), "{line}");

    let refusal =
        json!({"status": 400, "message": "Unsupported parameter: 'temperature' is not supported with this model."});
    let model = scripted(json!([{"fault": refusal}, {"reply": calls}])).await;
    let (ok, line) = check_line(&model, json!({"llm": {"temperature": 0.2}})).await;
    assert!(!ok && line.contains("refused `temperature`") && line.contains("called the offered tool"), "{line}");
    assert_eq!(model.request_count(), 2, "asked again without it");
}
