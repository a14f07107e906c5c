//! `picogent state migrate`: moves one agent's state from its SQLite file into PostgreSQL as it
//! stands, without replaying any history. Every table is copied row for row under the agent's
//! slug, in one PostgreSQL transaction, so the target holds all of it or none of it.
//!
//! What exactly-once rests on comes across unchanged. The stream position and the `stream_head`
//! value make the next `picogent run` on PostgreSQL resume where the SQLite one stopped (no first
//! start, no replay). Message and notice claims keep answered things answered. Runs keep their
//! status: finished ones stay finished, and `running` ones stay running, so the next start resumes
//! them from their record. The `presence.copy_id` value makes the agent's marker on the tracker
//! still its own.
//!
//! Refusals change nothing, and are checked in this order:
//! - the target is not a `postgres://` URL, or holds a password;
//! - the file is missing, or is not picogent's state at this version;
//! - the file's lock ([`lock_state`]) is held by a running agent;
//! - the file was moved already;
//! - an agent of that slug is running on the target (its `PostgresLock`);
//! - the target already holds a row of the agent in any table.
//!
//! The SQLite file is read without a write until the copy has committed; then, still under its
//! lock, it gets one named value, [`MOVED_TO`] (where its state went, and when), so a
//! `picogent run` on the old file refuses instead of acting a second time beside the agent on
//! PostgreSQL (they would share the copy id, so the tracker's presence marker could not tell
//! them apart), and a second migration of it is refused. The file's lock and the agent's lock in
//! PostgreSQL are held until the copy has committed, so no agent starts on either side halfway.
//!
//! The columns are named on both sides, as the schema stands in `crates/state/migrations/state/`. A column a
//! later migration adds to the PostgreSQL tables with a default takes its default here.

use std::path::{Path, PathBuf};

use futures::TryStreamExt;
use sqlx::postgres::{PgArguments, PgConnection};
use sqlx::query::Query;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteRow};
use sqlx::{ConnectOptions, Postgres};

use crate::postgres::{PostgresLock, PostgresStore};
use crate::store::Store as _;
use crate::{PostgresUrlError, check_postgres_url as check_url};
use crate::{StateError, sqlite};
use crate::{StateLockError, lock_state};

