//! One active copy per agent identity, across machines: `picogent run` child processes with
//! separate state files and the same agent token on one reference board. Whatever order they
//! start in, and whichever of them dies, is paused or comes back, one acts at a time, and a
//! person on the board sees every mention and assignment answered once.

#[path = "support/agent.rs"]
mod agent_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_support::*;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use picogent::tracker::presence::{Beat, Marker, parse_status};
use serde_json::json;

/// The copies' heartbeat: a copy watches a stale marker for 750 ms and a fresh start waits 600.
const BEAT_MS: u64 = 300;
/// `picogent run`'s exit code when another copy of the agent is active.
const EXIT_ANOTHER_COPY: i32 = 3;

/// One copy of the agent: its own folder, state file, `/readyz` port and log.
struct AgentCopy {
    dir: PathBuf,
    /// The board's database, in the folder the copies' folders are in (`start_board(root)`).
    board_db: PathBuf,
    config_path: PathBuf,
    http: SocketAddr,
    child: Option<Child>,
}

impl AgentCopy {
    /// A copy reaching the tracker at `board` (the board itself, or a proxy in front of it).
    fn new(root: &Path, name: &str, board: &str, model: &str) -> AgentCopy {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let http = free_port();
        let extra = json!({"http": {"listen": http.to_string()}, "presence": {"heartbeat_ms": BEAT_MS}});
        let config = agent_config(&dir, board, model, "picogent", extra);
        let config_path = write_config(&dir, &config);
        AgentCopy { dir, board_db: root.join("board.db"), config_path, http, child: None }
    }

    /// `picogent run` as the agent member; its stderr is appended to the copy's log.
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
        self.child = Some(spawn_agent_process_with(&self.config_path, log));
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("agent.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| child.try_wait().unwrap().is_none())
    }

    /// Waits for the copy to exit by itself; its exit code.
    async fn exit_code(&mut self, within: Duration) -> i32 {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().expect("started");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status.code().expect("exited, not killed by a signal");
            }
            assert!(Instant::now() < deadline, "the copy did not exit; its log:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("started").id().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success(), "kill {signal}");
    }

    /// SIGKILL: nothing is said or cleaned up, as in a crash.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM; its exit code.
    fn terminate(&mut self) -> i32 {
        self.signal("-TERM");
        let status = self.child.take().unwrap().wait().unwrap();
        status.code().expect("exited, not killed by a signal")
    }

    async fn readyz(&self) -> Option<(u16, String)> {
        let answer = reqwest::get(format!("http://{}/readyz", self.http)).await.ok()?;
        Some((answer.status().as_u16(), answer.text().await.ok()?))
    }

    /// The writes the copy holds at its presence gate now, as its `/metrics` says.
    async fn writes_held(&self) -> Option<u64> {
        let text = reqwest::get(format!("http://{}/metrics", self.http)).await.ok()?.text().await.ok()?;
        text.lines().find_map(|line| line.strip_prefix("picogent_tracker_writes_held ")?.parse().ok())
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.readyz().await.map(|(status, _)| status) != Some(200) {
            assert!(self.is_running(), "the copy exited; its log:\n{}", self.log());
            assert!(Instant::now() < deadline, "the copy is not ready; its log:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for AgentCopy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback proxy in front of the board that can meddle with one path, the agent's own member
/// (`/api/members/me`, where the presence marker lives): drop its requests (`cut`), or hold its
/// writes and let them through one by one (`hold_writes`, `release_write`); it counts the reads
/// of it and the writes held. Everything else (the other
/// REST calls, the event stream) goes through. One request per connection, so none slips past
/// on a kept-alive one.
struct StatusProxy {
    addr: SocketAddr,
    shared: Arc<ProxyShared>,
}

struct ProxyShared {
    cut: AtomicBool,
    hold_writes: AtomicBool,
    released: tokio::sync::Semaphore,
    reads: AtomicUsize,
    held: AtomicUsize,
}

impl StatusProxy {
    async fn start(upstream: SocketAddr) -> StatusProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(ProxyShared {
            cut: AtomicBool::new(false),
            hold_writes: AtomicBool::new(false),
            released: tokio::sync::Semaphore::new(0),
            reads: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
        });
        let for_accept = shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, for_accept.clone()));
            }
        });
        StatusProxy { addr, shared }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set_cut(&self, cut: bool) {
        self.shared.cut.store(cut, Ordering::SeqCst);
    }

    /// Holds every write of the status from now on, until [`release_write`](Self::release_write).
    fn hold_writes(&self) {
        self.shared.hold_writes.store(true, Ordering::SeqCst);
    }

    /// Lets the longest-held write through; `all` lets every write through from now on.
    fn release_write(&self, all: bool) {
        if all {
            self.shared.hold_writes.store(false, Ordering::SeqCst);
            self.shared.released.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
        } else {
            self.shared.released.add_permits(1);
        }
    }

    fn reads(&self) -> usize {
        self.shared.reads.load(Ordering::SeqCst)
    }

    fn held(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }
}

