//! The reference board against its contract (`docs/tracker-api.md`), driven over real sockets
//! through `picogent::tracker::TrackerClient`, raw HTTP for malformed requests, and a WebSocket
//! client for the event stream.

mod support;

use std::collections::HashSet;

use picogent::tracker::TrackerError;
use picogent::tracker::model::*;
use serde_json::json;
use support::{EventStream, TestBoard, all_events};

fn new_task(title: &str) -> CreateTask {
    CreateTask { project_slug: "team".into(), title: title.into(), ..Default::default() }
}

fn invalid_field(error: TrackerError) -> String {
    match error {
        TrackerError::Invalid { field: Some(field), .. } => field,
        other => panic!("expected an invalid answer naming a field, got {other:?}"),
    }
}

/// A raw request, for bodies the typed client cannot produce. Returns status and JSON body.
async fn raw(
    board: &TestBoard,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Vec<u8>>,
) -> (u16, serde_json::Value) {
    let http = reqwest::Client::new();
    let mut request = http.request(method, format!("{}/api{path}", board.url()));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}

#[tokio::test]
async fn projects_and_members() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");

    let projects = alice.list_projects().await.unwrap();
    assert_eq!(projects.len(), 1);
    let team = &projects[0];
    assert_eq!((team.slug.as_str(), team.key.as_str(), team.active), ("team", "TE", true));
    assert!(!team.chat_id.is_empty());
    assert_eq!(&alice.get_project("team").await.unwrap(), team);
    assert_eq!(&alice.get_project(&team.id).await.unwrap(), team);
    assert!(matches!(alice.get_project("nope").await, Err(TrackerError::NotFound { .. })));

    let members = alice.list_members().await.unwrap();
    let slugs: Vec<&str> = members.iter().map(|m| m.slug.as_str()).collect();
    assert_eq!(slugs, ["alice", "bob", "otherbot", "picogent"]);
    let me = alice.get_member("me").await.unwrap();
    assert_eq!((me.slug.as_str(), me.kind), ("alice", MemberKind::Human));
    assert_eq!(alice.get_member("picogent").await.unwrap().kind, MemberKind::Agent);
    assert!(matches!(alice.get_member("carol").await, Err(TrackerError::NotFound { .. })));

    let agent = board.client("picogent");
    assert_eq!(agent.update_my_status("reading TE-1").await.unwrap().status, "reading TE-1");
    assert_eq!(alice.get_member("picogent").await.unwrap().status, "reading TE-1");
    let too_long = "x".repeat(limits::STATUS + 1);
    assert_eq!(invalid_field(agent.update_my_status(&too_long).await.unwrap_err()), "status");
    board.handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn unknown_or_missing_tokens_are_unauthorized() {
    let board = TestBoard::start().await;
    let stranger = support::client_at(&board.url(), "tok-nobody", 5_000, support::fast_retry(3));
    assert!(matches!(stranger.list_projects().await, Err(TrackerError::Unauthorized { .. })));
    let (status, body) = raw(&board, reqwest::Method::GET, "/tasks", None, None).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, _) = raw(&board, reqwest::Method::GET, "/tasks", Some("tok-nobody"), None).await;
    assert_eq!(status, 401);
    // The event stream refuses the handshake too.
    let url = format!("{}?token=tok-nobody", board.ws_url());
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status().as_u16(), 401),
        other => panic!("expected a 401 handshake, got {:?}", other.map(|_| ())),
    }
}

