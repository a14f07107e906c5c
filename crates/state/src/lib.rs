//! The agent's durable state: processed events, once-only claims, sessions, runs, spend, reply
//! counts, named values and scheduled firings (`firings.rs`). It lives in one of two stores
//! behind one interface (`store.rs`): a SQLite file (`state.path`, the default; `sqlite/`), or a
//! PostgreSQL database (`state.url = "postgres://…"`; `postgres/`), where every row is keyed by
//! the agent's slug so one database holds several agents. [`State`] is what the rest of the
//! program holds, whichever store is behind it; it does the conversions both share and hands each
//! operation to the store.
//!
//! Invariants (both stores):
//! - an event is handled at most once: [`State::record_event`] is an insert that ignores a known
//!   tracker event id (keyed by it, and by the agent in PostgreSQL), and only the caller that gets `true` acts on it; anything handled outside
//!   the event stream (reconciliation at start-up) goes through [`State::claim`] with a key that
//!   the event path uses too, so a reconnect, a replay and a reconciliation together act once;
//! - the router records an event as processed *before* acting on it, and queues a run
//!   ([`RunQueue::enqueue`], with the claim of what it is for) before the run's first effect; a
//!   crash after that leaves the run `queued` or `running`, and the queue resumes it
//!   (`queue.rs`);
//! - the resume point ([`State::last_seq`]) never moves backwards and is never pruned;
//! - pruning ([`State::prune`], `retention.rs`) forgets only rows nothing can ask for again: the
//!   reasoning for each table is at the top of that file;
//! - a commit is safe from a crash or kill of the process at once, and from a power cut once
//!   [`State::sync`] has returned: SQLite commits are `synchronous = NORMAL` (no fsync each, so
//!   handling an event costs no disk flush), and whoever is about to *act* on the board on the
//!   strength of a record (a run's first tool call, a notice) calls `sync` first. A power cut can
//!   then only roll back records nothing was done for yet; the replay after it does that work
//!   once. PostgreSQL commits are on the server's disk when they return, so `sync` is a no-op;
//! - a store reads and writes only its own agent's rows: a SQLite file is one agent's (the
//!   runtime's `<state.path>.lock` keeps a second copy off it); in PostgreSQL each row carries the
//!   agent's slug, the agent's identity, so replicas of one agent share rows and other agents in
//!   the same database never see them;
//! - the messages of a session and the record of a run are opaque JSON owned by the model loop;
//!   this module stores them whole and never looks inside.
//!
//! The order the router follows, so each thing is done once and nothing is silently dropped:
//! 1. `record_event(id, seq, name)`, which moves the resume point; `false` (a duplicate or a
//!    replay) drops the event; events that ask for nothing are only recorded;
//! 2. an event that asks for work (a task assigned, a message to answer): `enqueue` claims the
//!    thing and queues its run in one transaction; `Handled` means it was handled already (a
//!    replay after a crash, or reconciliation got there first); a message for a busy session is
//!    claimed in the transaction that hands it to the session's run (`send_input`);
//! 3. `claim_runs` takes queued runs for free slots; the run, then `finish_run` (only by the
//!    run's holder); a failure notice is posted only after `claim(RunNotice, run_id)` is `true`;
//! 4. at start-up, a copy with the state to itself lets every lease go (`release_all`), so the
//!    runs cut short are claimed again and resume; then it reconciles (tasks assigned and
//!    mentions made while away) through the same claim keys.
//!
//! A crash after 1 and before 2 loses the event's work to the record; reconciliation after the
//! restart finds the task or mention again through REST and the same claim keys. The claim and
//! the queued run are written together, so there is no moment where a thing is claimed but no
//! run says so.
//!
//! Times are stored as Unix milliseconds in UTC.
//!
//! Where things are: `lib.rs` (`State`: processed events, claims (`ClaimKind`), sessions, spend,
//! reply counts; each operation handed to its store through `on_store!`); `runs.rs` (`RunRow`,
//! `RunStatus`); `trigger.rs` (`Trigger`: what started a run, typed and as text); `start.rs` (the
//! stream position, told apart from "none yet"); `store.rs` (`Store`: every operation with its
//! guarantee; `QueueStore`; the column types `NewRun`, `RunEnd`,
//! `RunColumns`); `sqlite/` (`SqliteStore`, one agent per file, schema in `migrations/state/`) and
//! `postgres/` (`PostgresStore`, every row keyed by the agent's slug, schema in
//! `migrations/state-postgres/`; `lock.rs`: `PostgresLock`), each with its queue's SQL in
//! `queue.rs`; `queue.rs` (`RunQueue`: `enqueue`, one run per session unless queued `behind`, with
//! its claim; `send_input`; `claim_runs`, `renew_runs`, `release_all`; the stream's lease and the
//! heartbeats; its invariants at its top); `firings.rs` (the firing log and the schedules'
//! watermarks); `retention.rs` (`State::prune`, `PrunePlan`: what each table may lose and why);
//! `outage.rs` (`Outage`: one warning per database outage); `file_lock.rs` (`lock_state`, the OS
//! lock on `<state.path>.lock`); `migrate/` (`sqlite_to_postgres`, `picogent state migrate`);
//! `config.rs` (the `state` section, `StateConfig`, `check_postgres_url`). Tests of both stores:
//! `tests.rs` (`on_both_stores!`), `queue_tests.rs`, `firing_tests.rs`.

