//! The agent's live status: what `/readyz`, `/metrics` and the MCP `agent://status` resource show.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub use picogent_inspector::WaitingRun;
use picogent_inspector::startup::StartupReport;

#[derive(Debug)]
pub struct StatusBoard {
    connected: AtomicBool,
    caught_up: AtomicBool,
    active_runs: AtomicUsize,
    /// Runs waiting for a person now (`awaiting_input`).
    awaiting_input: AtomicUsize,
    /// Why this copy stopped acting, once another copy of the agent took over on the tracker.
    superseded: std::sync::OnceLock<String>,
    /// Fires when a run starts or ends (MCP list-changed notifications).
    run_changes: tokio::sync::broadcast::Sender<()>,
    /// How the agent started; set once the event stream began.
    startup: Mutex<Option<StartupReport>>,
    /// Whether this replica holds the event stream (always, for a single copy).
    holds_stream: AtomicBool,
    /// This replica among the agent's replicas; `None` for a single copy.
    replica: Mutex<Option<ReplicaView>>,
    /// Runs waiting in this process's queue for a free slot (`limits.max_concurrent_runs`).
    waiting: Mutex<Vec<WaitingRun>>,
    /// What the model probe `picogent run` sends at start found; `None` when none was sent.
    model: Mutex<Option<picogent_llm::probe::ModelCheck>>,
    /// The workspaces and their disk use (`workspaces`), measured every minute; `None` without
    /// a repository.
    workspaces: Mutex<Option<picogent_workspace::WorkspacesView>>,
}

/// This replica among the agent's replicas (`replicas.enabled`), for `/readyz` and `/metrics`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReplicaView {
    pub id: String,
    pub holds_stream: bool,
    /// Runs this replica holds, and how many it may hold (`limits.max_concurrent_runs`).
    pub runs: usize,
    pub slots: usize,
    /// The other replicas that beat lately, from their heartbeats in the database.
    pub others: Vec<picogent_state::ReplicaSeen>,
}

impl Default for StatusBoard {
    fn default() -> Self {
        StatusBoard {
            connected: AtomicBool::new(false),
            caught_up: AtomicBool::new(false),
            active_runs: AtomicUsize::new(0),
            awaiting_input: AtomicUsize::new(0),
            superseded: std::sync::OnceLock::new(),
            run_changes: tokio::sync::broadcast::channel(64).0,
            startup: Mutex::new(None),
            holds_stream: AtomicBool::new(false),
            replica: Mutex::new(None),
            waiting: Mutex::new(Vec::new()),
            workspaces: Mutex::new(None),
            model: Mutex::new(None),
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

    /// Records how many runs wait for a person, and tells subscribers that runs changed.
    pub fn set_awaiting_input(&self, value: usize) {
        self.awaiting_input.store(value, Ordering::SeqCst);
        let _ = self.run_changes.send(());
    }

    pub fn awaiting_input(&self) -> usize {
        self.awaiting_input.load(Ordering::SeqCst)
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

    pub fn set_workspaces(&self, view: picogent_workspace::WorkspacesView) {
        *self.workspaces.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(view);
    }

    pub fn workspaces(&self) -> Option<picogent_workspace::WorkspacesView> {
        *self.workspaces.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The runs waiting for a slot now, in order.
    pub fn set_waiting(&self, waiting: Vec<WaitingRun>) {
        *self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = waiting;
        let _ = self.run_changes.send(());
    }

    pub fn waiting(&self) -> Vec<WaitingRun> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Makes this a replica: `/readyz` and `/metrics` say so from now on.
    pub fn set_replica(&self, id: &str, slots: usize) {
        let view = ReplicaView { id: id.to_string(), holds_stream: false, runs: 0, slots, others: Vec::new() };
        *self.replica.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(view);
    }

    pub fn set_holds_stream(&self, value: bool) {
        self.holds_stream.store(value, Ordering::SeqCst);
        if !value {
            self.set_connected(false);
            self.set_caught_up(false);
        }
    }

    pub fn holds_stream(&self) -> bool {
        self.holds_stream.load(Ordering::SeqCst)
    }

    /// The other replicas, as their latest heartbeats showed them.
    pub fn set_replica_peers(&self, others: Vec<picogent_state::ReplicaSeen>) {
        if let Some(view) = self.replica.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).as_mut() {
            view.others = others;
        }
    }

    /// This replica's view, with what it holds now; `None` for a single copy.
    pub fn replica(&self) -> Option<ReplicaView> {
        let mut view = self.replica.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()?;
        view.holds_stream = self.holds_stream();
        view.runs = self.active_runs();
        Some(view)
    }

    pub fn set_startup(&self, report: StartupReport) {
        *self.startup.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(report);
    }

    /// How the agent started, once the event stream began.
    pub fn startup(&self) -> Option<StartupReport> {
        self.startup.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    pub fn set_model(&self, check: picogent_llm::probe::ModelCheck) {
        *self.model.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(check);
    }

    /// What the start-up model probe found (or that it is still out); `None` when none was sent.
    pub fn model(&self) -> Option<picogent_llm::probe::ModelCheck> {
        self.model.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

/// The run inspector's pages show the agent as this board has it.
impl picogent_inspector::AgentStatus for StatusBoard {
    fn connected(&self) -> bool {
        StatusBoard::connected(self)
    }

    fn caught_up(&self) -> bool {
        StatusBoard::caught_up(self)
    }

    fn superseded(&self) -> Option<&str> {
        StatusBoard::superseded(self)
    }

    fn active_runs(&self) -> usize {
        StatusBoard::active_runs(self)
    }

    fn awaiting_input(&self) -> usize {
        StatusBoard::awaiting_input(self)
    }

    fn waiting(&self) -> Vec<WaitingRun> {
        StatusBoard::waiting(self)
    }

    fn startup(&self) -> Option<StartupReport> {
        StatusBoard::startup(self)
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<()> {
        StatusBoard::subscribe(self)
    }
}