#[tokio::test]
async fn task_lifecycle() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    let agent = board.client("picogent");

    let first = alice.create_task(&new_task("first"), None).await.unwrap();
    assert_eq!(first.key, "TE-1");
    assert_eq!(first.status, TaskStatus::Todo);
    assert_eq!((first.priority, first.task_type), (Priority::Medium, TaskType::Task));
    assert_eq!(first.created_by, "alice");
    assert_eq!((first.assignee_slug.as_ref(), first.description.as_ref()), (None, None));
    let second = alice
        .create_task(
            &CreateTask {
                description: Some("details".into()),
                task_type: Some(TaskType::Bug),
                priority: Some(Priority::High),
                status: Some(TaskStatus::Backlog),
                assignee_slug: Some("bob".into()),
                labels: Some(vec!["api".into(), "api".into(), "ui".into()]),
                ..new_task("second")
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(second.key, "TE-2");
    assert_eq!(second.labels, ["api", "ui"]);
    assert_eq!(
        (second.status, second.priority, second.task_type),
        (TaskStatus::Backlog, Priority::High, TaskType::Bug)
    );
    assert_eq!(second.assignee_slug.as_deref(), Some("bob"));

    // Addressable by id and by key.
    assert_eq!(alice.get_task("TE-1").await.unwrap(), first);
    assert_eq!(alice.get_task(&first.id).await.unwrap(), first);
    assert!(matches!(alice.get_task("TE-99").await, Err(TrackerError::NotFound { .. })));
    let unknown_project = CreateTask { project_slug: "nope".into(), ..new_task("x") };
    assert!(matches!(alice.create_task(&unknown_project, None).await, Err(TrackerError::NotFound { .. })));

    // Update: fields change, null clears the description and unassigns.
    let update = UpdateTask {
        title: Some("second, renamed".into()),
        description: Some(None),
        status: Some(TaskStatus::InProgress),
        labels: Some(vec!["backend".into()]),
        assignee_slug: Some(None),
        ..Default::default()
    };
    let updated = alice.update_task("TE-2", &update).await.unwrap();
    assert_eq!(updated.title, "second, renamed");
    assert_eq!(updated.description, None);
    assert_eq!(updated.status, TaskStatus::InProgress);
    assert_eq!(updated.labels, ["backend"]);
    assert_eq!(updated.assignee_slug, None);
    let bad_assignee = UpdateTask { assignee_slug: Some(Some("carol".into())), ..Default::default() };
    assert!(matches!(alice.update_task("TE-2", &bad_assignee).await, Err(TrackerError::NotFound { .. })));

    // Assign, take, reject.
    let assigned = alice.assign_task("TE-1", "bob", None).await.unwrap();
    assert_eq!(assigned.assignee_slug.as_deref(), Some("bob"));
    assert!(matches!(alice.assign_task("TE-1", "carol", None).await, Err(TrackerError::NotFound { .. })));
    assert!(matches!(agent.take_task("TE-1", "picogent", None).await, Err(TrackerError::Conflict { .. })));
    assert!(matches!(agent.take_task("TE-2", "bob", None).await, Err(TrackerError::Forbidden { .. })));
    assert!(matches!(agent.take_task("TE-77", "picogent", None).await, Err(TrackerError::NotFound { .. })));
    let taken = agent.take_task("TE-2", "picogent", None).await.unwrap();
    assert_eq!(taken.assignee_slug.as_deref(), Some("picogent"));
    // Taking one's own task again is fine.
    assert_eq!(agent.take_task(&taken.id, "picogent", None).await.unwrap().assignee_slug.as_deref(), Some("picogent"));

    assert!(matches!(alice.reject_task("TE-2", "not mine", None).await, Err(TrackerError::Conflict { .. })));
    let rejected = agent.reject_task("TE-2", "needs a human", None).await.unwrap();
    assert_eq!(rejected, RejectOut { ok: true, reason: "needs a human".into() });
    let after = alice.get_task("TE-2").await.unwrap();
    assert_eq!((after.assignee_slug, after.status), (None, TaskStatus::Todo));
    let comments =
        alice.list_messages(&MessageQuery { task_id: Some("TE-2".into()), ..Default::default() }).await.unwrap();
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].content, "rejected: needs a human");
    assert_eq!(comments[0].author_slug, "picogent");
    assert_eq!(comments[0].task_id.as_deref(), Some(second.id.as_str()));

    // Watch.
    let watched = agent.watch_task("TE-1", "picogent", None).await.unwrap();
    assert_eq!(watched, WatchOut { ok: true, watchers: vec!["picogent".into()] });
    assert_eq!(alice.watch_task("TE-1", "alice", None).await.unwrap().watchers, ["picogent", "alice"]);
    assert_eq!(agent.watch_task("TE-1", "picogent", None).await.unwrap().watchers, ["picogent", "alice"]);
    assert!(matches!(agent.watch_task("TE-1", "alice", None).await, Err(TrackerError::Forbidden { .. })));
    assert_eq!(alice.get_task("TE-1").await.unwrap().watchers, ["picogent", "alice"]);
}

