//! The board's web page over a real socket: status codes, sign-in, escaping, live fragments.

use futures::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, LOCATION, SET_COOKIE};

/// A form post's body, as a browser sends it.
trait WithForm {
    fn with_form(self, pairs: &[(&str, &str)]) -> Self;
}

impl WithForm for reqwest::RequestBuilder {
    fn with_form(self, pairs: &[(&str, &str)]) -> Self {
        let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
        self.header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded").body(body)
    }
}

struct Page {
    board: crate::BoardHandle,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn board() -> Page {
    let dir = tempfile::tempdir().unwrap();
    let board = crate::start_seeded(dir.path()).await.unwrap();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    Page { board, http, _dir: dir }
}

impl Page {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.board.url())
    }

    /// Signs in as `member` and returns the cookie to send.
    async fn sign_in(&self, member: &str) -> String {
        let answer = self.http.post(self.url("/signin")).with_form(&[("member", member)]).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::SEE_OTHER);
        let cookie = answer.headers()[SET_COOKIE].to_str().unwrap().to_string();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
        cookie.split(';').next().unwrap().to_string()
    }

    async fn get(&self, path: &str, cookie: &str) -> (StatusCode, String) {
        let answer = self.http.get(self.url(path)).header(COOKIE, cookie).send().await.unwrap();
        let status = answer.status();
        if status == StatusCode::OK {
            let csp = answer.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
        }
        (status, answer.text().await.unwrap())
    }

    async fn post(&self, path: &str, cookie: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.http.post(self.url(path)).header(COOKIE, cookie).with_form(form).send().await.unwrap()
    }
}

#[tokio::test]
async fn the_sign_in_page_offers_the_human_members_and_every_page_needs_it() {
    let page = board().await;
    let (status, html) = page.get("/signin", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("value=\"alice\"") && html.contains("value=\"bob\""), "{html}");
    assert!(!html.contains("value=\"picogent\""), "agents are not offered: {html}");
    for path in ["/", "/projects/team", "/projects/team/chat", "/tasks/TE-1"] {
        let answer = page.http.get(page.url(path)).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(answer.headers()[LOCATION], "/signin", "{path}");
    }
    for path in ["/projects/team/live", "/tasks/TE-1/live", "/projects/team/chat/live"] {
        let (status, _) = page.get(path, "board_session=made-up").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    let refused = page.http.post(page.url("/signin")).with_form(&[("member", "picogent")]).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::NOT_FOUND, "an agent cannot be signed in as");
    let refused = page.http.post(page.url("/signin")).with_form(&[("nobody", "x")]).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let posted = page.post("/projects/team/tasks", "", &[("title", "x")]).await;
    assert_eq!(posted.status(), StatusCode::SEE_OTHER, "a form post without a session signs in first");
    assert_eq!(posted.headers()[LOCATION], "/signin");
}

#[tokio::test]
async fn a_task_made_in_the_page_shows_its_title_as_text_and_never_the_token() {
    let page = board().await;
    let cookie = page.sign_in("alice").await;
    assert!(!cookie.contains("tok-alice"));
    let (status, html) = page.get("/", &cookie).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{html}");
    let made = page
        .post(
            "/projects/team/tasks",
            &cookie,
            &[("title", "<script>alert(1)</script>"), ("description", "a <b>bold</b> claim"), ("assignee", "bob")],
        )
        .await;
    assert_eq!(made.status(), StatusCode::SEE_OTHER);
    assert_eq!(made.headers()[LOCATION], "/tasks/TE-1");
    for path in ["/tasks/TE-1", "/projects/team"] {
        let (status, html) = page.get(path, &cookie).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;"), "{path}: {html}");
        assert!(!html.contains("<script>alert"), "{path}: {html}");
        assert!(!html.contains("tok-"), "{path} shows a token: {html}");
        assert!(html.contains("@bob"), "{path}: {html}");
    }
    let task = page.board_task("TE-1").await;
    assert_eq!(task["created_by"], "alice");
    let assigned = page.post("/tasks/TE-1/assign", &cookie, &[("assignee", "picogent")]).await;
    assert_eq!(assigned.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.board_task("TE-1").await["assignee_slug"], "picogent");
    let commented = page.post("/tasks/TE-1/comments", &cookie, &[("content", "<img src=x onerror=alert(2)>")]).await;
    assert_eq!(commented.status(), StatusCode::SEE_OTHER);
    let (_, html) = page.get("/tasks/TE-1", &cookie).await;
    assert!(html.contains("&lt;img src=x onerror=alert(2)&gt;") && !html.contains("<img src=x"), "{html}");
    let said = page.post("/projects/team/chat", &cookie, &[("content", "hello <team>")]).await;
    assert_eq!(said.status(), StatusCode::SEE_OTHER);
    let (status, html) = page.get("/projects/team/chat", &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("hello &lt;team&gt;"), "{html}");
}

