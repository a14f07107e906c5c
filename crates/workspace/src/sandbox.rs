//! The sandbox a coding agent runs in (`sandbox: true`, or unset where `bwrap` is installed):
//! bubblewrap, with its own `/tmp`, process namespace (picogent's processes and their `/proc`
//! are not there) and network namespace, and no capabilities. Of the host it shows only:
//!
//! - the system's programs and libraries (`/usr`, `/bin`, `/lib*`, `/sbin`) and `/etc`, read-only,
//!   with the files that hold passwords and keys (`/etc/shadow`, `/etc/ssh`, …) blanked;
//! - the coding CLI's own installation, found from its program ([`install_roots`]: the prefix of
//!   its `node_modules` or virtual environment, its interpreter's), and the entry's
//!   `sandbox_read`, read-only;
//! - the worktree and the agent's home, writable; the worktree's `.git` file and the repository's
//!   mirror, read-only (picogent commits and pushes, not the agent);
//! - picogent's own executable, read-only, for the relay.
//!
//! `/root`, `/home`, `/srv`, `/var`, picogent's state and configuration, and the other tasks'
//! workspaces are not there. The only way out of its network is the model's address:
//!
//! ```text
//! coding agent ──TCP──▶ 127.0.0.1:PORT ─ relay inside ─unix socket (in its home)─▶ relay outside ──TCP──▶ model
//!                        (`picogent sandbox-relay`, the                          (a task of this
//!                         sandbox's first process)                                 process)
//! ```
//!
//! A Unix socket crosses network namespaces (it is a file), so neither relay needs a privilege:
//! the sandbox works wherever `bwrap` does. Inside, the model's host name (if it has one) is
//! mapped to 127.0.0.1 by a hosts file bound over `/etc/hosts`, so TLS to it still checks its
//! name; an IP address is replaced by 127.0.0.1 in `{base_url}`.
//!
//! The relay inside is picogent's own executable (the hidden `sandbox-relay` command), set once
//! at start with [`set_relay_program`]; a process that is not picogent (a test, an embedding)
//! sets it to a picogent binary, or a sandboxed entry cannot start.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::config::{CodingAgent, Sandboxing};
use crate::workspace::Workspace;

static RELAY_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// The system's folders, shown read-only (or as the links they are, on a merged `/usr`).
const SYSTEM: [&str; 8] = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];

/// Files under `/etc` that hold passwords or keys: blanked inside.
const BLANKED_FILES: [&str; 6] =
    ["/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/machine-id"];

/// Folders under `/etc` that hold keys: empty inside.
const BLANKED_FOLDERS: [&str; 4] = ["/etc/ssh", "/etc/sudoers.d", "/etc/ssl/private", "/etc/picogent"];

/// Whether a run of an entry with `sandboxing` goes in the sandbox.
pub fn wanted(sandboxing: Sandboxing) -> bool {
    match sandboxing {
        Sandboxing::On => true,
        Sandboxing::Off => false,
        Sandboxing::WhereInstalled => available(),
    }
}

/// Whether coding agents whose entry leaves `sandbox` unset run sandboxed: `bwrap` is installed.
pub fn available() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| on_path("bwrap"))
}

/// The picogent executable whose `sandbox-relay` command relays inside sandboxes. The first
/// call wins.
pub fn set_relay_program(path: PathBuf) {
    let _ = RELAY_PROGRAM.set(path);
}

/// The longest path a Unix socket may have (`sun_path` holds 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Why a sandboxed coding agent cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("its entry asks for the sandbox, and bwrap is not installed (Debian: bubblewrap)")]
    NoBwrap,
    #[error(
        "it runs in the sandbox (bwrap is installed and its entry does not say sandbox: false), and this process \
         is not picogent, whose `sandbox-relay` command carries the model's traffic out of it (set it with \
         picogent_workspace::sandbox::set_relay_program)"
    )]
    NoRelay,
    #[error("the sandbox cannot reach the model at {0:?}: {1}")]
    Model(String, &'static str),
    #[error("the sandbox's socket path {0} is longer than a Unix socket allows; use a shorter workspaces.root")]
    SocketPath(String),
    #[error("cannot prepare the sandbox: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot prepare the sandbox: {0}")]
    File(#[from] crate::files::FileError),
}

/// A sandbox for one run of a coding agent: how its command is wrapped, and where the model is.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Where the model is, outside: its host and port.
    host: String,
    port: u16,
    /// `{base_url}` as the agent inside uses it.
    inside_url: String,
    socket: PathBuf,
    /// A hosts file mapping the model's host name to 127.0.0.1, when it has one.
    hosts: Option<PathBuf>,
    relay: PathBuf,
    /// What it shows read-only besides the system: the CLI's installation, `sandbox_read`.
    reads: Vec<PathBuf>,
    /// `/etc/passwd` and `/etc/group` inside: the agent's own user and group, and root's; none of
    /// the host's accounts.
    accounts: (PathBuf, PathBuf),
}

