//! The `limits` section of `agent.json`: the budgets of one run the loop enforces, and the
//! day's and the process's bounds beside them, with their defaults and their checks.

use picogent_support::setting::{Problem, problem};
use serde::{Deserialize, Serialize};

/// The `limits` section, whole: the agent crate owns it because the loop is what it bounds, and
/// the loop takes it as is ([`RunSetup::limits`](crate::RunSetup::limits)).
///
/// One type for the section, not a loop-only subset beside it: the file's `limits` keys are the
/// field names the loop, its tests and the run's notices all speak (`limits.max_turns`), and a
/// second type with a copy of six of its fields would need a conversion at every run for nothing.
/// The fields the loop does not read (the day's budget, concurrent runs, the artifacts' quotas,
/// the shutdown grace, the spend footer) are plain numbers: they cost the loop no dependency.
/// The config crate embeds it, and checks only how it fits with the rest (`max_cost_per_day`
/// needs `llm.price`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Model turns in one run.
    pub max_turns: u32,
    /// Tool calls in one run.
    pub max_tool_calls: u32,
    /// Prompt + completion tokens in one run.
    pub max_tokens_per_run: u64,
    /// Wall-clock time of one run, in milliseconds.
    pub run_timeout_ms: u64,
    /// Prompt + completion tokens across all runs in one UTC day.
    pub max_tokens_per_day: u64,
    /// Prompt + completion tokens across the runs of one tree of tasks (a parent and the
    /// sub-tasks of its plan, `parent:KEY`): a sub-task's run gets at most what is left of it.
    pub max_tokens_per_tree: u64,
    /// Replies to bots the agent may post in one thread in an hour: the loop guard (people are
    /// always answered).
    pub max_replies_per_thread_per_hour: u32,
    /// Runs in flight at once.
    pub max_concurrent_runs: u32,
    /// Tool result text sent to the model is cut at this many bytes.
    pub max_tool_result_bytes: usize,
    /// Bytes of artifacts (external tools' large or binary results, saved to disk) one run may
    /// write; past it a result is not saved and the model is told why.
    pub max_artifact_bytes_per_run: u64,
    /// Bytes all artifacts in the artifacts folder may take together; past it, as above.
    pub max_artifact_bytes: u64,
    /// On SIGINT/SIGTERM, how long running runs may take to finish.
    pub shutdown_grace_ms: u64,
    /// The same tool with the same arguments this many times in a row is not run again: the
    /// model is told it repeats itself.
    pub max_identical_calls: u32,
    /// The day's spend in money (needs `llm.price`); past it new runs are refused as past
    /// `max_tokens_per_day`.
    pub max_cost_per_day: Option<f64>,
    /// Whether the answer picogent posts for a run ends with a line of what it spent (turns, tool
    /// calls, tokens, cost).
    pub spend_footer: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_turns: 12,
            max_tool_calls: 40,
            max_tokens_per_run: 60_000,
            run_timeout_ms: 300_000,
            max_tokens_per_day: 2_000_000,
            max_tokens_per_tree: 400_000,
            max_replies_per_thread_per_hour: 6,
            max_concurrent_runs: 4,
            max_tool_result_bytes: 8 * 1024,
            max_artifact_bytes_per_run: 64 * 1024 * 1024,
            max_artifact_bytes: 1024 * 1024 * 1024,
            shutdown_grace_ms: 30_000,
            max_identical_calls: 3,
            max_cost_per_day: None,
            spend_footer: true,
        }
    }
}

impl Limits {
    /// Checks what types alone cannot: every budget above 0. The problem names its field
    /// (`limits.max_turns`) and what it should be.
    pub fn check(&self) -> Result<(), Problem> {
        if let Some(cost) = self.max_cost_per_day
            && (cost.is_nan() || cost <= 0.0)
        {
            return problem("limits.max_cost_per_day", "expected an amount greater than 0");
        }
        let positive = [
            ("limits.max_turns", u64::from(self.max_turns)),
            ("limits.max_tool_calls", u64::from(self.max_tool_calls)),
            ("limits.max_tokens_per_run", self.max_tokens_per_run),
            ("limits.run_timeout_ms", self.run_timeout_ms),
            ("limits.max_tokens_per_day", self.max_tokens_per_day),
            ("limits.max_tokens_per_tree", self.max_tokens_per_tree),
            ("limits.max_concurrent_runs", u64::from(self.max_concurrent_runs)),
            ("limits.max_tool_result_bytes", self.max_tool_result_bytes as u64),
            ("limits.max_artifact_bytes_per_run", self.max_artifact_bytes_per_run),
            ("limits.max_artifact_bytes", self.max_artifact_bytes),
            ("limits.max_identical_calls", u64::from(self.max_identical_calls)),
        ];
        match positive.iter().find(|(_, value)| *value == 0) {
            Some((field, _)) => problem(field, "expected a number greater than 0"),
            None => Ok(()),
        }
    }
}
