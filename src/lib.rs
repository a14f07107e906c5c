//! picogent: a long-lived team agent for the Team Board task tracker — the binary's library:
//! the command line ([`cli`]), `picogent run` as a process ([`run`]), `picogent check`
//! ([`check`]), `picogent demo` ([`demo`]) and `picogent eval` ([`eval`]).
//!
//! Everything else lives in the workspace's crates, one per floor (ARCHITECTURE.md lists them
//! with their jobs, bottom to top: support, web, tracker, prompts, state, tools, llm, workspace,
//! schedule, agent, notices, mcp, config, inspector, runtime; beside them the reference board
//! and the offline model). Each is re-exported here under the module name it had before the
//! split, so `picogent::tracker`, `picogent::runtime::router` and the like keep their paths for
//! the tests and the benches.
//!
//! Where things are: `cli.rs` (the command line, and `picogent mcp`, `picogent state migrate`,
//! the hidden `sandbox-relay` handled first); `run.rs`; `check.rs` (config, templates, the state
//! folder, the tracker, the model in the server's list and a tool-call probe of it); `eval/`
//! (a versioned suite of scenarios in `scenarios.rs`, each checked from the board); `demo.rs`.

pub use picogent_agent as agent;
pub use picogent_board as board;
pub mod check;
pub mod cli;
pub use picogent_config as config;
pub mod demo;
pub mod eval;
pub use picogent_inspector as inspector;
pub use picogent_llm as llm;
pub use picogent_mcp as mcp;
pub use picogent_notices as notices;
pub use picogent_offline_model as offline_model;
pub use picogent_prompts as prompts;
pub use picogent_runtime as runtime;
pub use picogent_runtime::router;
pub mod run;
pub use picogent_schedule as schedule;
pub use picogent_state as state;
pub use picogent_support::private_files;
pub use picogent_support::retry;
pub use picogent_support::secret;
pub use picogent_support::sqlite;
pub use picogent_tools as tools;
pub use picogent_tracker as tracker;
pub use picogent_tracker::session;
pub use picogent_tracker::stream as transport;
pub use picogent_web as web;
pub use picogent_workspace as workspace;