/// Calls `$method` of the store behind `$state` with the arguments, and awaits it. Each
/// operation's guarantee is written on the `Store` trait (`store.rs`).
macro_rules! on_store {
    ($state:expr, $method:ident($($argument:expr),* $(,)?)) => {
        match &$state.store {
            $crate::Backend::Sqlite(store) => {
                $crate::store::Store::$method(store, $($argument),*).await
            }
            $crate::Backend::Postgres(store) => {
                $crate::store::Store::$method(store, $($argument),*).await
            }
        }
    };
}

/// Calls `$method` of the run queue of the store behind `$state` (`store::QueueStore`).
macro_rules! on_queue {
    ($state:expr, $method:ident($($argument:expr),* $(,)?)) => {
        match &$state.store {
            $crate::Backend::Sqlite(store) => {
                $crate::store::QueueStore::$method(store, $($argument),*).await
            }
            $crate::Backend::Postgres(store) => {
                $crate::store::QueueStore::$method(store, $($argument),*).await
            }
        }
    };
}

pub mod config;
mod file_lock;
mod firings;
pub mod migrate;
mod outage;
mod postgres;
mod queue;
mod retention;
mod runs;
mod sqlite;
mod start;
mod store;
mod trigger;
mod values;

use std::path::{Path, PathBuf};

use time::{Date, OffsetDateTime};

use picogent_tracker::session::SessionKey;

pub use config::{PostgresUrlError, StateConfig, check_postgres_url};
pub use file_lock::{LockHolder, StateLockError, lock_state};
pub use firings::{FiringOutcome, FiringRow, UnknownFiringOutcome, firing_claim_key};
pub use outage::Outage;
pub use postgres::{LockSpec, PostgresLock};
pub use queue::{Beat, ClaimedRun, Enqueued, InputKind, QueuedRun, QueuedView, ReplicaSeen, RunQueue, SentInput};
pub use retention::{PrunePlan, Pruned};
pub use runs::{AWAITING_INPUT, FinishRun, PassedOver, RunRow, RunStatus, RunSummary, WaitKind, Waiting};
pub use trigger::{Trigger, UnknownTrigger};

/// What a claim in [`State::claim`] is for; its key says which one. The words are what the
/// database stores, so they never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimKind {
    /// Key: the message id. A message was taken in (answered, steered into a run, or decided
    /// against), so no later path acts on it again.
    Message,
    /// Key: the run id. The notice of a failed or stopped run was posted.
    RunNotice,
    /// Key: the UTC day, then `/` and the session. The notice that the daily budget is spent
    /// was posted there.
    SpendNotice,
    /// Key: the UTC day (and hour) of its window, then `/`, what refused, `/` and the session. The
    /// notice that a cap or a policy refused a request was posted there in that window.
    LimitNotice,
    /// Key: the job, `@` and the firing's scheduled time in Unix ms ([`firing_claim_key`]). The
    /// firing of a scheduled job was taken in (queued as a run, or decided against), so no other
    /// replica, and no restart, fires it again. Pruned past `retention.claims_ms` only once the
    /// job's watermark ([`State::schedule_through`]) has reached the firing: the scheduler never
    /// considers a time at or before it again, and the watermark is never pruned.
    Firing,
    /// Key: a parent task's key. A person stopped the tree under it: none of its sub-tasks
    /// starts afterwards (a blocked one whose blockers end, one assigned later).
    TreeStop,
}