/// What was copied.
#[derive(Debug, Clone, PartialEq)]
pub struct Migrated {
    /// Rows copied per table, in the order the tables were copied (every table, even empty ones).
    pub tables: Vec<(&'static str, u64)>,
    /// The PostgreSQL database and the agent, as they may be shown (no password).
    pub target: String,
}

impl Migrated {
    pub fn total_rows(&self) -> u64 {
        self.tables.iter().map(|(_, rows)| rows).sum()
    }
}

/// Why nothing was copied. Every one leaves the target as it was.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("--to expects a PostgreSQL URL, postgres://user@host:port/database; only PostgreSQL can take the state")]
    NotPostgres,
    #[error("--to {0}")]
    BadUrl(#[source] PostgresUrlError),
    #[error("--agent expects a member slug (letters, digits, '-' or '_'), the slug the agent runs as")]
    BadSlug,
    #[error("the state file {} does not exist: give --from the agent's state.path", path.display())]
    Missing { path: PathBuf },
    #[error("{} is not picogent's state file: {reason}", path.display())]
    NotState { path: PathBuf, reason: String },
    #[error(
        "the state file {} is in use: a picogent run holds its lock {}; stop that agent first, then migrate",
        path.display(),
        lock_path.display()
    )]
    Locked { path: PathBuf, lock_path: PathBuf },
    #[error(transparent)]
    Lock(StateLockError),
    #[error(
        "the state file {} was moved already, to {to}: run the agent there (state.url), or migrate another \
         agent's file",
        path.display()
    )]
    AlreadyMoved { path: PathBuf, to: String },
    #[error(
        "the state is copied, but the file {} could not be marked as moved ({cause}): do not start picogent on the \
         file again; run the agent on the PostgreSQL state (state.url)",
        path.display()
    )]
    Mark { path: PathBuf, cause: StateError },
    // `cause`, not `source`, here and below: the message says it already.
    #[error("cannot read {table} in the state file {}: {cause}", path.display())]
    Read { path: PathBuf, table: &'static str, cause: sqlx::Error },
    #[error("cannot open the PostgreSQL state: {0}")]
    Target(StateError),
    #[error(
        "agent `{agent}` is running on the PostgreSQL state {url} (it holds the agent's lock there): \
         stop it first; a migration goes into a state no agent has used yet"
    )]
    TargetInUse { url: String, agent: String },
    #[error(
        "the PostgreSQL state {target} already holds rows of agent `{agent}` (in {}): nothing was copied; \
         migrate into another schema (?options=-c%20search_path%3D<schema>) or database, or under another \
         identity with --agent",
        tables.join(", ")
    )]
    TargetNotEmpty { target: String, agent: String, tables: Vec<&'static str> },
    #[error("cannot write {table} in PostgreSQL: {cause}; nothing was copied")]
    Write { table: &'static str, cause: sqlx::Error },
    #[error("the PostgreSQL transaction failed: {0}; nothing was copied")]
    Transaction(sqlx::Error),
}

impl MigrateError {
    /// Whether the command line itself is wrong (exit code 2), not the files or databases it names.
    pub fn is_usage(&self) -> bool {
        matches!(self, MigrateError::NotPostgres | MigrateError::BadUrl(_) | MigrateError::BadSlug)
    }
}

/// Copies the state of agent `agent` (its slug) from the SQLite file `from` into the PostgreSQL
/// database `to` (made or brought up to date by the PostgreSQL store's own migrations). See the
/// module docs for what is refused.
pub async fn sqlite_to_postgres(from: &Path, to: &str, agent: &str) -> Result<Migrated, MigrateError> {
    if !(to.starts_with("postgres://") || to.starts_with("postgresql://")) {
        return Err(MigrateError::NotPostgres);
    }
    check_url(to).map_err(MigrateError::BadUrl)?;
    if !picogent_tracker::model::slug_ok(agent) {
        return Err(MigrateError::BadSlug);
    }
    if !from.exists() {
        return Err(MigrateError::Missing { path: from.to_path_buf() });
    }
    if !from.is_file() {
        return Err(MigrateError::NotState { path: from.to_path_buf(), reason: "it is not a file".to_string() });
    }
    // Held to the end: no `picogent run` starts on the file while it is read.
    let _file_lock = lock_state(from).map_err(|error| match error {
        StateLockError::Held { path, lock_path } | StateLockError::HeldBy { path, lock_path, .. } => {
            MigrateError::Locked { path, lock_path }
        }
        error => MigrateError::Lock(error),
    })?;
    let mut source = open_read_only(from).await?;
    let checked = check_schema(&mut source, from).await;
    if let Err(error) = checked {
        let _ = sqlx::Connection::close(source).await;
        return Err(error);
    }
    let moved: Option<String> = sqlx::query_scalar("SELECT value FROM named_values WHERE name = $1")
        .bind(MOVED_TO)
        .fetch_optional(&mut source)
        .await
        .map_err(|cause| MigrateError::Read { path: from.to_path_buf(), table: "named_values", cause })?;
    if let Some(to) = moved {
        let _ = sqlx::Connection::close(source).await;
        return Err(MigrateError::AlreadyMoved { path: from.to_path_buf(), to });
    }
    let copied = copy_into(&mut source, from, to, agent).await;
    let _ = sqlx::Connection::close(source).await;
    let migrated = copied?;
    // Still under the file's lock: the file says where its state went, so `picogent run` on it
    // refuses instead of acting a second time beside the agent on PostgreSQL.
    let moved_to = format!("{} at {}", migrated.target, now_text());
    let mark = async {
        let state = crate::State::open(from).await?;
        let marked = state.set_value(MOVED_TO, &moved_to).await;
        state.close().await;
        marked
    };
    mark.await.map_err(|cause| MigrateError::Mark { path: from.to_path_buf(), cause })?;
    Ok(migrated)
}

/// The named value a moved SQLite file keeps: where its state went, and when.
pub const MOVED_TO: &str = "state.moved_to";

fn now_text() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| now.unix_timestamp().to_string())
}