#[tokio::test]
async fn steps() {
    let board = TestBoard::start().await;
    let agent = board.client("picogent");
    let task = agent.create_task(&new_task("with steps"), None).await.unwrap();
    let one = agent.add_step("TE-1", "read the code", None).await.unwrap();
    let two = agent.add_step(&task.id, "write the fix", None).await.unwrap();
    assert_eq!((one.position, two.position), (1, 2));
    assert_eq!((one.done, one.task_id.as_str()), (false, task.id.as_str()));

    let renamed = agent
        .update_step("TE-1", &two.id, &UpdateStep { title: Some("write the fix and a test".into()), done: None })
        .await
        .unwrap();
    assert_eq!((renamed.title.as_str(), renamed.done), ("write the fix and a test", false));
    let done = agent.complete_step("TE-1", &one.id, None).await.unwrap();
    assert!(done.done);
    assert!(agent.complete_step("TE-1", &one.id, None).await.unwrap().done, "completing twice is fine");
    let reopened = agent.update_step("TE-1", &one.id, &UpdateStep { title: None, done: Some(false) }).await.unwrap();
    assert!(!reopened.done);

    let steps = agent.list_steps("TE-1").await.unwrap();
    assert_eq!(steps.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [one.id.as_str(), two.id.as_str()]);
    assert!(matches!(agent.complete_step("TE-1", "no-such-step", None).await, Err(TrackerError::NotFound { .. })));
    assert!(matches!(agent.list_steps("TE-9").await, Err(TrackerError::NotFound { .. })));
    // By id as by key (the board remembers both); an unknown task is not found for its comments
    // either.
    assert_eq!(agent.list_steps(&task.id).await.unwrap(), steps);
    let unknown = MessageQuery { task_id: Some("TE-9".into()), ..Default::default() };
    assert!(matches!(agent.list_messages(&unknown).await, Err(TrackerError::NotFound { .. })));
    assert_eq!(invalid_field(agent.add_step("TE-1", &"s".repeat(201), None).await.unwrap_err()), "title");
}

#[tokio::test]
async fn invalid_input_names_the_field() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    alice.create_task(&new_task("target"), None).await.unwrap();

    // Through the client: over-long values and out-of-range queries.
    let long_title = new_task(&"t".repeat(limits::TITLE + 1));
    assert_eq!(invalid_field(alice.create_task(&long_title, None).await.unwrap_err()), "title");
    let long_description = CreateTask { description: Some("d".repeat(limits::DESCRIPTION + 1)), ..new_task("x") };
    assert_eq!(invalid_field(alice.create_task(&long_description, None).await.unwrap_err()), "description");
    let many_labels = CreateTask { labels: Some((0..21).map(|i| format!("l{i}")).collect()), ..new_task("x") };
    assert_eq!(invalid_field(alice.create_task(&many_labels, None).await.unwrap_err()), "labels");
    assert_eq!(invalid_field(alice.reject_task("TE-1", &"r".repeat(2_001), None).await.unwrap_err()), "reason");
    let zero = TaskQuery { limit: Some(0), ..Default::default() };
    assert_eq!(invalid_field(alice.list_tasks(&zero).await.unwrap_err()), "limit");
    let doing = TaskQuery { status: Some("todo,doing".into()), ..Default::default() };
    assert_eq!(invalid_field(alice.list_tasks(&doing).await.unwrap_err()), "status");
    let neither = MessageQuery::default();
    assert_eq!(invalid_field(alice.list_messages(&neither).await.unwrap_err()), "chat_id");
    let two = MessageQuery { chat_id: Some("x".into()), mentioning: Some("bob".into()), ..Default::default() };
    assert_eq!(invalid_field(alice.list_messages(&two).await.unwrap_err()), "mentioning");
    let nowhere = SendMessage { content: "hello".into(), ..Default::default() };
    assert_eq!(invalid_field(alice.send_message(&nowhere, None).await.unwrap_err()), "chat_id");
    let stranger = SendMessage {
        content: "hello".into(),
        task_id: Some("TE-1".into()),
        mentions: Some(vec!["carol".into()]),
        ..Default::default()
    };
    assert_eq!(invalid_field(alice.send_message(&stranger, None).await.unwrap_err()), "mentions");

    // Raw bodies the typed client cannot send.
    let token = Some(board.token("alice"));
    let cases: &[(reqwest::Method, &str, serde_json::Value, &str)] = &[
        (reqwest::Method::POST, "/tasks", json!({"title": "no project"}), "project_slug"),
        (reqwest::Method::POST, "/tasks", json!({"project_slug": "team", "title": "x", "colour": "red"}), "colour"),
        (reqwest::Method::POST, "/tasks", json!({"project_slug": "team", "title": "x", "status": "doing"}), "status"),
        (reqwest::Method::POST, "/tasks", json!({"project_slug": "team", "title": 7}), "title"),
        (reqwest::Method::PATCH, "/tasks/TE-1", json!({"priority": "whenever"}), "priority"),
        (reqwest::Method::POST, "/tasks/TE-1/take", json!({}), "agent_slug"),
        (reqwest::Method::POST, "/messages", json!({"content": "hi", "chat": "x"}), "chat"),
        (reqwest::Method::PATCH, "/members/me", json!({"status": ["busy"]}), "status"),
    ];
    for (method, path, body, field) in cases {
        let (status, answer) = raw(&board, method.clone(), path, token, Some(body.to_string().into_bytes())).await;
        assert_eq!(status, 422, "{method} {path} {body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid");
        assert_eq!(answer["error"]["details"]["field"], *field, "{method} {path} {body}: {answer}");
        assert!(answer["error"]["details"]["expected"].is_string(), "{answer}");
    }
    let (status, answer) = raw(&board, reqwest::Method::POST, "/tasks", token, Some(b"{not json".to_vec())).await;
    assert_eq!((status, answer["error"]["details"]["field"].as_str()), (422, Some("body")));

    // Over the 1 MiB cap.
    let huge = json!({"project_slug": "team", "title": "x", "description": "d".repeat(limits::BODY_BYTES)});
    let (status, answer) =
        raw(&board, reqwest::Method::POST, "/tasks", token, Some(huge.to_string().into_bytes())).await;
    assert_eq!(status, 413);
    assert_eq!(
        (answer["error"]["code"].as_str(), answer["error"]["details"]["field"].as_str()),
        (Some("invalid"), Some("body"))
    );

    // Nothing of that was created.
    assert_eq!(alice.list_tasks(&TaskQuery::default()).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn list_tasks_filters_and_pages() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    for index in 1..=5 {
        let labels = if index % 2 == 0 { vec!["even".into(), "x".into()] } else { vec!["odd".into(), "x".into()] };
        let assignee = (index <= 2).then(|| "picogent".to_string());
        let status = (index == 5).then_some(TaskStatus::Done);
        let body =
            CreateTask { labels: Some(labels), assignee_slug: assignee, status, ..new_task(&format!("t{index}")) };
        alice.create_task(&body, None).await.unwrap();
    }
    let mut keys = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let query = TaskQuery { limit: Some(2), cursor: cursor.clone(), ..Default::default() };
        let page = alice.list_tasks(&query).await.unwrap();
        pages += 1;
        keys.extend(page.items.iter().map(|t| t.key.clone()));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(keys, ["TE-1", "TE-2", "TE-3", "TE-4", "TE-5"]);

    let keys_of = |page: TaskPage| page.items.into_iter().map(|t| t.key).collect::<Vec<_>>();
    let mine = TaskQuery { assignee: Some("picogent".into()), ..Default::default() };
    assert_eq!(keys_of(alice.list_tasks(&mine).await.unwrap()), ["TE-1", "TE-2"]);
    let open =
        TaskQuery { status: Some("todo,in_progress".into()), project_id: Some("team".into()), ..Default::default() };
    assert_eq!(keys_of(alice.list_tasks(&open).await.unwrap()), ["TE-1", "TE-2", "TE-3", "TE-4"]);
    let even = TaskQuery { labels: Some("x,even".into()), ..Default::default() };
    assert_eq!(keys_of(alice.list_tasks(&even).await.unwrap()), ["TE-2", "TE-4"]);
    let none = TaskQuery { labels: Some("even,odd".into()), ..Default::default() };
    assert!(alice.list_tasks(&none).await.unwrap().items.is_empty());
    let project = alice.get_project("team").await.unwrap();
    let by_id = TaskQuery { project_id: Some(project.id), limit: Some(200), ..Default::default() };
    assert_eq!(alice.list_tasks(&by_id).await.unwrap().items.len(), 5);
    let unknown = TaskQuery { project_id: Some("nope".into()), ..Default::default() };
    assert!(matches!(alice.list_tasks(&unknown).await, Err(TrackerError::NotFound { .. })));
    let bad_cursor = TaskQuery { cursor: Some("abc".into()), ..Default::default() };
    assert_eq!(invalid_field(alice.list_tasks(&bad_cursor).await.unwrap_err()), "cursor");
}

