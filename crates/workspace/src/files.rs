//! Files picogent writes where a coding agent can write (its home) and reads back from where a
//! coding agent wrote (the worktree, its home). The agent may have put anything there: a link to
//! a host file, a FIFO, `/dev/zero`, a 2 GB sparse file. So:
//!
//! - a write never follows a link and never reuses what is there: the name is removed (a link is
//!   removed, not its target), then the file is created anew (`O_CREAT | O_EXCL | O_NOFOLLOW`,
//!   mode `0600`), in a folder that is itself checked not to be a link;
//! - a read opens regular files only, without following a link or blocking on a FIFO, and reads
//!   at most a given number of bytes.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Why a file could not be written safely or read back.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0} is not a folder of picogent's (it is a link or not a folder)")]
    NotAFolder(String),
    #[error("{0} is not a regular file (a link, a folder, a device or a pipe was put there)")]
    NotRegular(String),
    #[error("{path} is larger than {limit} bytes")]
    TooLarge { path: String, limit: u64 },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
    move |source| FileError::Io { path: path.display().to_string(), source }
}

/// Makes `dir` (and its parents) a folder, `0700`: a link or a file found at `dir` itself is
/// removed first, and a folder made anew.
pub fn ensure_dir(dir: &Path) -> Result<(), FileError> {
    if let Ok(meta) = std::fs::symlink_metadata(dir)
        && !meta.is_dir()
    {
        std::fs::remove_file(dir).map_err(io(dir))?;
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    if !meta.is_dir() {
        return Err(FileError::NotAFolder(dir.display().to_string()));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))
}

/// Writes `contents` to `dir/name` as a new file, whatever was there before: a link is removed,
/// never followed; a folder of that name is refused.
pub fn write_fresh(dir: &Path, name: &str, contents: &[u8]) -> Result<(), FileError> {
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    if !meta.is_dir() {
        return Err(FileError::NotAFolder(dir.display().to_string()));
    }
    let path = dir.join(name);
    match std::fs::symlink_metadata(&path) {
        Ok(found) if found.is_dir() => return Err(FileError::NotRegular(path.display().to_string())),
        Ok(_) => std::fs::remove_file(&path).map_err(io(&path))?,
        Err(_) => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(io(&path))?;
    file.write_all(contents).map_err(io(&path))
}

/// Opens `path` for reading if it is a regular file: not through a link, never blocking on a
/// FIFO or a device.
pub fn open_regular(path: &Path) -> Result<File, FileError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ELOOP) => FileError::NotRegular(path.display().to_string()),
            _ => FileError::Io { path: path.display().to_string(), source },
        })?;
    let meta = file.metadata().map_err(io(path))?;
    if !meta.is_file() {
        return Err(FileError::NotRegular(path.display().to_string()));
    }
    Ok(file)
}

/// The whole of the regular file `path`, if it holds at most `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(io(path))?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge { path: path.display().to_string(), limit });
    }
    Ok(bytes)
}

/// The lines of a new file as git counts them, from at most `limit` bytes of it: none for a
/// binary file (a NUL byte in what was read), a file that is not regular, or one that cannot be
/// read. Reads in small pieces, so memory stays small whatever the file's size.
pub fn count_lines(path: &Path, limit: u64) -> u64 {
    let Ok(file) = open_regular(path) else { return 0 };
    let mut reader = file.take(limit);
    let mut buffer = [0u8; 64 * 1024];
    let (mut newlines, mut last, mut any) = (0u64, b'\n', false);
    loop {
        let read = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return 0,
        };
        let piece = &buffer[..read];
        if piece.contains(&0) {
            return 0;
        }
        newlines += piece.iter().filter(|byte| **byte == b'\n').count() as u64;
        last = piece[read - 1];
        any = true;
    }
    newlines + u64::from(any && last != b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_removes_a_planted_link_and_never_writes_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("host-file");
        std::fs::write(&target, "the host's").unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::symlink(&target, home.join("instructions.md")).unwrap();
        write_fresh(&home, "instructions.md", b"ours").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "the host's");
        assert_eq!(std::fs::read_to_string(home.join("instructions.md")).unwrap(), "ours");
        assert!(!std::fs::symlink_metadata(home.join("instructions.md")).unwrap().file_type().is_symlink());
        // A home that is itself a link is refused, not written through.
        let linked_home = dir.path().join("linked-home");
        std::os::unix::fs::symlink(dir.path(), &linked_home).unwrap();
        assert!(matches!(write_fresh(&linked_home, "x", b"y"), Err(FileError::NotAFolder(_))));
        // ensure_dir puts a real folder where the link was.
        ensure_dir(&linked_home).unwrap();
        assert!(std::fs::symlink_metadata(&linked_home).unwrap().is_dir());
    }

    #[test]
    fn reads_take_regular_files_only_and_at_most_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "one\ntwo\nthree").unwrap();
        assert_eq!(count_lines(&file, 1 << 20), 3);
        assert_eq!(read_bounded(&file, 100).unwrap(), b"one\ntwo\nthree");
        assert!(matches!(read_bounded(&file, 5), Err(FileError::TooLarge { .. })));
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(matches!(read_bounded(&zero, 100), Err(FileError::NotRegular(_))));
        assert_eq!(count_lines(&zero, 1 << 30), 0);
        assert!(matches!(read_bounded(Path::new("/dev/zero"), 100), Err(FileError::NotRegular(_))));
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo only reads the path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert!(matches!(read_bounded(&fifo, 100), Err(FileError::NotRegular(_))));
        // A big sparse file: counted from its first bytes, a NUL stops the count.
        let sparse = dir.path().join("sparse");
        File::create(&sparse).unwrap().set_len(2 << 30).unwrap();
        assert_eq!(count_lines(&sparse, 1 << 30), 0);
    }
}