impl Sandbox {
    /// The sandbox for `agent` working in `workspace` and told the model is at `base_url`.
    pub fn new(workspace: &Workspace, base_url: &str, agent: &CodingAgent) -> Result<Sandbox, SandboxError> {
        if !on_path("bwrap") {
            return Err(SandboxError::NoBwrap);
        }
        let relay = RELAY_PROGRAM.get().cloned().ok_or(SandboxError::NoRelay)?;
        let url = Endpoint::parse(base_url)?;
        let socket = workspace.home.join("model.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(SandboxError::SocketPath(socket.display().to_string()));
        }
        let (inside_url, hosts) = match url.host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(_) => (format!("{}://127.0.0.1:{}{}", url.scheme, url.port, url.rest), None),
            Err(_) => {
                let mapped = format!("127.0.0.1 localhost\n::1 localhost\n127.0.0.1 {}\n", url.host);
                crate::files::write_fresh(&workspace.home, "sandbox-hosts", mapped.as_bytes())?;
                (base_url.to_string(), Some(workspace.home.join("sandbox-hosts")))
            }
        };
        // SAFETY: getuid and getgid only read the process's ids.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let home = workspace.home.display();
        let mut passwd = String::from("root:x:0:0:root:/root:/bin/sh\n");
        let mut group = String::from("root:x:0:\n");
        if uid != 0 {
            passwd.push_str(&format!("agent:x:{uid}:{gid}:coding agent:{home}:/bin/sh\n"));
        }
        if gid != 0 {
            group.push_str(&format!("agent:x:{gid}:\n"));
        }
        crate::files::write_fresh(&workspace.home, "sandbox-passwd", passwd.as_bytes())?;
        crate::files::write_fresh(&workspace.home, "sandbox-group", group.as_bytes())?;
        crate::files::write_fresh(&workspace.home, "sandbox-empty", b"")?;
        let accounts = (workspace.home.join("sandbox-passwd"), workspace.home.join("sandbox-group"));
        let mut reads = install_roots(&agent.command);
        reads.extend(agent.sandbox_read.iter().cloned());
        Ok(Sandbox {
            host: url.host.trim_matches(['[', ']']).to_string(),
            port: url.port,
            inside_url,
            socket,
            hosts,
            relay,
            reads,
            accounts,
        })
    }

    /// `{base_url}` inside the sandbox.
    pub fn base_url(&self) -> &str {
        &self.inside_url
    }

    /// `words` run inside bubblewrap, behind the relay.
    pub fn wrap(&self, words: Vec<String>, workspace: &Workspace) -> Vec<String> {
        let ws = workspace.path.to_string_lossy().into_owned();
        let home = workspace.home.to_string_lossy().into_owned();
        let mut wrapped = vec!["bwrap".to_string()];
        let mut add = |words: &[&str]| wrapped.extend(words.iter().map(|word| word.to_string()));
        for dir in SYSTEM {
            match std::fs::symlink_metadata(dir) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(dir) {
                        add(&["--symlink", &target.to_string_lossy(), dir]);
                    }
                }
                Ok(meta) if meta.is_dir() => add(&["--ro-bind", dir, dir]),
                _ => {}
            }
        }
        let empty = self.accounts.0.with_file_name("sandbox-empty");
        for file in BLANKED_FILES.iter().filter(|file| Path::new(file).is_file()) {
            add(&["--ro-bind", &empty.to_string_lossy(), file]);
        }
        for dir in BLANKED_FOLDERS.iter().filter(|dir| Path::new(dir).is_dir()) {
            add(&["--tmpfs", dir]);
        }
        add(&["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]);
        if let Some(hosts) = &self.hosts {
            add(&["--ro-bind", &hosts.to_string_lossy(), "/etc/hosts"]);
        }
        add(&["--ro-bind", &self.accounts.0.to_string_lossy(), "/etc/passwd"]);
        add(&["--ro-bind", &self.accounts.1.to_string_lossy(), "/etc/group"]);
        for read in self.reads.iter().filter(|read| read.exists()) {
            let read = read.to_string_lossy();
            add(&["--ro-bind", &read, &read]);
        }
        let relay = self.relay.to_string_lossy();
        add(&["--ro-bind", &relay, &relay]);
        let mirror = workspace.mirror.to_string_lossy();
        if workspace.mirror.is_dir() {
            add(&["--ro-bind", &mirror, &mirror]);
        }
        for dir in [&ws, &home] {
            add(&["--bind", dir, dir]);
        }
        let dot_git = workspace.path.join(".git");
        if dot_git.is_file() {
            let dot_git = dot_git.to_string_lossy();
            add(&["--ro-bind", &dot_git, &dot_git]);
        }
        add(&["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]);
        // SAFETY: geteuid only reads the process's id.
        if unsafe { libc::geteuid() } == 0 {
            add(&["--cap-drop", "ALL"]);
        }
        add(&["--chdir", &ws, "--"]);
        wrapped.extend([
            self.relay.to_string_lossy().into_owned(),
            "sandbox-relay".to_string(),
            "--port".to_string(),
            self.port.to_string(),
            "--socket".to_string(),
            self.socket.to_string_lossy().into_owned(),
            "--".to_string(),
        ]);
        wrapped.extend(words);
        wrapped
    }

    /// The relay outside: connections to the socket go to the model, until `stop`.
    pub fn relay_outside(&self, stop: CancellationToken) -> Result<(), SandboxError> {
        let _ = std::fs::remove_file(&self.socket);
        let listener = UnixListener::bind(&self.socket)?;
        let (host, port) = (self.host.clone(), self.port);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stop.cancelled() => break,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut inside, _)) = accepted else { continue };
                let host = host.clone();
                tokio::spawn(async move {
                    match TcpStream::connect((host.as_str(), port)).await {
                        Ok(mut model) => {
                            let _ = tokio::io::copy_bidirectional(&mut inside, &mut model).await;
                        }
                        Err(error) => tracing::warn!(%error, %host, port, "the sandbox's relay cannot reach the model"),
                    }
                });
            }
        });
        Ok(())
    }
}

