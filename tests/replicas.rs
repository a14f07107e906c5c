//! Replicas of one agent on one PostgreSQL state (`replicas.enabled`), end to end over real
//! sockets: the reference board, the offline model endpoint, the machine's PostgreSQL (a schema
//! per test, `tests/support/postgres.rs`), and replicas in this process. What is checked is what
//! a person on the board sees, and where the database says each run ran. The soak with three
//! `picogent run` processes, SIGKILLs and a rolling restart is `tests/replicas_soak.rs`.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/postgres.rs"]
mod test_postgres;

use std::path::Path;
use std::time::Duration;

use agent_support::*;
use picogent::config::Config;
use picogent::runtime::AgentHandle;
use picogent::tracker::model::*;
use serde_json::{Value, json};
use sqlx::Connection;
use test_postgres::{TestSchema, with_schema};

/// A replica's config on `schema`, with short leases and a quick tick; `extra` on top.
fn replica_config(schema: &TestSchema, dir: &Path, board: &str, model: &str, extra: Value) -> Config {
    let mut all = json!({
        "replicas": {"enabled": true, "stream_lease_ms": 1500, "run_lease_ms": 3000, "poll_ms": 100},
    });
    merge(&mut all, extra);
    let mut config = agent_config(dir, board, model, "picogent", all);
    config.state.postgres_url = Some(schema.url());
    config
}

async fn holds_stream_and_caught_up(agent: &AgentHandle) {
    eventually(Duration::from_secs(20), "the replica holds the stream and caught up", || async {
        (agent.status.holds_stream() && agent.status.caught_up()).then_some(())
    })
    .await;
}

/// The replica that holds each running run, from the database: (session key, holder).
async fn running_holders(schema: &TestSchema) -> Vec<(String, String)> {
    let mut connection = schema.connection().await;
    let rows = sqlx::query_as("SELECT session_key, holder FROM runs WHERE status = 'running' AND holder IS NOT NULL")
        .fetch_all(&mut connection)
        .await
        .unwrap();
    let _ = connection.close().await;
    rows
}

fn replica_id(agent: &AgentHandle) -> String {
    agent.status.replica().expect("a replica").id
}

/// A run on the replica that does not hold the stream still hears what was said to it there:
/// a comment steers it, `@picogent stop` stops it, and the person sees one "Stopped" notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_and_stop_reach_a_run_on_another_replica() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(250).await;
        let holder = start_agent(replica_config(
            &schema,
            dir.path(),
            &board.url(),
            &model.url(),
            json!({"limits": {"max_concurrent_runs": 1}}),
        ))
        .await;
        holds_stream_and_caught_up(&holder).await;
        let standby = start_agent(replica_config(
            &schema,
            dir.path(),
            &board.url(),
            &model.url(),
            json!({"limits": {"max_concurrent_runs": 4}}),
        ))
        .await;
        eventually(Duration::from_secs(10), "the holder sees the standby", || async {
            holder.status.replica().is_some_and(|view| view.others.len() == 1).then_some(())
        })
        .await;
        assert!(!standby.status.holds_stream());
        let alice = client(&board, "tok-alice");
        // Two long tasks: the holder has one slot, so one of them runs on the standby.
        let steps: String = (1..=12).map(|n| format!("- step {n}\n")).collect();
        let first = create_assigned(&alice, "Long task one", &steps).await;
        let second = create_assigned(&alice, "Long task two", &steps).await;
        let standby_id = replica_id(&standby);
        let on_standby = eventually(Duration::from_secs(20), "a task run on the standby", || async {
            let holders = running_holders(&schema).await;
            holders.into_iter().find(|(_, holder)| holder == &standby_id).map(|(session, _)| session)
        })
        .await;
        let task = if on_standby == format!("task:{}", first.id) { &first } else { &second };
        assert_eq!(on_standby, format!("task:{}", task.id), "one of the two tasks");

        comment(&alice, &task.id, "@picogent please mention the launch date in your summary").await;
        eventually(Duration::from_secs(20), "the steering reached the run on the standby", || async {
            model.requests().iter().any(|request| request.to_string().contains("mention the launch date")).then_some(())
        })
        .await;
        comment(&alice, &task.id, "@picogent stop").await;
        let notice = eventually(Duration::from_secs(20), "the stop notice on the task", || async {
            comments(&alice, &task.id)
                .await
                .into_iter()
                .find(|m| m.author_slug == "picogent" && m.content.starts_with("Stopped"))
        })
        .await;
        assert!(notice.content.contains("@alice asked me to stop"), "{}", notice.content);
        let other = if task.id == first.id { &second } else { &first };
        wait_status(&alice, &other.id, TaskStatus::InReview).await;
        // Past the point where anything more would be posted: the holder handled every event,
        // and each replica every run's end.
        caught_up_with_board(&holder, &dir.path().join("board.db"), "picogent").await;
        wait_settled(&standby).await;
        let stopped: Vec<_> =
            comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
        assert_eq!(stopped.len(), 1, "one notice, nothing else: {stopped:#?}");
        let mut connection = schema.connection().await;
        let (status, ran_on): (String, String) =
            sqlx::query_as("SELECT status, holder FROM runs WHERE session_key = $1")
                .bind(format!("task:{}", task.id))
                .fetch_one(&mut connection)
                .await
                .unwrap();
        assert_eq!((status.as_str(), ran_on.as_str()), ("stopped", standby_id.as_str()));
        standby.shutdown().await.unwrap();
        holder.shutdown().await.unwrap();
        model.shutdown().await;
    })
    .await;
}

