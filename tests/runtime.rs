//! End-to-end tests of the long-lived agent over real sockets: the reference board, the offline
//! model endpoint and the agent, all on 127.0.0.1:0.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/interop.rs"]
mod interop;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::*;
use picogent::runtime::AgentHandle;
use picogent::state::RunStatus;
use picogent::tracker::model::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assignment_is_acknowledged_then_worked_to_review() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Ship the docs", "Docs for 1.0\n- write the guide\n- proofread it").await;
    let task = wait_status(&alice, &task.id, TaskStatus::InReview).await;
    wait_idle(&agent).await;

    // The acknowledgement overlaps the first model call, so the prompt shows the task in the
    // status it gives it; and it landed before the run's first tool call, so it cannot have
    // overtaken the run's own move to in_review.
    let prompt = first_user_prompt(&model);
    assert!(prompt.contains("Status: in_progress"), "{prompt}");
    assert_eq!(alice.get_task(&task.id).await.unwrap().status, TaskStatus::InReview);
    let steps = alice.list_steps(&task.id).await.unwrap();
    let titles: Vec<_> = steps.iter().map(|s| s.title.as_str()).collect();
    assert_eq!(titles, ["write the guide", "proofread it"]);
    assert!(steps.iter().all(|s| s.done));
    let notes = comments(&alice, &task.id).await;
    assert_eq!(notes.iter().filter(|m| m.author_slug == "picogent").count(), 1, "{notes:#?}");

    let runs = runs_for(&agent, &format!("task:{}", task.id)).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Completed);
    assert!(runs[0].prompt_tokens > 0 && runs[0].tool_calls >= 6, "{:?}", runs[0]);

    let metrics =
        reqwest::get(format!("http://{}/metrics", agent.http_addr.unwrap())).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("picogent_runs_total{outcome=\"completed\"} 1"), "{metrics}");
    assert!(!metrics.contains("tok-"), "metrics must not carry tokens");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// The acknowledgement waits for the run's first model request; a run that ends before making