async fn relay(mut client: tokio::net::TcpStream, upstream: SocketAddr, shared: Arc<ProxyShared>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut request_line = head.split_whitespace();
    let (method, target) = (request_line.next().unwrap_or_default(), request_line.next().unwrap_or_default());
    if target.starts_with("/api/members/me") {
        if shared.cut.load(Ordering::SeqCst) {
            return;
        }
        if method == "GET" {
            shared.reads.fetch_add(1, Ordering::SeqCst);
        } else if shared.hold_writes.load(Ordering::SeqCst) {
            shared.held.fetch_add(1, Ordering::SeqCst);
            if let Ok(permit) = shared.released.acquire().await {
                permit.forget();
            }
        }
    }
    let upgrade = head.to_ascii_lowercase().contains("\r\nupgrade: websocket");
    let mut forwarded = Vec::new();
    if upgrade {
        forwarded.extend_from_slice(&buffer[..head_end]);
    } else {
        for line in head.trim_end().split("\r\n") {
            if !line.to_ascii_lowercase().starts_with("connection:") {
                forwarded.extend_from_slice(format!("{line}\r\n").as_bytes());
            }
        }
        forwarded.extend_from_slice(b"connection: close\r\n\r\n");
    }
    forwarded.extend_from_slice(&buffer[head_end..]);
    let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else { return };
    if server.write_all(&forwarded).await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    }
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// The presence marker in the agent member's status, as anyone on the board can read it.
async fn marker(alice: &TrackerClient) -> Option<Marker> {
    parse_status(&alice.get_member("picogent").await.unwrap().status).marker
}

/// Waits until the copy marked on the board has moved its marker on: it is the live one.
async fn live_copy(alice: &TrackerClient) -> String {
    let first = eventually(Duration::from_secs(20), "a marker", || marker(alice)).await;
    eventually(Duration::from_secs(20), "the marker moving", || async {
        let now = marker(alice).await?;
        (now.copy_id == first.copy_id && now != first && now.beat != Beat::Stopped).then_some(())
    })
    .await;
    first.copy_id
}

/// Waits until `running`, the one copy still running (the others exited), has handled every
/// event the board logged for the agent, and has no run open: whatever it would still do, it
/// would have started, and what the exited copies did is done.
async fn settled(running: &AgentCopy) {
    let head = board_head(&running.board_db, "picogent").await;
    let state = picogent::state::State::open(&running.dir.join("picogent.db")).await.unwrap();
    eventually(Duration::from_secs(60), "the running copy handled every event and ended its runs", || async {
        let handled = state.last_seq().await.ok()? >= head;
        let runs = state.list_runs(100).await.ok()?;
        let open = runs.iter().any(|run| run.finished_at.is_none());
        (handled && !open).then_some(())
    })
    .await;
    state.close().await;
}