#[tokio::test]
async fn messages_threads_mentions_and_files() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    let bob = board.client("bob");
    let chat_id = alice.get_project("team").await.unwrap().chat_id;
    let task = alice.create_task(&new_task("discuss"), None).await.unwrap();

    let hello = SendMessage {
        content: "hi @bob and @picogent, not email@bob.org nor @carol".into(),
        chat_id: Some(chat_id.clone()),
        mentions: Some(vec!["otherbot".into()]),
        ..Default::default()
    };
    let root = alice.send_message(&hello, None).await.unwrap();
    assert_eq!(root.mentions, ["otherbot", "bob", "picogent"]);
    assert_eq!(
        (root.chat_id.as_deref(), root.task_id.as_ref(), root.parent_id.as_ref()),
        (Some(chat_id.as_str()), None, None)
    );
    assert_eq!(alice.get_message(&root.id).await.unwrap(), root);
    assert!(matches!(alice.get_message("nope").await, Err(TrackerError::NotFound { .. })));

    let reply = bob
        .reply_message(&root.id, &ReplyMessage { content: "hello".into(), mentions: None, reply_to: None }, None)
        .await
        .unwrap();
    assert_eq!(
        (reply.parent_id.as_deref(), reply.chat_id.as_deref()),
        (Some(root.id.as_str()), Some(chat_id.as_str()))
    );
    // A reply to a reply joins the same thread; so does send_message with parent_id alone. What
    // a message answers is kept apart from where it is: `reply_to` names any message.
    let answering = ReplyMessage { content: "again".into(), mentions: None, reply_to: Some(reply.id.clone()) };
    let nested = alice.reply_message(&reply.id, &answering, None).await.unwrap();
    assert_eq!(nested.parent_id.as_deref(), Some(root.id.as_str()));
    assert_eq!(nested.reply_to.as_deref(), Some(reply.id.as_str()));
    assert_eq!(alice.get_message(&nested.id).await.unwrap(), nested);
    assert_eq!((root.reply_to.as_ref(), reply.reply_to.as_ref()), (None, None));
    let nowhere = SendMessage {
        content: "answers nothing".into(),
        chat_id: Some(chat_id.clone()),
        reply_to: Some("nope".into()),
        ..Default::default()
    };
    match alice.send_message(&nowhere, None).await {
        Err(TrackerError::Invalid { field, .. }) => assert_eq!(field.as_deref(), Some("reply_to")),
        other => panic!("a reply_to that names no message is refused, got {other:?}"),
    }
    let by_parent = SendMessage { content: "third".into(), parent_id: Some(reply.id.clone()), ..Default::default() };
    let third = bob.send_message(&by_parent, None).await.unwrap();
    assert_eq!(
        (third.parent_id.as_deref(), third.chat_id.as_deref()),
        (Some(root.id.as_str()), Some(chat_id.as_str()))
    );
    assert!(matches!(
        bob.reply_message("nope", &ReplyMessage { content: "x".into(), mentions: None, reply_to: None }, None).await,
        Err(TrackerError::NotFound { .. })
    ));

    let comment =
        SendMessage { content: "on the task, @alice".into(), task_id: Some(task.key.clone()), ..Default::default() };
    let comment = bob.send_message(&comment, None).await.unwrap();
    assert_eq!((comment.task_id.as_deref(), comment.chat_id.as_ref()), (Some(task.id.as_str()), None));
    assert_eq!(comment.mentions, ["alice"]);

    let ids = |messages: Vec<MessageOut>| messages.into_iter().map(|m| m.id).collect::<Vec<_>>();
    let in_chat = MessageQuery { chat_id: Some(chat_id.clone()), ..Default::default() };
    assert_eq!(
        ids(alice.list_messages(&in_chat).await.unwrap()),
        [root.id.as_str(), reply.id.as_str(), nested.id.as_str(), third.id.as_str()]
    );
    let thread = MessageQuery { parent_id: Some(nested.id.clone()), ..Default::default() };
    assert_eq!(
        ids(alice.list_messages(&thread).await.unwrap()),
        [root.id.as_str(), reply.id.as_str(), nested.id.as_str(), third.id.as_str()]
    );
    let on_task = MessageQuery { task_id: Some(task.id.clone()), ..Default::default() };
    assert_eq!(ids(alice.list_messages(&on_task).await.unwrap()), [comment.id.as_str()]);
    let for_alice = MessageQuery { mentioning: Some("alice".into()), ..Default::default() };
    assert_eq!(ids(alice.list_messages(&for_alice).await.unwrap()), [comment.id.as_str()]);
    let for_bob = MessageQuery { mentioning: Some("bob".into()), ..Default::default() };
    assert_eq!(ids(alice.list_messages(&for_bob).await.unwrap()), [root.id.as_str()]);

    // Windows: newest `limit`, before, after; always oldest first.
    let newest = MessageQuery { limit: Some(2), ..in_chat.clone() };
    assert_eq!(ids(alice.list_messages(&newest).await.unwrap()), [nested.id.as_str(), third.id.as_str()]);
    let before = MessageQuery { limit: Some(2), before: Some(third.id.clone()), ..in_chat.clone() };
    assert_eq!(ids(alice.list_messages(&before).await.unwrap()), [reply.id.as_str(), nested.id.as_str()]);
    let after = MessageQuery { limit: Some(2), after: Some(root.id.clone()), ..in_chat.clone() };
    assert_eq!(ids(alice.list_messages(&after).await.unwrap()), [reply.id.as_str(), nested.id.as_str()]);
    let unknown_chat = MessageQuery { chat_id: Some("nope".into()), ..Default::default() };
    assert!(matches!(alice.list_messages(&unknown_chat).await, Err(TrackerError::NotFound { .. })));

    // Files.
    use base64::Engine as _;
    let bytes = b"line one\nline two\n".to_vec();
    let upload = UploadFile {
        filename: "notes.txt".into(),
        content: base64::engine::general_purpose::STANDARD.encode(&bytes),
        mime_type: Some("text/plain".into()),
    };
    let on_comment = bob.upload_file(&comment.id, &upload, None).await.unwrap();
    assert_eq!((on_comment.size, on_comment.mime_type.as_str()), (bytes.len() as u64, "text/plain"));
    let plain = UploadFile { filename: "blob.bin".into(), content: "AAEC".into(), mime_type: None };
    let on_chat = bob.upload_file(&root.id, &plain, None).await.unwrap();
    assert_eq!((on_chat.size, on_chat.mime_type.as_str()), (3, "application/octet-stream"));
    let files = |query: FileQuery| {
        let alice = alice.clone();
        async move { alice.list_files(&query).await.unwrap().into_iter().map(|a| a.id).collect::<Vec<_>>() }
    };
    assert_eq!(
        files(FileQuery { task_id: Some(task.key.clone()), ..Default::default() }).await,
        [on_comment.id.as_str()]
    );
    assert_eq!(
        files(FileQuery { message_id: Some(root.id.clone()), ..Default::default() }).await,
        [on_chat.id.as_str()]
    );
    assert_eq!(
        files(FileQuery { project_id: Some("team".into()), ..Default::default() }).await,
        [on_comment.id.as_str(), on_chat.id.as_str()]
    );
    let downloaded = alice.download_file(&on_comment.id).await.unwrap();
    assert_eq!((downloaded.filename.as_str(), downloaded.mime_type.as_str()), ("notes.txt", "text/plain"));
    assert_eq!(base64::engine::general_purpose::STANDARD.decode(downloaded.content).unwrap(), bytes);
    assert!(matches!(alice.download_file("nope").await, Err(TrackerError::NotFound { .. })));
    let not_base64 = UploadFile { filename: "x".into(), content: "!!!".into(), mime_type: None };
    assert_eq!(invalid_field(bob.upload_file(&root.id, &not_base64, None).await.unwrap_err()), "content");
    assert!(matches!(bob.upload_file("nope", &plain, None).await, Err(TrackerError::NotFound { .. })));
    assert_eq!(invalid_field(alice.list_files(&FileQuery::default()).await.unwrap_err()), "task_id");
}

