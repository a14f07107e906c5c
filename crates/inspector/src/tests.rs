//! The inspector over a real socket, on a real state file: every page's status, escaping of
//! what runs stored, 404 for an unknown run, and the token off loopback.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_SECURITY_POLICY, COOKIE, SET_COOKIE};

use super::{
    Access, AgentStatus, EventLog, Inspector, RecentEvent, Settings, SubTask, TaskTree, TreeError, TreeSource,
    TreeTask, WaitingRun,
};
use crate::record::{RunStart, StoredRun};
use crate::startup::StartupReport;
use picogent_agent::{RunOutcome, RunRecord};
use picogent_llm::{Message, ToolCall};
use picogent_state::{FinishRun, RunStatus, State};
use picogent_support::secret::Secret;
use picogent_tracker::model::TaskStatus;
use picogent_tracker::session::SessionKey;

struct Served {
    url: String,
    state: State,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// What the runtime hands the inspector for a config with a model whose name holds markup, and
/// every other setting at its default.
fn settings() -> Settings {
    Settings {
        slug: "picogent".into(),
        tracker_url: "http://127.0.0.1:9".into(),
        task_pages: "http://127.0.0.1:9/tasks/{id}".into(),
        message_pages: "http://127.0.0.1:9/messages/{id}".into(),
        limits: picogent_agent::Limits::default(),
        model: "offline-<b>planner</b>".into(),
        model_url: "http://127.0.0.1:9/v1".into(),
        priced: false,
        listen: "127.0.0.1:9464".into(),
        allowed_hosts: Vec::new(),
        max_live_streams: picogent_web::LiveStreams::DEFAULT_MAX,
        sessions: picogent_web::SessionLimits {
            idle: Some(std::time::Duration::from_secs(8 * 60 * 60)),
            lifetime: Some(std::time::Duration::from_secs(24 * 60 * 60)),
            ..picogent_web::SessionLimits::default()
        },
    }
}

/// The running agent as a test shows it: how it started, and two events the router judged.
struct Agent {
    startup: Option<StartupReport>,
    /// Never sends: held, so a live page waits on its tick.
    changes: tokio::sync::broadcast::Sender<()>,
}

impl Default for Agent {
    fn default() -> Agent {
        Agent { startup: None, changes: tokio::sync::broadcast::channel(1).0 }
    }
}

impl AgentStatus for Agent {
    fn connected(&self) -> bool {
        false
    }
    fn caught_up(&self) -> bool {
        false
    }
    fn superseded(&self) -> Option<&str> {
        None
    }
    fn active_runs(&self) -> usize {
        0
    }
    fn awaiting_input(&self) -> usize {
        0
    }
    fn waiting(&self) -> Vec<WaitingRun> {
        Vec::new()
    }
    fn startup(&self) -> Option<StartupReport> {
        self.startup.clone()
    }
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.changes.subscribe()
    }
}

impl EventLog for Agent {
    fn recent_events(&self) -> Vec<RecentEvent> {
        let at = time::OffsetDateTime::now_utc();
        vec![
            RecentEvent { at, name: "task.assigned".into(), fate: "run".into() },
            RecentEvent { at, name: "message.new".into(), fate: "own_message".into() },
        ]
    }
}

