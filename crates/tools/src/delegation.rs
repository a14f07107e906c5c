//! The `delegation` section of `agent.json`: whether a task run may break its task into
//! sub-tasks (the `plan_subtasks` tool of `plan.rs`), and the bounds of a plan. The tools own it; the configuration
//! embeds it.
//!
//! `stall_ms` is the tree's watchdog's bound (`runtime::watchdog`). `max_review_rounds` is how
//! many rounds of review (the `review` section's hand-off, in the workspace crate) a task gets
//! before a person is asked.

use picogent_support::setting::{Problem, problem};
use serde::{Deserialize, Serialize};

/// The most sub-tasks `delegation.max_subtasks` may allow.
pub const MAX_SUBTASKS_CEILING: u32 = 50;
/// The deepest tree `delegation.max_depth` may allow.
pub const MAX_DEPTH_CEILING: u32 = 5;
/// The most review rounds `delegation.max_review_rounds` may allow.
pub const MAX_REVIEW_ROUNDS_CEILING: u32 = 10;
/// The longest a tracker label may be (`docs/tracker-api.md`).
const MAX_LABEL_CHARS: usize = 50;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DelegationConfig {
    /// Whether task runs are offered `plan_subtasks`.
    pub enabled: bool,
    /// A task carrying one of these labels is asked, in its prompt, to propose a breakdown
    /// before it is worked.
    pub labels: Vec<String>,
    /// The most sub-tasks one plan may make.
    pub max_subtasks: u32,
    /// How deep a tree of tasks may grow: 1, a sub-task is not broken down again.
    pub max_depth: u32,
    /// A sub-task in progress with no activity this long (ms) is said to stall, once, on its
    /// parent (the tree's watchdog).
    pub stall_ms: u64,
    /// Review rounds of two agents before a person is asked to decide (the round limit that
    /// keeps two agents from handing a task back and forth forever).
    pub max_review_rounds: u32,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        DelegationConfig {
            enabled: true,
            labels: vec!["epic".to_string()],
            max_subtasks: 8,
            max_depth: 1,
            stall_ms: 300_000,
            max_review_rounds: 2,
        }
    }
}

impl DelegationConfig {
    /// Checks what types alone cannot: numbers in range, labels the tracker can hold. The
    /// problem names its field (`delegation.max_subtasks`) and what it should be.
    pub fn check(&self) -> Result<(), Problem> {
        if !(1..=MAX_SUBTASKS_CEILING).contains(&self.max_subtasks) {
            return problem(
                "delegation.max_subtasks",
                &format!("expected a number of sub-tasks from 1 to {MAX_SUBTASKS_CEILING}"),
            );
        }
        if !(1..=MAX_DEPTH_CEILING).contains(&self.max_depth) {
            return problem(
                "delegation.max_depth",
                &format!("expected a depth from 1 (sub-tasks are not broken down again) to {MAX_DEPTH_CEILING}"),
            );
        }
        if !(1..=MAX_REVIEW_ROUNDS_CEILING).contains(&self.max_review_rounds) {
            return problem(
                "delegation.max_review_rounds",
                &format!("expected a number of review rounds from 1 to {MAX_REVIEW_ROUNDS_CEILING}"),
            );
        }
        if !(1_000..=604_800_000).contains(&self.stall_ms) {
            return problem(
                "delegation.stall_ms",
                "expected milliseconds from 1000 to 604800000 (7 days); 5 minutes is 300000",
            );
        }
        for label in &self.labels {
            if label.trim().is_empty() || label.trim() != label {
                return problem("delegation.labels", &format!("{label:?}: expected a label without spaces around it"));
            }
            if label.chars().count() > MAX_LABEL_CHARS || label.contains(',') {
                return problem(
                    "delegation.labels",
                    &format!("{label:?}: expected a label of at most {MAX_LABEL_CHARS} characters, without commas"),
                );
            }
        }
        Ok(())
    }

    /// Whether a task carrying `labels` asks for a breakdown.
    pub fn asks_for_breakdown(&self, labels: &[String]) -> bool {
        self.enabled && labels.iter().any(|label| self.labels.contains(label))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_pass_and_each_bound_is_named() {
        assert_eq!(DelegationConfig::default().check(), Ok(()));
        type Change = fn(&mut DelegationConfig);
        let cases: [(Change, &str); 8] = [
            (|c| c.max_subtasks = 0, "delegation.max_subtasks"),
            (|c| c.max_subtasks = 51, "delegation.max_subtasks"),
            (|c| c.max_depth = 0, "delegation.max_depth"),
            (|c| c.stall_ms = 10, "delegation.stall_ms"),
            (|c| c.max_review_rounds = 0, "delegation.max_review_rounds"),
            (|c| c.max_review_rounds = 11, "delegation.max_review_rounds"),
            (|c| c.labels = vec![" epic".into()], "delegation.labels"),
            (|c| c.labels = vec!["a,b".into()], "delegation.labels"),
        ];
        for (change, field) in cases {
            let mut config = DelegationConfig::default();
            change(&mut config);
            assert_eq!(config.check().unwrap_err().field, field);
        }
    }

    #[test]
    fn a_breakdown_is_asked_by_a_configured_label_while_enabled() {
        let config = DelegationConfig::default();
        assert!(config.asks_for_breakdown(&["bug".into(), "epic".into()]));
        assert!(!config.asks_for_breakdown(&["Epic".into()]));
        let off = DelegationConfig { enabled: false, ..DelegationConfig::default() };
        assert!(!off.asks_for_breakdown(&["epic".into()]));
    }
}