async fn open_read_only(path: &Path) -> Result<SqliteConnection, MigrateError> {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .create_if_missing(false)
        .busy_timeout(std::time::Duration::from_secs(10));
    options.connect().await.map_err(|source| not_sqlite(path, "the database", source))
}

/// The error of a read; an SQLite "not a database" (result code 26) says the file is someone else's.
fn not_sqlite(path: &Path, table: &'static str, cause: sqlx::Error) -> MigrateError {
    let not_a_database = matches!(&cause, sqlx::Error::Database(e) if e.code().as_deref() == Some("26"));
    if not_a_database {
        return MigrateError::NotState { path: path.to_path_buf(), reason: "it is not an SQLite database".to_string() };
    }
    MigrateError::Read { path: path.to_path_buf(), table, cause }
}

/// Holds the file's applied migrations against this picogent's: the same versions with the same
/// checksums, so every table and column read below is there and nothing else is.
async fn check_schema(source: &mut SqliteConnection, path: &Path) -> Result<(), MigrateError> {
    let not_state = |reason: String| MigrateError::NotState { path: path.to_path_buf(), reason };
    let has_migrations: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')",
    )
    .fetch_one(&mut *source)
    .await
    .map_err(|error| not_sqlite(path, "sqlite_master", error))?;
    if !has_migrations {
        return Err(not_state(
            "it holds no picogent schema (no _sqlx_migrations table); give --from the agent's state.path".to_string(),
        ));
    }
    let applied: Vec<(i64, Vec<u8>, bool)> =
        sqlx::query_as("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&mut *source)
            .await
            .map_err(|error| not_sqlite(path, "_sqlx_migrations", error))?;
    let known: Vec<&sqlx::migrate::Migration> =
        sqlite::MIGRATOR.iter().filter(|m| !m.migration_type.is_down_migration()).collect();
    for (version, checksum, success) in &applied {
        match known.iter().find(|m| m.version == *version) {
            None => {
                return Err(not_state(format!(
                    "it was written by a newer picogent (migration {version} is unknown to this one): migrate with \
                     that version"
                )));
            }
            Some(migration) if migration.checksum.as_ref() != checksum.as_slice() => {
                return Err(not_state(format!("its migration {version} is not picogent's")));
            }
            Some(_) if !success => return Err(not_state(format!("its migration {version} did not complete"))),
            Some(_) => {}
        }
    }
    if let Some(missing) = known.iter().find(|m| !applied.iter().any(|(version, _, _)| *version == m.version)) {
        return Err(not_state(format!(
            "it was written by an older picogent (migration {} is not applied): start this version's `picogent run` \
             on it once, which brings the file up to date, stop it, then migrate",
            missing.version
        )));
    }
    Ok(())
}

async fn copy_into(
    source: &mut SqliteConnection,
    path: &Path,
    url: &str,
    agent: &str,
) -> Result<Migrated, MigrateError> {
    let store = PostgresStore::open(url, agent).await.map_err(MigrateError::Target)?;
    let target = store.location();
    let copied = copy_tables(source, path, &store, url, agent, &target).await;
    store.close().await;
    copied.map(|tables| Migrated { tables, target })
}