/// One tree, TE-1, whose sub-task left a branch whose name holds markup; TE-7's board fails.
impl TreeSource for Agent {
    fn tree<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, Result<TaskTree, TreeError>> {
        let task = |key: &str, title: &str, status| TreeTask {
            key: key.into(),
            id: format!("id-{key}"),
            title: title.into(),
            status,
            assignee: Some("picogent".into()),
        };
        let tree = match key {
            "TE-1" => Ok(TaskTree {
                parent: task("TE-1", "Export <b>all</b>", TaskStatus::InProgress),
                part_of: Some("TE-0".into()),
                sub_tasks: vec![SubTask {
                    task: task("TE-2", "CSV endpoint", TaskStatus::InReview),
                    blockers: vec!["TE-3".into()],
                    review_round: Some(2),
                    branch: Some("picogent/te-2-<i>csv</i>".into()),
                    spent: picogent_state::Spend { tokens: 12_345, cost: 0.5 },
                    latest_run: Some("run-of-te-2".into()),
                }],
                spent: picogent_state::Spend { tokens: 100_000, cost: 0.5 },
            }),
            "TE-7" => Err(TreeError::Board(picogent_tracker::TrackerError::Server {
                status: 503,
                retry_after: None,
                message: "down".into(),
            })),
            other => Err(TreeError::NotFound { key: other.into() }),
        };
        Box::pin(async move { tree })
    }
}

async fn serve(listen: &str, access: Access) -> Served {
    serve_with(listen, access, Agent::default()).await
}

/// [`serve`], showing what `agent` says of the running agent.
async fn serve_with(listen: &str, access: Access, agent: Agent) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&dir.path().join("state.db")).await.unwrap();
    let agent = Arc::new(agent);
    let inspector = Inspector::new(
        state.clone(),
        agent.clone(),
        agent.clone(),
        settings(),
        vec!["get_task".into()],
        access,
        tokio_util::sync::CancellationToken::new(),
    )
    .with_trees(agent);
    let listen: SocketAddr = listen.parse().unwrap();
    let doors = picogent_web::DoorLimits::default();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(picogent_web::serve::serve(listener, super::routes(inspector), doors, shutdown, "http.listen"));
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    Served { url: format!("http://127.0.0.1:{}", addr.port()), state, http, _dir: dir }
}

/// A finished run whose model text, tool arguments and tool result all hold markup.
async fn hostile_run(state: &State) -> String {
    let run_id = state.start_run(&SessionKey::Task("t-1".into()), "task.assigned TE-1").await.unwrap();
    let mut record = RunRecord::new();
    record.outcome = RunOutcome::Completed;
    record.final_message = "done <script>alert('final')</script>".into();
    record.turns = 2;
    record.prompt_tokens = 10_749;
    record.cached_tokens = 9_000;
    let stored = StoredRun {
        start: RunStart {
            prompt: "Task: <script>alert('prompt')</script>".into(),
            system_prompt: Some("You are <b>picogent</b>.".into()),
            parent: Some("TE-9".into()),
            ..RunStart::default()
        },
        record: Some(record),
        conversation: vec![
            Message::user("Task: <script>alert('prompt')</script>"),
            Message::Assistant {
                content: Some("Looking <script>alert('turn')</script>".into()),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "get_task".into(),
                    arguments: r#"{"task_id": "<img src=x onerror=alert(1)>"}"#.into(),
                }],
                refusal: None,
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                name: "get_task".into(),
                content: "TE-1 <script>alert('result')</script>".into(),
                is_error: false,
            },
            Message::Assistant {
                content: Some("done <script>alert('final')</script>".into()),
                tool_calls: vec![],
                refusal: None,
            },
        ],
        coding: None,
    };
    let finish = FinishRun {
        turns: 2,
        tool_calls: 1,
        outcome: Some("done <script>".into()),
        record: Some(serde_json::to_value(&stored).unwrap()),
        ..FinishRun::new(RunStatus::Completed)
    };
    assert!(state.finish_run(&run_id, &finish).await.unwrap());
    run_id
}

impl Served {
    async fn get(&self, path: &str) -> (StatusCode, String) {
        let answer = self.http.get(format!("{}{path}", self.url)).send().await.unwrap();
        let status = answer.status();
        let csp = answer.headers().get(CONTENT_SECURITY_POLICY).map(|v| v.to_str().unwrap().to_string());
        assert!(csp.is_some_and(|csp| csp.contains("script-src 'self'")), "{path} has no CSP");
        (status, answer.text().await.unwrap())
    }
}

