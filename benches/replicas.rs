//! Replicas on PostgreSQL, for `bench/run.sh`: runs completed per second with one `picogent run`
//! and with three replicas of the same agent, against the offline model answering every request
//! after 2 s (the model is the bottleneck, as with a real one), and the time a standby takes to
//! take the event stream over after the holder is SIGKILLed, with the default lease. Writes one
//! JSON document (`BENCH_REPLICAS_OUT`, default `target/bench-replicas.json`) that
//! `bench/report.py` turns into rows of `bench/RESULTS.md`.
//!
//! Needs the PostgreSQL the tests use (`POSTGRES_TEST_URL`, default the machine's own on
//! 127.0.0.1:5432, database `test`) and the binary to run (`BENCH_BIN`, default
//! `target/release/picogent`). `BENCH_QUICK=1` runs fewer mentions and takeovers.

#[path = "../tests/support/postgres.rs"]
mod test_postgres;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use picogent::board::BoardOptions;
use picogent::offline_model::OfflineModelOptions;
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

const MODEL_DELAY: Duration = Duration::from_secs(2);
const SLOTS_PER_REPLICA: u32 = 4;

fn quick() -> bool {
    std::env::var("BENCH_QUICK").is_ok_and(|value| value == "1")
}

fn binary() -> PathBuf {
    std::env::var("BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/picogent"))
}

struct Replica {
    child: Child,
    http: SocketAddr,
}

impl Replica {
    fn start(dir: &Path, n: usize, board: &str, model: &str, state_url: &str, lease: Option<u64>) -> Replica {
        let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let mut replicas = json!({"enabled": true});
        if let Some(lease) = lease {
            replicas["stream_lease_ms"] = json!(lease);
        }
        let config = json!({
            "slug": "picogent",
            "name": "picogent",
            "tracker": {"url": board},
            "llm": {"base_url": model, "model": "offline-planner", "timeout_ms": 30000},
            "limits": {"max_concurrent_runs": SLOTS_PER_REPLICA, "shutdown_grace_ms": 1000},
            "state": {"url": state_url},
            "replicas": replicas,
            "http": {"listen": http.to_string()},
            "prompts_dir": Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts"),
            "presence": {"heartbeat_ms": 500},
        });
        let path = dir.join(format!("replica-{n}-{}.json", http.port()));
        std::fs::write(&path, config.to_string()).unwrap();
        let log = std::fs::File::create(dir.join(format!("replica-{n}-{}.log", http.port()))).unwrap();
        let child = Command::new(binary())
            .args(["run", "--config"])
            .arg(&path)
            .env("TEAMBOARD_TOKEN", "tok-picogent")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run {}: {error} (set BENCH_BIN)", binary().display()));
        Replica { child, http }
    }