async fn copy_tables(
    source: &mut SqliteConnection,
    path: &Path,
    store: &PostgresStore,
    url: &str,
    agent: &str,
    target: &str,
) -> Result<Vec<(&'static str, u64)>, MigrateError> {
    // Held until the commit: no agent of this slug starts on the target meanwhile.
    let lock = PostgresLock::take(url, agent, false).await.map_err(|error| match error {
        StateError::PostgresLocked { url, agent, .. } => MigrateError::TargetInUse { url, agent },
        error => MigrateError::Target(error),
    })?;
    let mut transaction = store.pool().begin().await.map_err(MigrateError::Transaction)?;
    let mut holding = Vec::new();
    for (table, any_row) in AGENT_HAS_ROWS {
        let found: bool = sqlx::query_scalar(any_row)
            .bind(agent)
            .fetch_one(&mut *transaction)
            .await
            .map_err(|cause| MigrateError::Write { table, cause })?;
        if found {
            holding.push(table);
        }
    }
    if !holding.is_empty() {
        lock.release().await;
        return Err(MigrateError::TargetNotEmpty {
            target: target.to_string(),
            agent: agent.to_string(),
            tables: holding,
        });
    }
    let tables = vec![
        (ProcessedEvent::NAME, copy::<ProcessedEvent>(source, path, &mut transaction, agent).await?),
        (StreamPosition::NAME, copy::<StreamPosition>(source, path, &mut transaction, agent).await?),
        (NamedValue::NAME, copy::<NamedValue>(source, path, &mut transaction, agent).await?),
        (Claim::NAME, copy::<Claim>(source, path, &mut transaction, agent).await?),
        (SessionRow::NAME, copy::<SessionRow>(source, path, &mut transaction, agent).await?),
        (Run::NAME, copy::<Run>(source, path, &mut transaction, agent).await?),
        (RunInputRow::NAME, copy::<RunInputRow>(source, path, &mut transaction, agent).await?),
        (DailySpend::NAME, copy::<DailySpend>(source, path, &mut transaction, agent).await?),
        (Reply::NAME, copy::<Reply>(source, path, &mut transaction, agent).await?),
    ];
    transaction.commit().await.map_err(MigrateError::Transaction)?;
    lock.release().await;
    Ok(tables)
}

/// Whether the agent has a row in each PostgreSQL table (`$1`: the agent), every table copied.
const AGENT_HAS_ROWS: [(&str, &str); 9] = [
    ("processed_events", "SELECT EXISTS (SELECT 1 FROM processed_events WHERE agent = $1)"),
    ("stream_position", "SELECT EXISTS (SELECT 1 FROM stream_position WHERE agent = $1)"),
    ("named_values", "SELECT EXISTS (SELECT 1 FROM named_values WHERE agent = $1)"),
    ("claims", "SELECT EXISTS (SELECT 1 FROM claims WHERE agent = $1)"),
    ("sessions", "SELECT EXISTS (SELECT 1 FROM sessions WHERE agent = $1)"),
    ("runs", "SELECT EXISTS (SELECT 1 FROM runs WHERE agent = $1)"),
    ("run_inputs", "SELECT EXISTS (SELECT 1 FROM run_inputs WHERE agent = $1)"),
    ("daily_spend", "SELECT EXISTS (SELECT 1 FROM daily_spend WHERE agent = $1)"),
    ("replies", "SELECT EXISTS (SELECT 1 FROM replies WHERE agent = $1)"),
];

/// One table as it is copied: its rows read from SQLite, inserted into PostgreSQL in batches.
trait Table: Sized + Send + Unpin + for<'r> sqlx::FromRow<'r, SqliteRow> {
    const NAME: &'static str;
    /// Reads every row from SQLite, in the order they were written (the order runs' ties in
    /// start time are broken by, `row_order` in PostgreSQL).
    const SELECT: &'static str;
    /// Rows per INSERT.
    const BATCH: usize = 500;
    /// One INSERT of `rows` under `agent` (`$1`), each column bound as an array and unnested in
    /// the order given.
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments>;
}

/// Copies every row of `T`; returns how many.
async fn copy<T: Table>(
    source: &mut SqliteConnection,
    path: &Path,
    target: &mut PgConnection,
    agent: &str,
) -> Result<u64, MigrateError> {
    let mut rows = sqlx::query_as::<_, T>(T::SELECT).fetch(&mut *source);
    let mut batch = Vec::with_capacity(T::BATCH);
    let mut copied = 0;
    loop {
        let next = rows.try_next().await.map_err(|error| not_sqlite(path, T::NAME, error))?;
        let done = next.is_none();
        batch.extend(next);
        if batch.len() == T::BATCH || (done && !batch.is_empty()) {
            let insert = T::insert(agent, std::mem::take(&mut batch));
            let inserted =
                insert.execute(&mut *target).await.map_err(|cause| MigrateError::Write { table: T::NAME, cause })?;
            copied += inserted.rows_affected();
        }
        if done {
            return Ok(copied);
        }
    }
}

