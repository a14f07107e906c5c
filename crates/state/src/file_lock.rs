//! The operating system's lock on `<state.path>.lock`: one process per SQLite state file, be it
//! `picogent run` or `picogent state migrate`.

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
    Private(picogent_support::private_files::PrivateFileError),
    // `cause`, not `source`: the message says it already, and the chain would say it twice.
    #[error("cannot {action} the state lock {}: {cause}", lock_path.display())]
    Io { action: &'static str, lock_path: std::path::PathBuf, cause: std::io::Error },
}

/// The process holding a state lock, and its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub pid: u32,
    pub user: picogent_support::private_files::Account,
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
/// The lock file is private (`0600`, this user's, never through a link: [`picogent_support::private_files`]),
/// so no other user can open it, and so none can take the lock to keep the agent from starting;
/// a lock file another user made is refused, naming them. A held lock names its holder when the
/// system tells (Linux's `/proc/locks`), or else by the process id the holder wrote into the lock
/// file when it took the lock (some filesystems report another device to `stat` than to
/// `/proc/locks`).
pub fn lock_state(path: &std::path::Path) -> Result<std::fs::File, StateLockError> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = std::path::PathBuf::from(lock_path);
    let file = picogent_support::private_files::open_private(&lock_path).map_err(|error| match error {
        picogent_support::private_files::PrivateFileError::Io { cause, .. } => {
            StateLockError::Io { action: "open", lock_path: lock_path.clone(), cause }
        }
        refused => StateLockError::Private(refused),
    })?;
    match file.try_lock() {
        Ok(()) => {
            write_own_pid(&file);
            Ok(file)
        }
        Err(std::fs::TryLockError::WouldBlock) => Err(match lock_holder(&file).or_else(|| written_holder(&file)) {
            Some(holder) => StateLockError::HeldBy { path: path.to_path_buf(), lock_path, holder },
            None => StateLockError::Held { path: path.to_path_buf(), lock_path },
        }),
        Err(std::fs::TryLockError::Error(cause)) => Err(StateLockError::Io { action: "take", lock_path, cause }),
    }
}

/// Writes this process's id into the lock file it holds, for [`written_holder`]. Best effort: the
/// lock is what keeps a second copy out, the id only names the holder in the refusal.
fn write_own_pid(mut file: &std::fs::File) {
    use std::io::{Seek, Write};
    let written = file
        .set_len(0)
        .and_then(|()| file.seek(std::io::SeekFrom::Start(0)))
        .and_then(|_| writeln!(file, "{}", std::process::id()));
    if let Err(error) = written {
        tracing::debug!(%error, "could not write the process id into the state lock");
    }
}

/// The holder named by the process id in the lock file, when that process still runs (on a
/// system with `/proc`; `None` elsewhere, or when the file holds no live process's id).
fn written_holder(mut file: &std::fs::File) -> Option<LockHolder> {
    use std::io::{Read, Seek};
    let mut text = String::new();
    file.seek(std::io::SeekFrom::Start(0)).ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    let pid: u32 = text.trim().parse().ok()?;
    holder_of(pid)
}

/// The process `pid` as a lock holder, with its user, if it runs (Linux's `/proc`).
fn holder_of(pid: u32) -> Option<LockHolder> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
        let me = picogent_support::private_files::current_uid();
        Some(LockHolder { pid, user: picogent_support::private_files::Account::of_uid(uid), same_user: uid == me })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
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
        holder_of(holder_in(&locks, metadata.dev(), metadata.ino())?)
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

    #[cfg(target_os = "linux")]
    #[test]
    fn the_holder_is_named_from_the_lock_file_where_proc_locks_does_not_list_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("agent.db");
        let _held = lock_state(&state).unwrap();
        let text = std::fs::read_to_string(dir.path().join("agent.db.lock")).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        let other = std::fs::File::open(dir.path().join("agent.db.lock")).unwrap();
        let holder = written_holder(&other).expect("the written id names a live process");
        assert_eq!(holder.pid, std::process::id());
        assert!(holder.same_user);
        // An id of no live process names nobody.
        std::fs::write(dir.path().join("stale.lock"), "4294967295\n").unwrap();
        assert!(written_holder(&std::fs::File::open(dir.path().join("stale.lock")).unwrap()).is_none());
    }

    #[test]
    fn a_holder_of_another_user_is_named_as_such() {
        let error = StateLockError::HeldBy {
            path: "/srv/agent.db".into(),
            lock_path: "/srv/agent.db.lock".into(),
            holder: LockHolder {
                pid: 4242,
                user: picogent_support::private_files::Account { uid: 1001, name: Some("bob".into()) },
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