/// The parts of a model's base URL the relay needs.
struct Endpoint<'a> {
    scheme: &'a str,
    host: &'a str,
    port: u16,
    /// The path and what follows it.
    rest: &'a str,
}

impl<'a> Endpoint<'a> {
    fn parse(url: &'a str) -> Result<Endpoint<'a>, SandboxError> {
        let bad = |why| SandboxError::Model(picogent_support::secret::shown_url(url), why);
        let (scheme, after) = url.split_once("://").ok_or_else(|| bad("it is not an http(s) URL"))?;
        let default_port = match scheme {
            "http" => 80,
            "https" => 443,
            _ => return Err(bad("it is not an http(s) URL")),
        };
        let end = after.find(['/', '?']).unwrap_or(after.len());
        let (authority, rest) = after.split_at(end);
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let (host, port) = match authority.rfind(':') {
            Some(colon) if !authority[colon..].contains(']') => {
                let port = authority[colon + 1..].parse().map_err(|_| bad("its port is not a number"))?;
                (&authority[..colon], port)
            }
            _ => (authority, default_port),
        };
        if host.is_empty() {
            return Err(bad("it names no host"));
        }
        Ok(Endpoint { scheme, host, port, rest })
    }
}

/// The next connection on `listener`; never, without one.
async fn accept_on(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, std::net::SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

fn on_path(program: &str) -> bool {
    which(program).is_some()
}

/// Where `program` is: itself when it names a path, else the first of `PATH`'s folders that has it.
fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| candidate.is_file())
}

/// Whether `path` is inside the system's folders the sandbox shows anyway.
fn in_system(path: &Path) -> bool {
    SYSTEM.iter().any(|dir| path.starts_with(dir))
}