#[tokio::test]
async fn every_page_answers_and_shows_stored_markup_as_text() {
    let served = serve("127.0.0.1:0", Access::Open).await;
    let run_id = hostile_run(&served.state).await;
    let (status, html) = served.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(&run_id) && html.contains("task.assigned TE-1"), "{html}");
    assert!(
        html.contains("href=\"http:&#x2f;&#x2f;127.0.0.1:9&#x2f;tasks&#x2f;t-1\""),
        "the run links to its task: {html}"
    );
    let (status, html) = served.get(&format!("/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::OK);
    for text in ["alert('prompt')", "alert('turn')", "alert('result')", "alert('final')"] {
        assert!(
            html.contains(&format!("&lt;script&gt;{}", text.replace('\'', "&#x27;"))),
            "{text} not escaped: {html}"
        );
    }
    assert!(!html.contains("<script>alert") && !html.contains("<img src=x"), "{html}");
    assert!(html.contains("You are &lt;b&gt;picogent&lt;&#x2f;b&gt;."), "{html}");
    assert!(html.contains("data-tool=\"get_task\""), "{html}");
    assert!(html.contains("<a href=\"/tree/TE-9\">TE-9</a>"), "a sub-task's run links to its tree: {html}");
    for path in ["/runs?status=completed&trigger=task.assigned", "/events", "/health", "/assets/style.css"] {
        let (status, html) = served.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(!html.contains("<b>planner"), "{path}: {html}");
    }
    let (_, html) = served.get("/events").await;
    assert!(html.contains("its own message") && html.contains("started a run"), "{html}");
    let (_, html) = served.get("/runs?status=failed").await;
    assert!(!html.contains(&run_id), "the filter keeps only failed runs: {html}");
    let (_, html) = served.get("/runs?trigger=message.new").await;
    assert!(!html.contains(&run_id), "{html}");
    let (status, _) = served.get("/runs/no-such-run").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = served.get("/runs/no-such-run/live").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let live = served.http.get(format!("{}/runs/{run_id}/live", served.url)).send().await.unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    assert!(live.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let login = served.http.get(format!("{}/login", served.url)).send().await.unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER, "an open inspector needs no login");
}

#[tokio::test]
async fn off_loopback_every_page_needs_the_token() {
    let served = serve("0.0.0.0:0", Access::Token(Secret::new("ui-secret"))).await;
    let run_id = hostile_run(&served.state).await;
    for path in ["/", "/runs", &format!("/runs/{run_id}"), "/runs/live", "/events", "/events/live", "/health"] {
        let (status, html) = served.get(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(!html.contains(&run_id) && html.contains("Token needed"), "{path}: {html}");
        let wrong =
            served.http.get(format!("{}{path}", served.url)).header(AUTHORIZATION, "Bearer nope").send().await.unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let right = served.http.get(format!("{}/runs/{run_id}", served.url)).bearer_auth("ui-secret").send().await.unwrap();
    assert_eq!(right.status(), StatusCode::OK);
    let (status, _) = served.get("/assets/style.css").await;
    assert_eq!(status, StatusCode::OK, "the token form's stylesheet needs no token");
    let form = |token: &str| {
        served
            .http
            .post(format!("{}/login", served.url))
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
    };
    assert_eq!(form("nope").send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let signed_in = form("ui-secret").send().await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in.headers()[SET_COOKIE].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && !cookie.contains("ui-secret"), "{cookie}");
    let cookie = cookie.split(';').next().unwrap().to_string();
    let page = served.http.get(format!("{}/runs", served.url)).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains(&run_id));
}

#[test]
fn a_listener_off_loopback_without_a_token_serves_no_inspector() {
    let any: SocketAddr = "0.0.0.0:9464".parse().unwrap();
    assert!(Access::for_listener(any, None, "PICOGENT_UI_TOKEN").is_none());
    assert!(matches!(Access::for_listener(any, Some(Secret::new("t")), "X"), Some(Access::Token(_))));
    let loopback: SocketAddr = "127.0.0.1:9464".parse().unwrap();
    assert!(matches!(Access::for_listener(loopback, None, "X"), Some(Access::Open)));
    let v6: SocketAddr = "[::1]:9464".parse().unwrap();
    assert!(matches!(Access::for_listener(v6, None, "X"), Some(Access::Open)));
}

#[test]
fn the_terminal_shows_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    let settings = settings();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let text = runtime.block_on(async {
        let state = State::open(&dir.path().join("state.db")).await.unwrap();
        let run_id = hostile_run(&state).await;
        let run = state.get_run(&run_id).await.unwrap().unwrap();
        let list = super::cli::list_text(&[super::view::summary(&run, &settings)], time::OffsetDateTime::now_utc());
        assert!(list.contains(&run_id[..8]) && list.contains("completed") && list.contains("just now"), "{list}");
        super::cli::show_text(&super::view::detail(&run, &settings, None))
    });
    for part in [
        "== system prompt",
        "== turn 1",
        "tool get_task",
        "TE-1 <script>",
        "== final answer",
        "budget   turns: 2 of",
        // The prompt-cache line the page shows too.
        "cache    9,000 of 10,749 prompt tokens read from the cache (83%)",
    ] {
        assert!(text.contains(part), "{part} missing:\n{text}");
    }
    assert_eq!(super::cli::list_text(&[], time::OffsetDateTime::now_utc()), "no runs\n");
}

#[test]
fn a_run_links_to_its_task_where_the_config_says_the_board_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let run = runtime.block_on(async {
        let state = State::open(&dir.path().join("state.db")).await.unwrap();
        let run_id = hostile_run(&state).await;
        state.get_run(&run_id).await.unwrap().unwrap()
    });
    assert_eq!(super::view::summary(&run, &settings).link.as_deref(), Some("http://127.0.0.1:9/tasks/t-1"));
    settings.task_pages = "https://board.example.com/task/{id}/view".into();
    assert_eq!(super::view::summary(&run, &settings).link.as_deref(), Some("https://board.example.com/task/t-1/view"));
}

