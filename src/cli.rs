//! The command line: one subcommand per job. Each returns an exit code; errors are printed once,
//! lowercase, saying what to do next.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "picogent", version, about = "A team agent for the Team Board task tracker")]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the reference board: a small real Team Board (HTTP + WebSocket + SQLite).
    Board {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8700")]
        listen: SocketAddr,
        /// The board's SQLite database (created if missing).
        #[arg(long, default_value = "board.db")]
        db: PathBuf,
        /// A seed file of projects and members with their tokens, applied when the database is new.
        #[arg(long)]
        seed: Option<PathBuf>,
    },
    /// Serve the offline model endpoint: an OpenAI-compatible chat completions API answered by a
    /// rule-based planner (or a replayed script) — a stand-in for tests and demos, not an LLM.
    OfflineModel {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8790")]
        listen: SocketAddr,
        /// Replay this script (`fixtures/llm/*.json`) instead of running the planner.
        #[arg(long)]
        script: Option<PathBuf>,
        /// Answer every request this many milliseconds late.
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
    },
}

/// Sets up tracing on stderr (stdout is kept for command output and, later, MCP over stdio).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

pub fn main(cli: Cli) -> ExitCode {
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Board { listen, db, seed } => crate::board::run_cli(listen, db, seed).await,
            Command::OfflineModel { listen, script, delay_ms } => {
                crate::offline_model::run_cli(listen, script, delay_ms).await
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
