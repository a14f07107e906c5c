//! The agent's live status: what `/readyz`, `/metrics` and the MCP `agent://status` resource show.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub struct StatusBoard {
    connected: AtomicBool,
    caught_up: AtomicBool,
    active_runs: AtomicUsize,
}

impl StatusBoard {
    pub fn set_connected(&self, value: bool) {
        self.connected.store(value, Ordering::SeqCst);
    }

    pub fn set_caught_up(&self, value: bool) {
        self.caught_up.store(value, Ordering::SeqCst);
    }

    pub fn set_active_runs(&self, value: usize) {
        self.active_runs.store(value, Ordering::SeqCst);
    }

    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    /// Connected, resumed, and reconciled through REST.
    pub fn caught_up(&self) -> bool {
        self.connected() && self.caught_up.load(Ordering::SeqCst)
    }

    pub fn active_runs(&self) -> usize {
        self.active_runs.load(Ordering::SeqCst)
    }
}