/// one (here its token budget cannot fit the first request) must still let it go, end, and say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_before_its_first_model_request_is_acknowledged_and_ends() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"limits": {"max_tokens_per_run": 100}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Too big a budget", "Anything\n- one step").await;
    let session = format!("task:{}", task.id);
    let run = eventually(Duration::from_secs(30), "the run to end", || async {
        runs_for(&agent, &session).await.into_iter().find(|run| run.finished_at.is_some())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(run.status, RunStatus::Failed, "{run:?}");
    assert!(model.requests().is_empty(), "no model request was made");
    assert_eq!(alice.get_task(&task.id).await.unwrap().status, TaskStatus::InProgress, "acknowledged");
    let notice = eventually(Duration::from_secs(20), "the run's notice", || async {
        comments(&alice, &task.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    assert!(notice.content.contains("budget") || notice.content.contains("token"), "{notice:#?}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mention_gets_one_reply_and_the_rest_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;

    let ignored = say(&alice, &chat, "lunch at noon, anyone? (no bot needed)").await;
    let question = say(&alice, &chat, "@picogent how many tasks are open?").await;
    let replies = eventually(Duration::from_secs(20), "a reply", || async {
        let replies: Vec<_> =
            thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
        (!replies.is_empty()).then_some(replies)
    })
    .await;
    wait_idle(&agent).await;
    // The agent's own reply came back to it as message.new and did not start a run.
    eventually(Duration::from_secs(10), "own reply seen", || async {
        (agent.metrics.event_count("message.new", "own_message") >= 1).then_some(())
    })
    .await;
    assert_eq!(replies.len(), 1);
    assert_eq!(thread(&alice, &question.id).await.iter().filter(|m| m.author_slug == "picogent").count(), 1);
    assert!(thread(&alice, &ignored.id).await.iter().all(|m| m.author_slug != "picogent"));
    assert_eq!(agent.metrics.event_count("message.new", "not_addressed"), 1);
    assert_eq!(agent.state.list_runs(50).await.unwrap().len(), 1);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_replays_and_reconciliation_are_handled_once() {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;

    // A second connection as the agent captures the real envelopes, to deliver them again.
    let mut request = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
        "{}/api/ws?token=tok-picogent",
        board.url().replace("http://", "ws://")
    ))
    .unwrap();
    request.headers_mut().remove("authorization");
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();

    let task = create_assigned(&alice, "Tidy labels", "- merge duplicates").await;
    let question = say(&alice, &chat, "@picogent ping").await;
    let mut envelopes = Vec::new();
    while envelopes.len() < 2 {
        let frame = tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap().unwrap().unwrap();
        if let Ok(envelope) = serde_json::from_str::<EventEnvelope>(frame.to_text().unwrap())
            && (envelope.event == EVENT_TASK_ASSIGNED || envelope.event == EVENT_MESSAGE_NEW)
        {
            envelopes.push(envelope);
        }
    }
    wait_status(&alice, &task.id, TaskStatus::InReview).await;
    wait_idle(&agent).await;

    // The same events again, twice: as a redelivery and as a replay would bring them.
    for _ in 0..2 {
        for envelope in &envelopes {
            let item = picogent::transport::StreamItem::Event(envelope.clone().into_received().unwrap());
            agent.inputs.send(picogent::router::Input::Stream(Box::new(item))).await.unwrap();
        }
    }
    // And a reconciliation, which finds the same task and the same mention through REST.
    let caught_up = picogent::transport::LinkStatus::CaughtUp { last_seq: 0 };
    agent
        .inputs
        .send(picogent::router::Input::Stream(Box::new(picogent::transport::StreamItem::Status(caught_up))))
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "duplicates dropped", || async {
        (agent.metrics.event_count("task.assigned", "duplicate")
            + agent.metrics.event_count("message.new", "duplicate")
            >= 4)
            .then_some(())
    })
    .await;
    // Give a wrongly started run the chance to show itself before counting.
    wait_idle(&agent).await;
    let runs = agent.state.list_runs(50).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!(thread(&alice, &question.id).await.iter().filter(|m| m.author_slug == "picogent").count(), 1);
    assert_eq!(comments(&alice, &task.id).await.iter().filter(|m| m.author_slug == "picogent").count(), 1);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_restart_mid_run_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let addr = board.addr();
    let model = start_model(150).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;

    let first = create_assigned(&alice, "First", "- a\n- b").await;
    eventually(Duration::from_secs(10), "first run started", || async { (model.request_count() >= 1).then_some(()) })
        .await;
    // The board goes away mid-run (the WebSocket drops), and comes back on the same port.
    board.shutdown().await.unwrap();
    let board = start_board_at(dir.path(), addr).await;
    // Events sent while the agent reconnects.
    let second = create_assigned(&alice, "Second", "- c").await;
    let question = say(&alice, &chat, "@picogent are you there?").await;

    for task in [&first, &second] {
        wait_status(&alice, &task.id, TaskStatus::InReview).await;
    }
    eventually(Duration::from_secs(20), "reply", || async {
        thread(&alice, &question.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert_eq!(thread(&alice, &question.id).await.iter().filter(|m| m.author_slug == "picogent").count(), 1);
    for task in [&first, &second] {
        let steps = alice.list_steps(&task.id).await.unwrap();
        let description = task.description.as_deref().unwrap();
        assert_eq!(steps.len(), description.lines().count(), "steps of {}: {steps:#?}", task.key);
        let mine = comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
        assert_eq!(mine, 1, "summary comments on {}", task.key);
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_agent_resumes_its_run_without_repeating_comments() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(250).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let config_path = dir.path().join("agent.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let spawn = || spawn_agent_process(&config_path);
    let mut process = spawn();
    let alice = client(&board, "tok-alice");
    // The agent is up when its HTTP listener... it binds port 0, so wait for the task to move.
    let task = create_assigned(&alice, "Survive a crash", "- one\n- two\n- three").await;
    // Kill it in the middle of the run: after some steps exist, before the summary.
    eventually(Duration::from_secs(20), "a step ticked", || async {
        alice.list_steps(&task.id).await.ok()?.iter().any(|s| s.done).then_some(())
    })
    .await;
    process.kill().unwrap();
    process.wait().unwrap();
    let before = model.request_count();

    let mut process = spawn();
    wait_status(&alice, &task.id, TaskStatus::InReview).await;
    assert!(model.request_count() > before, "the restarted agent went on");
    let steps = alice.list_steps(&task.id).await.unwrap();
    assert_eq!(steps.len(), 3, "{steps:#?}");
    assert!(steps.iter().all(|s| s.done));

    let state = picogent::state::State::open(&config.state.path).await.unwrap();
    let runs = eventually(Duration::from_secs(10), "the run recorded as finished", || async {
        let runs = state.list_runs(10).await.ok()?;
        runs.iter().all(|r| r.finished_at.is_some()).then_some(runs)
    })
    .await;
    // The summary is posted as the run ends, after the task moved to review.
    let mine = comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert_eq!(mine, 1);
    process.kill().unwrap();
    process.wait().unwrap();
    assert_eq!(runs.len(), 1, "the interrupted run was resumed, not duplicated: {runs:#?}");
    assert_eq!(runs[0].status, RunStatus::Completed);
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_during_a_run_steers_it() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(200).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Steer me", "- x\n- y").await;
    eventually(Duration::from_secs(10), "run started", || async { (model.request_count() >= 1).then_some(()) }).await;
    comment(&alice, &task.id, "@picogent also mention the changelog").await;
    wait_status(&alice, &task.id, TaskStatus::InReview).await;
    wait_idle(&agent).await;
    let runs = runs_for(&agent, &format!("task:{}", task.id)).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(agent.metrics.event_count("message.new", "steered"), 1);
    let record = runs[0].record.clone().unwrap();
    assert_eq!(record["record"]["steering_inputs"], 1, "{record:#}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unassigning_and_stop_cancel_runs_and_say_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(300).await;
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let unassigned = create_assigned(&alice, "Unassign me", "- a\n- b\n- c").await;
    let stopped = create_assigned(&alice, "Stop me", "- a\n- b\n- c").await;
    eventually(Duration::from_secs(10), "both runs started", || async {
        (agent.status.active_runs() == 2).then_some(())
    })
    .await;
    alice
        .update_task(&unassigned.id, &UpdateTask { assignee_slug: Some(None), ..UpdateTask::default() })
        .await
        .unwrap();
    comment(&alice, &stopped.id, "@picogent stop").await;
    wait_idle(&agent).await;
    for task in [&unassigned, &stopped] {
        let runs = runs_for(&agent, &format!("task:{}", task.id)).await;
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].status, RunStatus::Stopped, "{:?}", runs[0]);
        let stopped_notices = || async {
            let notices: Vec<_> = comments(&alice, &task.id)
                .await
                .into_iter()
                .filter(|m| m.author_slug == "picogent" && m.content.starts_with("Stopped"))
                .collect();
            notices
        };
        eventually(Duration::from_secs(10), "the stop notice", || async {
            (!stopped_notices().await.is_empty()).then_some(())
        })
        .await;
        let notices = stopped_notices().await;
        assert_eq!(notices.len(), 1, "{notices:#?}");
        assert_ne!(alice.get_task(&task.id).await.unwrap().status, TaskStatus::InReview);
    }
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A run waiting for a slot is stopped before it starts: the person sees one notice, the task is
/// never worked, and after a restart reconciliation does not take it up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_while_it_waits_for_a_slot_says_so_once_and_stays_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(300).await;
    let config =
        agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({"limits": {"max_concurrent_runs": 1}}));
    let agent = start_agent(config.clone()).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let first = create_assigned(&alice, "Busy work", "- a\n- b\n- c").await;
    let waiting = create_assigned(&alice, "Wait your turn", "- a\n- b").await;
    eventually(Duration::from_secs(10), "the second run waits for the slot", || async {
        (agent.status.active_runs() == 1 && agent.status.waiting().len() == 1).then_some(())
    })
    .await;
    comment(&alice, &waiting.id, "@picogent stop").await;
    wait_status(&alice, &first.id, TaskStatus::InReview).await;
    wait_idle(&agent).await;
    let agent_comments = |task_id: String| {
        let alice = &alice;
        async move {
            comments(alice, &task_id).await.into_iter().filter(|m| m.author_slug == "picogent").collect::<Vec<_>>()
        }
    };
    let said = agent_comments(waiting.id.clone()).await;
    assert_eq!(said.len(), 1, "one notice and nothing else: {said:#?}");
    assert!(said[0].content.starts_with("Stopped before it started: @alice asked me to stop"), "{}", said[0].content);
    assert_eq!(alice.get_task(&waiting.id).await.unwrap().status, TaskStatus::Todo, "never worked");
    assert!(alice.list_steps(&waiting.id).await.unwrap().is_empty());
    let runs = runs_for(&agent, &format!("task:{}", waiting.id)).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!((runs[0].status, runs[0].turns), (RunStatus::Stopped, 0));
    agent.shutdown().await.unwrap();

    // A restart: the stopped task is open and assigned, but it was stopped; nothing is taken up.
    // Past the point where it would be taken up: the restart's reconciliation is done, and every
    // event the board holds for the agent is handled with what it started.
    let agent = start_agent(config).await;
    wait_ready(&agent).await;
    caught_up_with_board(&agent, &dir.path().join("board.db"), "picogent").await;
    let found = agent.status.startup().and_then(|startup| startup.reconciliation).expect("the first reconciliation");
    assert_eq!(found.tasks.worked, 0, "{found:?}");
    assert_eq!(found.tasks.skipped.get("finished_run"), Some(&1), "the stopped run counts as finished: {found:?}");
    assert_eq!(runs_for(&agent, &format!("task:{}", waiting.id)).await.len(), 1, "not worked after the restart");
    assert_eq!(agent_comments(waiting.id.clone()).await.len(), 1);
    assert_eq!(alice.get_task(&waiting.id).await.unwrap().status, TaskStatus::Todo);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// The reply cap is a guard against bots, not people: a person's seventh and tenth mention in an
/// hour in one thread are answered like the first, each by a reply that names it, with no notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_seventh_and_tenth_mention_in_an_hour_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"limits": {"max_replies_per_thread_per_hour": 6}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let root = say(&alice, &chat_id(&alice).await, "@picogent question 1: what is open?").await;
    let mut asked = vec![root.clone()];
    for n in 1..=10 {
        let mention = asked.last().unwrap().clone();
        let answer = eventually(Duration::from_secs(20), &format!("the answer to question {n}"), || async {
            thread(&alice, &root.id).await.into_iter().find(|m| m.reply_to.as_deref() == Some(mention.id.as_str()))
        })
        .await;
        assert_eq!(answer.author_slug, "picogent");
        wait_idle(&agent).await;
        if n < 10 {
            let body = ReplyMessage {
                content: format!("@picogent question {}: and then?", n + 1),
                mentions: None,
                reply_to: None,
            };
            asked.push(alice.reply_message(&root.id, &body, None).await.unwrap());
        }
    }
    let messages = thread(&alice, &root.id).await;
    let replies: Vec<_> = messages.iter().filter(|m| m.author_slug == "picogent").collect();
    assert_eq!(replies.len(), 10, "one reply per mention, the seventh to the tenth too: {messages:#?}");
    for question in &asked {
        let named = replies.iter().filter(|m| m.reply_to.as_deref() == Some(question.id.as_str())).count();
        assert_eq!(named, 1, "{:?} answered once", question.content);
    }
    assert!(replies.iter().all(|m| !m.content.contains("max_replies_per_thread_per_hour")), "no notice");
    assert_eq!(agent.metrics.event_count("message.new", "reply_cap"), 0);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// Two bots allowed to answer each other are stopped by the cap on replies to bots; the person
/// who started the thread sees one notice from each bot that stopped, not one per message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_cap_stops_two_bots_talking_to_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let cap = 3;
    let limits = json!({"limits": {"max_replies_per_thread_per_hour": cap}});
    let mut picogent_extra = limits.clone();
    merge(&mut picogent_extra, json!({"allowed_bots": ["otherbot"]}));
    let mut otherbot_extra = limits;
    merge(&mut otherbot_extra, json!({"allowed_bots": ["picogent"]}));
    let picogent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", picogent_extra)).await;
    let otherbot = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "otherbot", otherbot_extra)).await;
    wait_ready(&picogent).await;
    wait_ready(&otherbot).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;

    // Both bots are addressed; each answers in the thread, and each answer is a message in a
    // thread the other has answered in: without the cap they would go on for ever.
    let root = say(&alice, &chat, "@picogent @otherbot please discuss the release between you").await;
    let capped = |bot: &AgentHandle| bot.metrics.event_count("message.new", "reply_cap");
    let is_notice = |m: &MessageOut| m.content.contains("limits.max_replies_per_thread_per_hour");
    let notices_of =
        |messages: &[MessageOut], slug: &str| messages.iter().filter(|m| m.author_slug == slug && is_notice(m)).count();
    let messages = eventually(Duration::from_secs(60), "the conversation stopped by the cap", || async {
        if picogent.status.active_runs() + otherbot.status.active_runs() > 0 {
            return None;
        }
        let messages = thread(&alice, &root.id).await;
        let last = messages.last()?.author_slug.clone();
        // The bot that did not write the last message refused to answer it, and a bot that
        // refused told the thread.
        let refuser = if last == "picogent" { &otherbot } else { &picogent };
        let told = [(&picogent, "picogent"), (&otherbot, "otherbot")]
            .iter()
            .all(|(bot, slug)| capped(bot) == 0 || notices_of(&messages, slug) >= 1);
        (capped(refuser) >= 1 && told).then_some(messages)
    })
    .await;
    for slug in ["picogent", "otherbot"] {
        // Its answer to alice is a person's and not counted; its answers to the other bot are.
        let answers = messages.iter().filter(|m| m.author_slug == slug && !is_notice(m)).count();
        assert!(answers <= cap as usize + 1, "{slug} replied {answers} times: {messages:#?}");
        assert!(notices_of(&messages, slug) <= 1, "{slug}: one notice, not one per message: {messages:#?}");
    }
    let most =
        ["picogent", "otherbot"].map(|slug| messages.iter().filter(|m| m.author_slug == slug && !is_notice(m)).count());
    assert_eq!(most.into_iter().max(), Some(cap as usize + 1), "{messages:#?}");
    let notices: Vec<_> = messages.iter().filter(|m| is_notice(m)).collect();
    assert!(!notices.is_empty(), "the person is told: {messages:#?}");
    assert!(notices.iter().all(|m| m.content.contains("UTC")), "and when the bot answers again: {notices:#?}");
    picogent.shutdown().await.unwrap();
    otherbot.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// Past the day's budget every new request is refused without a model call, and the person is
/// told once in each thread where they asked, with the setting and when: not once per mention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_spend_guard_refuses_new_runs_with_one_notice_per_thread() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"limits": {"max_tokens_per_day": 2500}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;

    let first = say(&alice, &chat, "@picogent first question").await;
    eventually(Duration::from_secs(20), "first reply", || async {
        thread(&alice, &first.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let spent = agent.state.tokens_today().await.unwrap();
    assert!(spent > 0 && spent <= 2500, "spent {spent}");
    // Top the day up to the limit, as a busy day would have.
    agent.state.add_tokens(time::OffsetDateTime::now_utc().date(), 2500 - spent).await.unwrap();

    // Three mentions in one thread, one in another.
    let busy = say(&alice, &chat, "@picogent question 0").await;
    for n in 1..3 {
        let body = ReplyMessage { content: format!("@picogent question {n}"), mentions: None, reply_to: None };
        alice.reply_message(&busy.id, &body, None).await.unwrap();
    }
    let other = say(&alice, &chat, "@picogent another question").await;
    eventually(Duration::from_secs(20), "spend guard", || async {
        (agent.metrics.event_count("run", "spend_guard") >= 4).then_some(())
    })
    .await;
    wait_idle(&agent).await;
    for root in [&busy, &other] {
        // The refusal is counted, then told.
        let notices = eventually(Duration::from_secs(20), "the notice in the thread", || async {
            let notices: Vec<_> =
                thread(&alice, &root.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
            (!notices.is_empty()).then_some(notices)
        })
        .await;
        assert_eq!(notices.len(), 1, "one notice in the thread: {notices:#?}");
        let text = &notices[0].content;
        assert!(text.contains("daily model budget") && text.contains("limits.max_tokens_per_day"), "{text}");
        assert!(text.contains("00:00 UTC"), "when it works again: {text}");
        assert_eq!(notices[0].reply_to.as_deref(), Some(root.id.as_str()), "it answers the first refused");
    }
    assert_eq!(agent.state.list_runs(50).await.unwrap().len(), 1);
    assert!(agent.state.tokens_today().await.unwrap() <= 2500);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[test]
fn demo_runs_to_completion() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .arg("demo")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "demo failed: {stdout}\n{stderr}");
    // The timeline is what a person reads: without RUST_LOG the agent's info lines stay out.
    assert!(!stderr.contains("INFO") && !stderr.contains("tool permission"), "{stderr}");
    assert!(stdout.contains("is in review"), "{stdout}");
    assert!(stdout.contains("[x] draft the notes"), "{stdout}");
    assert!(stdout.contains("reply @picogent"), "{stdout}");
    assert!(stdout.contains("offline planner"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_agent_is_driven_over_mcp() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    // The task exists but is not assigned: only start_run makes the agent work it.
    let alice = client(&board, "tok-alice");
    let task = alice
        .create_task(
            &CreateTask {
                project_slug: "team".into(),
                title: "Driven over MCP".into(),
                description: Some("- first\n- second".into()),
                ..CreateTask::default()
            },
            None,
        )
        .await
        .unwrap();
    // By default start_run works only tasks assigned to the agent.
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let url = format!("http://{}/mcp", agent.http_addr.unwrap());
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(MCP_TOKEN),
    );
    let mcp = ().serve(transport).await.unwrap();
    let mut arguments = serde_json::Map::new();
    arguments.insert("task_key".into(), json!(task.key));
    let refused = mcp.call_tool(CallToolRequestParams::new("start_run").with_arguments(arguments)).await.unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(format!("{refused:?}").contains("mcp.allow_unassigned_runs"), "{refused:?}");
    assert!(agent.state.list_runs(10).await.unwrap().is_empty(), "no run was started");
    mcp.cancel().await.unwrap();
    agent.shutdown().await.unwrap();

    let allowed = json!({"mcp": {"allow_unassigned_runs": true}});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", allowed)).await;
    wait_ready(&agent).await;
    let url = format!("http://{}/mcp", agent.http_addr.unwrap());

    // Without the token: refused.
    let refused = reqwest::Client::new().post(&url).json(&json!({})).send().await.unwrap();
    assert_eq!(refused.status(), 401);

    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(MCP_TOKEN),
    );
    let mcp = ().serve(transport).await.unwrap();
    let mut arguments = serde_json::Map::new();
    arguments.insert("task_key".into(), json!(task.key));
    let started = mcp.call_tool(CallToolRequestParams::new("start_run").with_arguments(arguments)).await.unwrap();
    assert_ne!(started.is_error, Some(true), "{started:?}");
    let run_id = started.structured_content.as_ref().unwrap()["run_id"].as_str().unwrap().to_string();

    let read = |uri: String| {
        let mcp = &mcp;
        async move { resource_text(mcp.peer(), &uri).await }
    };
    let run: Value = eventually(Duration::from_secs(30), "the run finished", || async {
        let run: Value = serde_json::from_str(&read(format!("run://{run_id}")).await).ok()?;
        (run["status"] != "running").then_some(run)
    })
    .await;
    assert_eq!(run["status"], "completed", "{run:#}");
    assert!(run["tool_calls"].as_u64().unwrap() >= 5, "{run:#}");
    let result: Value = serde_json::from_str(&read(format!("run://{run_id}/result")).await).unwrap();
    assert_eq!(result["outcome"], "completed", "{result:#}");
    let log = read(format!("run://{run_id}/log")).await;
    assert!(log.contains("add_step"), "{log}");
    let status: Value = serde_json::from_str(&read("agent://status".to_string()).await).unwrap();
    assert_eq!(status["connected"], true, "{status:#}");
    let steps = alice.list_steps(&task.id).await.unwrap();
    assert_eq!(steps.len(), 2);
    assert!(steps.iter().all(|s| s.done));
    mcp.cancel().await.unwrap();
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// The MCP server-everything script installed by `tests/interop/install.sh`.
fn everything_script() -> String {
    interop::ensure_installed();
    let default = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let path = std::env::var("MCP_SERVER_EVERYTHING").map(PathBuf::from).unwrap_or(default);
    assert!(path.exists(), "{} is missing: run bash tests/interop/install.sh", path.display());
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_mcp_servers_join_the_running_agent() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({
        "mcp_servers": {"everything": {"command": "node", "args": [everything_script(), "stdio"], "trusted": true}},
        "permissions": {"disallowed_tools": ["mcp__everything__toggle-*"]}
    });
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;

    // A prompt command: the server's rendered prompt becomes the request, answered in the thread.
    let command = say(&alice, &chat, r#"@picogent /mcp__everything__args-prompt city="New York" state=NY"#).await;
    eventually(Duration::from_secs(30), "a reply to the prompt command", || async {
        thread(&alice, &command.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    wait_idle(&agent).await;
    let run = agent.state.list_runs(10).await.unwrap().into_iter().next().unwrap();
    let stored = run.record.unwrap();
    let prompt = stored["prompt"].as_str().unwrap();
    assert!(prompt.contains("New York"), "the server's rendered prompt is the request: {prompt}");
    // The model was offered the server's tools under their public names, minus the denied ones.
    let requests = model.requests();
    let offered: Vec<String> = requests.last().unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(offered.iter().any(|n| n == "mcp__everything__echo"), "{offered:?}");
    assert!(!offered.iter().any(|n| n.starts_with("mcp__everything__toggle-")), "{offered:?}");
    assert!(offered.iter().any(|n| n == "reply_message"), "{offered:?}");
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_leaves_one_clear_comment() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    // A model endpoint that is not there: every request fails to connect.
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_model = format!("http://{}/v1", unused.local_addr().unwrap());
    drop(unused);
    let agent = start_agent(agent_config(dir.path(), &board.url(), &dead_model, "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");

    let task = create_assigned(&alice, "Nobody home", "- a").await;
    let notice = eventually(Duration::from_secs(30), "the failure notice", || async {
        comments(&alice, &task.id).await.into_iter().find(|m| m.author_slug == "picogent")
    })
    .await;
    wait_idle(&agent).await;
    assert!(notice.content.contains("model"), "{}", notice.content);
    assert!(notice.content.contains("mention me"), "says what to do: {}", notice.content);
    assert!(!notice.content.contains("panicked") && !notice.content.contains("src/"), "{}", notice.content);
    let runs = runs_for(&agent, &format!("task:{}", task.id)).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Failed);
    // A reconciliation finds the task again but does not retry a run that failed, nor say it twice.
    let caught_up = picogent::transport::LinkStatus::CaughtUp { last_seq: 0 };
    agent
        .inputs
        .send(picogent::router::Input::Stream(Box::new(picogent::transport::StreamItem::Status(caught_up))))
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "reconciled", || async { agent.status.caught_up().then_some(()) }).await;
    wait_idle(&agent).await;
    let mine = comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert_eq!(mine, 1);
    agent.shutdown().await.unwrap();
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_each_dependency_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let config_path = dir.path().join("agent.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let check = |token: &'static str| {
        let config_path = config_path.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
                .args(["check", "--config"])
                .arg(&config_path)
                .env("TEAMBOARD_TOKEN", token)
                .env("RUST_LOG", "warn")
                .output()
                .unwrap()
        })
    };
    let good = check("tok-picogent").await.unwrap();
    let stdout = String::from_utf8_lossy(&good.stdout).to_string();
    assert!(good.status.success(), "{stdout}");
    for what in
        ["config", "prompts", "tracker token", "tracker REST", "tracker events", "model endpoint", "model tool call"]
    {
        assert!(stdout.lines().any(|l| l.starts_with("ok") && l.contains(what)), "{what}: {stdout}");
    }
    let bad = check("tok-wrong").await.unwrap();
    let stdout = String::from_utf8_lossy(&bad.stdout).to_string();
    assert_eq!(bad.status.code(), Some(1), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("FAIL") && l.contains("tracker REST")), "{stdout}");
    assert!(!stdout.contains("tok-wrong"), "the token is never printed: {stdout}");
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_running_run_finish_then_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(150).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let config_path = dir.path().join("agent.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let mut process = spawn_agent_process(&config_path);
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Finish before leaving", "- one\n- two").await;
    eventually(Duration::from_secs(20), "the run started", || async { (model.request_count() >= 2).then_some(()) })
        .await;
    let killed = std::process::Command::new("kill").arg("-TERM").arg(process.id().to_string()).status().unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || process.wait().unwrap()).await.unwrap();
    assert!(status.success(), "exit status {status:?}");
    // The run that was going when the signal came finished before the process left.
    assert_eq!(alice.get_task(&task.id).await.unwrap().status, TaskStatus::InReview);
    let state = picogent::state::State::open(&config.state.path).await.unwrap();
    let runs = state.list_runs(10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Completed);
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_the_same_state_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let config_path = write_config(dir.path(), &config);
    let mut first = spawn_agent_process(&config_path);
    let lock = dir.path().join("picogent.db.lock");
    eventually(Duration::from_secs(20), "the first agent holding its lock", || async {
        let file = std::fs::File::open(&lock).ok()?;
        matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock)).then_some(())
    })
    .await;
    let second = picogent_output(&["run"], &config_path);
    let second = tokio::time::timeout(Duration::from_secs(20), second).await.expect("the second exits");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{stderr}");
    assert!(
        stderr.contains("another picogent run (process ") && stderr.contains(") is using the state file"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("(process {})", first.id())), "the refusal names the holder: {stderr}");
    assert!(first.try_wait().unwrap().is_none(), "the first one goes on");
    first.kill().unwrap();
    first.wait().unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_missing_from_the_boards_log_is_survived_and_later_mentions_answered() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
    let agent = start_agent(config.clone()).await;
    wait_ready(&agent).await;
    agent.shutdown().await.unwrap();

    // While the agent is away, an event for it is logged and then lost from the board's log.
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    let lost = say(&alice, &chat, "@picogent this one is lost from the log").await;
    let later = say(&alice, &chat, "@picogent are you still listening?").await;
    // The lost one's event goes (the board numbers new events after the highest, so it is not
    // the last).
    let pool = sqlx::sqlite::SqlitePool::connect(&format!("sqlite://{}", dir.path().join("board.db").display()))
        .await
        .unwrap();
    let removed = sqlx::query("DELETE FROM events WHERE member_slug = 'picogent' AND data LIKE ?")
        .bind(format!("%{}%", lost.id))
        .execute(&pool)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(removed, 1);
    pool.close().await;

    let agent = start_agent(config).await;
    eventually(Duration::from_secs(30), "the later mention answered", || async {
        thread(&alice, &later.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    eventually(Duration::from_secs(30), "the gap gone on without", || async {
        let metrics =
            reqwest::get(format!("http://{}/metrics", agent.http_addr.unwrap())).await.ok()?.text().await.ok()?;
        metrics.lines().any(|l| l == "picogent_event_gaps_total 1").then_some(())
    })
    .await;
    wait_idle(&agent).await;
    assert!(agent.status.caught_up(), "ready");
    assert_eq!(thread(&alice, &later.id).await.iter().filter(|m| m.author_slug == "picogent").count(), 1);
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
