//! Coding tasks, end to end over loopback: the reference board, the offline planner (a
//! rule-based stand-in for a model), a local bare git repository as the remote, and a coding
//! agent in the task's workspace — the stand-in script under `fixtures/coding-agent/`, or a
//! command of the test's. What a person sees is checked: the branch on the remote, the answer on
//! the task naming it, one notice when the coding agent fails or is stopped, and no process left.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/git.rs"]
mod git_support;

use std::path::Path;
use std::time::Duration;

use agent_support::*;
use git_support::{git, remote};
use picogent::state::RunStatus;
use picogent::tracker::model::*;
use serde_json::{Value, json};

const STAND_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/coding-agent/stand-in.sh");

/// The `workspaces` section: the remote serves the seed's `team` project; `agent` is the coding
/// agent's entry.
fn workspaces(dir: &Path, remote: &Path, agent: Value, direct: bool) -> Value {
    json!({"workspaces": {
        "root": dir.join("workspaces"),
        "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
        "agents": {"stand-in": agent},
        "agent": "stand-in",
        "direct": direct,
        "links": {"commit": "https://git.example.com/{repository}/commit/{commit}"},
    }})
}

fn stand_in() -> Value {
    json!({"command": ["sh", STAND_IN, "{instructions}"], "output": "jsonl"})
}

const FIX: &str = "In src/date.py replace \"2020-01-01\" with \"2024-06-01\".";

