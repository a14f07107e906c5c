//! `picogent state migrate`: moves one agent's state from its SQLite file into PostgreSQL as it
//! stands, without replaying any history. Every table is copied row for row under the agent's
//! slug, in one PostgreSQL transaction, so the target holds all of it or none of it.
//!
//! What exactly-once rests on comes across unchanged. The stream position and the `stream_head`
//! value make the next `picogent run` on PostgreSQL resume where the SQLite one stopped (no first
//! start, no replay). Message and notice claims keep answered things answered. Runs keep their
//! status: finished ones stay finished, and `running` ones stay running, so the next start resumes
//! them from their record. The `presence.copy_id` value makes the agent's marker on the tracker
//! still its own. Firing claims and the schedules' watermarks (`schedule.through.*` values) keep
//! fired firings fired, and the firing log comes along for the record.
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

mod tables;
use tables::{
    Claim, DailySpend, NamedValue, ProcessedEvent, Reply, Run, RunInputRow, ScheduleFiring, SessionRow, StreamPosition,
};

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
        (ScheduleFiring::NAME, copy::<ScheduleFiring>(source, path, &mut transaction, agent).await?),
    ];
    transaction.commit().await.map_err(MigrateError::Transaction)?;
    lock.release().await;
    Ok(tables)
}

/// Whether the agent has a row in each PostgreSQL table (`$1`: the agent), every table copied.
const AGENT_HAS_ROWS: [(&str, &str); 10] = [
    ("processed_events", "SELECT EXISTS (SELECT 1 FROM processed_events WHERE agent = $1)"),
    ("stream_position", "SELECT EXISTS (SELECT 1 FROM stream_position WHERE agent = $1)"),
    ("named_values", "SELECT EXISTS (SELECT 1 FROM named_values WHERE agent = $1)"),
    ("claims", "SELECT EXISTS (SELECT 1 FROM claims WHERE agent = $1)"),
    ("sessions", "SELECT EXISTS (SELECT 1 FROM sessions WHERE agent = $1)"),
    ("runs", "SELECT EXISTS (SELECT 1 FROM runs WHERE agent = $1)"),
    ("run_inputs", "SELECT EXISTS (SELECT 1 FROM run_inputs WHERE agent = $1)"),
    ("daily_spend", "SELECT EXISTS (SELECT 1 FROM daily_spend WHERE agent = $1)"),
    ("replies", "SELECT EXISTS (SELECT 1 FROM replies WHERE agent = $1)"),
    ("schedule_firings", "SELECT EXISTS (SELECT 1 FROM schedule_firings WHERE agent = $1)"),
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