/// The installation a coding agent's command runs from, to be shown read-only: for its program
/// (as named, and where its links lead), its `#!` interpreter, and each absolute path among its
/// words that is a file (a script it runs): the prefix that holds it. A prefix is the folder
/// holding its outermost `node_modules`, the folder above its `bin`, or else its own folder; a
/// Python virtual environment brings the installation it was made from (`pyvenv.cfg`'s `home`).
/// Nothing under the system's folders is listed (they are shown anyway).
pub fn install_roots(command: &[String]) -> Vec<PathBuf> {
    let mut programs: Vec<PathBuf> = Vec::new();
    if let Some(found) = command.first().and_then(|program| which(program)) {
        programs.push(found);
    }
    programs.extend(command.iter().skip(1).map(PathBuf::from).filter(|word| word.is_absolute() && word.is_file()));
    let mut roots: Vec<PathBuf> = Vec::new();
    let mut seen = 0;
    while seen < programs.len() && seen < 16 {
        let program = programs[seen].clone();
        seen += 1;
        let resolved = std::fs::canonicalize(&program).unwrap_or_else(|_| program.clone());
        for path in [&program, &resolved] {
            let Some(root) = prefix_of(path) else { continue };
            if let Some(home) = venv_home(&root) {
                programs.push(home.join("python3"));
            }
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        if let Some(interpreter) = shebang(&resolved) {
            programs.push(interpreter);
        }
    }
    roots
}

fn prefix_of(path: &Path) -> Option<PathBuf> {
    if in_system(path) || !path.is_absolute() {
        return None;
    }
    let mut prefix = PathBuf::new();
    for part in path.components() {
        if part.as_os_str() == "node_modules" {
            return Some(prefix);
        }
        prefix.push(part);
    }
    let dir = path.parent()?;
    let root = match dir.file_name() {
        Some(name) if name == "bin" => dir.parent()?.to_path_buf(),
        _ => dir.to_path_buf(),
    };
    (!in_system(&root) && root != Path::new("/")).then_some(root)
}

/// The `bin` folder a virtual environment at `root` was made from.
fn venv_home(root: &Path) -> Option<PathBuf> {
    let config = crate::files::read_bounded(&root.join("pyvenv.cfg"), 64 * 1024).ok()?;
    let config = String::from_utf8_lossy(&config);
    let home = config.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })?;
    home.is_absolute().then_some(home)
}

/// The program a script's `#!` line runs (through `env`, the program it names).
fn shebang(script: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let read = crate::files::open_regular(script).ok()?.read(&mut head).ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line.split(|byte| *byte == b'\n').next()?).into_owned();
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if first.ends_with("/env") {
        let named = words.find(|word| !word.starts_with('-'))?;
        return which(named);
    }
    Some(PathBuf::from(first))
}

/// The relay inside the sandbox (`picogent sandbox-relay`): listens on 127.0.0.1:`port` (and
/// `[::1]`), carries each connection to `socket`, and runs `command` as its child; exits with
/// the command's exit code (128 + the signal that killed it), or 125 when it cannot start.
pub fn relay_inside(port: u16, socket: &Path, command: &[String]) -> i32 {
    let Some((program, args)) = command.split_first() else {
        eprintln!("picogent sandbox-relay: no command given after --");
        return 125;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("picogent sandbox-relay: {error}");
            return 125;
        }
    };
    runtime.block_on(async {
        let listener = match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("picogent sandbox-relay: cannot listen on 127.0.0.1:{port}: {error}");
                return 125;
            }
        };
        let v6 = TcpListener::bind(("::1", port)).await.ok();
        let mut child = match tokio::process::Command::new(program).args(args).spawn() {
            Ok(child) => child,
            Err(error) => {
                eprintln!("picogent sandbox-relay: cannot run {program:?}: {error}");
                return 127;
            }
        };
        loop {
            let accepted = tokio::select! {
                status = child.wait() => {
                    use std::os::unix::process::ExitStatusExt;
                    return match status {
                        Ok(status) => status.code().or(status.signal().map(|signal| 128 + signal)).unwrap_or(1),
                        Err(_) => 1,
                    };
                }
                accepted = listener.accept() => accepted,
                accepted = accept_on(v6.as_ref()) => accepted,
            };
            let Ok((mut agent, _)) = accepted else { continue };
            let socket = socket.to_path_buf();
            tokio::spawn(async move {
                if let Ok(mut outside) = UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut agent, &mut outside).await;
                }
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_is_split_into_host_port_and_path() {
        let url = Endpoint::parse("http://127.0.0.1:8790/v1").unwrap();
        assert_eq!((url.scheme, url.host, url.port, url.rest), ("http", "127.0.0.1", 8790, "/v1"));
        let url = Endpoint::parse("https://api.example.com/v1/chat").unwrap();
        assert_eq!((url.host, url.port), ("api.example.com", 443));
        let url = Endpoint::parse("http://[::1]:9000").unwrap();
        assert_eq!((url.host, url.port, url.rest), ("[::1]", 9000, ""));
        for bad in ["ftp://x", "no-scheme", "http://:80/v1", "http://host:port/"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