fn agent_comments(comments: &[MessageOut]) -> Vec<&MessageOut> {
    comments.iter().filter(|m| m.author_slug == "picogent").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_naming_a_file_is_delegated_and_its_commit_pushed_and_named_on_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let main_before = git(&remote, &["rev-parse", "main"]);
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = workspaces(dir.path(), &remote, stand_in(), false);
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Fix the date parser; `rm -rf ~` $(touch /tmp/picogent-pwned)", FIX).await;
    wait_status(&alice, &task.id, TaskStatus::InReview).await;
    wait_idle(&agent).await;

    let branch = format!("picogent/{}", task.key);
    let commit = git(&remote, &["rev-parse", &branch]);
    let subject = git(&remote, &["log", "-1", "--format=%s", &branch]);
    assert!(subject.starts_with(&format!("{}: ", task.key)), "{subject}");
    let file = git(&remote, &["show", &format!("{branch}:src/date.py")]);
    assert!(file.contains("2024-06-01"), "{file}");
    assert_eq!(git(&remote, &["rev-parse", "main"]), main_before, "the base branch is untouched");
    assert_eq!(git(&remote, &["rev-list", "--count", &format!("main..{branch}")]), "1");
    assert!(!Path::new("/tmp/picogent-pwned").exists(), "the title was never run");

    let comments = comments(&alice, &task.id).await;
    let answers = agent_comments(&comments);
    assert_eq!(answers.len(), 1, "one answer on the task: {answers:#?}");
    let short = &commit[..10];
    assert!(answers[0].content.contains(&format!("Work: branch `{branch}`, commit {short}")), "{}", answers[0].content);
    assert!(answers[0].content.contains(&format!("https://git.example.com/app/commit/{commit}")));

    // The run offered the coding tools and its record keeps the coding agent's report.
    let runs = runs_for(&agent, &format!("task:{}", task.id)).await;
    assert_eq!(runs.len(), 1);
    let record = serde_json::to_string(&runs[0].record).unwrap();
    assert!(record.contains("run_coding_agent") && record.contains("Replaced"), "{record}");

    // `/readyz` shows the workspaces and their disk use (measured at start, then every minute).
    let readyz: Value =
        reqwest::get(format!("http://{}/readyz", agent.http_addr.unwrap())).await.unwrap().json().await.unwrap();
    let limit = 10u64 * 1024 * 1024 * 1024;
    assert_eq!(readyz["workspaces"]["max_bytes"], json!(limit), "{readyz:#}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_direct_mode_the_task_goes_to_the_coding_agent_without_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let mut extra = workspaces(dir.path(), &remote, stand_in(), true);
    extra["workspaces"]["retention_ms"] = json!(0);
    extra["workspaces"]["hooks"] = json!({"before_run": "echo preparing $PICOGENT_TASK_KEY on $PICOGENT_BRANCH"});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra.clone())).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Fix the date parser", FIX).await;
    let answer = eventually(Duration::from_secs(30), "the coding agent's answer", || async {
        let comments = comments(&alice, &task.id).await;
        comments.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    wait_idle(&agent).await;
    assert!(answer.content.starts_with("The coding agent stand-in finished: Replaced"), "{}", answer.content);
    let branch = format!("picogent/{}", task.key);
    assert!(answer.content.contains(&format!("Work: branch `{branch}`")), "{}", answer.content);
    assert!(git(&remote, &["show", &format!("{branch}:src/date.py")]).contains("2024-06-01"));
    assert_eq!(model.request_count(), 0, "direct mode asks no model");
    assert_eq!(agent_comments(&comments(&alice, &task.id).await).len(), 1);
    let runs = runs_for(&agent, &format!("task:{}", task.id)).await;
    assert_eq!(runs[0].status, RunStatus::Completed);
    // The hook's output is in the run's record.
    let record = runs[0].record.clone().unwrap();
    let hook = &record["coding"]["hooks"][0];
    assert_eq!(hook["point"], "before_run", "{record:#}");
    assert!(hook["output"].as_str().unwrap().contains(&format!("preparing {} on {branch}", task.key)), "{record:#}");

    // Over MCP: the coding agent's output as plain text, and the result with the branch and commit.
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let url = format!("http://{}/mcp", agent.http_addr.unwrap());
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(MCP_TOKEN),
    );
    let mcp = ().serve(transport).await.unwrap();
    let read = |uri: String| {
        let mcp = &mcp;
        async move { resource_text(mcp.peer(), &uri).await }
    };
    let logs = read(format!("run://{}/logs", runs[0].id)).await;
    assert!(logs.contains(r#""type":"result""#) && logs.contains("Replaced"), "{logs}");
    let result: Value = serde_json::from_str(&read(format!("run://{}/result", runs[0].id)).await).unwrap();
    assert_eq!(result["work"]["branch"], json!(branch), "{result:#}");
    let commit = git(&remote, &["rev-parse", &branch]);
    assert_eq!(result["work"]["commit"], json!(commit), "{result:#}");
    assert_eq!(result["work"]["diff"]["files"], json!(["src/date.py"]), "{result:#}");
    mcp.cancel().await.unwrap();
    agent.shutdown().await.unwrap();

    // Done, and past `retention_ms` (0 here): the next start removes its workspace; the branch stays.
    let workspace = dir.path().join(format!("workspaces/app/{}", task.key));
    assert!(workspace.join(".git").exists());
    let done = UpdateTask { status: Some(TaskStatus::Done), ..UpdateTask::default() };
    alice.update_task(&task.id, &done).await.unwrap();
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    eventually(Duration::from_secs(30), "the done task's workspace removed", || async {
        (!workspace.exists()).then_some(())
    })
    .await;
    assert_eq!(git(&remote, &["rev-parse", &branch]), commit, "the pushed branch stays");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// An MCP client of the agent's `/mcp`.
async fn mcp_client(agent: &picogent::runtime::AgentHandle) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let url = format!("http://{}/mcp", agent.http_addr.unwrap());
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(MCP_TOKEN),
    );
    ().serve(transport).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_run_over_mcp_names_the_coding_agent_and_the_branch() {
    use rmcp::model::CallToolRequestParams;
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let main_before = git(&remote, &["rev-parse", "main"]);
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let mut extra = workspaces(dir.path(), &remote, stand_in(), true);
    extra["workspaces"]["agents"]["careful"] = stand_in();
    extra["mcp"] = json!({"allow_unassigned_runs": true});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let create = CreateTask {
        project_slug: "team".into(),
        title: "Fix the date parser".into(),
        description: Some(FIX.into()),
        ..CreateTask::default()
    };
    let task = alice.create_task(&create, None).await.unwrap();
    let mcp = mcp_client(&agent).await;
    let call = |args: Value| {
        let mcp = &mcp;
        async move {
            let params = CallToolRequestParams::new("start_run").with_arguments(args.as_object().unwrap().clone());
            mcp.call_tool(params).await.unwrap()
        }
    };
    let text = |result: &rmcp::model::CallToolResult| format!("{:?}", result.content);

    // Refused, each with what is wrong: an agent not configured, a branch git would misread, a
    // choice on a prompt run. Nothing starts.
    let refused = call(json!({"task_key": task.key, "coding_agent": "sloppy"})).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(text(&refused).contains("sloppy"), "{}", text(&refused));
    for branch in ["../main", "-f", "a..b"] {
        let refused = call(json!({"task_key": task.key, "branch": branch})).await;
        assert_eq!(refused.is_error, Some(true), "{branch}: {}", text(&refused));
    }
    let refused = call(json!({"prompt": "hello", "branch": "x"})).await;
    assert!(text(&refused).contains("go with a task"), "{}", text(&refused));
    assert!(runs_for(&agent, &format!("task:{}", task.id)).await.is_empty());

    let started = call(json!({"task_key": task.key, "coding_agent": "careful", "branch": "fix-dates"})).await;
    assert_ne!(started.is_error, Some(true), "{}", text(&started));
    let answer = eventually(Duration::from_secs(30), "the coding agent's answer", || async {
        comments(&alice, &task.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    wait_idle(&agent).await;
    assert!(answer.content.starts_with("The coding agent careful finished"), "{}", answer.content);
    assert!(answer.content.contains("Work: branch `picogent/fix-dates`"), "{}", answer.content);
    assert!(git(&remote, &["show", "picogent/fix-dates:src/date.py"]).contains("2024-06-01"));
    let branches = git(&remote, &["branch", "--format=%(refname:short)"]);
    assert_eq!(branches.lines().collect::<Vec<_>>(), ["main", "picogent/fix-dates"], "no picogent/{} made", task.key);
    assert_eq!(git(&remote, &["rev-parse", "main"]), main_before);
    mcp.cancel().await.unwrap();
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A 2026-07-28 client of the agent's `/mcp` that declares the tasks extension (rmcp's).
async fn tasks_client(
    agent: &picogent::runtime::AgentHandle,
) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
    use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::{ClientLifecycleMode, ClientServiceExt};
    let url = format!("http://{}/mcp", agent.http_addr.unwrap());
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(MCP_TOKEN),
    );
    let info = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("tasks-client", "1.0.0"),
    );
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    info.serve_with_lifecycle(transport, lifecycle).await.unwrap()
}

/// A model that answers a task in plain text and calls no tool (as small models do): the run
/// did nothing, the task gets one notice saying so, and the MCP client that started it sees the
/// task `completed` with `isError`, never `working` for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_run_that_did_nothing_is_an_error_result_of_its_mcp_task_and_one_notice() {
    use picogent::offline_model::OfflineModelOptions;
    use picogent::offline_model::script::Script;
    use rmcp::model::{CallToolRequestParams, CallToolResponse, GetTaskParams, TaskPayload};
    let dir = tempfile::tempdir().unwrap();
    let script: Script = serde_json::from_value(json!({
        "description": "the model writes about the task and calls no tool",
        "turns": [{"reply": {"content": "I would fix the parser by changing the default date."}}]
    }))
    .unwrap();
    let model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let board = start_board(dir.path()).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let mcp = tasks_client(&agent).await;
    let args = json!({"project": "team", "title": "Fix the date parser", "description": FIX});
    let params = CallToolRequestParams::new("start_run").with_arguments(args.as_object().unwrap().clone());
    let CallToolResponse::Task(created) = mcp.call_tool_once(params).await.unwrap() else {
        panic!("start_run answered without a task")
    };
    let done = eventually(Duration::from_secs(30), "the task at its end", || async {
        let task = mcp.get_task(GetTaskParams::new(created.task.task_id.clone())).await.unwrap().task;
        task.status().is_terminal().then_some(task)
    })
    .await;
    let TaskPayload::Completed { result } = &done.payload else { panic!("{done:?}") };
    assert_eq!(result.get("isError"), Some(&json!(true)), "{result:?}");
    assert_eq!(result["structuredContent"]["run"]["status"], json!("did_nothing"), "{result:?}");
    let session = result["structuredContent"]["run"]["session"].as_str().unwrap().to_string();
    let task_id = session.strip_prefix("task:").unwrap().to_string();
    eventually(Duration::from_secs(15), "the notice", || async {
        (!agent_comments(&comments(&alice, &task_id).await).is_empty()).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let notices = comments(&alice, &task_id).await;
    assert_eq!(agent_comments(&notices).len(), 1, "{notices:#?}");
    mcp.cancel().await.unwrap();
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// An MCP client of the tasks extension (rmcp's, on 2026-07-28), as seed 000's `create_task` was
/// used: `start_run` creates a task with a coding agent and a branch and is answered at once with
/// a task; the client follows it with `tasks/get` to its end and reads `run://{id}/logs` and
/// `run://{id}/result`; a second, hanging run is cancelled midway with `tasks/cancel`, and a
/// third is stopped from the board. The board shows the same runs: one each (the created task's
/// own assignment starts none), its answer naming the branch, and one notice for the stop. A
/// 2025-11-25 client gets the run id as before, though it declares the extension.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_follows_a_coding_run_as_a_task_and_cancels_another() {
    use rmcp::ServiceExt;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams,
        Implementation, ProtocolVersion, TaskPayload, TaskStatus as McpTaskStatus,
    };
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let main_before = git(&remote, &["rev-parse", "main"]);
    let pidfile = dir.path().join("hanging.pid");
    let hang = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let mut extra = workspaces(dir.path(), &remote, stand_in(), true);
    // Without the sandbox on purpose: the test follows the process by its host pid.
    extra["workspaces"]["agents"]["hanging"] =
        json!({"command": ["sh", "-c", hang, "coding-agent", "{instructions}"], "sandbox": false});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let mcp = tasks_client(&agent).await;
    let start = |args: Value| {
        let mcp = &mcp;
        async move {
            let params = CallToolRequestParams::new("start_run").with_arguments(args.as_object().unwrap().clone());
            match mcp.call_tool_once(params).await.unwrap() {
                CallToolResponse::Task(created) => created.task,
                other => panic!("start_run answered without a task: {other:?}"),
            }
        }
    };
    let state = |id: String| {
        let mcp = &mcp;
        async move { mcp.get_task(GetTaskParams::new(id)).await.unwrap().task }
    };
    let read = |uri: String| {
        let mcp = &mcp;
        async move { resource_text(mcp.peer(), &uri).await }
    };

    // A refusal is a tool result, not a task, and makes no task on the board.
    let refused = mcp
        .call_tool_once(CallToolRequestParams::new("start_run").with_arguments(
            json!({"project": "team", "title": "x", "coding_agent": "sloppy"}).as_object().unwrap().clone(),
        ))
        .await
        .unwrap();
    assert!(matches!(&refused, CallToolResponse::Complete(r) if r.is_error == Some(true)), "{refused:?}");

    let created = start(json!({"project": "team", "title": "Fix the date parser", "description": FIX,
                               "coding_agent": "stand-in", "branch": "fix-dates"}))
    .await;
    assert_eq!(created.status, McpTaskStatus::Working);
    let run_id = created.task_id.clone();
    let done = eventually(Duration::from_secs(60), "the task at its end", || async {
        let task = state(run_id.clone()).await;
        task.status().is_terminal().then_some(task)
    })
    .await;
    let TaskPayload::Completed { result } = &done.payload else { panic!("{done:?}") };
    assert_ne!(result.get("isError"), Some(&json!(true)), "{result:?}");
    let work = &result["structuredContent"]["result"]["work"];
    let commit = git(&remote, &["rev-parse", "picogent/fix-dates"]);
    assert_eq!(work["branch"], json!("picogent/fix-dates"), "{result:?}");
    assert_eq!(work["commit"], json!(commit), "{result:?}");
    assert_eq!(git(&remote, &["rev-parse", "main"]), main_before, "the base untouched");
    let logs = read(format!("run://{run_id}/logs")).await;
    assert!(logs.contains("Replaced"), "{logs}");
    let stored: Value = serde_json::from_str(&read(format!("run://{run_id}/result")).await).unwrap();
    assert_eq!(stored["work"]["commit"], json!(commit), "{stored:#}");

    // The board: the task made, assigned to the agent, worked by this run only, answered once.
    let session = result["structuredContent"]["run"]["session"].as_str().unwrap().to_string();
    let task = alice.get_task(session.strip_prefix("task:").unwrap()).await.unwrap();
    assert_eq!((task.title.as_str(), task.assignee_slug.as_deref()), ("Fix the date parser", Some("picogent")));
    wait_idle(&agent).await;
    let runs = runs_for(&agent, &session).await;
    assert_eq!(runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [run_id.as_str()], "one run");
    let answers = comments(&alice, &task.id).await;
    let answers = agent_comments(&answers);
    assert_eq!(answers.len(), 1, "{answers:#?}");
    assert!(answers[0].content.contains("Work: branch `picogent/fix-dates`"), "{}", answers[0].content);

    // A second run that hangs, cancelled midway: its process group killed, one notice, cancelled.
    let hanging = start(json!({"project": "team", "title": "Rework src/date.py",
                               "description": "Make src/date.py faster.", "coding_agent": "hanging"}))
    .await;
    let session = agent.state.get_run(&hanging.task_id).await.unwrap().unwrap().session_key.to_string();
    let other = alice.get_task(session.strip_prefix("task:").unwrap()).await.unwrap();
    let sleeper: i32 = eventually(Duration::from_secs(30), "the coding agent started", || async {
        std::fs::read_to_string(&pidfile).ok().and_then(|text| text.trim().parse().ok())
    })
    .await;
    assert_eq!(state(hanging.task_id.clone()).await.status(), McpTaskStatus::Working);
    mcp.cancel_task(CancelTaskParams::new(hanging.task_id.clone())).await.unwrap();
    let cancelled = eventually(Duration::from_secs(30), "the task cancelled", || async {
        let task = state(hanging.task_id.clone()).await;
        task.status().is_terminal().then_some(task)
    })
    .await;
    assert_eq!(cancelled.status(), McpTaskStatus::Cancelled, "{cancelled:?}");
    eventually(Duration::from_secs(15), "the coding agent's process group killed", || async {
        (!alive(sleeper)).then_some(())
    })
    .await;
    // The stop's notice is posted as the run ends; waited for, then counted once all is idle.
    eventually(Duration::from_secs(15), "the stop notice", || async {
        (!agent_comments(&comments(&alice, &other.id).await).is_empty()).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let notices = comments(&alice, &other.id).await;
    let notices = agent_comments(&notices);
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert!(notices[0].content.starts_with("Stopped"), "{}", notices[0].content);

    // A third, stopped from the board by a person: the client sees it cancelled too.
    std::fs::remove_file(&pidfile).unwrap();
    let third = start(json!({"project": "team", "title": "Profile src/date.py", "coding_agent": "hanging"})).await;
    let session = agent.state.get_run(&third.task_id).await.unwrap().unwrap().session_key.to_string();
    let profiled = session.strip_prefix("task:").unwrap().to_string();
    let sleeper: i32 = eventually(Duration::from_secs(30), "the third coding agent started", || async {
        std::fs::read_to_string(&pidfile).ok().and_then(|text| text.trim().parse().ok())
    })
    .await;
    comment(&alice, &profiled, "@picogent stop").await;
    let stopped = eventually(Duration::from_secs(30), "the task cancelled from the board", || async {
        let task = state(third.task_id.clone()).await;
        task.status().is_terminal().then_some(task)
    })
    .await;
    assert_eq!(stopped.status(), McpTaskStatus::Cancelled, "{stopped:?}");
    eventually(Duration::from_secs(15), "its process group killed", || async { (!alive(sleeper)).then_some(()) }).await;
    let unknown = mcp.get_task(GetTaskParams::new("run-nope")).await;
    assert!(unknown.is_err(), "an unknown task is an error: {unknown:?}");
    mcp.cancel().await.unwrap();

    // A 2025-11-25 client that declares the extension all the same gets the run id, as before.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", agent.http_addr.unwrap()))
            .auth_header(MCP_TOKEN),
    );
    let legacy = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("tasks-client", "1.0.0"),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25)
    .serve(transport)
    .await
    .unwrap();
    assert_eq!(legacy.peer_info().unwrap().protocol_version, ProtocolVersion::V_2025_11_25);
    let args = json!({"project": "team", "title": "Tidy src/date.py", "description": FIX});
    let params = CallToolRequestParams::new("start_run").with_arguments(args.as_object().unwrap().clone());
    let started = legacy.call_tool(params).await.unwrap();
    assert_ne!(started.is_error, Some(true), "{started:?}");
    assert!(started.structured_content.as_ref().is_some_and(|s| s["run_id"].is_string()), "{started:?}");
    wait_idle(&agent).await;
    legacy.cancel().await.unwrap();
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_steps_the_coding_agent_reports_done_are_ticked_on_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = workspaces(dir.path(), &remote, stand_in(), true);
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let create = CreateTask {
        project_slug: "team".into(),
        title: "Fix the date parser".into(),
        description: Some(FIX.into()),
        ..CreateTask::default()
    };
    let task = alice.create_task(&create, None).await.unwrap();
    alice.add_step(&task.id, "Change the default date", None).await.unwrap();
    alice.add_step(&task.id, "Say what changed", None).await.unwrap();
    let done = alice.add_step(&task.id, "Read the report", None).await.unwrap();
    alice.complete_step(&task.id, &done.id, None).await.unwrap();
    alice.assign_task(&task.id, "picogent", None).await.unwrap();

    eventually(Duration::from_secs(30), "the coding agent's answer", || async {
        comments(&alice, &task.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    wait_idle(&agent).await;
    // The stand-in was given the open steps and reported them done in its to-do list; each is
    // ticked once, and the step done before stays as it was.
    let steps = alice.list_steps(&task.id).await.unwrap();
    assert!(steps.iter().all(|step| step.done), "{steps:#?}");
    let answers = agent_comments(&comments(&alice, &task.id).await).into_iter().cloned().collect::<Vec<_>>();
    assert_eq!(answers.len(), 1, "{answers:#?}");
    assert!(
        answers[0].content.ends_with("Steps done: Change the default date; Say what changed."),
        "{}",
        answers[0].content
    );
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_kills_the_coding_agent_and_a_crash_is_one_notice_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let pidfile = dir.path().join("coding-agent.pid");
    // Hangs, with a child of its own, until it is killed; a second task's run crashes it.
    let script = format!(
        "case \"$1\" in *crash*) echo 'panic: index out of range in parser' >&2; exit 3;; esac; \
         sleep 300 & echo $! > {}; wait",
        pidfile.display()
    );
    // Without the sandbox on purpose: the test follows the agent's processes by their host pids.
    let agent_entry = json!({"command": ["sh", "-c", script, "coding-agent", "{instructions}"], "sandbox": false});
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = workspaces(dir.path(), &remote, agent_entry, true);
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let hanging = create_assigned(&alice, "Rework src/date.py", "Make src/date.py faster.").await;
    eventually(Duration::from_secs(30), "the coding agent started", || async {
        std::fs::read_to_string(&pidfile).ok().filter(|text| !text.trim().is_empty())
    })
    .await;
    let sleeper: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    comment(&alice, &hanging.id, "@picogent stop").await;
    eventually(Duration::from_secs(15), "the coding agent's process group killed", || async {
        (!alive(sleeper)).then_some(())
    })
    .await;
    let stopped = eventually(Duration::from_secs(15), "the stop notice", || async {
        let notices: Vec<_> =
            comments(&alice, &hanging.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
        (!notices.is_empty()).then_some(notices)
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(stopped.len(), 1, "{stopped:#?}");
    assert!(stopped[0].content.starts_with("Stopped"), "{}", stopped[0].content);
    assert_eq!(runs_for(&agent, &format!("task:{}", hanging.id)).await[0].status, RunStatus::Stopped);

    let crashing = create_assigned(&alice, "crash src/date.py", "Please crash.").await;
    let notice = eventually(Duration::from_secs(30), "the failure notice", || async {
        comments(&alice, &crashing.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    wait_idle(&agent).await;
    assert!(
        notice.content.contains("the coding agent stand-in failed: exit 3: panic: index out of range"),
        "{}",
        notice.content
    );
    assert_eq!(agent_comments(&comments(&alice, &crashing.id).await).len(), 1, "one notice");
    let branch = format!("refs/heads/picogent/{}", crashing.key);
    assert_eq!(git(&remote, &["for-each-ref", &branch]), "", "nothing pushed for a crashed run");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coding_agent_sees_no_token_of_picogents() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    // Written into its home (writable inside the sandbox too), read from outside.
    let probe = json!({
        "command": ["sh", "-c", "env > \"$HOME/env.txt\"; echo probed"],
        "env": {"GIVEN": "only-this"},
    });
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = workspaces(dir.path(), &remote, probe, true);
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Probe", "Look at README.md").await;
    eventually(Duration::from_secs(30), "the probe's answer", || async {
        comments(&alice, &task.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    wait_idle(&agent).await;
    let dump = dir.path().join("workspaces/.homes/app").join(&task.key).join("env.txt");
    let env = std::fs::read_to_string(&dump).unwrap();
    assert!(env.contains("GIVEN=only-this"), "{env}");
    for secret in ["tok-picogent", MCP_TOKEN, "tok-alice"] {
        assert!(!env.contains(secret), "{secret} reached the coding agent: {env}");
    }
    let names: Vec<&str> = env.lines().filter_map(|line| line.split('=').next()).collect();
    for name in &names {
        assert!(
            ["PATH", "HOME", "LANG", "TZ", "GIVEN", "PWD", "SHLVL", "_", "OLDPWD"].contains(name),
            "{name} leaked: {env}"
        );
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
}

#[test]
fn demo_coding_shows_a_commit_on_the_tasks_branch_offline() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["demo", "--coding"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "demo --coding failed: {stdout}\n{stderr}");
    assert!(stdout.contains("is in review"), "{stdout}");
    assert!(stdout.contains("run_coding_agent("), "the planner delegated: {stdout}");
    assert!(stdout.contains("Work: branch `picogent/TE-1`, commit "), "the task names the commit: {stdout}");
    assert!(stdout.contains("TE-1: Replaced \"2020-01-01\" with \"2024-06-01\""), "the commit on the remote: {stdout}");
    assert!(stdout.contains("return text or \"2024-06-01\""), "{stdout}");
    assert!(stdout.contains("stand-in coding agent"), "named as a stand-in: {stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_of_picogent_mid_run_resumes_in_the_same_workspace_with_one_commit_and_one_push() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let pidfile = dir.path().join("left-over.pid");
    // The first time it hangs (leaving a child of its own), as a long coding run would; the next
    // time it does the work.
    let script = format!(
        "if [ ! -f \"$HOME/started-once\" ]; then touch \"$HOME/started-once\"; sleep 300 & echo $! > {}; wait; fi; \
         exec sh {STAND_IN} \"$1\"",
        pidfile.display()
    );
    // Without the sandbox on purpose: the test follows the left-over process by its host pid.
    let entry =
        json!({"command": ["sh", "-c", script, "coding-agent", "{instructions}"], "output": "jsonl", "sandbox": false});
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = workspaces(dir.path(), &remote, entry, true);
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
    let config_path = write_config(dir.path(), &config);
    let alice = client(&board, "tok-alice");
    let mut picogent = spawn_agent_process(&config_path);

    let task = create_assigned(&alice, "Fix the date parser", FIX).await;
    eventually(Duration::from_secs(60), "the coding agent started", || async {
        std::fs::read_to_string(&pidfile).ok().filter(|text| !text.trim().is_empty())
    })
    .await;
    let left_over: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    picogent.kill().unwrap();
    picogent.wait().unwrap();

    let mut picogent = spawn_agent_process(&config_path);
    let answer = eventually(Duration::from_secs(60), "the resumed run's answer", || async {
        comments(&alice, &task.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    assert!(!alive(left_over), "what the killed run's coding agent left running was killed");
    let branch = format!("picogent/{}", task.key);
    assert!(answer.content.contains(&format!("Work: branch `{branch}`")), "{}", answer.content);
    assert_eq!(git(&remote, &["rev-list", "--count", &format!("main..{branch}")]), "1", "one commit");
    assert!(git(&remote, &["show", &format!("{branch}:src/date.py")]).contains("2024-06-01"));
    let worktrees = git(&dir.path().join("workspaces/.mirrors/app.git"), &["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 2, "the mirror and the one workspace: {worktrees}");
    // Past the point where a second answer would come: the agent handled every event the board
    // holds for it (its own answer's among them), and no run is open.
    let state = picogent::state::State::open(&config.state.path).await.unwrap();
    let head = board_head(&dir.path().join("board.db"), "picogent").await;
    eventually(Duration::from_secs(20), "every event handled and every run ended", || async {
        let handled = state.last_seq().await.ok()? >= head;
        let runs = state.list_runs(50).await.ok()?;
        let open = runs.iter().any(|run| run.finished_at.is_none());
        (handled && !open).then_some(())
    })
    .await;
    state.close().await;
    assert_eq!(agent_comments(&comments(&alice, &task.id).await).len(), 1, "one answer");
    picogent.kill().unwrap();
    picogent.wait().unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_ask_mode_the_coding_agent_and_its_push_wait_for_a_yes_in_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let mut extra = workspaces(dir.path(), &remote, stand_in(), false);
    extra["permissions"] = json!({"mode": "ask", "ask_timeout_ms": 30_000});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Fix the date parser", FIX).await;
    let question = eventually(Duration::from_secs(30), "the permission question", || async {
        comments(&alice, &task.id)
            .await
            .into_iter()
            .find(|m| m.author_slug == "picogent" && m.content.starts_with("@alice Permission needed"))
    })
    .await;
    assert!(
        question.content.contains("run the coding agent") && question.content.contains("push"),
        "{}",
        question.content
    );
    let branch = format!("refs/heads/picogent/{}", task.key);
    assert_eq!(git(&remote, &["for-each-ref", &branch]), "", "nothing pushed before the yes");
    assert!(!dir.path().join(format!("workspaces/app/{}", task.key)).exists(), "nothing made before the yes");
    comment(&alice, &task.id, "yes").await;
    wait_status(&alice, &task.id, TaskStatus::InReview).await;
    wait_idle(&agent).await;
    assert_ne!(git(&remote, &["for-each-ref", &branch]), "", "pushed after the yes");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// The inspector's run page shows the coding agent's output while it works, and its live stream
/// carries each new line without a reload; once it ends, the page names the branch, the commit
/// (linked) and the diff. The coding agent is a script that waits on files the test writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_page_shows_the_coding_agents_output_live_and_then_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    // The files it waits on are in its home, which the sandbox shows it (the seeded board's first
    // task is TE-1).
    let home = dir.path().join("workspaces/.homes/app/TE-1");
    let (first, second) = (home.join("go-1"), home.join("go-2"));
    let script = "echo 'reading the date parser'; while [ ! -f \"$HOME/go-1\" ]; do sleep 0.1; done; \
         sed -i 's/2020-01-01/2024-06-01/' src/date.py; echo 'edited the date parser <b>bold</b>'; \
         while [ ! -f \"$HOME/go-2\" ]; do sleep 0.1; done; echo 'all done'";
    let entry = json!({"command": ["sh", "-c", script, "coding-agent", "{instructions}"]});
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = workspaces(dir.path(), &remote, entry, true);
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Fix the date parser", FIX).await;
    let run = eventually(Duration::from_secs(20), "the task's run", || async {
        runs_for(&agent, &format!("task:{}", task.id)).await.into_iter().next()
    })
    .await;
    let page = format!("http://{}/runs/{}", agent.http_addr.unwrap(), run.id);
    let html = eventually(Duration::from_secs(30), "the first line on the running run's page", || async {
        let html = reqwest::get(&page).await.ok()?.text().await.ok()?;
        html.contains("reading the date parser").then_some(html)
    })
    .await;
    assert!(html.contains(r#"id="coding-log""#) && html.contains("output so far"), "{html}");
    assert!(!html.contains("edited the date parser"), "{html}");

    // The live stream, opened now, brings the next line while the coding agent still works.
    let mut live = reqwest::get(format!("{page}/live")).await.unwrap();
    assert_eq!(live.status(), 200);
    std::fs::write(&first, "").unwrap();
    let mut streamed = String::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !streamed.contains("edited the date parser") {
            let chunk = live.chunk().await.unwrap().expect("the live stream ended early");
            streamed.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the new line never came on the live stream: {streamed}"));
    assert!(streamed.contains("&lt;b&gt;bold") && !streamed.contains("<b>bold"), "escaped: {streamed}");
    assert_eq!(agent.state.get_run(&run.id).await.unwrap().unwrap().status, RunStatus::Running);
    drop(live);

    std::fs::write(&second, "").unwrap();
    wait_idle(&agent).await;
    let branch = format!("picogent/{}", task.key);
    let commit = git(&remote, &["rev-parse", &branch]);
    // The page escapes `/` (`&#x2f;`) with the rest.
    let html = reqwest::get(&page).await.unwrap().text().await.unwrap().replace("&#x2f;", "/");
    assert!(html.contains(&format!("Branch <code>{branch}</code>")), "{html}");
    assert!(html.contains(&format!("https://git.example.com/app/commit/{commit}")), "{html}");
    assert!(html.contains("1 file(s) changed, +1 −1") && html.contains("pushed"), "{html}");
    assert!(html.contains("all done") && !html.contains("output so far"), "the stored output: {html}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