    async fn wait_ready(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(response) = reqwest::get(format!("http://{}/readyz", self.http)).await
                && response.status().is_success()
                && let Ok(body) = response.json::<serde_json::Value>().await
                && let Some(id) = body["replica"]["id"].as_str()
            {
                return id.to_string();
            }
            assert!(Instant::now() < deadline, "a replica never became ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

/// Runs per second with `replicas` replicas: `mentions` mentions sent at once, timed until each
/// has its answer on the board.
async fn throughput(replicas: usize, mentions: usize) -> f64 {
    let schema = test_postgres::TestSchema::create().await;
    let dir = tempfile::tempdir().unwrap();
    let board_db = dir.path().join("board.db");
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/board-seed.json");
    let board = picogent::board::start(BoardOptions::loopback(&board_db, Some(seed))).await.unwrap();
    let model =
        picogent::offline_model::start(OfflineModelOptions { delay: MODEL_DELAY, ..OfflineModelOptions::planner() })
            .await
            .unwrap();
    let running: Vec<Replica> =
        (0..replicas).map(|n| Replica::start(dir.path(), n, &board.url(), &model.url(), &schema.url(), None)).collect();
    for replica in &running {
        replica.wait_ready().await;
    }
    let alice = human(&board.url());
    let chat = alice.get_project("team").await.unwrap().chat_id;
    let started = Instant::now();
    for n in 0..mentions {
        let body = picogent::tracker::model::SendMessage {
            content: format!("@picogent bench question {n}: how many tasks are open?"),
            chat_id: Some(chat.clone()),
            ..Default::default()
        };
        alice.send_message(&body, None).await.unwrap();
    }
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::new().filename(&board_db).read_only(true))
        .await
        .unwrap();
    loop {
        let answered: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM messages q WHERE q.content LIKE '@picogent bench question %' \
             AND EXISTS (SELECT 1 FROM messages r WHERE r.parent_id = q.id AND r.author_slug = 'picogent')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if answered as usize == mentions {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(600), "the mentions were not answered in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    for replica in running {
        replica.stop();
    }
    model.shutdown().await;
    board.shutdown().await.unwrap();
    schema.drop_schema().await;
    mentions as f64 / elapsed.as_secs_f64()
}

fn human(board: &str) -> picogent::tracker::TrackerClient {
    let config: picogent::config::TrackerConfig = serde_json::from_value(json!({"url": board})).unwrap();
    picogent::tracker::TrackerClient::new(&config, picogent::secret::Secret::new("tok-alice")).unwrap()
}

/// The replica holding the stream, as the agent's own lease code reads it.
async fn stream_holder(observer: &picogent::state::RunQueue) -> Option<String> {
    observer.stream_holder().await.unwrap().map(|(holder, _)| holder)
}

/// Seconds from the SIGKILL of the stream's holder to another replica holding it, `kills` times,
/// with three replicas and the default lease.
async fn takeovers(kills: usize) -> (Vec<f64>, u64) {
    let schema = test_postgres::TestSchema::create().await;
    let dir = tempfile::tempdir().unwrap();
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/board-seed.json");
    let board = picogent::board::start(BoardOptions::loopback(dir.path().join("board.db"), Some(seed))).await.unwrap();
    let model = picogent::offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let start = |n| Replica::start(dir.path(), n, &board.url(), &model.url(), &schema.url(), None);
    let mut running: Vec<Replica> = (0..3).map(start).collect();
    let mut ids = Vec::new();
    for replica in &running {
        ids.push(replica.wait_ready().await);
    }
    let state = picogent::state::State::open_postgres(&schema.url(), "picogent").await.unwrap();
    let (_, observer) = state.for_holder("observer", true);
    let mut samples = Vec::new();
    for n in 0..kills {
        let holder = loop {
            if let Some(holder) = stream_holder(&observer).await {
                break holder;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let index = ids.iter().position(|id| id == &holder).expect("the holder is one of the replicas");
        let killed = Instant::now();
        running[index].kill();
        loop {
            if stream_holder(&observer).await.is_some_and(|now| now != holder) {
                break;
            }
            assert!(killed.elapsed() < Duration::from_secs(60), "nobody took the stream over");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        samples.push(killed.elapsed().as_secs_f64());
        running[index] = start(3 + n);
        ids[index] = running[index].wait_ready().await;
        // Let the new holder renew a few times, as a holder does in the long run.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    for replica in running {
        replica.stop();
    }
    model.shutdown().await;
    board.shutdown().await.unwrap();
    schema.drop_schema().await;
    (samples, picogent::config::ReplicasConfig::default().stream_lease_ms)
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (mentions, rounds, kills) = if quick() { (12, 1, 2) } else { (36, 2, 5) };
        let (mut one, mut three) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternating, so a slower moment of the machine falls on both.
            if round % 2 == 0 {
                one.push(throughput(1, mentions).await);
                three.push(throughput(3, mentions).await);
            } else {
                three.push(throughput(3, mentions).await);
                one.push(throughput(1, mentions).await);
            }
            eprintln!("[replicas] round {round}: one {:.2} runs/s, three {:.2} runs/s", one[round], three[round]);
        }
        let (samples, lease_ms) = takeovers(kills).await;
        eprintln!("[replicas] takeovers after SIGKILL: {samples:?} s");
        let out = json!({
            "throughput": {
                "one": one, "three": three,
                "one_median": median(&one), "three_median": median(&three),
                "ratio_median": median(&three) / median(&one),
                "mentions": mentions, "model_delay_ms": MODEL_DELAY.as_millis() as u64,
                "slots_per_replica": SLOTS_PER_REPLICA,
            },
            "takeover": {
                "samples_s": samples, "median_s": median(&samples),
                "max_s": samples.iter().copied().fold(0.0, f64::max), "stream_lease_ms": lease_ms,
            },
        });
        let path = std::env::var("BENCH_REPLICAS_OUT")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-replicas.json").to_string());
        std::fs::write(&path, serde_json::to_string_pretty(&out).unwrap()).unwrap();
        eprintln!("[replicas] wrote {path}");
    });
}
