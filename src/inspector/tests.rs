//! The inspector over a real socket, on a real state file: every page's status, escaping of
//! what runs stored, 404 for an unknown run, and the token off loopback.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_SECURITY_POLICY, COOKIE, SET_COOKIE};

use super::{Access, Inspector};
use crate::agent::{RunOutcome, RunRecord};
use crate::llm::{Message, ToolCall};
use crate::runtime::record::StoredRun;
use crate::secret::Secret;
use crate::state::{FinishRun, RunStatus, State};

struct Served {
    url: String,
    state: State,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

fn config(dir: &std::path::Path) -> crate::config::Config {
    serde_json::from_value(serde_json::json!({
        "slug": "picogent",
        "name": "Picogent",
        "prompts_dir": dir.join("prompts"),
        "tracker": {"url": "http://127.0.0.1:9"},
        "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "offline-<b>planner</b>"},
        "state": {"path": dir.join("state.db")},
    }))
    .unwrap()
}

async fn serve(listen: &str, access: Access) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let state = State::open(&config.state.path).await.unwrap();
    let metrics = Arc::new(crate::runtime::metrics::Metrics::default());
    metrics.event("message.new", "own_message");
    metrics.event("task.assigned", "run");
    let inspector = Inspector::new(
        state.clone(),
        Arc::default(),
        metrics,
        Arc::new(config),
        vec!["get_task".into()],
        access,
        tokio_util::sync::CancellationToken::new(),
    );
    let listen: SocketAddr = listen.parse().unwrap();
    let (addr, _server) =
        crate::runtime::http::serve(listen, super::routes(inspector), tokio_util::sync::CancellationToken::new())
            .await
            .unwrap();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    Served { url: format!("http://127.0.0.1:{}", addr.port()), state, http, _dir: dir }
}

/// A finished run whose model text, tool arguments and tool result all hold markup.
async fn hostile_run(state: &State) -> String {
    let run_id = state.start_run("task:t-1", "task.assigned TE-1").await.unwrap();
    let mut record = RunRecord::new();
    record.outcome = RunOutcome::Completed;
    record.final_message = "done <script>alert('final')</script>".into();
    record.turns = 2;
    let stored = StoredRun {
        prompt: "Task: <script>alert('prompt')</script>".into(),
        history_len: 0,
        system_prompt: Some("You are <b>picogent</b>.".into()),
        fence: None,
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
    let config = config(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let text = runtime.block_on(async {
        let state = State::open(&config.state.path).await.unwrap();
        let run_id = hostile_run(&state).await;
        let run = state.get_run(&run_id).await.unwrap().unwrap();
        let list = super::cli::list_text(&[super::view::summary(&run, &config)]);
        assert!(list.contains(&run_id) && list.contains("completed"), "{list}");
        super::cli::show_text(&super::view::detail(&run, &config))
    });
    for part in
        ["== system prompt", "== turn 1", "tool get_task", "TE-1 <script>", "== final answer", "budget   turns: 2 of"]
    {
        assert!(text.contains(part), "{part} missing:\n{text}");
    }
    assert_eq!(super::cli::list_text(&[]), "no runs\n");
}

#[test]
fn a_run_links_to_its_task_where_the_config_says_the_board_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let run = runtime.block_on(async {
        let state = State::open(&config.state.path).await.unwrap();
        let run_id = hostile_run(&state).await;
        state.get_run(&run_id).await.unwrap().unwrap()
    });
    assert_eq!(super::view::summary(&run, &config).link.as_deref(), Some("http://127.0.0.1:9/tasks/t-1"));
    config.http.task_link = Some("https://board.example.com/task/{id}/view".into());
    assert_eq!(super::view::summary(&run, &config).link.as_deref(), Some("https://board.example.com/task/t-1/view"));
}