/// A finished chat run, answering a message whose words it stored at its start.
async fn chat_run(state: &State) -> String {
    let message_id = "0b7f3c1e-9d2a-4f61-a8e3-5c4d2b1a0f9e";
    let run_id = state
        .start_run(&SessionKey::Thread(message_id.to_string()), &format!("message.new {message_id}"))
        .await
        .unwrap();
    let stored = StoredRun {
        start: RunStart {
            prompt: "Message id: …".into(),
            message_words: Some("what is on the board for the <b>release</b>?".into()),
            ..RunStart::default()
        },
        record: Some(RunRecord::new()),
        conversation: Vec::new(),
        coding: None,
    };
    let finish = FinishRun {
        outcome: Some("Replied in the thread.".into()),
        record: Some(serde_json::to_value(&stored).unwrap()),
        ..FinishRun::new(RunStatus::Completed)
    };
    assert!(state.finish_run(&run_id, &finish).await.unwrap());
    run_id
}

/// The text a person reads in `html`: the tags' contents, not their attributes.
fn visible_text(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text
}

#[tokio::test]
async fn a_chat_run_is_named_by_its_words_and_statuses_and_times_read_as_words() {
    let served = serve("127.0.0.1:0", Access::Open).await;
    let run_id = chat_run(&served.state).await;
    for path in ["/runs".to_string(), format!("/runs/{run_id}")] {
        let (status, html) = served.get(&path).await;
        assert_eq!(status, StatusCode::OK);
        let text = visible_text(&html);
        assert!(text.contains("what is on the board for the &lt;b&gt;release&lt;&#x2f;b&gt;?"), "{path}: {text}");
        assert!(!text.contains("0b7f3c1e"), "{path} shows the message id as the run's name: {text}");
        assert!(html.contains("title=\"message.new 0b7f3c1e-9d2a-4f61-a8e3-5c4d2b1a0f9e\""), "on hover: {html}");
        assert!(text.contains("Completed") && !text.contains("completed"), "{path}: the status's label: {text}");
        // The start: relative, with the exact time in UTC on hover.
        let time = html.split("<time ").nth(1).unwrap_or_else(|| panic!("{path} has no time element: {html}"));
        assert!(time.starts_with("datetime=\"20") && time.contains(" UTC\">just now</time>"), "{path}: {time}");
    }
    let (_, html) = served.get("/runs").await;
    assert!(html.contains("<option value=\"interrupted\">Interrupted</option>"), "the filter offers labels: {html}");
}