#[tokio::test]
async fn an_idempotency_key_replays_the_first_answer() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    let chat_id = alice.get_project("team").await.unwrap().chat_id;
    let body = SendMessage { content: "once".into(), chat_id: Some(chat_id.clone()), ..Default::default() };
    let first = alice.send_message(&body, Some("key-1")).await.unwrap();
    let again = alice.send_message(&body, Some("key-1")).await.unwrap();
    assert_eq!(first, again);

    // Concurrent duplicates: still one message.
    let body = SendMessage { content: "racing".into(), chat_id: Some(chat_id.clone()), ..Default::default() };
    let racers: Vec<_> = (0..6)
        .map(|_| {
            let alice = alice.clone();
            let body = body.clone();
            tokio::spawn(async move { alice.send_message(&body, Some("key-2")).await.unwrap() })
        })
        .collect();
    let mut ids = HashSet::new();
    for racer in racers {
        ids.insert(racer.await.unwrap().id);
    }
    assert_eq!(ids.len(), 1);

    // Keys are per member: bob's key-1 is his own.
    let bob = board.client("bob");
    let bobs = bob.send_message(&body, Some("key-1")).await.unwrap();
    assert_ne!(bobs.id, first.id);

    // A key reused for another path is refused; an error answer is replayed as well.
    let reused = alice.create_task(&new_task("x"), Some("key-1")).await.unwrap_err();
    assert_eq!(invalid_field(reused), "Idempotency-Key");
    let in_chat = MessageQuery { chat_id: Some(chat_id), limit: Some(200), ..Default::default() };
    let contents: Vec<String> = alice.list_messages(&in_chat).await.unwrap().into_iter().map(|m| m.content).collect();
    assert_eq!(contents, ["once", "racing", "racing"]);

    let task = alice.create_task(&new_task("contested"), Some("task-key")).await.unwrap();
    assert_eq!(alice.create_task(&new_task("contested"), Some("task-key")).await.unwrap(), task);
    assert_eq!(alice.list_tasks(&TaskQuery::default()).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn concurrent_takes_have_exactly_one_winner() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    for round in 0..8 {
        let task = alice.create_task(&new_task(&format!("race {round}")), None).await.unwrap();
        let contenders: Vec<_> = ["picogent", "otherbot"]
            .into_iter()
            .map(|member| {
                let client = board.client(member);
                let key = task.key.clone();
                tokio::spawn(async move { (member, client.take_task(&key, member, None).await) })
            })
            .collect();
        let mut winners = Vec::new();
        let mut conflicts = 0;
        for contender in contenders {
            match contender.await.unwrap() {
                (member, Ok(taken)) => {
                    assert_eq!(taken.assignee_slug.as_deref(), Some(member));
                    winners.push(member);
                }
                (_, Err(TrackerError::Conflict { .. })) => conflicts += 1,
                (member, Err(other)) => panic!("{member} failed to take: {other:?}"),
            }
        }
        assert_eq!((winners.len(), conflicts), (1, 1), "round {round}");
        assert_eq!(alice.get_task(&task.key).await.unwrap().assignee_slug.as_deref(), Some(winners[0]));
    }
}