#[derive(sqlx::FromRow)]
struct ProcessedEvent {
    id: String,
    seq: i64,
    name: String,
    processed_at_ms: i64,
}

impl Table for ProcessedEvent {
    const NAME: &'static str = "processed_events";
    const SELECT: &'static str = "SELECT id, seq, name, processed_at_ms FROM processed_events ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut id, mut seq, mut name, mut processed_at_ms) = (vec![], vec![], vec![], vec![]);
        for row in rows {
            id.push(row.id);
            seq.push(row.seq);
            name.push(row.name);
            processed_at_ms.push(row.processed_at_ms);
        }
        sqlx::query(
            "INSERT INTO processed_events (agent, id, seq, name, processed_at_ms) \
             SELECT $1, id, seq, name, processed_at_ms \
             FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::bigint[]) AS row (id, seq, name, processed_at_ms)",
        )
        .bind(agent)
        .bind(id)
        .bind(seq)
        .bind(name)
        .bind(processed_at_ms)
    }
}

/// The resume point. SQLite keeps exactly one row; PostgreSQL one per agent.
#[derive(sqlx::FromRow)]
struct StreamPosition {
    last_seq: i64,
}

impl Table for StreamPosition {
    const NAME: &'static str = "stream_position";
    const SELECT: &'static str = "SELECT last_seq FROM stream_position WHERE singleton = 1";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let last_seq: Vec<i64> = rows.into_iter().map(|row| row.last_seq).collect();
        sqlx::query(
            "INSERT INTO stream_position (agent, last_seq) SELECT $1, last_seq FROM UNNEST($2::bigint[]) AS row (last_seq)",
        )
        .bind(agent)
        .bind(last_seq)
    }
}

/// Among them `stream_head` (the position counts as recorded) and `presence.copy_id`.
#[derive(sqlx::FromRow)]
struct NamedValue {
    name: String,
    value: String,
    updated_at_ms: i64,
}

impl Table for NamedValue {
    const NAME: &'static str = "named_values";
    const SELECT: &'static str = "SELECT name, value, updated_at_ms FROM named_values ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut name, mut value, mut updated_at_ms) = (vec![], vec![], vec![]);
        for row in rows {
            name.push(row.name);
            value.push(row.value);
            updated_at_ms.push(row.updated_at_ms);
        }
        sqlx::query(
            "INSERT INTO named_values (agent, name, value, updated_at_ms) SELECT $1, name, value, updated_at_ms \
             FROM UNNEST($2::text[], $3::text[], $4::bigint[]) AS row (name, value, updated_at_ms)",
        )
        .bind(agent)
        .bind(name)
        .bind(value)
        .bind(updated_at_ms)
    }
}

#[derive(sqlx::FromRow)]
struct Claim {
    kind: String,
    key: String,
    claimed_at_ms: i64,
}

impl Table for Claim {
    const NAME: &'static str = "claims";
    const SELECT: &'static str = "SELECT kind, key, claimed_at_ms FROM claims ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut kind, mut key, mut claimed_at_ms) = (vec![], vec![], vec![]);
        for row in rows {
            kind.push(row.kind);
            key.push(row.key);
            claimed_at_ms.push(row.claimed_at_ms);
        }
        sqlx::query(
            "INSERT INTO claims (agent, kind, key, claimed_at_ms) SELECT $1, kind, key, claimed_at_ms \
             FROM UNNEST($2::text[], $3::text[], $4::bigint[]) AS row (kind, key, claimed_at_ms)",
        )
        .bind(agent)
        .bind(kind)
        .bind(key)
        .bind(claimed_at_ms)
    }
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    key: String,
    messages: String,
    updated_at_ms: i64,
}

