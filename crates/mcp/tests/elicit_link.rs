//! A link an MCP server asks the person to open (URL-mode elicitation) is posted on the
//! reference board so that the person sees it, working, and the board reads no mention in it:
//! `http://127.0.0.1:1/@bob?x=@picogent` once mentioned bob and picogent. The question mentions
//! the person asked, and only them; their `done` answers it.

use std::time::Duration;

use picogent_mcp::elicit::{Elicitation, People};
use picogent_support::secret::Secret;
use picogent_tools::ToolContext;
use picogent_tools::person::PersonAsker;
use picogent_tracker::TrackerClient;
use picogent_tracker::TrackerConfig;
use picogent_tracker::model::{CreateTask, MessageOut, MessageQuery, SendMessage};
use picogent_tracker::session::SessionKey;
use rmcp::model::{ElicitRequestParams, ElicitationAction};

/// The link as the server sends it, and as the person must see it.
const SENT: &str = "http://127.0.0.1:1/@bob?x=@picogent#@otherbot";
const SHOWN: &str = "http://127.0.0.1:1/%40bob?x=%40picogent#%40otherbot";
const WAIT: Duration = Duration::from_secs(30);

fn client(board: &picogent_board::BoardHandle, token: &str) -> TrackerClient {
    let config: TrackerConfig = serde_json::from_value(serde_json::json!({"url": board.url()})).unwrap();
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

/// The agent's posts on the task so far.
async fn posts(alice: &TrackerClient, task_id: &str) -> Vec<MessageOut> {
    let query = MessageQuery { task_id: Some(task_id.to_string()), ..MessageQuery::default() };
    alice.list_messages(&query).await.unwrap().into_iter().filter(|m| m.author_slug == "picogent").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_is_posted_working_and_mentions_nobody_but_the_person_asked() {
    let dir = tempfile::tempdir().unwrap();
    let board = picogent_board::start_seeded(dir.path()).await.unwrap();
    let alice = client(&board, "tok-alice");
    let task = CreateTask {
        project_slug: "team".into(),
        title: "Connect the account".into(),
        assignee_slug: Some("picogent".into()),
        ..CreateTask::default()
    };
    let task = alice.create_task(&task, None).await.unwrap();

    let elicitation = Elicitation::default();
    let asker = PersonAsker::new(client(&board, "tok-picogent")).with_poll_interval(Duration::from_millis(50));
    elicitation.set_people(People { asker, timeout: WAIT, url_retries: 1, model: None });
    let mut context = ToolContext::new("picogent");
    context.session = Some(SessionKey::Task(task.id.clone()));
    context.requester = Some("alice".to_string());
    context.run_id = Some("run-link".to_string());
    let params = ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message: "Sign in to connect, @bob".to_string(),
        url: SENT.to_string(),
        elicitation_id: "link-1".to_string(),
    };
    let asking = tokio::spawn(async move { elicitation.answer("auth", "connect_@bob", &params, Some(&context)).await });

    let deadline = tokio::time::Instant::now() + WAIT;
    let question = loop {
        if let Some(question) = posts(&alice, &task.id).await.into_iter().next() {
            break question;
        }
        assert!(tokio::time::Instant::now() < deadline, "the link was never posted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("the question:\n{}", question.content);
    assert!(question.content.contains(SHOWN), "the person sees the link: {}", question.content);
    assert_eq!(question.mentions, ["alice"], "only the person asked is mentioned: {}", question.content);
    for member in ["bob", "picogent", "otherbot"] {
        let query = MessageQuery { mentioning: Some(member.to_string()), ..MessageQuery::default() };
        assert!(alice.list_messages(&query).await.unwrap().is_empty(), "{member} was mentioned");
    }

    let done = SendMessage { task_id: Some(task.id.clone()), content: "done".into(), ..SendMessage::default() };
    alice.send_message(&done, None).await.unwrap();
    let answer = tokio::time::timeout(WAIT, asking).await.expect("answered").unwrap().expect("an answer");
    assert_eq!(answer.action, ElicitationAction::Accept);
}