#[tokio::test]
async fn data_survives_a_restart() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    let task = alice
        .create_task(&CreateTask { assignee_slug: Some("picogent".into()), ..new_task("durable") }, None)
        .await
        .unwrap();
    let chat_id = alice.get_project("team").await.unwrap().chat_id;
    let body = SendMessage { content: "still here".into(), chat_id: Some(chat_id.clone()), ..Default::default() };
    let message = alice.send_message(&body, Some("durable-key")).await.unwrap();
    let events_before = all_events(&board, "picogent").await;
    assert_eq!(events_before.len(), 2);

    // An open event stream does not hold the shutdown up; it is closed.
    let mut open_stream = EventStream::connect(&board, "picogent").await;
    let board = board.restart().await;
    open_stream.expect_closed().await;
    let alice = board.client("alice");
    assert_eq!(alice.get_task("TE-1").await.unwrap(), task);
    assert_eq!(alice.get_message(&message.id).await.unwrap(), message);
    // The idempotency key and the task numbering live on; the seed was not applied again.
    assert_eq!(alice.send_message(&body, Some("durable-key")).await.unwrap(), message);
    assert_eq!(alice.create_task(&new_task("next"), None).await.unwrap().key, "TE-2");
    assert_eq!(alice.list_projects().await.unwrap().len(), 1);
    // The event log survives too, and its numbering goes on.
    let events_after = all_events(&board, "picogent").await;
    assert_eq!(events_after, events_before);
}

