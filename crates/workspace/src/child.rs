//! Child processes in a group of their own: a hook, git, a coding agent. Stopping one stops
//! everything it started (`killpg`), and dropping its [`Group`] (a run cancelled, a future
//! dropped) kills the group, so no process outlives what started it. If picogent itself is
//! killed, the child gets SIGKILL from the kernel (`PR_SET_PDEATHSIG`), and what it started in its
//! group is killed at the next run in the same folder ([`kill_left_over`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// How long a stopped group has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// The variables of picogent's own environment every child keeps: nothing else of it (the
/// tracker's token, the MCP token, the model key) reaches a child unless its entry names it.
const KEPT: [&str; 3] = ["PATH", "LANG", "TZ"];

/// A command with an empty environment but [`KEPT`], `home` as `HOME`, and `env` on top; run in
/// `dir`, stdin closed, stdout and stderr piped, in a process group of its own.
pub fn command(program: &str, args: &[String], dir: &Path, home: &Path, env: &BTreeMap<String, String>) -> Command {
    let mut command = Command::new(program);
    command.args(args).current_dir(dir).env_clear();
    for name in KEPT {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.env("HOME", home).envs(env);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    // SAFETY: between fork and exec only prctl runs, which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
}

/// The child gets no privilege: `no_new_privs`, an empty capability bounding set, and no
/// capability at all, so a child of root is root without root's powers (it cannot read the
/// memory or the `/proc` files of picogent, which is not dumpable). For a child that is not
/// root, which has no capability, this changes nothing but `no_new_privs`.
pub fn without_privileges(command: &mut Command) {
    // SAFETY: between fork and exec only prctl and capset run, which are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            for capability in 0..64 {
                // EINVAL past the last capability, EPERM without CAP_SETPCAP: nothing to drop.
                libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0);
            }
            libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
            let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
            let data = [CapData::default(); 2];
            if libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Kills what is left of the process group `pgid` of an earlier picogent that was killed: every
