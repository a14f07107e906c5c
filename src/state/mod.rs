//! The agent's durable state in one SQLite file (`state.path`): processed events, once-only
//! claims, sessions, runs, and spend.
//!
//! Invariants:
//! - an event is handled at most once: [`State::record_event`] is an `INSERT OR IGNORE` on the
//!   tracker's event id, and only the caller that gets `true` acts on it; anything handled outside
//!   the event stream (reconciliation at start-up) goes through [`State::claim`] with a key that
//!   the event path uses too, so a reconnect, a replay and a reconciliation together act once;
//! - the router records an event as processed *before* acting on it, and opens a run record
//!   ([`State::start_run`]) before the run's first effect; a crash in between leaves a run in
//!   `running`, which [`State::unfinished_runs`] finds at the next start-up;
//! - the resume point ([`State::last_seq`]) never moves backwards and is never pruned;
//! - pruning ([`State::prune`], `retention.rs`) forgets only rows nothing can ask for again: the
//!   reasoning for each table is at the top of that file;
//! - a commit is safe from a crash or kill of the process at once, and from a power cut once
//!   [`State::sync`] has returned: commits are `synchronous = NORMAL` (no fsync each, so handling
//!   an event costs no disk flush), and whoever is about to *act* on the board on the strength of
//!   a record (a run's first tool call, a notice) calls `sync` first. A power cut can then only
//!   roll back records nothing was done for yet; the replay after it does that work once;
//! - the messages of a session and the record of a run are opaque JSON owned by the model loop;
//!   this module stores them whole and never looks inside.
//!
//! The order the router follows, so each thing is done once and nothing is silently dropped:
//! 1. an event that asks for work (a task assigned, a message to answer):
//!    `start_claimed_run(kind, key, session_key, trigger)` claims the thing and opens its run
//!    record in one transaction; `None` means it was handled already (a duplicate, a replay, or
//!    reconciliation got there first);
//! 2. then `record_event(id, seq, name)`, which moves the resume point; events that ask for
//!    nothing are only recorded;
//! 3. the run, then `finish_run`; a failure notice is posted only after
//!    `claim(FAILURE_NOTICE, run_id)` returns `true`;
//! 4. at start-up: `unfinished_runs()` are runs cut short; resume each or `mark_interrupted` it;
//!    then reconcile (tasks assigned while away) through the same claim keys.
//!
//! A crash after 1 leaves a `running` run that step 4 finds; a crash before 2 means the event is
//! replayed after the restart and its claim drops it. The claim and the run record are written
//! together, so there is no moment where a thing is claimed but no run says so.
//!
//! Times are stored as Unix milliseconds in UTC.

mod retention;
mod runs;
mod start;
mod values;

use std::path::{Path, PathBuf};

use sqlx::Row;
use sqlx::sqlite::SqlitePool;
use time::{Date, OffsetDateTime};

pub use retention::{PrunePlan, Pruned};
pub use runs::{FinishRun, RunRow, RunStatus};

/// What a claim in [`State::claim`] is for; its key says which one. The words are what the
/// database stores, so they never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimKind {
    /// Key: the message id. A message was taken in (answered, steered into a run, or decided
    /// against), so no later path acts on it again.
    Message,
    /// Key: the run id. The notice of a failed or stopped run was posted.
    RunNotice,
    /// Key: the UTC day. The notice that the daily budget is spent was posted.
    SpendNotice,
}

impl ClaimKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimKind::Message => "message",
            ClaimKind::RunNotice => "run_notice",
            ClaimKind::SpendNotice => "spend_notice",
        }
    }
}

/// Why the state could not be read or written. `Open` and `Migrate` happen at start-up and are
/// the user's to fix; the rest are bugs or a damaged file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot open the state database {path}: {source}; {hint}")]
    Open { path: PathBuf, source: sqlx::Error, hint: &'static str },
    #[error(
        "cannot prepare the state database {path}: {source}; if the file belongs to another program or \
         a newer picogent, move it aside or set `state.path` to a new file"
    )]
    Migrate { path: PathBuf, source: sqlx::migrate::MigrateError },
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
    pub key: String,
    /// The messages, a JSON array in the model loop's own shape.
    pub messages: serde_json::Value,
    pub updated_at: OffsetDateTime,
}