#[tokio::test]
async fn the_event_stream_delivers_and_resumes() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    let chat_id = alice.get_project("team").await.unwrap().chat_id;
    // Logged before the connection: not sent to a fresh connection.
    alice.create_task(&CreateTask { assignee_slug: Some("picogent".into()), ..new_task("old") }, None).await.unwrap();

    let mut stream = EventStream::connect(&board, "picogent").await;
    let task = alice.create_task(&new_task("work"), None).await.unwrap();
    alice.assign_task(&task.key, "picogent", None).await.unwrap();
    let assigned = stream.next_event().await;
    assert_eq!((assigned.event.as_str(), assigned.seq), (EVENT_TASK_ASSIGNED, 2));
    match Event::from_envelope(&assigned).unwrap() {
        Event::TaskAssigned(data) => {
            assert_eq!(data.task.key, task.key);
            assert_eq!(data.assigned_by, "alice");
        }
        other => panic!("expected task.assigned, got {other:?}"),
    }
    stream.send_json(json!({"type": "ping"})).await;
    assert_eq!(stream.next_json().await, json!({"type": "pong"}));
    stream.close().await;

    // Missed while disconnected.
    let body = SendMessage { content: "standup".into(), chat_id: Some(chat_id), ..Default::default() };
    let chat = alice.send_message(&body, None).await.unwrap();
    alice.update_task(&task.key, &UpdateTask { priority: Some(Priority::Urgent), ..Default::default() }).await.unwrap();
    alice.assign_task(&task.key, "bob", None).await.unwrap();

    let mut stream = EventStream::connect_with_query_token(&board, "picogent").await;
    let (missed, last_seq) = stream.resume(assigned.seq).await;
    let names: Vec<&str> = missed.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names, [EVENT_MESSAGE_NEW, EVENT_TASK_UPDATED, EVENT_TASK_UNASSIGNED]);
    assert_eq!(missed.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
    assert_eq!(last_seq, 5);
    match Event::from_envelope(&missed[0]).unwrap() {
        Event::MessageNew(data) => assert_eq!(data.message.id, chat.id),
        other => panic!("expected message.new, got {other:?}"),
    }
    match Event::from_envelope(&missed[1]).unwrap() {
        Event::TaskUpdated(data) => {
            assert_eq!((data.changed, data.updated_by.as_str()), (vec!["priority".to_string()], "alice"))
        }
        other => panic!("expected task.updated, got {other:?}"),
    }
    match Event::from_envelope(&missed[2]).unwrap() {
        Event::TaskUnassigned(data) => {
            assert_eq!((data.previous_assignee.as_str(), data.unassigned_by.as_str()), ("picogent", "alice"));
            assert_eq!(data.task.assignee_slug.as_deref(), Some("bob"));
        }
        other => panic!("expected task.unassigned, got {other:?}"),
    }
    let ids: HashSet<&str> = missed.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), 3);

    // Live events follow the replay with no gap; garbage frames are ignored.
    stream.send_json(json!({"type": "dance"})).await;
    stream.send_json(json!("not even an object")).await;
    alice.take_task(&task.key, "alice", None).await.unwrap_err();
    alice.assign_task(&task.key, "picogent", None).await.unwrap();
    let live = stream.next_event().await;
    assert_eq!((live.event.as_str(), live.seq), (EVENT_TASK_ASSIGNED, 6));
    // A resume past the end of the log replays nothing and says where the log ends.
    assert_eq!(stream.resume(1_000).await, (Vec::new(), 6));
    alice
        .update_task(&task.key, &UpdateTask { title: Some("work, renamed".into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(stream.next_event().await.seq, 7);

    // Protocol pings are answered.
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    stream.socket.send(Message::Ping(b"are you there".to_vec().into())).await.unwrap();
    loop {
        let frame = tokio::time::timeout(support::PATIENCE, stream.socket.next()).await.unwrap().unwrap().unwrap();
        if let Message::Pong(payload) = frame {
            assert_eq!(payload.as_ref(), b"are you there");
            break;
        }
    }
    stream.close().await;

    // A frame over 1 MiB is refused: the connection ends.
    let mut stream = EventStream::connect(&board, "picogent").await;
    let huge = json!({"type": "ping", "padding": "p".repeat(limits::FRAME_BYTES)});
    let _ = stream.socket.send(Message::Text(huge.to_string().into())).await;
    stream.expect_closed().await;
}

#[tokio::test]
async fn events_reach_the_members_the_contract_names() {
    let board = TestBoard::start().await;
    let alice = board.client("alice");
    let bob = board.client("bob");
    let agent = board.client("picogent");
    let other = board.client("otherbot");
    let chat_id = alice.get_project("team").await.unwrap().chat_id;

    // Created with an assignee, watched, updated, reassigned by PATCH, taken back, rejected.
    let task = alice
        .create_task(&CreateTask { assignee_slug: Some("picogent".into()), ..new_task("flow") }, None)
        .await
        .unwrap();
    other.watch_task(&task.key, "otherbot", None).await.unwrap();
    alice.update_task(&task.key, &UpdateTask { title: Some("flow 2".into()), ..Default::default() }).await.unwrap();
    let to_bob = UpdateTask { assignee_slug: Some(Some("bob".into())), ..Default::default() };
    alice.update_task(&task.key, &to_bob).await.unwrap();
    alice.update_task(&task.key, &UpdateTask { assignee_slug: Some(None), ..Default::default() }).await.unwrap();
    agent.take_task(&task.key, "picogent", None).await.unwrap();
    agent.reject_task(&task.key, "cannot", None).await.unwrap();
    // A task comment by bob mentioning nobody; a chat message by bob; a reply by otherbot.
    let comment = SendMessage { content: "note".into(), task_id: Some(task.key.clone()), ..Default::default() };
    bob.send_message(&comment, None).await.unwrap();
    let chat = SendMessage { content: "hello team".into(), chat_id: Some(chat_id), ..Default::default() };
    let chat = bob.send_message(&chat, None).await.unwrap();
    other
        .reply_message(&chat.id, &ReplyMessage { content: "hi @alice".into(), mentions: None, reply_to: None }, None)
        .await
        .unwrap();

    let names = |events: Vec<EventEnvelope>| events.into_iter().map(|e| e.event).collect::<Vec<_>>();
    let agent_events = all_events(&board, "picogent").await;
    assert!(agent_events.windows(2).all(|w| w[1].seq == w[0].seq + 1), "seq counts up by one");
    assert_eq!(
        names(agent_events),
        [
            "task.assigned",   // created for it
            "task.updated",    // the title changed
            "task.unassigned", // reassigned to bob
            "task.assigned",   // taken
            "task.unassigned", // its own rejection
            "message.new",     // the rejection comment: it is the author
            "message.new",     // the chat message: every member
            "message.new",     // the reply in the chat
        ]
    );
    assert_eq!(
        names(all_events(&board, "bob").await),
        ["task.assigned", "task.unassigned", "message.new", "message.new", "message.new"]
    );
    // otherbot watches: the title change and the comments; changes of assignee alone (the
    // reassignments, the rejection of a task already in todo) are not updates.
    assert_eq!(
        names(all_events(&board, "otherbot").await),
        ["task.updated", "message.new", "message.new", "message.new", "message.new"]
    );
    // alice created the task: its comments, the chat, and the reply that mentions her.
    assert_eq!(names(all_events(&board, "alice").await), ["message.new", "message.new", "message.new", "message.new"]);
}
