//! The sandbox a coding agent entry may ask for (`sandbox: true`): bubblewrap (`bwrap`), with
//! the workspace and the agent's home writable, the rest of the file system read-only, its own
//! `/tmp`, process namespace and network namespace. The only way out of that network is the
//! model's address:
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

use crate::workspace::Workspace;

static RELAY_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

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
        "its entry asks for the sandbox, and this process is not picogent, whose `sandbox-relay` command \
         carries the model's traffic out of it (set it with picogent_workspace::sandbox::set_relay_program)"
    )]
    NoRelay,
    #[error("the sandbox cannot reach the model at {0:?}: {1}")]
    Model(String, &'static str),
    #[error("the sandbox's socket path {0} is longer than a Unix socket allows; use a shorter workspaces.root")]
    SocketPath(String),
    #[error("cannot prepare the sandbox: {0}")]
    Io(#[from] std::io::Error),
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
}

impl Sandbox {
    /// The sandbox for an agent working in `workspace` and told the model is at `base_url`.
    pub fn new(workspace: &Workspace, base_url: &str) -> Result<Sandbox, SandboxError> {
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
                let hosts = workspace.home.join("sandbox-hosts");
                let mapped = format!("127.0.0.1 localhost\n::1 localhost\n127.0.0.1 {}\n", url.host);
                std::fs::write(&hosts, mapped)?;
                (base_url.to_string(), Some(hosts))
            }
        };
        Ok(Sandbox {
            host: url.host.trim_matches(['[', ']']).to_string(),
            port: url.port,
            inside_url,
            socket,
            hosts,
            relay,
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
        let mut wrapped: Vec<String> =
            ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
                .iter()
                .map(|word| word.to_string())
                .collect();
        if let Some(hosts) = &self.hosts {
            wrapped.extend(["--ro-bind".to_string(), hosts.to_string_lossy().into_owned(), "/etc/hosts".to_string()]);
        }
        for dir in [&ws, &home] {
            wrapped.extend(["--bind".to_string(), dir.clone(), dir.clone()]);
        }
        wrapped.extend(
            ["--unshare-pid", "--unshare-net", "--die-with-parent", "--chdir", &ws, "--"].iter().map(|w| w.to_string()),
        );
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
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
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
