//! Every run's coding agent output and work, by run id, while the process lives: the live
//! views read it as it comes, and the run's stored record takes it when the run ends.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;

use super::WorkDone;
use crate::hooks::HookReport;

/// How many lines of coding agent output are kept per run for the live views.
const LOG_LINES: usize = 2_000;

/// Every run's coding agent output and work, by run id, while the process lives.
#[derive(Debug, Default)]
pub struct CodingRuns {
    runs: Mutex<HashMap<String, RunCoding>>,
}

#[derive(Debug, Default, Clone)]
struct RunCoding {
    lines: std::collections::VecDeque<String>,
    dropped: u64,
    work: Option<WorkDone>,
    hooks: Vec<HookReport>,
    choice: Option<CodingChoice>,
}

/// What a run was started with (MCP's `start_run`): its coding agent and its branch, instead of
/// `workspaces.agent` and `picogent/<KEY>`. Stored with the queued run, so a resumed run keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CodingChoice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Always under `picogent/` ([`CodingTools::choice`] makes it so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

impl CodingRuns {
    fn with<T>(&self, run_id: &str, f: impl FnOnce(&mut RunCoding) -> T) -> T {
        let mut runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(runs.entry(run_id.to_string()).or_default())
    }

    pub(super) fn push_line(&self, run_id: &str, line: &str) {
        self.with(run_id, |run| {
            if run.lines.len() == LOG_LINES {
                run.lines.pop_front();
                run.dropped += 1;
            }
            run.lines.push_back(line.to_string());
        });
    }

    /// The workspace hooks that ran for the run `run_id`.
    pub(super) fn add_hooks(&self, run_id: &str, hooks: Vec<HookReport>) {
        self.with(run_id, |run| run.hooks.extend(hooks));
    }

    /// How the run `run_id`'s coding work ended.
    pub(super) fn set_work(&self, run_id: &str, work: WorkDone) {
        self.with(run_id, |run| run.work = Some(work));
    }

    /// The run `run_id` works with `choice` (set before it starts).
    pub fn choose(&self, run_id: &str, choice: CodingChoice) {
        self.with(run_id, |run| run.choice = Some(choice));
    }

    pub(super) fn choice(&self, run_id: Option<&str>) -> CodingChoice {
        let runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        run_id.and_then(|id| runs.get(id)).and_then(|run| run.choice.clone()).unwrap_or_default()
    }

    /// The coding agent's output of the run `run_id` so far, as plain text (`run://{id}/logs`).
    pub fn log(&self, run_id: &str) -> Option<String> {
        let runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(run_id).map(|run| self.log_of(run))
    }

    /// How the run's coding work ended, if it did any.
    pub fn work(&self, run_id: &str) -> Option<WorkDone> {
        let runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(run_id).and_then(|run| run.work.clone())
    }

    /// What the run `run_id` has kept so far (its output, work and hooks), while it runs.
    pub fn record(&self, run_id: &str) -> Option<CodingRecord> {
        let runs = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        runs.get(run_id).map(|run| self.record_of(run))
    }

    /// Takes what the run `run_id` kept, for its stored record, and forgets it here: a run that
    /// ended holds no memory in this process.
    pub fn take(&self, run_id: &str) -> Option<CodingRecord> {
        let taken = self.runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(run_id)?;
        Some(self.record_of(&taken))
    }

    fn record_of(&self, run: &RunCoding) -> CodingRecord {
        CodingRecord { log: self.log_of(run), work: run.work.clone(), hooks: run.hooks.clone() }
    }

    fn log_of(&self, run: &RunCoding) -> String {
        let mut text = String::new();
        if run.dropped > 0 {
            text.push_str(&format!("[{} earlier lines not kept]\n", run.dropped));
        }
        for line in &run.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }
}

/// What a run's coding agent printed and how its work ended, as stored with the run when it ends
/// (`run://{id}/logs`, `run://{id}/result`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CodingRecord {
    pub log: String,
    pub work: Option<WorkDone>,
    /// The workspace hooks that ran for it, with their output.
    #[serde(default)]
    pub hooks: Vec<HookReport>,
}