#[tokio::test]
async fn wrong_input_gets_an_error_page_with_the_boards_status() {
    let page = board().await;
    let cookie = page.sign_in("bob").await;
    let (status, html) = page.get("/tasks/TE-99", &cookie).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("TE-99"), "{html}");
    let (status, _) = page.get("/projects/nope", &cookie).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = page.get("/projects/nope/chat", &cookie).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let empty = page.post("/projects/team/tasks", &cookie, &[("title", "   ")]).await;
    assert_eq!(empty.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let missing = page.post("/projects/team/tasks", &cookie, &[("description", "no title")]).await;
    assert_eq!(missing.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let nobody = page.post("/projects/team/tasks", &cookie, &[("title", "t"), ("assignee", "ghost")]).await;
    assert_eq!(nobody.status(), StatusCode::NOT_FOUND);
    let signed_out = page.post("/signout", &cookie, &[]).await;
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
    let answer = page.http.get(page.url("/projects/team")).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::SEE_OTHER, "the session is gone after signing out");
    let asset = page.http.get(page.url("/assets/live.js")).send().await.unwrap();
    assert_eq!(asset.status(), StatusCode::OK);
    assert!(asset.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
    let (status, _) = page.get("/assets/nope.js", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_task_page_hears_a_step_ticked_through_the_api() {
    let page = board().await;
    let cookie = page.sign_in("alice").await;
    page.post("/projects/team/tasks", &cookie, &[("title", "Tick me"), ("assignee", "bob")]).await;
    let bob = [("Authorization", "Bearer tok-bob")];
    let step: serde_json::Value = page
        .http
        .post(format!("{}/tasks/TE-1/steps", page.board.api_base()))
        .header(bob[0].0, bob[0].1)
        .json(&serde_json::json!({"title": "the one step"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let live = page.http.get(page.url("/tasks/TE-1/live")).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    assert!(live.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut events = sse_data(live);
    let first = events.next().await.unwrap();
    assert!(first.contains("the one step") && first.contains("data-done=\"false\""), "{first}");
    let ticked = page
        .http
        .post(format!("{}/tasks/TE-1/steps/{}/complete", page.board.api_base(), step["id"].as_str().unwrap()))
        .header(bob[0].0, bob[0].1)
        .send()
        .await
        .unwrap();
    assert_eq!(ticked.status(), StatusCode::OK);
    let second = events.next().await.unwrap();
    assert!(second.contains("data-done=\"true\"") && second.contains("1/1"), "{second}");
}

impl Page {
    async fn board_task(&self, key: &str) -> serde_json::Value {
        let url = format!("{}/tasks/{key}", self.board.api_base());
        self.http.get(url).bearer_auth("tok-alice").send().await.unwrap().json().await.unwrap()
    }
}

/// The `data:` of each server-sent event, joined the way a browser joins them.
fn sse_data(response: reqwest::Response) -> impl futures::Stream<Item = String> + Unpin {
    let chunks = response.bytes_stream();
    Box::pin(futures::stream::unfold((chunks, String::new()), |(mut chunks, mut buffer)| async move {
        loop {
            if let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data: ").or(line.strip_prefix("data:")))
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Some((data.join("\n"), (chunks, buffer)));
            }
            let chunk = chunks.next().await?.ok()?;
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }))
}

#[tokio::test]
async fn statuses_read_as_labels_and_times_as_how_long_ago() {
    let page = board().await;
    let cookie = page.sign_in("alice").await;
    page.post("/projects/team/tasks", &cookie, &[("title", "Label me"), ("assignee", "bob")]).await;
    page.post("/tasks/TE-1/comments", &cookie, &[("content", "first")]).await;
    let moved = page
        .http
        .patch(format!("{}/tasks/TE-1", page.board.api_base()))
        .bearer_auth("tok-bob")
        .json(&serde_json::json!({"status": "in_review"}))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), StatusCode::OK);
    let (_, html) = page.get("/tasks/TE-1", &cookie).await;
    assert!(html.contains("data-status=\"in_review\">In review</span>"), "{html}");
    assert!(!html.contains(">in_review<"), "{html}");
    let comment = html.split("class=\"author\">@alice</span>").nth(1).expect("alice's comment");
    assert!(comment.trim_start().starts_with("<span class=\"muted\"><time datetime=\"20"), "{comment}");
    assert!(comment.contains(" UTC\">just now</time>"), "{comment}");
    let (_, html) = page.get("/projects/team", &cookie).await;
    for label in ["Backlog", "To do", "In progress", "In review", "Done"] {
        assert!(html.contains(&format!("<h2>{label} <span")), "{label}: {html}");
    }
}

#[tokio::test]
async fn the_page_answers_only_its_own_host_names_and_takes_changes_only_from_its_own_origin() {
    let page = board().await;
    let cookie = page.sign_in("alice").await;
    let rebind = |request: reqwest::RequestBuilder| request.header(reqwest::header::HOST, "rebind.attacker.example");
    for path in ["/", "/signin", "/projects/team", "/projects/team/live", "/tasks/TE-1", "/assets/style.css"] {
        let answer = rebind(page.http.get(page.url(path))).header(COOKIE, &cookie).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::MISDIRECTED_REQUEST, "GET {path}");
        assert_eq!(answer.text().await.unwrap(), "", "GET {path}: nothing else");
    }
    let signin = rebind(page.http.post(page.url("/signin"))).with_form(&[("member", "alice")]).send().await.unwrap();
    assert_eq!(signin.status(), StatusCode::MISDIRECTED_REQUEST, "a rebinding page cannot sign in");
    assert!(signin.headers().get(SET_COOKIE).is_none());
    assert_eq!(signin.text().await.unwrap(), "");
    let foreign = page
        .http
        .post(page.url("/projects/team/tasks"))
        .header(COOKIE, &cookie)
        .header(reqwest::header::ORIGIN, "http://rebind.attacker.example")
        .with_form(&[("title", "planted")])
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    assert_eq!(foreign.text().await.unwrap(), "");
    let own = page
        .http
        .post(page.url("/projects/team/tasks"))
        .header(COOKIE, &cookie)
        .header(reqwest::header::ORIGIN, page.board.url())
        .with_form(&[("title", "from the page itself")])
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.board_task("TE-1").await["title"], "from the page itself", "only the own origin's post landed");
    // The API is not the page: its bearer token is what guards it, under any name.
    let api = rebind(page.http.get(format!("{}/members", page.board.api_base()))).bearer_auth("tok-alice");
    assert_eq!(api.send().await.unwrap().status(), StatusCode::OK);
}