/// A handle on the state database. Cheap to clone; clones share one connection pool.
#[derive(Clone, Debug)]
pub struct State {
    pool: SqlitePool,
    path: PathBuf,
    /// The spend of the last day asked about or added to, as stored. This handle and its clones
    /// are the file's only writer while the agent runs, so the figure stays true; the lock is
    /// held across each read or write of the table, so no stale read can overwrite a newer sum.
    spend: std::sync::Arc<tokio::sync::Mutex<Option<(Date, Spend)>>>,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/state");

impl State {
    /// Opens the database at `path`, creating the file if it is missing, and brings its schema
    /// up to date. The folder must exist.
    pub async fn open(path: &Path) -> Result<State, StateError> {
        let open_error = |source: sqlx::Error| {
            // SQLite's primary result code 26 is SQLITE_NOTADB: the file is someone else's.
            let not_a_database = matches!(&source, sqlx::Error::Database(e) if e.code().as_deref() == Some("26"));
            let hint = if not_a_database {
                "the file is not an SQLite database: move it aside, or point `state.path` in agent.json at a new file"
            } else {
                "check that its folder exists and is writable, or point `state.path` in agent.json somewhere that is"
            };
            StateError::Open { path: path.to_path_buf(), source, hint }
        };
        // Commits are NORMAL: one survives a crash of the process but not a power cut until
        // `sync`; see the module's invariants for who calls it and when.
        let pool = crate::sqlite::open(path, 4, &MIGRATOR).await.map_err(|error| match error {
            crate::sqlite::OpenError::Connect(source) => open_error(source),
            crate::sqlite::OpenError::Migrate(source) => StateError::Migrate { path: path.to_path_buf(), source },
        })?;
        Ok(State { pool, path: path.to_path_buf(), spend: Default::default() })
    }

