//! The command line: one subcommand per job. Each returns an exit code; errors are printed once,
//! lowercase, saying what to do next.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::inspector::view::RunFilter;
use crate::mcp::server::{self as mcp, McpServer};
use crate::prompts::Prompts;
use crate::runtime::inspector_settings;
use crate::secret::Secret;
use crate::tools::ToolSource;
use crate::tracker::TrackerClient;
use crate::transport::StreamStart;

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

/// Why a flag's value was refused: clap prints it under the flag's name.
#[derive(Debug, thiserror::Error)]
enum BadFlagValue {
    #[error("expected milliseconds, a whole number greater than 0 (7 days is 604800000)")]
    Milliseconds,
    #[error("expected a whole number greater than 0")]
    Count,
    #[error(
        "expected a host name or address, with a port or not, like board.example.com or board.example.com:8700 \
         (no scheme, no path)"
    )]
    HostName,
}

/// A duration flag in milliseconds: a whole number greater than 0.
fn positive_ms(text: &str) -> Result<u64, BadFlagValue> {
    text.parse::<u64>().ok().filter(|ms| *ms > 0).ok_or(BadFlagValue::Milliseconds)
}

/// A count of at least 1 (`--max-connections` and the like).
fn positive_count(text: &str) -> Result<usize, BadFlagValue> {
    text.parse::<usize>().ok().filter(|count| *count > 0).ok_or(BadFlagValue::Count)
}

/// The limits of `picogent board`'s door, each with the agent's default for `http.listen`.
#[derive(Debug, clap::Args)]
pub struct BoardLimits {
    /// How long a client may take to send a request's headers, in milliseconds; past it the
    /// connection is closed (as is a keep-alive connection idle that long).
    #[arg(long, default_value_t = crate::web::DoorLimits::DEFAULT_HEADER_TIMEOUT_MS, value_parser = positive_ms)]
    header_timeout_ms: u64,
    /// Connections open at once (WebSockets included); past it new clients wait until one closes.
    #[arg(long, default_value_t = crate::web::DoorLimits::DEFAULT_MAX_CONNECTIONS, value_parser = positive_count)]
    max_connections: usize,
    /// Live streams of the web page open at once; past it a new one gets 503 with Retry-After
    /// (the page still works and tries again later).
    #[arg(long, default_value_t = crate::web::LiveStreams::DEFAULT_MAX, value_parser = positive_count)]
    max_live_streams: usize,
    /// Signed-in sessions of the web page kept; past it the one used longest ago ends.
    #[arg(long, default_value_t = crate::web::SessionLimits::DEFAULT_MAX_SESSIONS, value_parser = positive_count)]
    max_sessions: usize,
    /// Sign-ins to the web page allowed in any minute; past it they get 429 with Retry-After.
    #[arg(long, default_value_t = crate::web::SignInRate::DEFAULT_PER_MINUTE, value_parser = positive_count)]
    sign_ins_per_minute: usize,
}

