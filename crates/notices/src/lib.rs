//! The words people read from the agent when it did not do what they asked: a failed run's
//! notice ([`failure_notice`]), the refusals of a cap, a budget or a setting ([`Refusal`]), the
//! short notices of a run that could not start, was stopped or could not nudge, and of a firing
//! that failed ([`run`]); the words of a task tree: what a sub-task waits for, the roll-up on its
//! parent ([`tree`]); and the spend line under an answer ([`spend_line`]).
//!
//! Why a crate of its own, not a module of the runtime: the wording reads only values (the run's
//! record, the model's settings, the budget that held the run, a session), never the runtime's
//! machinery, so it sits below the runtime and is tested on its own; and every sentence a person
//! reads on the board is in one place, to be read and changed together. Posting them (where,
//! once, with which idempotency key) stays with the runtime (`answer.rs`, `refusal.rs`).
//!
//! Codemap: `failure.rs` (a failed or did-nothing run's notice, [`NoticeContext`]), `again.rs`
//! ([`AskAgain`]: how a person asks for a run again), `model.rs` (a failure of the model service:
//! its cause, its fix, the setting behind a refused parameter), `budget.rs` ([`TokenBudget`]:
//! which budget held a run's tokens), `refusal.rs` ([`Refusal`]), [`run`] (the short notices),
//! [`tree`] (a sub-task's wait, a parent's roll-up), `words.rs` (numbers and text on one line, as people read them).
//!
//! Invariants:
//! - every notice names what held the run by its setting in agent.json, with its value now, and
//!   says what to do next; never a stack trace, never a secret (a URL is shown without its user
//!   info);
//! - a scheduled job's notice never asks for a mention (no mention fires a job): it names
//!   `picogent schedules run <job>` instead ([`AskAgain`]);
//! - the model's own words are quoted on one line, bounded, without fence markers, and not at
//!   all when they only repeat the request back (which may carry hostile text).
//!
//! Where things are: posting them is the runtime's: `answer.rs` (`RunPosts`, `post_answer`) and
//! `refusal.rs` (`tell_once`: one notice per thread and window, claimed); a tree's notices are
//! posted by the router (`router/tree.rs`).

mod again;
mod budget;
mod failure;
mod model;
mod refusal;
pub mod run;
pub mod tree;
mod words;

pub use again::AskAgain;
pub use budget::TokenBudget;
pub use failure::{NoticeContext, OwnBudget, RunLimits, failure_notice};
pub use refusal::Refusal;
pub use words::{one_line, spend_line, thousands};

#[cfg(test)]
mod tests;
