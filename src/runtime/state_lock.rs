//! One copy per state: the operating system's lock on `<state.path>.lock` for a SQLite file, and
//! the agent's advisory lock for PostgreSQL. The file's lock lasts as long as the process. The
//! PostgreSQL lock lasts as long as its connection, which a restart of the server, a network cut
//! or a terminated backend ends without a word; [`LockKeeper`] asks the connection every
//! presence heartbeat and, when it went, takes the lock again. When another copy took it
//! meanwhile, this copy stops acting as when a newer copy takes over on the tracker: writes
//! refused, the event stream stopped, `/readyz` and the log saying why, exit code 3.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::status::StatusBoard;
use crate::state::{Outage, PostgresLock, StateError};
use crate::tracker::presence::WriteGate;

/// What keeps a second copy of the agent off its state while this one runs.
#[derive(Debug)]
#[allow(dead_code, reason = "held, never read: dropping it lets the lock go")]
pub(super) enum StateLock {
    /// The operating system's lock on `<state.path>.lock`.
    File(std::fs::File),
    /// The agent's advisory lock in the PostgreSQL database, kept by a task of its own.
    Postgres(LockKeeper),
}

/// Why [`lock_state`] did not take the lock.
#[derive(Debug, thiserror::Error)]
pub enum StateLockError {
    /// Another process holds it: an agent runs on the file.
    #[error(
        "another picogent run is using the state file {} (its lock {} is held): run one copy per state file, \
         or give this one its own state.path",
        path.display(),
        lock_path.display()
    )]
    Held { path: std::path::PathBuf, lock_path: std::path::PathBuf },
    /// Another process holds it, and the system says which (Linux's `/proc/locks`).
    #[error(
        "{} is using the state file {} (it holds its lock {}): {}",
        holder.describe(),
        path.display(),
        lock_path.display(),
        holder.what_to_do()
    )]
    HeldBy { path: std::path::PathBuf, lock_path: std::path::PathBuf, holder: LockHolder },
    /// The lock file is another user's, a link, or cannot be made private: that user could keep
    /// this agent from starting.
    #[error("the state lock is not this user's to take: {0}")]
    Private(crate::private_files::PrivateFileError),
    // `cause`, not `source`: the message says it already, and the chain would say it twice.
    #[error("cannot {action} the state lock {}: {cause}", lock_path.display())]
    Io { action: &'static str, lock_path: std::path::PathBuf, cause: std::io::Error },
}

/// The process holding a state lock, and its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub pid: u32,
    pub user: crate::private_files::Account,
    /// Whether that user is the one running this copy.
    pub same_user: bool,
}

impl LockHolder {
    fn describe(&self) -> String {
        match self.same_user {
            true => format!("another picogent run (process {})", self.pid),
            false => format!("process {} of another user, {}", self.pid, self.user),
        }
    }

    fn what_to_do(&self) -> &'static str {
        match self.same_user {
            true => "run one copy per state file: stop that one, or give this one its own state.path",
            false => {
                "it is not this user's process: ask that user (or root) to stop it, or give this agent its own \
                 state.path in a folder only you can write"
            }
        }
    }
}

/// Takes the operating system's lock on `<state.path>.lock`, so a second agent on the same state
/// file refuses to start instead of answering everything a second time. The lock goes with the
/// process, however it ends. `picogent state migrate` takes it too, so no agent writes the file
/// while its state is copied.
///
/// The lock file is private (`0600`, this user's, never through a link: [`crate::private_files`]),
/// so no other user can open it, and so none can take the lock to keep the agent from starting;
/// a lock file another user made is refused, naming them. A held lock names its holder when the
/// system tells (Linux).
pub fn lock_state(path: &std::path::Path) -> Result<std::fs::File, StateLockError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = std::path::PathBuf::from(lock_path);
    let file = crate::private_files::open_private(&lock_path).map_err(|error| match error {
        crate::private_files::PrivateFileError::Io { cause, .. } => {
            StateLockError::Io { action: "open", lock_path: lock_path.clone(), cause }
        }
        refused => StateLockError::Private(refused),
    })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(match lock_holder(&file) {
            Some(holder) => StateLockError::HeldBy { path: path.to_path_buf(), lock_path, holder },
            None => StateLockError::Held { path: path.to_path_buf(), lock_path },
        }),
        Err(std::fs::TryLockError::Error(cause)) => Err(StateLockError::Io { action: "take", lock_path, cause }),
    }
}

/// Who holds the lock on `file`, from `/proc/locks` (Linux; `None` elsewhere or when it is not
/// listed). Its lines read `1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF`.
fn lock_holder(file: &std::fs::File) -> Option<LockHolder> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let metadata = file.metadata().ok()?;
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        let pid = holder_in(&locks, metadata.dev(), metadata.ino())?;
        let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
        let me = crate::private_files::current_uid();
        Some(LockHolder { pid, user: crate::private_files::Account::of_uid(uid), same_user: uid == me })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// The pid of the first lock in `/proc/locks` on the file `device`, `inode`.
#[cfg(target_os = "linux")]
fn holder_in(locks: &str, device: u64, inode: u64) -> Option<u32> {
    // The kernel prints the device as major:minor in hex (`MAJOR`/`MINOR` of `dev_t`).
    let major = ((device >> 8) & 0xfff) | ((device >> 32) & !0xfff);
    let minor = (device & 0xff) | ((device >> 12) & !0xff);
    let wanted = format!("{major:02x}:{minor:02x}:{inode}");
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A lock others wait for is listed again with `->`; the holder's line has none.
        if fields.get(1) == Some(&"->") {
            return None;
        }
        let at = fields.iter().position(|field| *field == wanted)?;
        fields.get(at.checked_sub(1)?)?.parse().ok()
    })
}

