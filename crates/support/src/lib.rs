//! What every floor of picogent shares, and nothing above it: [`secret`] (tokens and keys that
//! never print), [`retry`] (the one retry policy, on backon), [`private_files`] (files only the
//! user running picogent may read), [`sqlite`] (a SQLite file opened alike for the board and the
//! state), [`seal`] (picogent's process unreadable to what it starts), [`choice`] (settings that take one of a few words) and [`closest`] (the names nearest to a
//! mistyped one).
//!
//! Invariant: this crate depends on no other crate of the workspace.

pub mod choice;
pub mod closest;
pub mod private_files;
pub mod retry;
pub mod seal;
pub mod secret;
pub mod sqlite;
