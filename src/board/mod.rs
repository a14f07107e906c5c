//! The reference board: a small but real Team Board written from `docs/tracker-api.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// `picogent board`: serves until Ctrl-C.
pub async fn run_cli(listen: SocketAddr, db: PathBuf, seed: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let _ = (listen, db, seed);
    anyhow::bail!("the reference board is not built yet")
}
