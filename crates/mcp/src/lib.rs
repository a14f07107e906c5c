//! MCP both ways; the only module that imports rmcp's server and client machinery.
//!
//! As a server, picogent offers the tracker's tools, tasks as resources and its prompt templates
//! to any MCP host over rmcp's own transports, and `picogent run` adds the running agent, its
//! runs followed as MCP tasks by a client of the tasks extension ([`server`]). As a host, picogent connects external MCP servers (`mcp_servers` in agent.json)
//! and offers their tools to the model beside the tracker's, under the one permission policy of
//! [`picogent_tools::policy`]:
//!
//! - [`client`]: one server's connection — transport, handshake, restart with backoff, its lists,
//!   and the limit on what it sends (`max_result_bytes`);
//! - [`host`]: every server together as one [`picogent_tools::ToolSource`], with public names,
//!   resource tools, skill tools, the commands people call and server instructions;
//! - [`names`]: public names (`mcp__<server>__<name>`), made valid;
//! - [`commands`]: the one namespace of the commands people call, prompts and skills, and how a
//!   message calls one;
//! - [`skills`]: a `skill://` resource read as a skill (frontmatter, caps, cleaning);
//! - [`results`]: what a tool result becomes for the model (inline text or an artifact on disk,
//!   within the artifacts' quotas);
//! - [`wire`]: picogent's tool definitions and results to and from MCP's, the only place the two
//!   meet.
//!
//! Invariants:
//! - an external server is untrusted: what it sends is bounded (`max_result_bytes`), its words
//!   reach a model only cleaned and fenced, and its tools run only through the permission policy;
//! - a server that fails or hangs never stops the agent: its connection is restarted on the one
//!   reconnect schedule (`picogent_support::retry::reconnect_delay`), and its tools answer with
//!   an error meanwhile;
//! - the MCP server serves the tool source it is given (the binary gives it the registry under
//!   the agent's permission policy), and over HTTP `/mcp` answers only to its bearer token,
//!   compared in constant time.
//!
//! Where things are: `server/` (`mod.rs`: `McpServer`, `serve_stdio`; `tools.rs`, `resources.rs`,
//! `prompts.rs`; `control.rs`: `AgentControl`, implemented by the runtime's `RuntimeControl`;
//! `http.rs`: `http_router`, `HttpSecurity`, bearer, `Origin` and `Host` checks); `client.rs` (one
//! connection, restart, `ServerCallError`) with `client/connect.rs` (transport and handshake,
//! `ChildTransport`), `client/limit.rs` (`LimitedLines`: `max_result_bytes` kept while a stdio
//! server's output is read) and `client/refresh.rs` (`Refreshes`: list-changed notifications
//! coalesced per kind); `host.rs` (`McpHost`); `elicit.rs` (a server's elicitation asked of the
//! person, both protocol versions); `results.rs` (`ArtifactStore` and its quotas); `config.rs`
//! (the `mcp` and `mcp_servers` sections, `McpConfig` and `McpServerConfig`, with their defaults
//! and checks: the config crate embeds them). `picogent mcp` itself is in the binary's `cli.rs`.

pub mod client;
pub mod commands;
pub mod config;
pub mod elicit;
pub mod host;
pub mod names;
pub mod results;
pub mod server;
pub mod skills;
pub mod wire;

pub use config::{McpConfig, McpServerConfig, ServerToolsConfig};
