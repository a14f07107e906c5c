//! The reference board: a small but real Team Board written from `docs/tracker-api.md`
//! (HTTP + WebSocket + SQLite), used by the demo and the tests.
//!
//! Codemap:
//! - [`api`]: the router, and the project, member and step routes; [`tasks`] and [`messages`]
//!   hold the rest of the REST routes;
//! - [`events`]: the durable per-member event log and the WebSocket that delivers it;
//! - [`idempotency`]: `Idempotency-Key` on POSTs; [`extract`]: auth, bodies and queries;
//! - [`db`]: the SQLite store; [`seed`]: the seed file; [`error`]: the one error enum;
//! - [`retention`]: the schedule that prunes the event log and expired idempotency keys;
//! - [`web`]: the page a person uses (`/`: sign in, a project's columns, a task, the chat), on
//!   the same handlers as the API, live through `changes`.
//!
//! Invariants: every answer that is not a success is a [`BoardError`]; every event is logged in
//! the transaction of the change that causes it; writes hold SQLite's write lock from their
//! first statement (`BEGIN IMMEDIATE`).
//!
//! Where things are: `retention.rs` prunes the event log (each member's newest event stays) and
//! expired idempotency keys; `web/mod.rs` holds the page's routes behind the host check, sign-in
//! sessions and live wake-ups from `BoardState::changes`, `web/pages.rs` the handlers (acting
//! through the API's own), `web/templates/*.html` the pages; the contract is `docs/tracker-api.md`.

mod api;
mod db;
mod error;
mod events;
mod extract;
mod idempotency;
mod messages;
mod retention;
mod seed;
mod tasks;
mod web;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use sqlx::SqlitePool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use api::API_PREFIX;
pub use error::BoardError;
pub use retention::Retention;
pub use seed::{Seed, SeedError, SeedMember, SeedProblem, SeedProject};

/// Where the board listens, its database, the seed for a new database, how long it keeps its
/// event log, the host names its web page answers to, and the limits of its door.
#[derive(Debug, Clone)]
pub struct BoardOptions {
    pub listen: SocketAddr,
    pub db: PathBuf,
    pub seed: Option<PathBuf>,
    pub retention: Retention,
    /// Host names the web page answers to besides the listener's address, `localhost` and the
    /// loopback addresses (`--allowed-host`); the API answers any (its bearer tokens guard it).
    pub allowed_hosts: Vec<String>,
    /// The listener's header deadline and connection cap (`--header-timeout-ms`,
    /// `--max-connections`).
    pub doors: picogent_web::DoorLimits,
    /// The web page's live streams, sessions and sign-ins.
    pub pages: PageLimits,
}

/// The web page's limits: live streams open at once (`--max-live-streams`), sessions kept
/// (`--max-sessions`, the one used longest ago put out first) and sign-ins in any minute
/// (`--sign-ins-per-minute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimits {
    pub max_live_streams: usize,
    pub max_sessions: usize,
    pub sign_ins_per_minute: usize,
}

impl Default for PageLimits {
    fn default() -> Self {
        PageLimits {
            max_live_streams: picogent_web::LiveStreams::DEFAULT_MAX,
            max_sessions: picogent_web::SessionLimits::DEFAULT_MAX_SESSIONS,
            sign_ins_per_minute: picogent_web::SignInRate::DEFAULT_PER_MINUTE,
        }
    }
}

impl BoardOptions {
    /// A board on `listen` with the default retention and limits.
    pub fn new(listen: SocketAddr, db: impl Into<PathBuf>, seed: Option<PathBuf>) -> BoardOptions {
        BoardOptions {
            listen,
            db: db.into(),
            seed,
            retention: Retention::default(),
            allowed_hosts: Vec::new(),
            doors: picogent_web::DoorLimits::default(),
            pages: PageLimits::default(),
        }
    }

    /// A board on a free loopback port: what tests and the demo want.
    pub fn loopback(db: impl Into<PathBuf>, seed: Option<PathBuf>) -> BoardOptions {
        BoardOptions::new(SocketAddr::from(([127, 0, 0, 1], 0)), db, seed)
    }
}

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub struct BoardState {
    pub(crate) pool: SqlitePool,
    /// Who each token belongs to (members only come from the seed).
    pub(crate) members: Arc<extract::Members>,
    pub(crate) hub: Arc<events::Hub>,
    /// Woken whenever an idempotent request stores its answer, for duplicates waiting on it.
    pub(crate) idempotency_done: Arc<Notify>,
    /// Cancelled at shutdown; WebSocket connections watch it.
    pub(crate) shutdown: CancellationToken,
    /// Tasks that outlive a request (WebSocket connections, idempotent work), awaited at shutdown.
    pub(crate) tasks: TaskTracker,
    pub(crate) task_ids: Arc<TaskIds>,
    /// Counts every change (a write that succeeded); the web page's live fragments watch it.
    pub(crate) changes: Arc<tokio::sync::watch::Sender<u64>>,
    /// The web page's signed-in sessions.
    pub(crate) web_sessions: Arc<web::Sessions>,
    /// Sign-ins of the web page in the last minute.
    pub sign_ins: Arc<picogent_web::SignInRate>,
    /// The web page's live streams open now, within their cap.
    pub live_streams: picogent_web::LiveStreams,
    /// The host names the web page answers to.
    pub own_hosts: Arc<picogent_web::hosts::OwnHosts>,
}

