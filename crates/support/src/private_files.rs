//! Files only the user running picogent may read: the state database with its write-ahead log,
//! the state lock, the artifacts, and the reference board's database (which holds every member's
//! token).
//!
//! Invariants:
//! - a file made here is created `0600`, and a folder `0700`; a folder that already exists is the
//!   user's and is left as it is (`/tmp`, a home folder), but one others may write into, without
//!   the sticky bit, is warned about once: they could remove or replace what picogent keeps there;
//! - an existing file is used only when it is a regular file of the user running picogent, never
//!   through a symbolic link (`O_NOFOLLOW`); its mode is brought down to `0600` if it was wider;
//! - a file of another user is refused with an error naming both users and what to do, since its
//!   owner could read what picogent writes into it, or (a lock file) keep picogent from starting.
//!
//! On platforms without Unix permissions the files are opened as usual.

use std::fs::File;
use std::path::{Path, PathBuf};

/// The permission bits of the files made here.
pub const FILE_MODE: u32 = 0o600;
/// The permission bits of the folders made here.
pub const FOLDER_MODE: u32 = 0o700;

/// A user account, as an error names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    /// From the password database, when it has the uid.
    pub name: Option<String>,
}

impl Account {
    pub fn of_uid(uid: u32) -> Account {
        Account { uid, name: user_name(uid) }
    }
}

impl std::fmt::Display for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "user {name} (uid {})", self.uid),
            None => write!(f, "uid {}", self.uid),
        }
    }
}

/// Why a private file or folder could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum PrivateFileError {
    #[error(
        "{} belongs to {owner}, not to {me}, who runs picogent: its owner could read what picogent keeps \
         there, or keep picogent from starting. If nothing of theirs uses it, remove it (rm {}) and start \
         again; and keep picogent's files in a folder only you can write",
        path.display(),
        path.display()
    )]
    NotOwned { path: PathBuf, owner: Account, me: Account },
    #[error(
        "{} is a symbolic link: picogent does not follow links to its private files; remove the link, or \
         point the setting at the real path",
        path.display()
    )]
    Link { path: PathBuf },
    #[error("{} is not a regular file: move it aside, or point the setting at a file", path.display())]
    NotAFile { path: PathBuf },
    // `cause`, not `source`: the message says it already, and the chain would say it twice.
    #[error("cannot {action} {}: {cause}", path.display())]
    Io { action: &'static str, path: PathBuf, cause: std::io::Error },
}

/// Creates `folder` and any missing parents `0700`; folders that exist are left as they are, and
/// `folder` itself is warned about if others may write into it (see the module's invariants).
pub fn create_private_dir_all(folder: &Path) -> Result<(), PrivateFileError> {
    if folder.as_os_str().is_empty() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, FOLDER_MODE);
    builder.create(folder).map_err(|cause| PrivateFileError::Io {
        action: "create the folder",
        path: folder.to_path_buf(),
        cause,
    })?;
    warn_if_others_write(folder);
    Ok(())
}

/// Opens `path` for reading and writing, creating it `0600` if it is missing (its folder must
/// exist). An existing file must be a regular file of this user; a wider mode is narrowed.
pub fn open_private(path: &Path) -> Result<File, PrivateFileError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(FILE_MODE).custom_flags(libc::O_NOFOLLOW);
    }
    let file = match options.open(path) {
        Ok(file) => file,
        Err(cause) => {
            // Say why in the user's terms: a link, another user's file, or what the system said.
            check_existing(path)?;
            return Err(PrivateFileError::Io { action: "open", path: path.to_path_buf(), cause });
        }
    };
    let metadata =
        file.metadata().map_err(|cause| PrivateFileError::Io { action: "inspect", path: path.to_path_buf(), cause })?;
    keep_private(path, &metadata, Some(&file))?;
    Ok(file)
}

/// Checks a file that may exist beside a private one (SQLite's `-wal`, `-shm`, `-journal`): if it
/// is there it must be this user's regular file, and its mode is narrowed to `0600`.
pub fn check_existing(path: &Path) -> Result<(), PrivateFileError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(cause) if cause.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(cause) => return Err(PrivateFileError::Io { action: "inspect", path: path.to_path_buf(), cause }),
    };
    if metadata.file_type().is_symlink() {
        return Err(PrivateFileError::Link { path: path.to_path_buf() });
    }
    keep_private(path, &metadata, None)
}

/// Writes `bytes` to the new file `path` (`0600`; it must not exist).
pub fn write_new_private(path: &Path, bytes: &[u8]) -> Result<(), PrivateFileError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(FILE_MODE).custom_flags(libc::O_NOFOLLOW);
    }
    let mut file = options.open(path).map_err(|cause| PrivateFileError::Io {
        action: "create",
        path: path.to_path_buf(),
        cause,
    })?;
    file.write_all(bytes).map_err(|cause| PrivateFileError::Io { action: "write", path: path.to_path_buf(), cause })
}