impl Table for SessionRow {
    const NAME: &'static str = "sessions";
    const SELECT: &'static str = "SELECT key, messages, updated_at_ms FROM sessions ORDER BY rowid";
    // A session's messages can be large.
    const BATCH: usize = 50;
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut key, mut messages, mut updated_at_ms) = (vec![], vec![], vec![]);
        for row in rows {
            key.push(row.key);
            messages.push(row.messages);
            updated_at_ms.push(row.updated_at_ms);
        }
        sqlx::query(
            "INSERT INTO sessions (agent, key, messages, updated_at_ms) SELECT $1, key, messages, updated_at_ms \
             FROM UNNEST($2::text[], $3::text[], $4::bigint[]) AS row (key, messages, updated_at_ms)",
        )
        .bind(agent)
        .bind(key)
        .bind(messages)
        .bind(updated_at_ms)
    }
}

/// A run with the columns of `crates/state/migrations/state/`, named here rather than taken from the store's
/// `run_columns!`, so columns added to PostgreSQL's runs later (with defaults) take their default.
#[derive(sqlx::FromRow)]
struct Run {
    id: String,
    session_key: String,
    trigger: String,
    status: String,
    turns: i64,
    tool_calls: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
    model_duration_ms: i64,
    tool_duration_ms: i64,
    outcome: Option<String>,
    error: Option<String>,
    started_at_ms: i64,
    finished_at_ms: Option<i64>,
    record: Option<String>,
    cost: Option<f64>,
    /// What a queued or unfinished run needs to be claimed and resumed in the database; the
    /// holder and the lease stay behind (the copy that starts there lets every lease go).
    request: Option<String>,
    attempts: i64,
}

/// Runs' columns, in the order of the arrays bound after the agent.
macro_rules! copied_run_columns {
    () => {
        "id, session_key, trigger, status, turns, tool_calls, prompt_tokens, completion_tokens, \
         model_duration_ms, tool_duration_ms, outcome, error, started_at_ms, finished_at_ms, record, cost, \
         request, attempts"
    };
}

impl Table for Run {
    const NAME: &'static str = "runs";
    const SELECT: &'static str = concat!("SELECT ", copied_run_columns!(), " FROM runs ORDER BY rowid");
    // A run's record holds its whole transcript.
    const BATCH: usize = 50;
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let mut columns = RunArrays::default();
        for row in rows {
            columns.push(row);
        }
        let RunArrays {
            id,
            session_key,
            trigger,
            status,
            turns,
            tool_calls,
            prompt_tokens,
            completion_tokens,
            model_duration_ms,
            tool_duration_ms,
            outcome,
            error,
            started_at_ms,
            finished_at_ms,
            record,
            cost,
            request,
            attempts,
        } = columns;
        // `row_order` (an identity) is given in the order rows come out: SQLite's rowid order.
        sqlx::query(concat!(
            "INSERT INTO runs (agent, ",
            copied_run_columns!(),
            ") SELECT $1, ",
            copied_run_columns!(),
            " FROM UNNEST($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], \
               $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::text[], $14::bigint[], \
               $15::bigint[], $16::text[], $17::float8[], $18::text[], $19::bigint[]) WITH ORDINALITY AS row (",
            copied_run_columns!(),
            ", position) ORDER BY position"
        ))
        .bind(agent)
        .bind(id)
        .bind(session_key)
        .bind(trigger)
        .bind(status)
        .bind(turns)
        .bind(tool_calls)
        .bind(prompt_tokens)
        .bind(completion_tokens)
        .bind(model_duration_ms)
        .bind(tool_duration_ms)
        .bind(outcome)
        .bind(error)
        .bind(started_at_ms)
        .bind(finished_at_ms)
        .bind(record)
        .bind(cost)
        .bind(request)
        .bind(attempts)
    }
}

/// A batch of runs, a column at a time.
#[derive(Default)]
struct RunArrays {
    id: Vec<String>,
    session_key: Vec<String>,
    trigger: Vec<String>,
    status: Vec<String>,
    turns: Vec<i64>,
    tool_calls: Vec<i64>,
    prompt_tokens: Vec<i64>,
    completion_tokens: Vec<i64>,
    model_duration_ms: Vec<i64>,
    tool_duration_ms: Vec<i64>,
    outcome: Vec<Option<String>>,
    error: Vec<Option<String>>,
    started_at_ms: Vec<i64>,
    finished_at_ms: Vec<Option<i64>>,
    record: Vec<Option<String>>,
    cost: Vec<Option<f64>>,
    request: Vec<Option<String>>,
    attempts: Vec<i64>,
}