/// The lock as taken at start, before the parts of the agent that a lost lock stops exist.
pub(super) enum TakenLock {
    File(std::fs::File),
    Postgres(PostgresLock),
}

impl TakenLock {
    /// Holds the lock while the agent runs: a PostgreSQL lock is asked after every `every`.
    pub(super) fn keep(self, every: Duration, stand_down: StandDown) -> StateLock {
        match self {
            TakenLock::File(file) => StateLock::File(file),
            TakenLock::Postgres(lock) => StateLock::Postgres(LockKeeper::spawn(lock, every, stand_down)),
        }
    }
}

/// How long a lock whose connection stopped answering (rather than closed) is tried again
/// before this copy concludes another copy has it: the server may hold it for the old
/// connection until it notices that connection is gone, within about 25 s by the keepalive
/// probes [`PostgresLock::take`] asks for. A closed connection's lock goes at once.
const RETAKE_FOR: Duration = Duration::from_secs(30);

/// How long the lock's connection may take to answer before it counts as gone.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// Keeps the agent's PostgreSQL lock while the agent runs; lets it go when dropped (at the end of
/// the agent's shutdown, after its runs).
#[derive(Debug)]
pub(super) struct LockKeeper {
    stop: CancellationToken,
}

impl Drop for LockKeeper {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What this copy does when another copy took its lock: the same as when a newer copy takes over
/// on the tracker.
pub(super) struct StandDown {
    pub gate: Option<Arc<WriteGate>>,
    pub status: Arc<StatusBoard>,
    pub stream: CancellationToken,
    pub superseded: CancellationToken,
}

impl LockKeeper {
    /// Starts asking `lock`'s connection every `every`.
    pub(super) fn spawn(lock: PostgresLock, every: Duration, stand_down: StandDown) -> LockKeeper {
        let stop = CancellationToken::new();
        tokio::spawn(keep(lock, every, stand_down, stop.clone()));
        LockKeeper { stop }
    }
}

async fn keep(mut lock: PostgresLock, every: Duration, stand_down: StandDown, stop: CancellationToken) {
    let mut outage = Outage::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
        // An error means the connection is closed, so the server let the lock go; no answer in
        // time means it may still hold it until it notices the connection is gone.
        let grace = match tokio::time::timeout(ANSWER_WITHIN, lock.answers()).await {
            Ok(true) => continue,
            Ok(false) => Duration::ZERO,
            Err(_) => RETAKE_FOR,
        };
        tracing::warn!("the agent's lock in PostgreSQL went with its connection; taking it again");
        // The old connection first, so a lock it may still hold is let go, not mistaken for
        // another copy's.
        let spec = lock.spec();
        let _ = tokio::time::timeout(ANSWER_WITHIN, lock.release()).await;
        let mut held_since: Option<tokio::time::Instant> = None;
        loop {
            match spec.take().await {
                Ok(again) => {
                    outage.answered();
                    tracing::info!("took the agent's lock in PostgreSQL again");
                    lock = again;
                    break;
                }
                Err(StateError::PostgresLocked { url, agent, .. }) => {
                    let since = *held_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= grace {
                        let reason = format!(
                            "another copy of agent `{agent}` took its lock in the PostgreSQL database {url} while this \
                             copy's connection was down; this copy writes nothing more and exits: run one copy per \
                             agent and database (or several with replicas.enabled)"
                        );
                        tracing::error!("{reason}");
                        stand_down.now(reason);
                        return;
                    }
                }
                Err(error) => {
                    held_since = None;
                    outage.failed("cannot take the agent's lock in PostgreSQL again", &error);
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every.min(Duration::from_secs(5))) => {}
            }
        }
    }
    lock.release().await;
}

impl StandDown {
    fn now(&self, reason: String) {
        if let Some(gate) = &self.gate {
            gate.supersede(&reason);
        }
        self.status.set_superseded(reason);
        self.stream.cancel();
        self.superseded.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_file_is_private_and_a_second_taker_is_told_who_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("agent.db");
        let held = lock_state(&state).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let mode = std::fs::metadata(dir.path().join("agent.db.lock")).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let error = lock_state(&state).unwrap_err();
        #[cfg(target_os = "linux")]
        {
            let StateLockError::HeldBy { holder, .. } = &error else { panic!("{error:?}") };
            assert_eq!(holder.pid, std::process::id(), "this process holds it");
            assert!(holder.same_user);
            let message = error.to_string();
            assert!(message.contains(&format!("process {}", std::process::id())), "{message}");
            assert!(message.contains("own state.path"), "says what to do: {message}");
        }
        drop(held);
        lock_state(&state).unwrap();
    }

    #[test]
    fn a_holder_of_another_user_is_named_as_such() {
        let error = StateLockError::HeldBy {
            path: "/srv/agent.db".into(),
            lock_path: "/srv/agent.db.lock".into(),
            holder: LockHolder {
                pid: 4242,
                user: crate::private_files::Account { uid: 1001, name: Some("bob".into()) },
                same_user: false,
            },
        }
        .to_string();
        assert!(error.contains("process 4242 of another user, user bob (uid 1001)"), "{error}");
        assert!(error.contains("ask that user (or root) to stop it"), "{error}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn proc_locks_lines_name_the_holder_of_a_file() {
        let locks = "1: FLOCK  ADVISORY  WRITE 2113 fe:00:5835184 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 77 fe:00:5835184 0 EOF\n\
                     2: POSIX  ADVISORY  READ 587 08:01:10133507 0 EOF\n";
        let device = (0xfe << 8) as u64;
        assert_eq!(holder_in(locks, device, 5835184), Some(2113));
        assert_eq!(holder_in(locks, (8 << 8) | 1, 10133507), Some(587));
        assert_eq!(holder_in(locks, device, 1), None);
    }
}