impl ClaimKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimKind::Message => "message",
            ClaimKind::RunNotice => "run_notice",
            ClaimKind::SpendNotice => "spend_notice",
            ClaimKind::LimitNotice => "limit_notice",
            ClaimKind::Firing => "firing",
            ClaimKind::TreeStop => "tree_stop",
        }
    }
}

/// Why the state could not be read or written. `Open`, `Migrate` and the `Postgres*` ones happen
/// at start-up and are the user's to fix; the rest are bugs or a damaged database.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot open the state database {path}: {source}; {hint}")]
    Open { path: PathBuf, source: sqlx::Error, hint: &'static str },
    /// The file, its folder or its log is another user's, a link, or cannot be made private.
    #[error("cannot open the state database privately: {0}")]
    Private(picogent_support::private_files::PrivateFileError),
    #[error(
        "cannot prepare the state database {path}: {source}; if the file belongs to another program or \
         a newer picogent, move it aside or set `state.path` to a new file"
    )]
    Migrate { path: PathBuf, source: sqlx::migrate::MigrateError },
    #[error("`state.url` is not a URL PostgreSQL's client takes: {cause}; expected postgres://user@host:port/database")]
    PostgresUrl { cause: sqlx::Error },
    #[error(
        "cannot connect to the PostgreSQL state database {url}: {cause}; check that PostgreSQL is running \
         there and that `state.url` names it (user, host, port, database); a password comes from the \
         environment variable PGPASSWORD or ~/.pgpass"
    )]
    // `cause`, not `source`: the message says it already, and the chain would say it twice.
    PostgresConnect { url: String, cause: sqlx::Error },
    #[error(
        "{} of agent `{agent}` in the PostgreSQL database {url} (it holds the agent's lock there): {}",
        if *replicas { "a picogent run without replicas.enabled is using the state" } else { "another picogent run is using the state" },
        if *replicas { "stop it, or start this one with replicas.enabled set to false" } else { "run one copy per agent and database, give this one its own `state.url`, or run replicas (replicas.enabled on every copy)" }
    )]
    PostgresLocked { url: String, agent: String, replicas: bool },
    #[error(
        "cannot prepare the PostgreSQL state database {url}: {cause}; if its tables belong to another \
         program or a newer picogent, point `state.url` at another database (or schema: \
         ?options=-c%20search_path%3D<schema>)"
    )]
    PostgresMigrate { url: String, cause: sqlx::migrate::MigrateError },
    #[error("state database query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("state database holds a bad value in {field}: {message}")]
    Corrupt { field: &'static str, message: String },
    #[error("could not store {field}: {message}")]
    Unstorable { field: &'static str, message: String },
    #[error("cannot flush the state database to disk: {message}; check the disk holding `state.path`")]
    Sync { message: String },
    #[error("run {run_id} not found in the state database")]
    UnknownRun { run_id: String },
    /// A run's record that is not what was stored there: read into its type, it did not fit.
    // `cause`, not `source`: the message says it already.
    #[error("the record of run {run_id} in the state database is damaged: {cause}")]
    DamagedRecord { run_id: String, cause: serde_json::Error },
}

/// What was spent on one day: tokens, and money when the model has a price.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    pub tokens: u64,
    pub cost: f64,
}

/// A stored conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub key: SessionKey,
    /// The messages, a JSON array in the model loop's own shape.
    pub messages: serde_json::Value,
    pub updated_at: OffsetDateTime,
}

