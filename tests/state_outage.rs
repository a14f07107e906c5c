//! A replica cut off from its PostgreSQL state for a few seconds, over real sockets: a proxy
//! between picogent and the machine's PostgreSQL closes every connection and refuses new ones,
//! as a network cut or a restart of the server looks to the client. What an operator reads in
//! the log (one warning per poller, not one per tick, and a line when the database answers
//! again), and what a person on the board sees (a mention made during the outage answered once
//! after it), are checked. The whole log of this test binary is captured: one test per binary.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/cut_proxy.rs"]
mod cut_proxy;
#[path = "support/postgres.rs"]
mod test_postgres;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_support::*;
use cut_proxy::CutProxy;
use serde_json::json;
use test_postgres::with_schema;

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap()).lines().map(str::to_string).collect()
    }
}

fn capture_log() -> Log {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_env_filter("picogent=info")
        .with_ansi(false)
        .init();
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_postgres_says_so_once_and_answers_what_came_meanwhile() {
    let log = capture_log();
    with_schema(|schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let board = start_board(dir.path()).await;
        let model = start_model(0).await;
        let mut url = reqwest::Url::parse(&schema.url()).unwrap();
        let upstream: SocketAddr =
            format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432)).parse().unwrap();
        let proxy = CutProxy::start(upstream).await;
        url.set_port(Some(proxy.addr.port())).unwrap();
        let replicas =
            json!({"replicas": {"enabled": true, "stream_lease_ms": 1500, "run_lease_ms": 3000, "poll_ms": 100}});
        let mut config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", replicas);
        config.state.postgres_url = Some(url.to_string());
        let agent = start_agent(config).await;
        eventually(Duration::from_secs(20), "the replica holds the stream and caught up", || async {
            (agent.status.holds_stream() && agent.status.caught_up()).then_some(())
        })
        .await;
        let alice = client(&board, "tok-alice");
        let chat = chat_id(&alice).await;
        let mine = |messages: Vec<picogent::tracker::model::MessageOut>| {
            messages.into_iter().filter(|m| m.author_slug == "picogent").count()
        };

        let before = log.lines().len();
        proxy.cut();
        // A mention during the outage: the agent cannot record it, so it must come back to it.
        let during = say(&alice, &chat, "@picogent did the database come back?").await;
        // A timing test: the outage lasts a set time, and what the log says over it is counted.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let outage: Vec<String> = log.lines()[before..].to_vec();
        proxy.restore();

        let warnings: Vec<&String> = outage.iter().filter(|line| line.contains(" WARN ")).collect();
        println!("what the log said during the outage:\n{}", outage.join("\n"));
        // About 40 ticks of the router and polls of the stream's keeper went by; each poller
        // warns once (and the lock keeper and stream hand-over say what they do).
        assert!(warnings.len() <= 8, "{} warnings in a 4 s outage:\n{}", warnings.len(), outage.join("\n"));
        assert!(warnings.iter().any(|line| line.contains("asking again every poll")), "{}", outage.join("\n"));

        eventually(Duration::from_secs(30), "the mention made during the outage answered", || async {
            (mine(thread(&alice, &during.id).await) == 1).then_some(())
        })
        .await;
        eventually(Duration::from_secs(10), "the database answers again, in the log", || async {
            log.lines()[before..].iter().any(|line| line.contains("the state database answers again")).then_some(())
        })
        .await;
        let after = say(&alice, &chat, "@picogent and now?").await;
        eventually(Duration::from_secs(20), "a mention after the outage answered", || async {
            (mine(thread(&alice, &after.id).await) == 1).then_some(())
        })
        .await;
        // Past the point where either would be answered again: every event handled, every run
        // ended.
        caught_up_with_board(&agent, &dir.path().join("board.db"), "picogent").await;
        assert_eq!(mine(thread(&alice, &during.id).await), 1, "answered once");
        assert_eq!(mine(thread(&alice, &after.id).await), 1, "answered once");
        assert!(!agent.is_superseded(), "the lock was taken again, not lost to another copy");
        agent.shutdown().await.unwrap();
        model.shutdown().await;
        board.shutdown().await.unwrap();
    })
    .await;
}