#[tokio::test]
async fn the_health_page_says_how_it_started_in_a_table() {
    use crate::startup::ReconcileReport;
    let mut found = ReconcileReport::default();
    found.tasks.open = 3;
    found.tasks.worked = 1;
    found.tasks.skip("summarised");
    found.tasks.skip("summarised");
    found.mentions.window = "24h".into();
    found.mentions.answered = 2;
    found.mentions.skip("old");
    found.mentions.skip("a_reason_added_later");
    found.errors.push("cannot read the comments of TE-9: tracker error 500".into());
    let startup = Some(StartupReport {
        mode: picogent_tracker::stream::StartMode::Head,
        from_seq: 41,
        skipped_events: 7,
        reconciliation: Some(found),
    });
    let served = serve_with("127.0.0.1:0", Access::Open, Agent { startup, ..Agent::default() }).await;
    let (code, html) = served.get("/health").await;
    assert_eq!(code, StatusCode::OK);
    let startup =
        html.split("<table id=\"startup\">").nth(1).expect("a table of the start").split("</table>").next().unwrap();
    let text = visible_text(startup);
    for part in [
        "at the tracker&#x27;s head (seq 41), 7 past events not acted on",
        "3 on the board, 1 worked",
        "2 the board shows the agent&#x27;s summary after the task&#x27;s last change",
        "2 answered, within 24h",
        "1 older than the window",
        "1 A reason added later",
        "cannot read the comments of TE-9",
    ] {
        assert!(text.contains(part), "{part:?} missing: {text}");
    }
    assert!(!startup.contains('{') && !startup.contains("\"mode\""), "no JSON: {startup}");
}

#[tokio::test]
async fn a_page_for_another_host_name_gets_nothing() {
    let served = serve("127.0.0.1:0", Access::Open).await;
    let run_id = hostile_run(&served.state).await;
    for path in
        ["/", "/runs", &format!("/runs/{run_id}"), "/runs/live", "/events", "/health", "/login", "/assets/live.js"]
    {
        let answer = served
            .http
            .get(format!("{}{path}", served.url))
            .header(reqwest::header::HOST, "rebind.attacker.example")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::MISDIRECTED_REQUEST, "{path}");
        assert_eq!(answer.text().await.unwrap(), "", "{path}: nothing else");
    }
    let port = served.url.rsplit(':').next().unwrap().to_string();
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let answer =
            served.http.get(format!("{}/runs", served.url)).header(reqwest::header::HOST, &host).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{host}");
    }
}

#[test]
fn a_waiting_run_says_what_it_read_and_passed_over() {
    use picogent_state::{PassedOver, WaitKind, Waiting};
    let mut waiting = Waiting {
        kind: WaitKind::Approval,
        what: "may I run `book_table`?".to_string(),
        person: Some("alice".to_string()),
        asked_message_id: Some("m1".to_string()),
        since_ms: 0,
        until_ms: 1,
        passed_over: None,
    };
    assert_eq!(crate::view::waiting_line(&waiting), "waits for @alice (approval): may I run `book_table`?");
    waiting.passed_over = Some(PassedOver { count: 2, last_message_id: "m3".to_string(), last_by: "bob".to_string() });
    assert_eq!(
        crate::view::waiting_line(&waiting),
        "waits for @alice (approval; passed over 2 replies, the last by @bob): may I run `book_table`?"
    );
}