impl RunArrays {
    fn push(&mut self, run: Run) {
        self.id.push(run.id);
        self.session_key.push(run.session_key);
        self.trigger.push(run.trigger);
        self.status.push(run.status);
        self.turns.push(run.turns);
        self.tool_calls.push(run.tool_calls);
        self.prompt_tokens.push(run.prompt_tokens);
        self.completion_tokens.push(run.completion_tokens);
        self.model_duration_ms.push(run.model_duration_ms);
        self.tool_duration_ms.push(run.tool_duration_ms);
        self.outcome.push(run.outcome);
        self.error.push(run.error);
        self.started_at_ms.push(run.started_at_ms);
        self.finished_at_ms.push(run.finished_at_ms);
        self.record.push(run.record);
        self.cost.push(run.cost);
        self.request.push(run.request);
        self.attempts.push(run.attempts);
    }
}

/// What was sent to a run (steering, a stop), so a run still queued or running after the move
/// takes in what it was sent before it.
#[derive(sqlx::FromRow)]
struct RunInputRow {
    run_id: String,
    n: i64,
    kind: String,
    text: String,
    message_id: Option<String>,
    at_ms: i64,
}

impl Table for RunInputRow {
    const NAME: &'static str = "run_inputs";
    const SELECT: &'static str = "SELECT run_id, n, kind, text, message_id, at_ms FROM run_inputs ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut run_id, mut n, mut kind, mut text, mut message_id, mut at_ms) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for row in rows {
            run_id.push(row.run_id);
            n.push(row.n);
            kind.push(row.kind);
            text.push(row.text);
            message_id.push(row.message_id);
            at_ms.push(row.at_ms);
        }
        sqlx::query(
            "INSERT INTO run_inputs (agent, run_id, n, kind, text, message_id, at_ms) \
             SELECT $1, run_id, n, kind, text, message_id, at_ms \
             FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::bigint[]) \
             AS row (run_id, n, kind, text, message_id, at_ms)",
        )
        .bind(agent)
        .bind(run_id)
        .bind(n)
        .bind(kind)
        .bind(text)
        .bind(message_id)
        .bind(at_ms)
    }
}

#[derive(sqlx::FromRow)]
struct DailySpend {
    day: String,
    tokens: i64,
    cost: f64,
}

impl Table for DailySpend {
    const NAME: &'static str = "daily_spend";
    const SELECT: &'static str = "SELECT day, tokens, cost FROM daily_spend ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut day, mut tokens, mut cost) = (vec![], vec![], vec![]);
        for row in rows {
            day.push(row.day);
            tokens.push(row.tokens);
            cost.push(row.cost);
        }
        sqlx::query(
            "INSERT INTO daily_spend (agent, day, tokens, cost) SELECT $1, day, tokens, cost \
             FROM UNNEST($2::text[], $3::bigint[], $4::float8[]) AS row (day, tokens, cost)",
        )
        .bind(agent)
        .bind(day)
        .bind(tokens)
        .bind(cost)
    }
}

#[derive(sqlx::FromRow)]
struct Reply {
    thread_key: String,
    at_ms: i64,
}

impl Table for Reply {
    const NAME: &'static str = "replies";
    const SELECT: &'static str = "SELECT thread_key, at_ms FROM replies ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut thread_key, mut at_ms) = (vec![], vec![]);
        for row in rows {
            thread_key.push(row.thread_key);
            at_ms.push(row.at_ms);
        }
        sqlx::query(
            "INSERT INTO replies (agent, thread_key, at_ms) SELECT $1, thread_key, at_ms \
             FROM UNNEST($2::text[], $3::bigint[]) AS row (thread_key, at_ms)",
        )
        .bind(agent)
        .bind(thread_key)
        .bind(at_ms)
    }
}
