//! What every floor of picogent shares, and nothing above it: [`secret`] (tokens and keys that
//! never print), [`retry`] (the one retry policy, on backon), [`private_files`] (files only the
//! user running picogent may read), [`sqlite`] (a SQLite file opened alike for the board and the
//! state), [`seal`] (picogent's process unreadable to what it starts), [`choice`] (settings that
//! take one of a few words), [`closest`] (the names nearest to a mistyped one) and [`gauge`] (how
//! many of something are under way, for `/metrics`).
//!
//! Invariant: this crate depends on no other crate of the workspace.
//!
//! Where things are: `secret.rs` (`Secret`, whose `Debug` and `Display` print `***`); `retry.rs`
//! (`with_retry`, `Retryable`, `reconnect_delay`: the one policy, its schedule in its doc, used by
//! the tracker client and the model client); `private_files.rs` (`open_private`,
//! `create_private_dir_all`, `PrivateFileError`: `0600` files, `0700` folders picogent makes, no
//! link followed, a file another user made refused naming them; used by `sqlite.rs`, the state's
//! `file_lock.rs` and the MCP crate's `results.rs`); `sqlite.rs` (WAL, `NORMAL` commits, the log
//! checkpointed in the background off the commit path, the file made `0600` before SQLite opens
//! it); `choice.rs` (a setting of a few words, whose error lists them); `closest.rs`; `seal.rs`; `gauge.rs` (`Gauge`, counted by a guard).

pub mod choice;
pub mod closest;
pub mod gauge;
pub mod private_files;
pub mod retry;
pub mod seal;
pub mod secret;
pub mod setting;
pub mod sqlite;