/// A run still queued in the database is stopped where it waits: one notice, the task never
/// worked, the run `stopped` with no turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_is_stopped_where_it_waits_and_says_so_once() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(300).await;
        let config = json!({"limits": {"max_concurrent_runs": 1}});
        let replica = start_agent(replica_config(&schema, dir.path(), &board.url(), &model.url(), config)).await;
        holds_stream_and_caught_up(&replica).await;
        let alice = client(&board, "tok-alice");
        let first = create_assigned(&alice, "Busy work", "- a\n- b\n- c").await;
        let waiting = create_assigned(&alice, "Wait your turn", "- a\n- b").await;
        let session = format!("task:{}", waiting.id);
        let status_of = |session: String| {
            let schema = &schema;
            async move {
                let mut connection = schema.connection().await;
                let row: Option<(String, i64)> =
                    sqlx::query_as("SELECT status, turns::bigint FROM runs WHERE session_key = $1")
                        .bind(session)
                        .fetch_optional(&mut connection)
                        .await
                        .unwrap();
                let _ = connection.close().await;
                row
            }
        };
        eventually(Duration::from_secs(20), "the second run queued", || async {
            (status_of(session.clone()).await?.0 == "queued").then_some(())
        })
        .await;
        comment(&alice, &waiting.id, "@picogent stop").await;
        wait_status(&alice, &first.id, TaskStatus::InReview).await;
        let notice = eventually(Duration::from_secs(20), "the stop notice", || async {
            comments(&alice, &waiting.id).await.into_iter().find(|m| m.author_slug == "picogent")
        })
        .await;
        assert!(notice.content.starts_with("Stopped before it started: @alice asked me to stop"), "{}", notice.content);
        caught_up_with_board(&replica, &dir.path().join("board.db"), "picogent").await;
        let said: Vec<_> =
            comments(&alice, &waiting.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect();
        assert_eq!(said.len(), 1, "one notice, nothing else: {said:#?}");
        assert_eq!(alice.get_task(&waiting.id).await.unwrap().status, TaskStatus::Todo, "never worked");
        assert_eq!(status_of(session).await, Some(("stopped".to_string(), 0)));
        replica.shutdown().await.unwrap();
        model.shutdown().await;
    })
    .await;
}

/// `/readyz` of each replica says whether it holds the stream, what it runs, and where the
/// others are; `/metrics` has the per-replica gauges. When the holder stops, the standby takes
/// the stream over and answers what comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_the_stream_over_and_readyz_says_who_holds_it() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let first = start_agent(replica_config(&schema, dir.path(), &board.url(), &model.url(), json!({}))).await;
        holds_stream_and_caught_up(&first).await;
        let second = start_agent(replica_config(&schema, dir.path(), &board.url(), &model.url(), json!({}))).await;
        let (first_id, second_id) = (replica_id(&first), replica_id(&second));
        let readyz = |agent: &AgentHandle| format!("http://{}/readyz", agent.http_addr.unwrap());
        let body: Value = eventually(Duration::from_secs(10), "the standby's /readyz lists the holder", || async {
            let body: Value = reqwest::get(readyz(&second)).await.ok()?.json().await.ok()?;
            let others = body["replica"]["others"].as_array()?;
            others.iter().any(|other| other["id"] == first_id.as_str() && other["holds_stream"] == true).then_some(body)
        })
        .await;
        assert_eq!(body["replica"]["id"], second_id.as_str());
        assert_eq!(body["replica"]["holds_stream"], false);
        let status = body["status"].as_str().unwrap();
        assert!(status.contains("standby") && status.contains(&first_id), "{status}");
        let metrics =
            reqwest::get(format!("http://{}/metrics", first.http_addr.unwrap())).await.unwrap().text().await.unwrap();
        let label = first_id.replace(|c: char| !(c.is_ascii_alphanumeric() || "._-:".contains(c)), "_");
        assert!(metrics.contains(&format!("picogent_replica_holds_stream{{replica=\"{label}\"}} 1")), "{metrics}");
        assert!(metrics.contains("picogent_stream_takeovers_total 1"), "{metrics}");

        first.shutdown().await.unwrap();
        holds_stream_and_caught_up(&second).await;
        let alice = client(&board, "tok-alice");
        // A replica that stops leaves the shared presence marker moving, not `stopped`: the
        // others go on under the same copy id.
        let marker = picogent::tracker::presence::parse_status(&alice.get_member("picogent").await.unwrap().status)
            .marker
            .expect("the replicas' marker");
        assert_ne!(marker.beat, picogent::tracker::presence::Beat::Stopped);
        let chat = chat_id(&alice).await;
        let question = say(&alice, &chat, "@picogent who holds the stream now?").await;
        let reply = eventually(Duration::from_secs(20), "an answer after the takeover", || async {
            thread(&alice, &question.id).await.into_iter().find(|m| m.author_slug == "picogent")
        })
        .await;
        assert_eq!(reply.parent_id.as_deref(), Some(question.id.as_str()));
        caught_up_with_board(&second, &dir.path().join("board.db"), "picogent").await;
        let replies = thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
        assert_eq!(replies, 1);
        second.shutdown().await.unwrap();
        model.shutdown().await;
    })
    .await;
}