/// Task ids by id or key, for the reads that only need to know a task exists and its id (its
/// steps, its comments). Tasks are never deleted and never change id or key, so an answer once
/// read stays true, and those reads are one query instead of two.
#[derive(Default)]
pub(crate) struct TaskIds(std::sync::Mutex<std::collections::HashMap<String, String>>);

impl TaskIds {
    /// Bound on the entries kept (two a task); past it the map starts again.
    const MAX_ENTRIES: usize = 200_000;

    /// The id of the task `id_or_key` names, or not found.
    pub(crate) async fn resolve(
        &self,
        conn: &mut sqlx::SqliteConnection,
        id_or_key: &str,
    ) -> Result<String, error::BoardError> {
        if let Some(id) = self.0.lock().ok().and_then(|known| known.get(id_or_key).cloned()) {
            return Ok(id);
        }
        let task = db::find_task_row(conn, id_or_key).await?;
        self.remember(&task.id, &task.key);
        Ok(task.id)
    }

    /// Notes a task that exists (committed).
    pub(crate) fn remember(&self, id: &str, key: &str) {
        if let Ok(mut known) = self.0.lock() {
            if known.len() >= Self::MAX_ENTRIES {
                known.clear();
            }
            known.insert(id.to_string(), id.to_string());
            known.insert(key.to_string(), id.to_string());
        }
    }
}

/// A running board. Dropping it stops the server without waiting; [`BoardHandle::shutdown`]
/// waits until it has stopped and the database is closed.
pub struct BoardHandle {
    addr: SocketAddr,
    state: BoardState,
    server: tokio::task::JoinHandle<()>,
}

impl BoardHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the tracker URL a client is configured with.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `{url}{API_PREFIX}`.
    pub fn api_base(&self) -> String {
        format!("{}{API_PREFIX}", self.url())
    }

    /// Stops accepting requests, lets the ones in flight finish, closes every WebSocket and
    /// closes the database, so a new board can open the same file.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.state.shutdown.cancel();
        (&mut self.server).await.context("the board's server task failed")?;
        self.state.tasks.close();
        self.state.tasks.wait().await;
        self.state.pool.close().await;
        Ok(())
    }
}

impl Drop for BoardHandle {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
    }
}

/// The seed the demo's board starts from, the same file the tests use: the project `team` and
/// the members alice, bob, picogent and otherbot (tokens `tok-<slug>`).
pub const DEMO_SEED: &str = include_str!("../../../fixtures/board-seed.json");

/// A reference board on a free loopback port, its database in `dir`, seeded with [`DEMO_SEED`].
pub async fn start_seeded(dir: &Path) -> anyhow::Result<BoardHandle> {
    let seed_path = dir.join("board-seed.json");
    std::fs::write(&seed_path, DEMO_SEED).context("cannot write the board's seed")?;
    let any_port = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    start(BoardOptions::new(any_port, dir.join("board.db"), Some(seed_path)))
        .await
        .context("cannot start the reference board")
}

/// Opens (or creates) the database, applies the seed to a new one, and serves in the background.
pub async fn start(options: BoardOptions) -> anyhow::Result<BoardHandle> {
    let seed = options.seed.as_deref().map(Seed::load).transpose()?;
    let pool = db::open(&options.db).await?;
    idempotency::clean_up(&pool).await.context("cannot clean up idempotency keys")?;
    match &seed {
        Some(seed) => {
            if seed::apply(&pool, seed).await.context("cannot apply the seed")? {
                tracing::info!(projects = seed.projects.len(), members = seed.members.len(), "seeded a new board");
            } else {
                tracing::info!("the board database already has members; ignoring the seed");
            }
        }
        None => {
            let members: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM members").fetch_one(&pool).await?;
            if members == 0 {
                tracing::warn!("the board has no members, so every request is unauthorized: start it with --seed");
            }
        }
    }
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let addr = listener.local_addr().context("cannot read the board's address")?;
    let members = extract::Members::load(&pool).await.context("cannot read the members")?;
    let state = BoardState {
        pool,
        members: Arc::new(members),
        hub: Arc::new(events::Hub::default()),
        idempotency_done: Arc::new(Notify::new()),
        shutdown: CancellationToken::new(),
        tasks: TaskTracker::new(),
        task_ids: Arc::default(),
        changes: Arc::new(tokio::sync::watch::Sender::new(0)),
        web_sessions: Arc::new(web::Sessions::new(picogent_web::SessionLimits {
            max_sessions: options.pages.max_sessions,
            ..picogent_web::SessionLimits::default()
        })),
        sign_ins: Arc::new(picogent_web::SignInRate::new(options.pages.sign_ins_per_minute)),
        live_streams: picogent_web::LiveStreams::new(options.pages.max_live_streams),
        own_hosts: Arc::new(picogent_web::hosts::OwnHosts::new(addr.ip(), &options.allowed_hosts)),
    };
    retention::spawn(&state, options.retention);
    let app = api::router(state.clone());
    let stop = state.shutdown.clone();
    let server = tokio::spawn(picogent_web::serve::serve(listener, app, options.doors, stop, "board"));
    tracing::info!(%addr, "board listening");
    Ok(BoardHandle { addr, state, server })
}

/// `picogent board`: serves until Ctrl-C.
pub async fn run_cli(options: BoardOptions) -> anyhow::Result<ExitCode> {
    let board = start(options).await?;
    println!("board listening on {} (API at {}; open {} in a browser)", board.url(), board.api_base(), board.url());
    tokio::signal::ctrl_c().await.context("cannot wait for Ctrl-C")?;
    board.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}
