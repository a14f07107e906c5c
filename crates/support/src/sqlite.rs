//! How the board's database and the agent's state open SQLite: one file in WAL mode, commits
//! `synchronous = NORMAL`, a pool whose connections are not pinged before each use, and the
//! write-ahead log copied into the database (a checkpoint, with its disk flushes) by a background
//! task, not by whichever commit happens to fill it.
//!
//! SQLite's default checkpoints inside the commit that crosses 1,000 pages of log, so one event
//! in a few dozen waited for two disk flushes (~4 ms each here). A passive checkpoint neither
//! waits for nor blocks readers and writers, so the background one costs requests nothing.
//! sqlx's default pings a pooled connection before handing it out: one more round trip to the
//! connection's worker thread per statement, for a local file that cannot go stale.
//!
//! Both databases are private (`crate::private_files`): the file is made `0600` before SQLite
//! opens it, so the write-ahead log and shared-memory files SQLite
//! makes beside it get the same mode (SQLite copies the database's); an existing file of another
//! user, or a link, is refused.

use std::path::Path;
use std::time::Duration;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

/// How often the background checkpoint runs. The log holds at most about this much work.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Why a database could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The file, its folder or a file beside it could not be made private, or is another user's.
    Private(crate::private_files::PrivateFileError),
    /// The file could not be opened or is not an SQLite database.
    Connect(sqlx::Error),
    /// Its schema could not be brought up to date.
    Migrate(MigrateError),
}

/// The files SQLite keeps beside a database.
const BESIDE: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Opens the database at `path` (creating the file if it is missing), brings its schema up to
/// date with `migrator`, and checkpoints it in the background until the pool is closed.
///
/// Commits are `synchronous = NORMAL`: they survive a crash of the process at once, a power cut
/// once the log is flushed (by a checkpoint, or by whoever must be sure sooner).
pub async fn open(path: &Path, max_connections: u32, migrator: &Migrator) -> Result<SqlitePool, OpenError> {
    make_private(path).map_err(OpenError::Private)?;
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true)
        .pragma("wal_autocheckpoint", "0");
    let pool = SqlitePoolOptions::new()
        .max_connections(max_connections)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .map_err(OpenError::Connect)?;
    if let Err(error) = migrator.run(&pool).await {
        pool.close().await;
        return Err(OpenError::Migrate(error));
    }
    checkpoint_in_background(pool.clone());
    Ok(pool)
}

/// Creates the database file `0600` if it is missing, and checks that it and the files beside it
/// are this user's and private; SQLite then makes its log files alike. The folder is not made
/// here (a missing one is SQLite's error, naming the path): it is the user's, and only warned
/// about when others may write into it.
fn make_private(path: &Path) -> Result<(), crate::private_files::PrivateFileError> {
    let folder = path.parent().filter(|folder| !folder.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !folder.is_dir() {
        return Ok(());
    }
    crate::private_files::warn_if_others_write(folder);
    crate::private_files::open_private(path)?;
    for suffix in BESIDE {
        let mut beside = path.as_os_str().to_owned();
        beside.push(suffix);
        crate::private_files::check_existing(Path::new(&beside))?;
    }
    Ok(())
}

/// Checkpoints `pool`'s database every [`CHECKPOINT_EVERY`] until the pool is closed.
fn checkpoint_in_background(pool: SqlitePool) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(CHECKPOINT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if pool.is_closed() {
                break;
            }
            if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await {
                if pool.is_closed() {
                    break;
                }
                // The log only grows until the next one succeeds; commits are unaffected.
                tracing::warn!(%error, "checkpointing the SQLite write-ahead log failed; trying again shortly");
            }
        }
    });
}