/// A `--allowed-host` value: a host name or address, with a port or not.
fn host_name(text: &str) -> Result<String, BadFlagValue> {
    if crate::web::hosts::is_host_name(text) { Ok(text.to_string()) } else { Err(BadFlagValue::HostName) }
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
        /// How long events stay in the event log, in milliseconds (each member's newest always
        /// stays); a client resuming from before that gets a gap and reconciles. Default 7 days.
        #[arg(long, default_value_t = 7 * 24 * 60 * 60 * 1000, value_parser = positive_ms)]
        event_retention_ms: u64,
        /// How often the event log and expired idempotency keys (kept 24 hours) are pruned, in
        /// milliseconds. Default 1 hour.
        #[arg(long, default_value_t = 60 * 60 * 1000, value_parser = positive_ms)]
        prune_interval_ms: u64,
        /// A host name the web page answers to besides the listen address, localhost and the
        /// loopback addresses (repeat for more), e.g. board.example.com or board.example.com:8700.
        /// Others get an empty 421 (DNS-rebinding protection); the API answers any.
        #[arg(long = "allowed-host", value_name = "HOST", value_parser = host_name)]
        allowed_hosts: Vec<String>,
        #[command(flatten)]
        limits: BoardLimits,
    },
    /// Serve the tracker tools, task/project resources and prompts as an MCP server, acting as the
    /// agent of the config (token from the environment variable named by `tracker.token_env`).
    #[command(group(clap::ArgGroup::new("transport").required(true).args(["stdio", "http"])))]
    Mcp {
        /// Speak MCP on stdin/stdout (for hosts that launch the server); logs go to stderr.
        #[arg(long)]
        stdio: bool,
        /// Serve Streamable HTTP at http://ADDR/mcp; clients send `Authorization: Bearer <token>`
        /// with the token from the environment variable named by `mcp.token_env`.
        #[arg(long, value_name = "ADDR")]
        http: Option<SocketAddr>,
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
    },
    /// The tracker tools the model can call: list them, or call one against a live tracker.
    Tools {
        #[command(subcommand)]
        command: ToolsCommand,
    },
    /// Inside a coding agent's sandbox: relay 127.0.0.1:PORT to the model through SOCKET, and run
    /// the command (picogent starts this itself; see docs/coding-agents.md, "Sandbox").
    #[command(hide = true)]
    SandboxRelay {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        socket: PathBuf,
        #[arg(last = true, required = true)]
        command: Vec<String>,
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
    /// Run the agent: stay connected to the tracker, work assigned tasks, answer mentions.
    Run {
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
        /// Replay the tracker's whole event log from seq 0 and act on it, instead of beginning at
        /// the recorded position (or, on a first start, at the tracker's head).
        #[arg(long)]
        from_start: bool,
    },
    /// Check a deployment: the config, the templates, the tracker (REST and WebSocket), the model.
    Check {
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
    },
    /// Score the configured model on a fixed suite of scenarios on a fresh reference board, each
    /// checked from the board: a line per scenario as it ends and the totals, or JSON with
    /// `--json`; exit 1 when a scenario fails or the time runs out, 130 on Ctrl-C (the scorecard
    /// so far is printed either way).
    Eval {
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
        /// Print the scorecard as JSON, at the end.
        #[arg(long)]
        json: bool,
        /// How long the whole eval may take, in seconds, the agent's start and shutdown included.
        #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
        timeout_secs: u64,
    },
    /// The agent's durable state: move it between stores.
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// The runs the agent recorded, from the state database of a config (what the run inspector
    /// shows, as text).
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// The scheduled jobs of a config (`schedules`): list them with their next firing and how the
    /// last one went, or fire one now in the running agent.
    Schedules {
        #[command(subcommand)]
        command: SchedulesCommand,
    },
    /// The whole product offline on loopback: reference board, offline planner model, agent.
    Demo {
        /// Leave everything running and print the URLs, tokens and commands to try more.
        #[arg(long)]
        keep: bool,
        /// Show a coding task instead: a local bare repository, the stand-in coding agent, a commit.
        #[arg(long)]
        coding: bool,
        /// Show two agents instead: a parent broken into sub-tasks, worked, reviewed, rolled up.
        #[arg(long, conflicts_with = "coding")]
        team: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Copy an agent's state from its SQLite file into PostgreSQL, to go on there where it stopped.
    ///
    /// Every table, in one transaction; nothing is replayed. Stop the agent first; the file is
    /// left as it was. Refuses, copying nothing, when the target already holds the agent's rows.
    Migrate {
        /// The agent's SQLite state file (its `state.path`), opened read-only.
        #[arg(long, value_name = "PATH")]
        from: PathBuf,
        /// The PostgreSQL database, postgres://user@host:port/database (no password: PGPASSWORD
        /// or ~/.pgpass); `?options=-c%20search_path%3D<schema>` for a schema of its own.
        #[arg(long, value_name = "URL")]
        to: String,
        /// The agent.json whose `slug` names the agent, when --agent is not given.
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
        /// The agent's slug, the key of its rows in PostgreSQL (default: the config's `slug`).
        #[arg(long, value_name = "SLUG")]
        agent: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// The newest runs, newest first: trigger, outcome, turns, tool calls, tokens, duration.
    List {
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
        /// How many of the newest runs to read.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Only runs with this status (running, completed, failed, stopped, interrupted).
        #[arg(long, default_value = "")]
        status: String,
        /// Only runs whose trigger starts with this word (task.assigned, message.new, start_run, follow-up).
        #[arg(long, default_value = "")]
        trigger: String,
    },
    /// One run in full: prompts, each turn's text, tool calls with arguments and results, budgets.
    Show {
        /// The run's id (from `picogent runs list`).
        id: String,
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Each job: what it is, when it fires next, how its last firing went and what it cost (read
    /// from the state database; no agent needs to run).
    List {
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
    },
    /// Fire one job now, in the agent running with this config (asked at its `http.listen`, with
    /// the token of `http.ui_token_env` when set). Prints what became of it: queued as a run,
    /// idle (nothing to say: no model call, nothing posted), skipped or failed; exit 1 when it
    /// failed or no agent answers.
    Run {
        /// The job's name, a key of `schedules`.
        name: String,
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List the tool definitions (no tracker needed).
    List {
        /// Print the MCP definitions as JSON instead of one line per tool.
        #[arg(long)]
        json: bool,
        /// Count the tokens of each definition as the model receives it (OpenAI tools JSON, o200k_base).
        #[arg(long)]
        tokens: bool,
        /// List only what the `permissions` of this config file offer (`allowed_tools`,
        /// `disallowed_tools`; in `read_only` mode, read-only tools).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Call one tool against the tracker of the config; the token comes from the environment
    /// variable named by `tracker.token_env`. Exit code 1 when the result is an error.
    Call {
        /// The tool's name, e.g. get_task.
        name: String,
        /// The arguments as a JSON object, e.g. '{"task_id": "TE-1"}'.
        #[arg(default_value = "{}")]
        arguments: String,
        #[arg(long, default_value = "agent.json")]
        config: PathBuf,
        /// Print the structured JSON instead of the text.
        #[arg(long)]
        json: bool,
    },
}

/// The exit code of bad usage: unparsable arguments, a config that does not load, no token.
const EXIT_USAGE: u8 = 2;

/// Log targets capped below the level at which they print request headers (found by
/// `tests/access.rs`, which runs the binary at `RUST_LOG=trace` and greps for tokens).
const SECRET_LOGGING_TARGETS: [&str; 2] =
    ["tungstenite::handshake::client=info", "tungstenite::handshake::server=info"];

/// Sets up tracing on stderr (stdout is kept for command output and MCP over stdio), filtered by
/// `RUST_LOG`, or when it is not set by `default_filter`.
pub fn init_logging(format: LogFormat, default_filter: &str) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // rmcp logs every notification a server sends at info: a server that floods them (list
        // changes, progress) would flood the log. Its own words from warn on, unless RUST_LOG says.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default_filter},rmcp::service=warn")));
    // Libraries that log whole HTTP requests, headers and all, at trace: the bearer token would
    // be in the log. Capped here, whatever RUST_LOG says: these are the exact targets, so the
    // directive replaces any the user gave for them and wins over `trace` or `tungstenite=trace`.
    for directive in SECRET_LOGGING_TARGETS {
        if let Ok(directive) = directive.parse() {
            filter = filter.add_directive(directive);
        }
    }
    // Colours only on a terminal: a log written to a file or a journal carries no escape codes.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

pub fn main(cli: Cli) -> ExitCode {
    if let Command::SandboxRelay { port, socket, command } = &cli.command {
        let code = picogent_workspace::sandbox::relay_inside(*port, socket, command);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // Before any thread: nothing picogent starts reads a secret out of its process.
    picogent_support::seal::seal();
    // A sandboxed coding agent's relay is this program's `sandbox-relay`.
    if let Ok(program) = std::env::current_exe() {
        picogent_workspace::sandbox::set_relay_program(program);
    }
    // The demo prints its own timeline on stdout; the agent's info lines would bury it.
    let default_filter = match cli.command {
        Command::Demo { .. } => crate::demo::DEFAULT_LOG_FILTER,
        _ => "info",
    };
    init_logging(cli.log_format, default_filter);
    // `mcp --stdio` serves one client whose requests mostly wait on the tracker, and the board's
    // requests mostly wait on SQLite (which runs on sqlx's own threads): one thread answers them
    // without passing each message between worker threads (docs/performance.md).
    let runtime = match &cli.command {
        Command::Mcp { http: None, .. } | Command::Board { .. } => {
            tokio::runtime::Builder::new_current_thread().enable_all().build()
        }
        _ => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Board { listen, db, seed, event_retention_ms, prune_interval_ms, allowed_hosts, limits } => {
                let retention = crate::board::Retention {
                    events: std::time::Duration::from_millis(event_retention_ms),
                    interval: std::time::Duration::from_millis(prune_interval_ms),
                };
                let doors = crate::web::DoorLimits {
                    header_timeout: std::time::Duration::from_millis(limits.header_timeout_ms),
                    max_connections: limits.max_connections,
                };
                let pages = crate::board::PageLimits {
                    max_live_streams: limits.max_live_streams,
                    max_sessions: limits.max_sessions,
                    sign_ins_per_minute: limits.sign_ins_per_minute,
                };
                crate::board::run_cli(crate::board::BoardOptions {
                    retention,
                    allowed_hosts,
                    doors,
                    pages,
                    ..crate::board::BoardOptions::new(listen, db, seed)
                })
                .await
            }
            Command::Mcp { stdio: _, http, config } => {
                let listen = match http {
                    Some(addr) => McpListen::Http(addr),
                    None => McpListen::Stdio,
                };
                serve_mcp(config, listen, |config, tracker| {
                    let registry = crate::tools::Registry::new(tracker.clone(), config.limits.max_tool_result_bytes)?;
                    Ok(std::sync::Arc::new(crate::tools::policy::governed_for_person(
                        vec![std::sync::Arc::new(registry)],
                        &config.permissions,
                    )))
                })
                .await
            }
            Command::Tools { command: ToolsCommand::List { json, tokens, config } } => {
                Ok(tools_list(json, tokens, config.as_deref()))
            }
            Command::Tools { command: ToolsCommand::Call { name, arguments, config, json } } => {
                Ok(tools_call(&name, &arguments, &config, json).await)
            }
            // Handled before the runtime starts (it makes its own).
            Command::SandboxRelay { .. } => Ok(ExitCode::SUCCESS),
            Command::OfflineModel { listen, script, delay_ms } => {
                crate::offline_model::run_cli(listen, script, delay_ms).await
            }
            Command::Run { config, from_start } => {
                let start = if from_start { StreamStart::FromStart } else { StreamStart::Recorded };
                crate::run::run_cli(&config, start).await
            }
            Command::Check { config } => crate::check::run_cli(&config).await,
            Command::Eval { config, json, timeout_secs } => {
                crate::eval::run_cli(&config, json, std::time::Duration::from_secs(timeout_secs)).await
            }
            Command::State { command: StateCommand::Migrate { from, to, config, agent } } => {
                Ok(state_migrate(&from, &to, &config, agent).await)
            }
            Command::Runs { command: RunsCommand::List { config, limit, status, trigger } } => {
                let config = Config::load(&config)?;
                let (settings, filter) = (inspector_settings(&config), RunFilter { status, trigger });
                crate::inspector::cli::list(&settings, &config.state, limit, filter).await
            }
            Command::Runs { command: RunsCommand::Show { id, config } } => {
                let config = Config::load(&config)?;
                crate::inspector::cli::show(&inspector_settings(&config), &config.state, &id).await
            }
            Command::Schedules { command: SchedulesCommand::List { config: path } } => {
                let config = Config::load(&path)?;
                crate::inspector::schedules::list(&path, &config.schedules, &config.state, &config.slug).await
            }
            Command::Schedules { command: SchedulesCommand::Run { name, config: path } } => {
                let config = Config::load(&path)?;
                crate::inspector::schedules::run(&path, &config.http.listen, &config.http.ui_token_env, &name).await
            }
            Command::Demo { keep, coding, team } => crate::demo::run_cli(keep, coding, team).await,
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

/// How `picogent mcp` talks to its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum McpListen {
    Stdio,
    Http(SocketAddr),
}

/// `picogent mcp`: serves the tools `tools` builds, the tracker's resources and the prompt
/// templates of `prompts_dir`, until the client disconnects (stdio) or Ctrl-C.
async fn serve_mcp(
    config_path: PathBuf,
    listen: McpListen,
    tools: impl FnOnce(&Config, &TrackerClient) -> anyhow::Result<Arc<dyn ToolSource>>,
) -> anyhow::Result<ExitCode> {
    let config = Config::load(&config_path)?;
    let token = Secret::from_env(&config.tracker.token_env).context("tracker.token_env")?;
    let tracker = TrackerClient::new(&config.tracker, token).context("cannot build the tracker client")?;
    let tools = tools(&config, &tracker)?;
    let prompts = Prompts::load(&config.prompts_dir).context("cannot load the prompt templates")?;
    let server = McpServer::new(tools, tracker, Arc::new(prompts), config.slug.clone());
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            cancel.cancel();
        }
    });
    match listen {
        McpListen::Stdio => {
            tracing::info!("serving MCP on stdio");
            mcp::serve_stdio(server, cancel).await?;
        }
        McpListen::Http(addr) => {
            mcp::check_listen_address(addr, &config.mcp)?;
            let security = mcp::HttpSecurity::from_config(&config.mcp)?.with_doors(config.http.doors());
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| mcp::McpServerError::Bind { addr, source })?;
            let local = listener.local_addr().map_err(|source| mcp::McpServerError::Bind { addr, source })?;
            tracing::info!(url = %format!("http://{local}/mcp"), "serving MCP over Streamable HTTP");
            mcp::serve_http(server, listener, &security, cancel).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `picogent tools list`: the definitions, optionally under a config's policy, with token counts.
fn tools_list(json: bool, tokens: bool, config: Option<&std::path::Path>) -> ExitCode {
    use crate::llm::count_tools_json_tokens;
    use crate::tools::{CHAT_REPLY_TOOLS, Catalog, Policy, TASK_RUN_TOOLS};

    let policy = match config.map(crate::config::Config::load).transpose() {
        Ok(config) => Policy::from(&config.map(|c| c.permissions).unwrap_or_default()),
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let catalog = match Catalog::new() {
        Ok(catalog) => catalog,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // What the policy offers, as the model would be offered it.
    let offered = |catalog: &Catalog| -> Vec<crate::tools::ToolDefinition> {
        catalog.definitions().into_iter().filter(|tool| policy.offers(tool)).collect()
    };
    let definitions = offered(&catalog);
    let total = count_tools_json_tokens(&crate::tools::definition::specs(&definitions));
    // The presets are counted under the same policy, so a denied tool is not counted.
    let preset_tokens = |names: &[&str]| {
        catalog
            .subset(names)
            .map(|c| count_tools_json_tokens(&crate::tools::definition::specs(&offered(&c))))
            .unwrap_or(0)
    };
    if json {
        // As an MCP client lists them (`tools/list`).
        let listed: Vec<_> = definitions.iter().map(crate::mcp::wire::tool_to_mcp).collect();
        let mut out = serde_json::json!({ "tools": listed });
        if tokens {
            out["tokens"] = serde_json::json!({
                "total": total,
                "task_run_preset": preset_tokens(TASK_RUN_TOOLS),
                "chat_reply_preset": preset_tokens(CHAT_REPLY_TOOLS),
                "encoding": "o200k_base",
            });
        }
        print_stdout(&format!("{}\n", serde_json::to_string_pretty(&out).unwrap_or_default()));
        return ExitCode::SUCCESS;
    }
    let mut out = String::new();
    for tool in &definitions {
        let group = catalog.group_of(&tool.name).map(|g| g.as_str()).unwrap_or("-");
        let access = if tool.is_read_only() { "read" } else { "write" };
        let description = &tool.description;
        if tokens {
            let count = count_tools_json_tokens(&[tool.spec()]);
            out.push_str(&format!("{:<17} {:<9} {:<5} {:>4} tokens  {description}\n", tool.name, group, access, count));
        } else {
            out.push_str(&format!("{:<17} {:<9} {:<5} {description}\n", tool.name, group, access));
        }
    }
    if tokens {
        out.push_str(&format!(
            "total: {total} tokens for {} tools (o200k_base, OpenAI tools JSON); presets: task run {}, chat reply {}\n",
            definitions.len(),
            preset_tokens(TASK_RUN_TOOLS),
            preset_tokens(CHAT_REPLY_TOOLS)
        ));
    }
    print_stdout(&out);
    ExitCode::SUCCESS
}

/// `picogent tools call`: one call against the live tracker, printed as the model would see it.
async fn tools_call(name: &str, arguments: &str, config_path: &std::path::Path, json: bool) -> ExitCode {
    let arguments: serde_json::Value = match serde_json::from_str(arguments) {
        Ok(value @ serde_json::Value::Object(_)) => value,
        Ok(_) => {
            eprintln!("error: the arguments must be a JSON object, like '{{\"task_id\": \"TE-1\"}}'");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(error) => {
            eprintln!(
                "error: the arguments are not valid JSON ({error}); pass an object like '{{\"task_id\": \"TE-1\"}}'"
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let config = match crate::config::Config::load(config_path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let token = match crate::secret::Secret::from_env(&config.tracker.token_env) {
        Ok(token) => token,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // The same policy as the running agent's: a tool it may not call cannot be called from here.
    let tools =
        crate::tracker::TrackerClient::new(&config.tracker, token).map_err(|e| e.to_string()).and_then(|client| {
            let registry = crate::tools::Registry::new(client.clone(), config.limits.max_tool_result_bytes)
                .map_err(|e| e.to_string())?;
            Ok(crate::tools::policy::governed_for_person(vec![std::sync::Arc::new(registry)], &config.permissions))
        });
    let tools = match tools {
        Ok(tools) => tools,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let context = crate::tools::ToolContext::new(config.slug.clone());
    let result = crate::tools::ToolSource::call(&tools, name, arguments, &context).await;
    let mut out = String::new();
    if json {
        let structured = result.structured.clone().unwrap_or(serde_json::Value::Null);
        out.push_str(&serde_json::to_string_pretty(&structured).unwrap_or_default());
        out.push('\n');
    } else {
        out.push_str(&result.text);
        out.push('\n');
    }
    print_stdout(&out);
    if result.is_error { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// `picogent state migrate`: one line per table copied and a last line, or the reason nothing was.
async fn state_migrate(
    from: &std::path::Path,
    to: &str,
    config_path: &std::path::Path,
    agent: Option<String>,
) -> ExitCode {
    let agent = match agent {
        Some(agent) => agent,
        None => match crate::config::Config::load(config_path) {
            Ok(config) => config.slug,
            Err(error) => {
                eprintln!("error: {error}; or name the agent with --agent");
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    match crate::state::migrate::sqlite_to_postgres(from, to, &agent).await {
        Ok(migrated) => {
            let mut out = String::new();
            for (table, rows) in &migrated.tables {
                let unit = if *rows == 1 { "row" } else { "rows" };
                out.push_str(&format!("{table}: {rows} {unit} copied\n"));
            }
            out.push_str(&format!(
                "moved the state of agent `{agent}` from {} to {}: {} rows in {} tables, in one transaction; \
                 set state.url to the PostgreSQL URL in agent.json (in place of state.path) and start picogent run; \
                 the SQLite file is left as it was\n",
                from.display(),
                migrated.target,
                migrated.total_rows(),
                migrated.tables.len()
            ));
            print_stdout(&out);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            if error.is_usage() { ExitCode::from(EXIT_USAGE) } else { ExitCode::FAILURE }
        }
    }
}

/// Writes command output; a closed pipe (`| head`) is not an error worth a panic.
fn print_stdout(text: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
}