/// A replica refuses to share an agent's state with a copy that is not a replica, and the other
/// way round, saying what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_copy_and_replicas_never_share_one_agents_state() {
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let replica = start_agent(replica_config(&schema, dir.path(), &board.url(), &model.url(), json!({}))).await;
        let mut single = agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}));
        single.state.postgres_url = Some(schema.url());
        let refused = picogent::runtime::start(picogent::runtime::AgentOptions {
            config: single.clone(),
            tracker_token: picogent::secret::Secret::new("tok-picogent"),
            llm_api_key: None,
            mcp_token: None,
            ui_token: None,
            stream: Some(fast_stream()),
            serve_http: false,
            clock: None,
        })
        .await;
        let message = refused.err().expect("refused while replicas run").to_string();
        assert!(message.contains("replicas"), "{message}");
        replica.shutdown().await.unwrap();
        model.shutdown().await;
    })
    .await;
}

/// Two replicas that both find a schedule's firing due: one of them runs it, once. Both read the
/// board; the firing's claim, taken with its run in one transaction, lets one queue it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_run_a_scheduled_firing_once() {
    with_schema(|schema| async move {
        use picogent::schedule::{Clock, ShiftedClock};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let alice = client(&board, "tok-alice");
        let create = CreateTask { project_slug: "team".into(), title: "Moved".into(), ..CreateTask::default() };
        alice.create_task(&create, None).await.unwrap();
        let now = picogent::schedule::SystemClock.now_ms();
        let cadence = picogent::schedule::Cadence::parse("0 9 * * *", "UTC").unwrap();
        let nine = cadence.next_after(now).unwrap();
        let extra = json!({"schedules": {"standup": {"cron": "0 9 * * *", "kind": "standup", "project": "team"}}});
        // One clock for both, as two machines agreeing on the time; the firing comes once both run.
        let clock = Arc::new(ShiftedClock::starting_at(nine - 60_000));
        let shared: Arc<dyn Clock> = clock.clone();
        let first = start_agent_with_clock(
            replica_config(&schema, dir.path(), &board.url(), &model.url(), extra.clone()),
            Some(shared.clone()),
        )
        .await;
        let second = start_agent_with_clock(
            replica_config(&schema, dir.path(), &board.url(), &model.url(), extra),
            Some(shared),
        )
        .await;
        clock.set_now(nine - 500);
        let chat = chat_id(&alice).await;
        let digests = || async {
            let query = MessageQuery { chat_id: Some(chat.clone()), limit: Some(200), ..MessageQuery::default() };
            let messages = alice.list_messages(&query).await.unwrap();
            messages.into_iter().filter(|message| message.author_slug == "picogent").count()
        };
        eventually(Duration::from_secs(30), "the digest", || async { (digests().await >= 1).then_some(()) }).await;
        eventually(Duration::from_secs(30), "the firing's end recorded", || async {
            let row = first.state.get_firing("standup", nine).await.unwrap()?;
            // Over: every outcome but `Queued`, whose run may still post.
            (row.outcome != picogent::state::FiringOutcome::Queued).then_some(())
        })
        .await;
        // Both replicas have looked at 09:00 by the time each answers a firing asked of it.
        for replica in [&first, &second] {
            replica.schedules.run_now("standup").await.unwrap();
        }
        wait_idle(&first).await;
        wait_idle(&second).await;
        assert_eq!(digests().await, 1, "one digest for one firing");
        let mut connection = schema.connection().await;
        let runs: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE trigger LIKE 'schedule standup %' AND trigger NOT LIKE '%(run now)'",
        )
        .fetch_one(&mut connection)
        .await
        .unwrap();
        let _ = connection.close().await;
        assert_eq!(runs, 1, "one run for the firing");
        first.shutdown().await.unwrap();
        second.shutdown().await.unwrap();
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}

/// `replicas.enabled` with the state in SQLite is refused when the config loads.
#[test]
fn replicas_need_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let config = agent_config(
        dir.path(),
        "http://127.0.0.1:1",
        "http://127.0.0.1:2/v1",
        "picogent",
        json!({"replicas": {"enabled": true}}),
    );
    let error = config.validate(Path::new("agent.json")).unwrap_err().to_string();
    assert!(error.contains("replicas.enabled") && error.contains("state.url"), "{error}");
}