    /// The file this state lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes every commit so far survive a power cut: flushes the write-ahead log to the disk
    /// (what `synchronous = FULL` does at each commit). Cheap when nothing was committed since
    /// the last flush.
    pub async fn sync(&self) -> Result<(), StateError> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let directory = self.path.parent().map(Path::to_path_buf);
        let synced = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            match std::fs::File::open(&wal) {
                Ok(file) => file.sync_data()?,
                // No log yet: every commit is in the main file, which checkpoints flush.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(error) => return Err(error),
            }
            // The log's directory entry too, for a log created since the last checkpoint.
            if let Some(directory) = directory.filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(directory)?.sync_all()?;
            }
            Ok(())
        })
        .await;
        match synced {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(StateError::Sync { message: error.to_string() }),
            Err(error) => Err(StateError::Sync { message: error.to_string() }),
        }
    }

    /// Closes the pool, waiting for queries in flight; later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    // ---- processed events ----

    /// Records the event `id` as processed. Returns `true` if it is new — the caller acts on it —
    /// and `false` if it was seen before (a duplicate from a reconnect or a replay). The resume
    /// point moves to `seq` if that is higher, in the same transaction.
    pub async fn record_event(&self, id: &str, seq: u64, name: &str) -> Result<bool, StateError> {
        let seq = to_i64("processed_events.seq", seq)?;
        // One statement: the trigger `processed_events_advance` moves the resume point with the
        // insert (a duplicate's seq is behind it already).
        let inserted =
            sqlx::query("INSERT OR IGNORE INTO processed_events (id, seq, name, processed_at_ms) VALUES (?, ?, ?, ?)")
                .bind(id)
                .bind(seq)
                .bind(name)
                .bind(now_ms())
                .execute(&self.pool)
                .await?
                .rows_affected()
                == 1;
        Ok(inserted)
    }

    /// Whether the event `id` has been recorded as processed.
    pub async fn is_event_processed(&self, id: &str) -> Result<bool, StateError> {
        let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM processed_events WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }

    /// The highest seq processed so far (0 before the first event): the stream resumes after it.
    pub async fn last_seq(&self) -> Result<u64, StateError> {
        let seq: i64 = sqlx::query_scalar("SELECT last_seq FROM stream_position WHERE singleton = 1")
            .fetch_one(&self.pool)
            .await?;
        to_u64("stream_position.last_seq", seq)
    }

    /// Deletes processed events recorded before `before`; returns how many. The resume point is
    /// kept. Only events older than any replay window may go, or a replayed one would be acted
    /// on again (`retention.rs` says why `retention.events_ms` is that window).
    pub async fn prune_events(&self, before: OffsetDateTime) -> Result<u64, StateError> {
        let deleted = sqlx::query("DELETE FROM processed_events WHERE processed_at_ms < ?")
            .bind(to_ms(before))
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(deleted)
    }

    // ---- once-only claims ----

    /// Claims `(kind, key)`. Returns `true` for the first caller ever — it does the thing — and
    /// `false` for every later one.
    pub async fn claim(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        let inserted = sqlx::query("INSERT OR IGNORE INTO claims (kind, key, claimed_at_ms) VALUES (?, ?, ?)")
            .bind(kind.as_str())
            .bind(key)
            .bind(now_ms())
            .execute(&self.pool)
            .await?
            .rows_affected()
            == 1;
        Ok(inserted)
    }

    /// Whether `(kind, key)` has been claimed.
    pub async fn is_claimed(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM claims WHERE kind = ? AND key = ?")
            .bind(kind.as_str())
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }

    /// Gives a claim back, so the thing may be done again (e.g. a task unassigned and assigned
    /// anew). Returns whether there was a claim.
    pub async fn release(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError> {
        let deleted = sqlx::query("DELETE FROM claims WHERE kind = ? AND key = ?")
            .bind(kind.as_str())
            .bind(key)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(deleted == 1)
    }

    // ---- sessions ----

    /// The stored conversation under `key`, if any.
    pub async fn load_session(&self, key: &str) -> Result<Option<Session>, StateError> {
        let row = sqlx::query("SELECT messages, updated_at_ms FROM sessions WHERE key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let text: String = row.try_get("messages")?;
        let messages = serde_json::from_str(&text)
            .map_err(|e| StateError::Corrupt { field: "sessions.messages", message: e.to_string() })?;
        Ok(Some(Session { key: key.to_string(), messages, updated_at: from_ms(row.try_get("updated_at_ms")?)? }))
    }

    /// Stores the whole conversation under `key`, replacing what was there.
    pub async fn save_session(&self, key: &str, messages: &serde_json::Value) -> Result<(), StateError> {
        let text = serde_json::to_string(messages)
            .map_err(|e| StateError::Unstorable { field: "sessions.messages", message: e.to_string() })?;
        sqlx::query(
            "INSERT INTO sessions (key, messages, updated_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (key) DO UPDATE SET messages = excluded.messages, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(key)
        .bind(text)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forgets the conversation under `key`; returns whether there was one.
    pub async fn delete_session(&self, key: &str) -> Result<bool, StateError> {
        let deleted =
            sqlx::query("DELETE FROM sessions WHERE key = ?").bind(key).execute(&self.pool).await?.rows_affected();
        Ok(deleted == 1)
    }

    // ---- spend ----

    /// Adds `tokens` to the spend of the UTC `day`; returns the day's new total of tokens.
    pub async fn add_tokens(&self, day: Date, tokens: u64) -> Result<u64, StateError> {
        Ok(self.add_spend(day, Spend { tokens, cost: 0.0 }).await?.tokens)
    }

    /// Adds `spent` to the spend of the UTC `day`; returns the day's new totals.
    pub async fn add_spend(&self, day: Date, spent: Spend) -> Result<Spend, StateError> {
        let mut known = self.spend.lock().await;
        let row = sqlx::query(
            "INSERT INTO daily_spend (day, tokens, cost) VALUES (?, ?, ?) \
             ON CONFLICT (day) DO UPDATE SET tokens = tokens + excluded.tokens, cost = cost + excluded.cost \
             RETURNING tokens, cost",
        )
        .bind(day.to_string())
        .bind(to_i64("daily_spend.tokens", spent.tokens)?)
        .bind(spent.cost)
        .fetch_one(&self.pool)
        .await?;
        let total = Spend { tokens: to_u64("daily_spend.tokens", row.try_get("tokens")?)?, cost: row.try_get("cost")? };
        *known = Some((day, total));
        Ok(total)
    }

    /// What was spent on the UTC `day`. Asked before every run; read from the database only when
    /// the day changes.
    pub async fn spend_on(&self, day: Date) -> Result<Spend, StateError> {
        let mut known = self.spend.lock().await;
        if let Some((known_day, total)) = *known
            && known_day == day
        {
            return Ok(total);
        }
        let row = sqlx::query("SELECT tokens, cost FROM daily_spend WHERE day = ?")
            .bind(day.to_string())
            .fetch_optional(&self.pool)
            .await?;
        let total = match row {
            Some(row) => {
                Spend { tokens: to_u64("daily_spend.tokens", row.try_get("tokens")?)?, cost: row.try_get("cost")? }
            }
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
    pub async fn record_reply(&self, thread_key: &str, at: OffsetDateTime) -> Result<(), StateError> {
        let at_ms = to_ms(at);
        let mut transaction = self.pool.begin().await?;
        sqlx::query("INSERT INTO replies (thread_key, at_ms) VALUES (?, ?)")
            .bind(thread_key)
            .bind(at_ms)
            .execute(&mut *transaction)
            .await?;
        sqlx::query("DELETE FROM replies WHERE at_ms < ?")
            .bind(to_ms(at - retention::REPLY_LOG_KEPT))
            .execute(&mut *transaction)
            .await?;
        transaction.commit().await?;
        Ok(())
    }

    /// Replies the agent posted in `thread_key` at or after `since`.
    pub async fn replies_since(&self, thread_key: &str, since: OffsetDateTime) -> Result<u32, StateError> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM replies WHERE thread_key = ? AND at_ms >= ?")
            .bind(thread_key)
            .bind(to_ms(since))
            .fetch_one(&self.pool)
            .await?;
        u32::try_from(count).map_err(|e| StateError::Corrupt { field: "replies", message: e.to_string() })
    }

    /// Replies the agent posted in `thread_key` in the last hour.
    pub async fn replies_in_last_hour(&self, thread_key: &str) -> Result<u32, StateError> {
        self.replies_since(thread_key, OffsetDateTime::now_utc() - time::Duration::HOUR).await
    }
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
mod tests;