/// The store behind a [`State`].
#[derive(Clone, Debug)]
enum Backend {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PostgresStore),
}

/// A handle on the state database. Cheap to clone; clones share one connection pool.
#[derive(Clone, Debug)]
pub struct State {
    store: Backend,
    /// The spend of the last day asked about or added to, as stored. Without replicas this
    /// handle and its clones are the only writer of the agent's spend while the agent runs (a
    /// SQLite file is locked to one process, a PostgreSQL agent to one copy), so the figure stays
    /// true; the lock is held across each read or write of the table, so no stale read can
    /// overwrite a newer sum. Replicas read the day's spend from the database every time.
    spend: std::sync::Arc<tokio::sync::Mutex<Option<(Date, Spend)>>>,
    /// The process this handle writes runs' ends as (`for_holder`); `None` for a handle that
    /// runs no queued run (the command line's).
    replica: Option<std::sync::Arc<str>>,
    /// Other processes (replicas) share the agent's rows: the spend is read afresh each time.
    shared: bool,
}

impl State {
    /// Opens the SQLite database at `path`, creating the file if it is missing, and brings its
    /// schema up to date. The folder must exist.
    pub async fn open(path: &Path) -> Result<State, StateError> {
        Ok(State::over(Backend::Sqlite(sqlite::SqliteStore::open(path).await?)))
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://user@host:port/database`) as the
    /// agent `agent` (its slug: the key of every row it reads and writes), and brings the
    /// database's schema up to date.
    pub async fn open_postgres(url: &str, agent: &str) -> Result<State, StateError> {
        Ok(State::over(Backend::Postgres(postgres::PostgresStore::open(url, agent).await?)))
    }

    /// Opens the store `state` in agent.json names, for the agent `agent` (its slug).
    pub async fn open_from_config(state: &StateConfig, agent: &str) -> Result<State, StateError> {
        match &state.postgres_url {
            Some(url) => State::open_postgres(url, agent).await,
            None => State::open(&state.path).await,
        }
    }

    fn over(store: Backend) -> State {
        State { store, spend: Default::default(), replica: None, shared: false }
    }

    /// The SQLite file this state lives in; `None` in PostgreSQL.
    pub fn path(&self) -> Option<&Path> {
        match &self.store {
            Backend::Sqlite(store) => Some(store.path()),
            Backend::Postgres(_) => None,
        }
    }

    /// Where this state lives, to name it in messages: the SQLite file, or the PostgreSQL
    /// database (never its password) and the agent.
    pub fn location(&self) -> String {
        match &self.store {
            Backend::Sqlite(store) => store.path().display().to_string(),
            Backend::Postgres(store) => store.location(),
        }
    }

    /// Makes every commit so far survive a power cut. In SQLite it flushes the write-ahead log to
    /// the disk (what `synchronous = FULL` does at each commit), cheap when nothing was committed
    /// since the last flush; in PostgreSQL every commit is durable already.
    pub async fn sync(&self) -> Result<(), StateError> {
        on_store!(self, sync())
    }

    /// Closes the pool, waiting for queries in flight; later calls fail.
    pub async fn close(&self) {
        on_store!(self, close())
    }

    // ---- processed events ----

    /// Records the event `id` as processed. Returns `true` if it is new — the caller acts on it —
    /// and `false` if it was seen before (a duplicate from a reconnect or a replay). The resume
    /// point moves to `seq` if that is higher, in the same transaction.
    pub async fn record_event(&self, id: &str, seq: u64, name: &str) -> Result<bool, StateError> {
        let seq = to_i64("processed_events.seq", seq)?;
        on_store!(self, record_event(id, seq, name, now_ms()))
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Whether the event `id` has been recorded as processed.
    pub async fn is_event_processed(&self, id: &str) -> Result<bool, StateError> {
        on_store!(self, is_event_processed(id))
    }

    /// The highest seq processed so far (0 before the first event): the stream resumes after it.
    pub async fn last_seq(&self) -> Result<u64, StateError> {
        to_u64("stream_position.last_seq", on_store!(self, last_seq())?)
    }

    /// Deletes processed events recorded before `before`; returns how many. The resume point is
    /// kept. Only events older than any replay window may go, or a replayed one would be acted
    /// on again (`retention.rs` says why `retention.events_ms` is that window).
    pub async fn prune_events(&self, before: OffsetDateTime) -> Result<u64, StateError> {
        on_store!(self, prune_events(to_ms(before)))
    }

    // ---- once-only claims ----

    /// Claims `(kind, key)`. Returns `true` for the first caller ever — it does the thing — and
    /// `false` for every later one.
    pub async fn claim(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        on_store!(self, claim(kind, key, now_ms()))
    }

    /// Whether `(kind, key)` has been claimed.
    pub async fn is_claimed(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        on_store!(self, is_claimed(kind, key))
    }

    /// Gives a claim back, so the thing may be done again (e.g. a task unassigned and assigned
    /// anew). Returns whether there was a claim.
    pub async fn release(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        on_store!(self, release(kind, key))
    }

    // ---- sessions ----

    /// The stored conversation under `key`, if any.
    pub async fn load_session(&self, key: &SessionKey) -> Result<Option<Session>, StateError> {
        let Some((text, updated_at_ms)) = on_store!(self, load_session(&key.as_string()))? else { return Ok(None) };
        let messages = serde_json::from_str(&text)
            .map_err(|e| StateError::Corrupt { field: "sessions.messages", message: e.to_string() })?;
        Ok(Some(Session { key: key.clone(), messages, updated_at: from_ms(updated_at_ms)? }))
    }

    /// Stores the whole conversation under `key`, replacing what was there.
    pub async fn save_session(&self, key: &SessionKey, messages: &serde_json::Value) -> Result<(), StateError> {
        on_store!(self, save_session(&key.as_string(), &session_text(messages)?, now_ms()))
    }

    /// Stores the conversation the run `run_id` ended with under `key`. A replica stores it only
    /// while it still holds the run (as with the run's end); a single copy always does. Returns
    /// whether it was stored.
    pub async fn save_session_of_run(
        &self,
        run_id: &str,
        key: &SessionKey,
        messages: &serde_json::Value,
    ) -> Result<bool, StateError> {
        match (&self.store, self.replica.as_deref()) {
            (Backend::Postgres(store), Some(holder)) => {
                store.save_session_of_run(&key.as_string(), &session_text(messages)?, now_ms(), run_id, holder).await
            }
            _ => self.save_session(key, messages).await.map(|()| true),
        }
    }

    #[cfg(any(test, feature = "test-support"))]
    /// Forgets the conversation under `key`; returns whether there was one.
    pub async fn delete_session(&self, key: &SessionKey) -> Result<bool, StateError> {
        on_store!(self, delete_session(&key.as_string()))
    }

    // ---- spend ----

    #[cfg(any(test, feature = "test-support"))]
    /// Adds `tokens` to the spend of the UTC `day`; returns the day's new total of tokens.
    pub async fn add_tokens(&self, day: Date, tokens: u64) -> Result<u64, StateError> {
        Ok(self.add_spend(day, Spend { tokens, cost: 0.0 }).await?.tokens)
    }

    /// Adds `spent` to the spend of the UTC `day`; returns the day's new totals.
    pub async fn add_spend(&self, day: Date, spent: Spend) -> Result<Spend, StateError> {
        let mut known = self.spend.lock().await;
        let tokens = to_i64("daily_spend.tokens", spent.tokens)?;
        let (tokens, cost) = on_store!(self, add_spend(&day.to_string(), tokens, spent.cost))?;
        let total = Spend { tokens: to_u64("daily_spend.tokens", tokens)?, cost };
        *known = Some((day, total));
        Ok(total)
    }

    /// What was spent on the UTC `day`. Asked before every run; read from the database only when
    /// the day changes.
    pub async fn spend_on(&self, day: Date) -> Result<Spend, StateError> {
        let mut known = self.spend.lock().await;
        if let Some((known_day, total)) = *known
            && known_day == day
            && !self.shared
        {
            return Ok(total);
        }
        let total = match on_store!(self, spend_on(&day.to_string()))? {
            Some((tokens, cost)) => Spend { tokens: to_u64("daily_spend.tokens", tokens)?, cost },
            None => Spend::default(),
        };
        *known = Some((day, total));
        Ok(total)
    }

    /// Tokens spent on the UTC `day`.
    pub async fn tokens_on(&self, day: Date) -> Result<u64, StateError> {
        Ok(self.spend_on(day).await?.tokens)
    }

    /// Tokens spent today (UTC).
    pub async fn tokens_today(&self) -> Result<u64, StateError> {
        self.tokens_on(OffsetDateTime::now_utc().date()).await
    }

    /// What was spent today (UTC).
    pub async fn spend_today(&self) -> Result<Spend, StateError> {
        self.spend_on(OffsetDateTime::now_utc().date()).await
    }

    // ---- replies, for the loop guard ----

    /// Notes that the agent posted a reply in `thread_key` at `at`. Rows older than a day are
    /// dropped on the way, since the guard only looks back an hour (and pruning drops them too,
    /// for an agent that posts nothing for a day).
    pub async fn record_reply(&self, thread_key: &SessionKey, at: OffsetDateTime) -> Result<(), StateError> {
        let at_ms = to_ms(at);
        on_store!(self, record_reply(&thread_key.as_string(), at_ms, to_ms(at - retention::REPLY_LOG_KEPT)))
    }

    /// Replies the agent posted in `thread_key` at or after `since`.
    pub async fn replies_since(&self, thread_key: &SessionKey, since: OffsetDateTime) -> Result<u32, StateError> {
        let count = on_store!(self, replies_since(&thread_key.as_string(), to_ms(since)))?;
        u32::try_from(count).map_err(|e| StateError::Corrupt { field: "replies", message: e.to_string() })
    }

    /// Records a reply in `thread_key` now unless the agent posted `max` or more there in the
    /// last hour; then returns that count and records nothing. One step across replicas.
    pub async fn record_reply_within_hour(&self, thread_key: &SessionKey, max: u32) -> Result<Option<u32>, StateError> {
        let thread_key = thread_key.as_string();
        let now = OffsetDateTime::now_utc();
        let since = to_ms(now - time::Duration::HOUR);
        let forget = to_ms(now - retention::REPLY_LOG_KEPT);
        let refused = on_store!(self, record_reply_under(&thread_key, to_ms(now), since, i64::from(max), forget))?;
        refused
            .map(|count| {
                u32::try_from(count).map_err(|e| StateError::Corrupt { field: "replies", message: e.to_string() })
            })
            .transpose()
    }

    /// Replies the agent posted in `thread_key` in the last hour.
    pub async fn replies_in_last_hour(&self, thread_key: &SessionKey) -> Result<u32, StateError> {
        self.replies_since(thread_key, OffsetDateTime::now_utc() - time::Duration::HOUR).await
    }
}

/// A conversation as the text stored in `sessions.messages`.
fn session_text(messages: &serde_json::Value) -> Result<String, StateError> {
    serde_json::to_string(messages)
        .map_err(|e| StateError::Unstorable { field: "sessions.messages", message: e.to_string() })
}

fn now_ms() -> i64 {
    to_ms(OffsetDateTime::now_utc())
}

fn to_ms(at: OffsetDateTime) -> i64 {
    // i64 milliseconds cover ±292 million years; the cast cannot truncate a real date.
    (at.unix_timestamp_nanos() / 1_000_000) as i64
}

fn from_ms(ms: i64) -> Result<OffsetDateTime, StateError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .map_err(|e| StateError::Corrupt { field: "timestamp", message: e.to_string() })
}

fn to_i64(field: &'static str, value: u64) -> Result<i64, StateError> {
    i64::try_from(value).map_err(|_| StateError::Unstorable { field, message: format!("{value} is too large") })
}

fn to_u64(field: &'static str, value: i64) -> Result<u64, StateError> {
    u64::try_from(value).map_err(|_| StateError::Corrupt { field, message: format!("negative value {value}") })
}

#[cfg(test)]
mod firing_tests;
#[cfg(test)]
mod queue_tests;
#[cfg(test)]
mod tests;
