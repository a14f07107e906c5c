//! The run slots of this process (`limits.max_concurrent_runs`), and the runs waiting for a
//! person, which hold none.
//!
//! A run holds a slot from its start to its end, except while it waits for a person (an `ask`
//! mode approval, an MCP server's elicitation, the model's question: `picogent_tools::person`).
//! Then it is recorded `awaiting_input` with what it waits for, its slot goes back, and the
//! router is woken to start a queued run in it. When the wait ends the run takes a slot again,
//! waiting for one to free if every slot is taken, before it goes on; a stopped run ends at once.
//! `/metrics` counts the waits and how they ended.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::metrics::Metrics;
use crate::status::StatusBoard;
use picogent_state::{State, WaitKind, Waiting};
use picogent_tools::person::{WaitEnd, Waits};

/// The slots and the waits of this process. One, shared by the router and every run.
pub struct RunSlots {
    max: usize,
    inner: Mutex<Inner>,
    /// A slot went back.
    freed: Notify,
    state: State,
    metrics: Arc<Metrics>,
    status: Arc<StatusBoard>,
    /// Wakes the router to start a queued run in a slot a wait gave back (set once the
    /// router's channel exists; this module knows nothing of the router).
    wake_router: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for RunSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSlots").field("max", &self.max).field("inner", &self.inner).finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Runs holding a slot.
    holding: HashSet<String>,
    /// Runs waiting for a person, and what for.
    waiting: HashMap<String, WaitKind>,
}

impl RunSlots {
    pub fn new(max: usize, state: State, metrics: Arc<Metrics>, status: Arc<StatusBoard>) -> RunSlots {
        RunSlots {
            max,
            inner: Mutex::new(Inner::default()),
            freed: Notify::new(),
            state,
            metrics,
            status,
            wake_router: OnceLock::new(),
        }
    }

    pub fn connect_router(&self, wake: impl Fn() + Send + Sync + 'static) {
        let _ = self.wake_router.set(Box::new(wake));
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Slots free now.
    pub fn free(&self) -> usize {
        self.with(|inner| self.max.saturating_sub(inner.holding.len()))
    }

    /// The run `run_id` starts in a slot (the router checked [`RunSlots::free`]).
    pub fn hold(&self, run_id: &str) {
        self.with(|inner| inner.holding.insert(run_id.to_string()));
    }

    /// The run `run_id` ended: its slot, if it held one, goes back. A run that ended while it
    /// waited (stopped: the loop dropped the waiting call) counts as a wait that was stopped.
    pub fn release(&self, run_id: &str) {
        let waited = self.with(|inner| {
            inner.holding.remove(run_id);
            inner.waiting.remove(run_id)
        });
        if let Some(kind) = waited {
            self.metrics.wait_ended(kind, WaitEnd::Stopped);
            self.publish();
        }
        self.freed.notify_waiters();
    }

    /// Whether the run `run_id` waits for a person now.
    pub fn is_waiting(&self, run_id: &str) -> bool {
        self.with(|inner| inner.waiting.contains_key(run_id))
    }

    /// How many runs wait for a person now.
    pub fn waiting(&self) -> usize {
        self.with(|inner| inner.waiting.len())
    }

    /// Takes a slot for the run `run_id`, waiting until one is free.
    async fn take(&self, run_id: &str) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let taken = self.with(|inner| {
                if inner.holding.len() < self.max {
                    inner.holding.insert(run_id.to_string());
                    true
                } else {
                    false
                }
            });
            if taken {
                return;
            }
            freed.await;
        }
    }

    fn publish(&self) {
        self.status.set_awaiting_input(self.waiting());
    }
}

impl Waits for RunSlots {
    fn begin<'a>(&'a self, run_id: &'a str, waiting: &'a Waiting) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            tracing::info!(run_id, kind = waiting.kind.as_str(), what = %waiting.what, "the run waits for a person");
            if let Err(error) = self.state.set_waiting(run_id, Some(waiting)).await {
                tracing::warn!(%error, run_id, "cannot record that the run waits for a person");
            }
            self.with(|inner| {
                inner.holding.remove(run_id);
                inner.waiting.insert(run_id.to_string(), waiting.kind);
            });
            self.publish();
            self.freed.notify_waiters();
            if let Some(wake) = self.wake_router.get() {
                wake();
            }
        })
    }

    fn end<'a>(&'a self, run_id: &'a str, kind: WaitKind, end: WaitEnd) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            tracing::info!(run_id, kind = kind.as_str(), end = end.as_str(), "the run waits for a person no more");
            // Counted once: here, or by `release` when the run ended while it waited.
            if self.with(|inner| inner.waiting.remove(run_id)).is_some() {
                self.metrics.wait_ended(kind, end);
            }
            self.publish();
            if let Err(error) = self.state.set_waiting(run_id, None).await {
                tracing::warn!(%error, run_id, "cannot record that the run waits no more");
            }
            match end {
                // A stopped run only ends: it needs no slot for that.
                WaitEnd::Stopped => self.hold(run_id),
                _ => self.take(run_id).await,
            }
        })
    }
}
