//! picogent: a long-lived team agent for the Team Board task tracker.
//!
//! Codemap — data flows one way, and the modules are named for it:
//!
//! - [`config`]: `agent.json` plus `PICOGENT_*` overrides, loaded once and passed down.
//! - [`secret`]: the string type for tokens and keys; it never prints itself.
//! - [`retry`]: the one retry policy (backon), used by the tracker client and the model provider.
//! - [`tracker`]: the tracker's wire shapes ([`tracker::model`]) and the REST client, the only
//!   module that knows REST paths.
//! - [`board`]: the reference board — a small but real Team Board (HTTP + WebSocket + SQLite)
//!   written from `docs/tracker-api.md`, used by the demo and the tests.
//! - [`tools`]: what the model can call; [`tools::ToolSource`] is the one shape of every tool source.
//! - [`transport`]: the tracker's event stream (WebSocket): reconnects, heartbeats, resumes; a
//!   first start begins at the tracker's head.
//! - [`session`]: [`session::SessionKey`], the conversation an event belongs to (a task, a chat
//!   thread, a prompt), shared by the router, the runtime, the loop guard and the tools.
//! - [`state`]: the agent's durable state (SQLite, or PostgreSQL keyed by the agent's slug): processed
//!   events, claims, sessions, runs, spend.
//! - [`llm`]: the project's chat types and the OpenAI-compatible adapter ([`llm::openai`], the only
//!   module importing async-openai).
//! - [`agent`]: the tool-use loop: budgets, concurrency of read-only calls, the run record.
//! - [`offline_model`]: an OpenAI-compatible endpoint served by picogent itself — a deterministic
//!   rule-based planner or a replayed script, not an LLM — for the demo and the tests.
//! - [`prompts`]: the minijinja templates in `prompts/` and the cleaning of tracker text.
//! - [`router`]: the closed event loop deciding what the agent does with each event.
//! - [`runtime`]: `picogent run` — wires stream, router, runs, state and HTTP; one run's life in
//!   [`runtime::run`]; one active copy per agent identity in [`runtime::presence`].
//! - [`check`], [`demo`], [`eval`]: `picogent check`, `picogent demo`, and `picogent eval`
//!   (a fixed suite of scenarios scoring a model, checked from the board).
//! - [`mcp`]: the only module that imports rmcp's server/client machinery; [`mcp::server`] serves
//!   the tools, tracker resources and prompts over MCP (stdio and Streamable HTTP); the rest
//!   connects external MCP servers as tool sources, under the permission policy over all tools.
//! - [`inspector`]: the run inspector at `/` of `picogent run`'s listener, and `picogent runs`.
//! - [`private_files`]: the files only the user running picogent may read (`0600` in `0700`
//!   folders): the state database and its lock, the artifacts, the board's database.
//! - [`web`]: what the board's web page and the run inspector share: security headers, embedded
//!   assets, templates, live fragments over server-sent events.

pub use picogent_agent as agent;
pub use picogent_board as board;
pub mod check;
pub mod cli;
pub use picogent_config as config;
pub mod demo;
pub mod eval;
pub use picogent_llm as llm;
pub use picogent_mcp as mcp;
pub use picogent_offline_model as offline_model;
pub use picogent_prompts as prompts;
pub use picogent_runtime as runtime;
pub use picogent_runtime::inspector;
pub use picogent_runtime::router;
pub use picogent_runtime::transport;
pub use picogent_state as state;
pub use picogent_support::private_files;
pub use picogent_support::retry;
pub use picogent_support::secret;
pub use picogent_support::sqlite;
pub use picogent_tools as tools;
pub use picogent_tracker as tracker;
pub use picogent_tracker::session;
pub use picogent_web as web;
