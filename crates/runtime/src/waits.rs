//! The run slots of this process (`limits.max_concurrent_runs`), and the runs waiting for a
//! person, which hold none.
//!
//! A run holds a slot from its start to its end, except while it waits for a person (an `ask`
//! mode approval, an MCP server's elicitation, the model's question: `picogent_tools::person`).
//! Then it is recorded `awaiting_input` with what it waits for, its slot goes back, and the
//! router is woken to start a queued run in it. When the wait ends the run takes a slot again,
//! waiting for one to free if every slot is taken, before it goes on; a stopped run ends at once.
//! `/metrics` counts the waits and how they ended; one a shutdown cut short counts as
//! `interrupted` (the run resumes at the next start and asks again), not `stopped`.
//!
//! The messages taken as the answers of a run's questions are kept here until the run ends, so
//! that the run does not take them in again as steering (`run::forward_steering` holds a run's
//! steering while it waits, and drops what was taken as an answer).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// A wait ended.
    wait_ended: Notify,
    /// The agent is shutting down: a wait cut short now is interrupted, not stopped.
    shutting_down: AtomicBool,
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
    /// The messages taken as answers to each run's questions, until the run ends.
    answers: HashMap<String, HashSet<String>>,
}

impl RunSlots {
    pub fn new(max: usize, state: State, metrics: Arc<Metrics>, status: Arc<StatusBoard>) -> RunSlots {
        RunSlots {
            max,
            inner: Mutex::new(Inner::default()),
            freed: Notify::new(),
            wait_ended: Notify::new(),
            shutting_down: AtomicBool::new(false),
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

    /// The agent shuts down: the waits its runs' cancellation ends now are interrupted (the
    /// runs resume at the next start), and counted so.
    pub fn shut_down(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    /// The run `run_id` ended: its slot, if it held one, goes back, and what it took as answers
    /// is forgotten. A run that ended while it waited (the loop dropped the waiting call) counts
    /// as a wait that was stopped, or interrupted by the shutdown.
    pub fn release(&self, run_id: &str) {
        let waited = self.with(|inner| {
            inner.holding.remove(run_id);
            inner.answers.remove(run_id);
            inner.waiting.remove(run_id)
        });
        if let Some(kind) = waited {
            self.metrics.wait_ended(kind, self.cut_short());
            self.publish();
            self.wait_ended.notify_waiters();
        }
        self.freed.notify_waiters();
    }

    /// How a wait the run's cancellation ended counts.
    fn cut_short(&self) -> WaitEnd {
        if self.shutting_down.load(Ordering::SeqCst) { WaitEnd::Interrupted } else { WaitEnd::Stopped }
    }

    /// Resolves once the run `run_id` waits for nobody (at once when it does not).
    pub async fn not_waiting(&self, run_id: &str) {
        loop {
            let ended = self.wait_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self.is_waiting(run_id) {
                return;
            }
            ended.await;
        }
    }

    /// Whether the run `run_id` took the message `message_id` as the answer to a question.
    pub fn took_as_answer(&self, run_id: &str, message_id: &str) -> bool {
        self.with(|inner| inner.answers.get(run_id).is_some_and(|answers| answers.contains(message_id)))
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
            // First: from now on the run's steering waits for the answer to be told apart.
            self.with(|inner| {
                inner.holding.remove(run_id);
                inner.waiting.insert(run_id.to_string(), waiting.kind);
            });
            if let Err(error) = self.state.set_waiting(run_id, Some(waiting)).await {
                tracing::warn!(%error, run_id, "cannot record that the run waits for a person");
            }
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
            let waited = self.with(|inner| inner.waiting.remove(run_id)).is_some();
            if waited {
                self.metrics.wait_ended(kind, end);
            }
            self.wait_ended.notify_waiters();
            self.publish();
            if !waited {
                // The run ended meanwhile (a call that asked ends after its run was stopped):
                // there is nothing left to record, and no slot to take.
                return;
            }
            if let Err(error) = self.state.set_waiting(run_id, None).await {
                tracing::warn!(%error, run_id, "cannot record that the run waits no more");
            }
            match end {
                // A stopped run only ends: it needs no slot for that.
                WaitEnd::Stopped | WaitEnd::Interrupted => self.hold(run_id),
                _ => self.take(run_id).await,
            }
        })
    }

    fn passed_over<'a>(&'a self, run_id: &'a str, waiting: &'a Waiting) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(passed) = &waiting.passed_over {
                tracing::info!(
                    run_id,
                    by = %passed.last_by,
                    message_id = %passed.last_message_id,
                    "the run read a reply that does not answer its question, and waits on"
                );
            }
            // A wait that ended meanwhile is not recorded again.
            if self.is_waiting(run_id)
                && let Err(error) = self.state.set_waiting(run_id, Some(waiting)).await
            {
                tracing::warn!(%error, run_id, "cannot record the replies the run passed over");
            }
        })
    }

    fn answered(&self, run_id: &str, message_id: &str) {
        self.with(|inner| inner.answers.entry(run_id.to_string()).or_default().insert(message_id.to_string()));
    }

    fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn slots(dir: &std::path::Path) -> (RunSlots, Arc<Metrics>) {
        let state = State::open(&dir.join("state.db")).await.unwrap();
        let metrics = Arc::new(Metrics::default());
        (RunSlots::new(1, state, metrics.clone(), Arc::new(StatusBoard::default())), metrics)
    }

    fn waiting() -> Waiting {
        Waiting {
            kind: WaitKind::Elicitation,
            what: "a form".to_string(),
            person: Some("alice".to_string()),
            asked_message_id: Some("m1".to_string()),
            since_ms: 0,
            until_ms: 1,
            passed_over: None,
        }
    }

    fn counted(metrics: &Metrics, end: &str) -> bool {
        metrics.render(0, true, true).contains(&format!("picogent_waits_total{{kind=\"elicitation\",end=\"{end}\"}} 1"))
    }

    #[tokio::test]
    async fn a_wait_a_shutdown_cuts_short_is_interrupted_not_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let (slots, metrics) = slots(dir.path()).await;
        slots.hold("r1");
        slots.begin("r1", &waiting()).await;
        assert!(!slots.shutting_down());
        slots.shut_down();
        assert!(slots.shutting_down(), "the asker ends its wait as interrupted");
        // The loop dropped the waiting call: the run ends while it waits.
        slots.release("r1");
        assert!(counted(&metrics, "interrupted"), "{}", metrics.render(0, true, true));
        assert!(!counted(&metrics, "stopped"));
    }

    #[tokio::test]
    async fn the_answer_of_a_wait_is_told_apart_once_the_wait_ended() {
        let dir = tempfile::tempdir().unwrap();
        let (slots, metrics) = slots(dir.path()).await;
        let slots = Arc::new(slots);
        slots.hold("r1");
        slots.begin("r1", &waiting()).await;
        let settled = tokio::spawn({
            let slots = slots.clone();
            async move {
                slots.not_waiting("r1").await;
                (slots.took_as_answer("r1", "m2"), slots.took_as_answer("r1", "m3"))
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!settled.is_finished(), "held while the run waits");
        slots.answered("r1", "m2");
        slots.end("r1", WaitKind::Elicitation, WaitEnd::Answered).await;
        assert_eq!(settled.await.unwrap(), (true, false));
        assert!(counted(&metrics, "answered"));
        slots.release("r1");
        assert!(!slots.took_as_answer("r1", "m2"), "forgotten with the run");
    }
}
