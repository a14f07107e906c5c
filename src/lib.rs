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
//! - [`mcp`]: external MCP servers as tool sources, and the permission policy over all tools.

pub mod board;
pub mod cli;
pub mod config;
pub mod mcp;
pub mod prompts;
pub mod retry;
pub mod secret;
pub mod tools;
pub mod tracker;