/// process of that group whose working folder is inside `dir` (a process of another group, or
/// one that reused the number elsewhere, is left alone). Returns how many were killed.
pub fn kill_left_over(pgid: i32, dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut killed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid pgrp …`: the fields after the last ')'.
        let group =
            stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(2)).and_then(|g| g.parse().ok());
        if group != Some(pgid) {
            continue;
        }
        let inside = std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir));
        if inside {
            // SAFETY: kill only sends a signal.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            killed += 1;
        }
    }
    killed
}

/// A started child and its process group; the group is killed when this is dropped.
pub struct Group {
    pub child: Child,
    pgid: Option<i32>,
}

impl Group {
    /// The process group's id (the child's pid), while it runs.
    pub fn pgid(&self) -> Option<i32> {
        self.pgid
    }

    pub fn spawn(mut command: Command) -> std::io::Result<Group> {
        let child = command.spawn()?;
        let pgid = child.id().and_then(|pid| i32::try_from(pid).ok());
        Ok(Group { child, pgid })
    }

    /// SIGTERM to the whole group, then SIGKILL after [`GRACE`] if the child is still there;
    /// waits for the child. Whatever the child started in its group goes with it.
    pub async fn stop(&mut self) {
        self.signal(libc::SIGTERM);
        if tokio::time::timeout(GRACE, self.child.wait()).await.is_err() {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait().await;
        }
        // What it started and left behind in its group.
        self.signal(libc::SIGKILL);
        self.pgid = None;
    }

    fn signal(&self, signal: i32) {
        if let Some(pgid) = self.pgid {
            // SAFETY: killpg only sends a signal; a group that is gone gives ESRCH, ignored.
            unsafe {
                libc::killpg(pgid, signal);
            }
        }
    }
}

/// The longest line of a child's output kept whole; the rest of a longer one is dropped.
pub const MAX_LINE: usize = 64 * 1024;

/// The next line of `reader`, at most [`MAX_LINE`] bytes of it (the rest dropped, counted in a
/// note at its end); `None` at the end.
async fn next_line(reader: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> Option<String> {
    use tokio::io::AsyncBufReadExt;
    let mut line = Vec::new();
    let mut dropped = 0usize;
    let mut ended = false;
    loop {
        let buffer = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buffer) => buffer,
        };
        let (piece, used, done) = match buffer.iter().position(|byte| *byte == b'\n') {
            Some(at) => (&buffer[..at], at + 1, true),
            None => (buffer, buffer.len(), false),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&piece[..piece.len().min(room)]);
        dropped += piece.len().saturating_sub(room);
        reader.consume(used);
        if done {
            ended = true;
            break;
        }
    }
    if !ended && line.is_empty() && dropped == 0 {
        return None;
    }
    let mut text = String::from_utf8_lossy(&line).into_owned();
    if dropped > 0 {
        text.push_str(&format!(" [{dropped} more bytes of this line not kept]"));
    }
    Some(text)
}

impl Group {
    /// The child's output, line by line as it comes (each at most [`MAX_LINE`] bytes):
    /// `(true, line)` from stdout, `(false, line)` from stderr. The channel closes once both
    /// pipes are closed.
    pub fn lines(&mut self) -> tokio::sync::mpsc::UnboundedReceiver<(bool, String)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let stdout =
            self.child.stdout.take().map(|pipe| (true, Box::new(pipe) as Box<dyn tokio::io::AsyncRead + Send + Unpin>));
        let stderr = self.child.stderr.take().map(|pipe| (false, Box::new(pipe) as _));
        for (is_stdout, pipe) in [stdout, stderr].into_iter().flatten() {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(pipe);
                while let Some(line) = next_line(&mut reader).await {
                    if tx.send((is_stdout, line)).is_err() {
                        break;
                    }
                }
            });
        }
        rx
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// Keeps the first `cap` bytes of what it is given and counts the rest.
#[derive(Debug, Default, Clone)]
pub struct Capped {
    pub text: String,
    pub dropped: u64,
    cap: usize,
}

impl Capped {
    pub fn new(cap: u64) -> Capped {
        Capped { text: String::new(), dropped: 0, cap: usize::try_from(cap).unwrap_or(usize::MAX) }
    }

    pub fn push_line(&mut self, line: &str) {
        let room = self.cap.saturating_sub(self.text.len());
        if line.len() < room {
            self.text.push_str(line);
            self.text.push('\n');
        } else {
            let mut end = room;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&line[..end]);
            self.dropped += (line.len() - end + 1) as u64;
        }
    }

    /// The kept text, with a last line saying how much was dropped.
    pub fn shown(&self) -> String {
        if self.dropped == 0 {
            self.text.clone()
        } else {
            format!("{}\n[{} more bytes of output not kept]", self.text, self.dropped)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_output_keeps_the_start_and_counts_the_rest() {
        let mut capped = Capped::new(10);
        capped.push_line("12345");
        capped.push_line("67890abc");
        assert_eq!(capped.text, "12345\n6789");
        assert_eq!(capped.dropped, 5);
        capped.push_line("more");
        assert_eq!(capped.dropped, 10);
        assert!(capped.shown().ends_with("[10 more bytes of output not kept]"));
        let mut wide = Capped::new(2);
        wide.push_line("é€");
        assert_eq!(wide.text, "é");
    }

    #[tokio::test]
    async fn stopping_a_group_kills_what_the_child_started() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild");
        let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
        let command = command("sh", &["-c".into(), script], dir.path(), dir.path(), &BTreeMap::new());
        let mut group = Group::spawn(command).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&pidfile).map_or(true, |text| text.trim().is_empty()) {
            assert!(std::time::Instant::now() < deadline, "the child never started its own child");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let grandchild: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        group.stop().await;
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = || unsafe { libc::kill(grandchild, 0) } == 0 && !zombie(grandchild);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive() {
            assert!(std::time::Instant::now() < deadline, "the grandchild {grandchild} outlived the stop");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
            .unwrap_or(true)
    }

    #[test]
    fn a_child_sees_none_of_picogents_environment_but_what_it_is_given() {
        // SAFETY: this test's process sets a variable no other test reads.
        unsafe { std::env::set_var("PICOGENT_CHILD_TEST_SECRET", "s3cret") };
        let dir = tempfile::tempdir().unwrap();
        let env = BTreeMap::from([("GIVEN".to_string(), "yes".to_string())]);
        let mut command = command("sh", &["-c".into(), "env".into()], dir.path(), dir.path(), &env);
        let output = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async { command.output().await.unwrap() });
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains("GIVEN=yes"), "{text}");
        assert!(text.contains(&format!("HOME={}", dir.path().display())), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }
}