/// Mentions the agent in chat and assigns it a task, waits for both answers, waits for quiet,
/// and checks each was answered exactly once, as a person on the board sees it.
async fn ask_and_count(alice: &TrackerClient, running: &AgentCopy, what: &str) {
    let chat = chat_id(alice).await;
    let questions = [
        say(alice, &chat, &format!("@picogent {what}: what is open?")).await,
        say(alice, &chat, &format!("@picogent {what}: anything blocked?")).await,
    ];
    let task = create_assigned(alice, &format!("{what}: tidy labels"), "- merge duplicates\n- sort").await;
    for question in &questions {
        eventually(Duration::from_secs(30), "a reply", || async {
            thread(alice, &question.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
        })
        .await;
    }
    wait_status(alice, &task.id, TaskStatus::InReview).await;
    settled(running).await;
    for question in &questions {
        let replies = thread(alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
        assert_eq!(replies, 1, "replies to {:?}", question.content);
    }
    let mine = comments(alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert_eq!(mine, 1, "summary comments on {}", task.key);
    let steps = alice.list_steps(&task.id).await.unwrap();
    assert_eq!(steps.len(), 2, "each step once: {steps:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_copy_with_its_own_state_refuses_to_start_and_the_first_answers_once() {
    let root = tempfile::tempdir().unwrap();
    let board = start_board(root.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    // What a person (or the model) wrote in the agent's status stays before the marker.
    client(&board, "tok-picogent").update_my_status("reviewing TE-1").await.unwrap();
    let mut first = AgentCopy::new(root.path(), "first", &board.url(), &model.url());
    first.start();
    first.wait_ready().await;
    let first_id = live_copy(&alice).await;

    let mut second = AgentCopy::new(root.path(), "second", &board.url(), &model.url());
    second.start();
    assert_eq!(second.exit_code(Duration::from_secs(20)).await, EXIT_ANOTHER_COPY, "{}", second.log());
    let log = second.log();
    assert!(log.contains("another copy of this agent is active on the tracker"), "{log}");
    assert!(log.contains(&format!("copy {first_id}")), "names the other copy: {log}");
    assert!(log.contains("stop the other copy, or give this one its own agent member and token"), "{log}");
    assert!(!log.contains("tok-picogent"), "{log}");
    assert!(first.is_running(), "the first copy goes on: {}", first.log());
    assert_eq!(first.readyz().await.map(|(status, _)| status), Some(200));

    ask_and_count(&alice, &first, "after the refusal").await;
    assert_eq!(marker(&alice).await.map(|m| m.copy_id), Some(first_id.clone()));
    assert_eq!(first.terminate(), 0);
    // A clean stop leaves a stopped marker, after the status people read.
    let status = alice.get_member("picogent").await.unwrap().status;
    assert_eq!(
        status,
        format!("reviewing TE-1 {}", Marker { copy_id: first_id, beat: Beat::Stopped, can: Vec::new() })
    );
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_copies_started_at_once_leave_one_acting_and_everything_answered_once() {
    let root = tempfile::tempdir().unwrap();
    let board = start_board(root.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    // Work waiting for whichever copy comes up first: both would find it as they reconcile.
    let waiting = create_assigned(&alice, "Waiting for the agent", "- one\n- two\n- three").await;
    // The tightest race: each reads the status before either has written its marker.
    let proxy = StatusProxy::start(board.addr()).await;
    proxy.hold_writes();
    let mut copies = [
        AgentCopy::new(root.path(), "left", &proxy.url(), &model.url()),
        AgentCopy::new(root.path(), "right", &proxy.url(), &model.url()),
    ];
    for copy in &mut copies {
        copy.start();
    }
    eventually(Duration::from_secs(20), "both copies writing their markers", || async {
        (proxy.reads() >= 2 && proxy.held() >= 2).then_some(())
    })
    .await;
    // One marker lands, then the other a moment later: the first copy must not act meanwhile.
    // Time is the point here: the gap between the two writes is what the race is made of.
    proxy.release_write(false);
    tokio::time::sleep(Duration::from_millis(BEAT_MS / 2)).await;
    proxy.release_write(true);
    // The last to write its marker wins; the other stops before it acts.
    let deadline = Instant::now() + Duration::from_secs(30);
    let loser = loop {
        if let Some(index) = (0..2).find(|&index| !copies[index].is_running()) {
            break index;
        }
        assert!(Instant::now() < deadline, "neither copy stopped:\n{}\n{}", copies[0].log(), copies[1].log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let winner = 1 - loser;
    assert_eq!(copies[loser].exit_code(Duration::from_secs(5)).await, EXIT_ANOTHER_COPY, "{}", copies[loser].log());
    // It stopped before acting: refused at start, not superseded once running.
    let log = copies[loser].log();
    assert!(log.contains("another copy of this agent is active") && log.contains("does not start"), "{log}");
    assert!(!log.contains("writes nothing more"), "{log}");
    copies[winner].wait_ready().await;
    live_copy(&alice).await;
    wait_status(&alice, &waiting.id, TaskStatus::InReview).await;
    settled(&copies[winner]).await;
    let steps = alice.list_steps(&waiting.id).await.unwrap();
    assert_eq!(steps.len(), 3, "each step once: {steps:#?}");
    let mine = comments(&alice, &waiting.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert_eq!(mine, 1, "one summary comment");

    ask_and_count(&alice, &copies[winner], "after a race").await;
    assert!(copies[winner].is_running(), "{}", copies[winner].log());
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_the_same_copy_is_not_refused() {
    let root = tempfile::tempdir().unwrap();
    let board = start_board(root.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let mut copy = AgentCopy::new(root.path(), "only", &board.url(), &model.url());
    copy.start();
    copy.wait_ready().await;
    let id = live_copy(&alice).await;

    // Killed, with its marker left moving-looking on the board; restarted with its own state.
    copy.kill();
    copy.start();
    copy.wait_ready().await;
    assert_eq!(live_copy(&alice).await, id, "the same copy, known by its state file");
    // Stopped cleanly and started again.
    assert_eq!(copy.terminate(), 0);
    copy.start();
    copy.wait_ready().await;
    assert_eq!(live_copy(&alice).await, id);
    let log = copy.log();
    assert!(!log.contains("another copy"), "{log}");
    ask_and_count(&alice, &copy, "after restarts").await;
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_died_is_taken_over_and_refused_when_it_comes_back() {
    let root = tempfile::tempdir().unwrap();
    let board = start_board(root.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let mut old = AgentCopy::new(root.path(), "old", &board.url(), &model.url());
    old.start();
    old.wait_ready().await;
    let old_id = live_copy(&alice).await;
    old.kill();

    // A copy with other state starts at once, beside a marker that no longer moves.
    let mut new = AgentCopy::new(root.path(), "new", &board.url(), &model.url());
    new.start();
    new.wait_ready().await;
    let new_id = live_copy(&alice).await;
    assert_ne!(new_id, old_id);
    let log = new.log();
    assert!(log.contains("taking over from it") && log.contains(&old_id), "{log}");
    ask_and_count(&alice, &new, "after a takeover").await;

    // The old copy comes back with its own state: the new one is alive, so it refuses.
    old.start();
    assert_eq!(old.exit_code(Duration::from_secs(20)).await, EXIT_ANOTHER_COPY, "{}", old.log());
    assert!(old.log().contains(&format!("copy {new_id}")), "{}", old.log());
    assert!(new.is_running(), "{}", new.log());
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_copy_that_was_taken_over_stops_without_posting_and_exits_3() {
    let root = tempfile::tempdir().unwrap();
    let board = start_board(root.path()).await;
    // Slow enough to pause a copy while the model is still thinking over its request.
    let model = start_model(800).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    let mut paused = AgentCopy::new(root.path(), "paused", &board.url(), &model.url());
    paused.start();
    paused.wait_ready().await;
    let paused_id = live_copy(&alice).await;

    // Paused (a frozen VM, a long GC, a cut network) in the middle of working a task: the model's
    // plan for it waits in its socket, to be carried out the moment it wakes.
    let task = create_assigned(&alice, "Work through a pause", "- one\n- two").await;
    let asked = model.request_count();
    eventually(Duration::from_secs(20), "the paused copy asking the model", || async {
        (model.request_count() > asked).then_some(())
    })
    .await;
    // Paused just after a beat: the status has no compare-and-set, so a copy paused between
    // reading the status and writing it could still put its marker back over a newer one on
    // waking (docs/guarantees.md, "One copy"), and then the newer copy would be the one to stop.
    let before = marker(&alice).await;
    eventually(Duration::from_secs(5), "a beat", || async { (marker(&alice).await != before).then_some(()) }).await;
    paused.signal("-STOP");

    // Its marker stands still; a newer copy with its own state takes over and works the task.
    let mut newer = AgentCopy::new(root.path(), "newer", &board.url(), &model.url());
    newer.start();
    newer.wait_ready().await;
    let newer_id = live_copy(&alice).await;
    assert_ne!(newer_id, paused_id);
    // A mention the paused copy hears too, in its socket's buffer.
    let question = say(&alice, &chat, "@picogent who is answering?").await;
    eventually(Duration::from_secs(30), "the newer copy's reply", || async {
        thread(&alice, &question.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    wait_status(&alice, &task.id, TaskStatus::InReview).await;

    // Woken, the paused copy finds the newer marker before any write of its own goes out, says
    // so on /readyz, and exits 3.
    paused.signal("-CONT");
    let mut said = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while paused.is_running() {
        if let Some((503, body)) = paused.readyz().await {
            // The JSON body's `status` says why in words.
            said = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|b| b["status"].as_str().map(str::to_string));
        }
        assert!(
            Instant::now() < deadline,
            "the paused copy did not stop; /readyz {:?}; its log:\n{}\nthe newer copy's log:\n{}",
            paused.readyz().await,
            paused.log(),
            newer.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(paused.exit_code(Duration::from_secs(1)).await, EXIT_ANOTHER_COPY, "{}", paused.log());
    let said = said.expect("/readyz said why before the exit");
    assert!(said.starts_with("stopped: another copy of this agent"), "{said}");
    assert!(said.contains(&newer_id), "{said}");
    assert!(paused.log().contains(&format!("copy {newer_id}) took over")), "{}", paused.log());

    // The plan the paused copy woke up to was never carried out: each step once, one summary.
    settled(&newer).await;
    let steps = alice.list_steps(&task.id).await.unwrap();
    assert_eq!(steps.len(), 2, "each step once: {steps:#?}");
    let mine = comments(&alice, &task.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert_eq!(mine, 1);
    let replies = thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert_eq!(replies, 1);
    assert_eq!(marker(&alice).await.map(|m| m.copy_id), Some(newer_id));
    assert!(newer.is_running(), "{}", newer.log());
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_cannot_confirm_its_presence_holds_its_writes_and_stops_when_taken_over() {
    let root = tempfile::tempdir().unwrap();
    let board = start_board(root.path()).await;
    let proxy = StatusProxy::start(board.addr()).await;
    // A model each, to tell which copy worked on what.
    let cut_model = start_model(0).await;
    let newer_model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let chat = chat_id(&alice).await;
    let mut cut_off = AgentCopy::new(root.path(), "cut", &proxy.url(), &cut_model.url());
    cut_off.start();
    cut_off.wait_ready().await;
    let cut_id = live_copy(&alice).await;

    // Cut off from its status, not from the rest: it hears events and reaches the model, but
    // cannot confirm that it is still the one active copy, so its writes wait.
    proxy.set_cut(true);
    let mut newer = AgentCopy::new(root.path(), "newer", &board.url(), &newer_model.url());
    newer.start();
    newer.wait_ready().await;
    let newer_id = live_copy(&alice).await;
    assert_ne!(newer_id, cut_id);
    let asked = cut_model.request_count();
    let question = say(&alice, &chat, "@picogent are two of you answering?").await;
    eventually(Duration::from_secs(30), "the newer copy's reply", || async {
        thread(&alice, &question.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    eventually(Duration::from_secs(30), "the cut-off copy working on it too", || async {
        (cut_model.request_count() > asked).then_some(())
    })
    .await;
    // Its answer is held at its presence gate: its `/metrics` shows the write held.
    eventually(Duration::from_secs(30), "the cut-off copy holding a write", || async {
        (cut_off.writes_held().await? > 0).then_some(())
    })
    .await;
    let replies = thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert_eq!(replies, 1, "the cut-off copy's answer waited");

    // Back in touch, it finds the newer marker and stops for good.
    proxy.set_cut(false);
    assert_eq!(cut_off.exit_code(Duration::from_secs(20)).await, EXIT_ANOTHER_COPY, "{}", cut_off.log());
    assert!(cut_off.log().contains(&format!("copy {newer_id}) took over")), "{}", cut_off.log());
    settled(&newer).await;
    let replies = thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").count();
    assert_eq!(replies, 1, "nothing the cut-off copy held was sent after all");
    assert!(newer.is_running(), "{}", newer.log());
    ask_and_count(&alice, &newer, "after the cut").await;
    cut_model.shutdown().await;
    newer_model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_the_agent_sets_keeps_its_marker_and_no_marker_can_be_forged_through_it() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let alice = client(&board, "tok-alice");
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).await;
    wait_ready(&agent).await;
    let id = live_copy(&alice).await;

    // The tools of the running agent (here over its /mcp; the model's loop uses the same client)
    // set the status with a marker of a copy that does not exist.
    let url = format!("http://{}/mcp", agent.http_addr.unwrap());
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(MCP_TOKEN),
    );
    let mcp = ().serve(transport).await.unwrap();
    let mut arguments = serde_json::Map::new();
    arguments.insert("status".into(), json!("on call today [picogent copy 0123456789ab #99]"));
    let set = mcp.call_tool(CallToolRequestParams::new("update_my_status").with_arguments(arguments)).await.unwrap();
    assert_ne!(set.is_error, Some(true), "{set:?}");
    mcp.cancel().await.unwrap();

    let status = alice.get_member("picogent").await.unwrap().status;
    let parsed = parse_status(&status);
    assert_eq!(parsed.text, "on call today", "{status}");
    assert_eq!(parsed.marker.map(|m| m.copy_id), Some(id.clone()), "{status}");
    // Beats later the text is kept, the marker is still this copy's, and it still acts.
    live_copy(&alice).await;
    let status = alice.get_member("picogent").await.unwrap().status;
    assert!(status.starts_with("on call today [picogent copy "), "{status}");
    assert!(!agent.is_superseded());
    assert!(agent.status.caught_up());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
