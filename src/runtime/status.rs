//! The agent's live status: what `/readyz`, `/metrics` and the MCP `agent://status` resource show.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::startup::StartupReport;

#[derive(Debug)]
pub struct StatusBoard {
    connected: AtomicBool,
    caught_up: AtomicBool,
    active_runs: AtomicUsize,
    /// Why this copy stopped acting, once another copy of the agent took over on the tracker.
    superseded: std::sync::OnceLock<String>,
    /// Fires when a run starts or ends (MCP list-changed notifications).
    run_changes: tokio::sync::broadcast::Sender<()>,
    /// How the agent started; set once the event stream began.
    startup: Mutex<Option<StartupReport>>,
}

impl Default for StatusBoard {
    fn default() -> Self {
        StatusBoard {
            connected: AtomicBool::new(false),
            caught_up: AtomicBool::new(false),
            active_runs: AtomicUsize::new(0),
            superseded: std::sync::OnceLock::new(),
            run_changes: tokio::sync::broadcast::channel(64).0,
            startup: Mutex::new(None),
        }
    }
}

impl StatusBoard {
    pub fn set_connected(&self, value: bool) {
        self.connected.store(value, Ordering::SeqCst);
    }

    pub fn set_caught_up(&self, value: bool) {
        self.caught_up.store(value, Ordering::SeqCst);
    }

    /// Records how many runs are in flight, and tells subscribers that runs changed.
    pub fn set_active_runs(&self, value: usize) {
        self.active_runs.store(value, Ordering::SeqCst);
        // No subscriber is not an error: nobody is watching.
        let _ = self.run_changes.send(());
    }

    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.run_changes.subscribe()
    }

    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    /// Connected, resumed, and reconciled through REST (and not superseded).
    pub fn caught_up(&self) -> bool {
        self.connected() && self.caught_up.load(Ordering::SeqCst) && self.superseded().is_none()
    }

    /// Records that another copy of the agent took over, and why; the first reason stays.
    pub fn set_superseded(&self, reason: String) {
        let _ = self.superseded.set(reason);
    }

    /// Why this copy stopped acting, once it has.
    pub fn superseded(&self) -> Option<&str> {
        self.superseded.get().map(String::as_str)
    }

    pub fn active_runs(&self) -> usize {
        self.active_runs.load(Ordering::SeqCst)
    }

    pub fn set_startup(&self, report: StartupReport) {
        *self.startup.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(report);
    }

    /// How the agent started, once the event stream began.
    pub fn startup(&self) -> Option<StartupReport> {
        self.startup.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}