/// The file must be a regular file of this user; a mode wider than `0600` is narrowed (through
/// `file` when it is open, so no link swapped in meanwhile is followed).
fn keep_private(path: &Path, metadata: &std::fs::Metadata, file: Option<&File>) -> Result<(), PrivateFileError> {
    if !metadata.is_file() {
        return Err(PrivateFileError::NotAFile { path: path.to_path_buf() });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let me = current_uid();
        if metadata.uid() != me {
            return Err(PrivateFileError::NotOwned {
                path: path.to_path_buf(),
                owner: Account::of_uid(metadata.uid()),
                me: Account::of_uid(me),
            });
        }
        if metadata.mode() & 0o077 != 0 {
            let private = std::fs::Permissions::from_mode(FILE_MODE);
            match file {
                Some(file) => file.set_permissions(private),
                None => std::fs::set_permissions(path, private),
            }
            .map_err(|cause| PrivateFileError::Io {
                action: "make private (chmod 600)",
                path: path.to_path_buf(),
                cause,
            })?;
            tracing::info!(path = %path.display(), "made a file others could read private (0600)");
        }
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

/// Warns once per folder when users other than the owner may write into it and it has no sticky
/// bit: they could then remove or replace the files picogent keeps there. A folder others may
/// only read is not warned about: the files in it are `0600`, so its listing shows names only.
pub fn warn_if_others_write(folder: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        static WARNED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
        let Ok(metadata) = std::fs::metadata(folder) else { return };
        let mode = metadata.permissions().mode();
        let sticky = mode & 0o1000 != 0;
        if mode & 0o022 == 0 || sticky {
            return;
        }
        let mut warned = WARNED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if warned.iter().any(|seen| seen == folder) {
            return;
        }
        warned.push(folder.to_path_buf());
        tracing::warn!(
            folder = %folder.display(),
            mode = format!("{:o}", mode & 0o7777),
            "other users may write into the folder holding picogent's private files, so they could remove or \
             replace them: chmod go-w the folder, or keep the files in a folder only you can write"
        );
    }
    #[cfg(not(unix))]
    let _ = folder;
}

/// The effective uid of this process.
pub fn current_uid() -> u32 {
    #[cfg(unix)]
    {
        // SAFETY: geteuid takes no arguments, touches no memory of ours and cannot fail.
        unsafe { libc::geteuid() }
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// The name of `uid` in `/etc/passwd`, if it is there.
pub fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let _password = fields.next()?;
        (fields.next()?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn made_files_and_folders_are_private_and_wider_files_are_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("a/b");
        create_private_dir_all(&folder).unwrap();
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(&folder), 0o700);
        let file = folder.join("state.db");
        open_private(&file).unwrap();
        assert_eq!(mode(&file), 0o600);

        let wide = folder.join("old.db");
        std::fs::write(&wide, b"x").unwrap();
        std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o644)).unwrap();
        open_private(&wide).unwrap();
        assert_eq!(mode(&wide), 0o600);
        let beside = folder.join("old.db-wal");
        std::fs::write(&beside, b"").unwrap();
        std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o666)).unwrap();
        check_existing(&beside).unwrap();
        assert_eq!(mode(&beside), 0o600);
        check_existing(&folder.join("absent")).unwrap();

        write_new_private(&folder.join("artifact.bin"), b"bytes").unwrap();
        assert_eq!(mode(&folder.join("artifact.bin")), 0o600);
        assert!(write_new_private(&folder.join("artifact.bin"), b"again").is_err(), "never overwrites");
    }

    #[test]
    fn an_existing_folder_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir_all(dir.path()).unwrap();
        assert_eq!(mode(dir.path()), 0o755);
    }

    #[test]
    fn links_and_folders_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = open_private(&link).unwrap_err();
        assert!(matches!(error, PrivateFileError::Link { .. }), "{error}");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(matches!(check_existing(&link), Err(PrivateFileError::Link { .. })));
        let error = open_private(dir.path()).unwrap_err();
        assert!(matches!(error, PrivateFileError::NotAFile { .. } | PrivateFileError::Io { .. }), "{error}");
    }

    #[test]
    fn another_users_file_is_refused_naming_both_users() {
        let error = PrivateFileError::NotOwned {
            path: PathBuf::from("/srv/agent/state.db.lock"),
            owner: Account { uid: 1001, name: Some("bob".into()) },
            me: Account { uid: 1000, name: Some("alice".into()) },
        }
        .to_string();
        assert!(error.contains("belongs to user bob (uid 1001), not to user alice (uid 1000)"), "{error}");
        assert!(error.contains("rm /srv/agent/state.db.lock"), "says what to do: {error}");
        assert_eq!(Account { uid: 7, name: None }.to_string(), "uid 7");
        assert_eq!(user_name(0).as_deref(), Some("root"), "read from /etc/passwd");
    }
}