/// A stored run keeps its start's fields beside its own, as before the start was one field: a
/// resumed run reads its start from it, and records stored earlier read as before.
#[test]
fn a_stored_run_keeps_its_starts_fields_at_the_top() {
    let stored = StoredRun::without_loop("Task: TE-1".into(), None);
    let value = serde_json::to_value(&stored).unwrap();
    assert_eq!((value["prompt"].as_str(), value["history_len"].as_u64()), (Some("Task: TE-1"), Some(0)), "{value}");
    let start: RunStart = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(start.prompt, "Task: TE-1");
    let earlier = serde_json::json!({"prompt": "p", "history_len": 2, "conversation": []});
    let read: StoredRun = serde_json::from_value(earlier).unwrap();
    assert_eq!((read.start.prompt.as_str(), read.start.history_len), ("p", 2));
}

/// A tree's page: the parent, a row per sub-task with what its source said, the tree's spend
/// against `limits.max_tokens_per_tree`, every text escaped; 404 for what is not a key or names
/// no task, 502 when the board fails.
#[tokio::test]
async fn a_tree_page_shows_its_sub_tasks_and_answers_404_for_no_tree() {
    let served = serve("127.0.0.1:0", Access::Open).await;
    let (status, html) = served.get("/tree/TE-1").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("Export &lt;b&gt;all&lt;&#x2f;b&gt;") && !html.contains("<b>all"), "{html}");
    assert!(html.contains("part of <a href=\"/tree/TE-0\">TE-0</a>"), "{html}");
    assert!(html.contains("100,000 of 400,000") && html.contains("value=\"25\""), "the tree's spend: {html}");
    for cell in [
        "<td class=\"blockers\">TE-3</td>",
        "<code>picogent&#x2f;te-2-&lt;i&gt;csv&lt;&#x2f;i&gt;</code>",
        "<td class=\"round\">2</td>",
        "<td class=\"tokens\">12,345</td>",
        "<a href=\"/runs/run-of-te-2\">run-of-t</a>",
        "data-status=\"in_review\"",
    ] {
        assert!(html.contains(cell), "{cell}: {html}");
    }
    assert!(!html.contains("0.5000"), "no money without llm.price: {html}");
    for (path, status) in [
        ("/tree/not-a-key", StatusCode::NOT_FOUND),
        ("/tree/%3Cscript%3E-1", StatusCode::NOT_FOUND),
        ("/tree/TE-99", StatusCode::NOT_FOUND),
        ("/tree/TE-7", StatusCode::BAD_GATEWAY),
    ] {
        let (answered, html) = served.get(path).await;
        assert_eq!(answered, status, "{path}: {html}");
        assert!(!html.contains("<script>"), "{path}: {html}");
    }
    let (_, html) = served.get("/tree/TE-99").await;
    assert!(html.contains("no task TE-99 on the board"), "{html}");
}

/// A run asked to break its task down links to the tree it makes, from its start on.
#[tokio::test]
async fn a_run_asked_to_break_its_task_down_links_to_its_tree() {
    let served = serve("127.0.0.1:0", Access::Open).await;
    let run_id = served.state.start_run(&SessionKey::Task("t-1".into()), "task.assigned TE-1").await.unwrap();
    let start = RunStart { prompt: "Task: TE-1".into(), breaks_down: Some("TE-1".into()), ..RunStart::default() };
    served.state.save_run_record(&run_id, &serde_json::to_value(&start).unwrap()).await.unwrap();
    let (status, html) = served.get(&format!("/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Asked to break TE-1 down: <a href=\"/tree/TE-1\">its tree</a>"), "{html}");
}
