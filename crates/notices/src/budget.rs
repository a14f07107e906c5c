//! Which budget held a run's tokens, and how a notice names it.

/// Where a run's token budget came from: the least of the run's own limit and what the day's
/// budgets had left when it started. A notice names the setting that held it.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenBudget {
    /// `limits.max_tokens_per_run`.
    PerRun { per_run: u64 },
    /// What `limits.max_tokens_per_day` had left.
    DayLeft { left: u64, per_day: u64 },
    /// What `limits.max_cost_per_day` still paid for, in tokens at the dearer price.
    CostLeft { left: u64, per_day: f64 },
    /// What `limits.max_tokens_per_tree` had left for the tree of tasks under `parent`.
    TreeLeft { left: u64, per_tree: u64, parent: String },
}

impl TokenBudget {
    /// The least of the run's limit and what the day's tokens and money still allow (ties: the
    /// run's own limit, then the day's tokens).
    pub fn least(per_run: u64, day: (u64, u64), cost: Option<(u64, f64)>) -> TokenBudget {
        let (day_left, per_day) = day;
        let mut budget = TokenBudget::PerRun { per_run };
        if day_left < budget.tokens() {
            budget = TokenBudget::DayLeft { left: day_left, per_day };
        }
        if let Some((left, per_day)) = cost
            && left < budget.tokens()
        {
            budget = TokenBudget::CostLeft { left, per_day };
        }
        budget
    }

    /// This budget, or what the tree under `parent` has left when that is less (a sub-task's run;
    /// ties keep this one).
    pub fn within_tree(self, left: u64, per_tree: u64, parent: &str) -> TokenBudget {
        if left < self.tokens() { TokenBudget::TreeLeft { left, per_tree, parent: parent.to_string() } } else { self }
    }

    /// The tokens the run may spend.
    pub fn tokens(&self) -> u64 {
        match *self {
            TokenBudget::PerRun { per_run } => per_run,
            TokenBudget::DayLeft { left, .. }
            | TokenBudget::CostLeft { left, .. }
            | TokenBudget::TreeLeft { left, .. } => left,
        }
    }

    /// The setting to raise; `per_run` names the run's own token limit (`limits.max_tokens_per_run`,
    /// or a scheduled job's `max_tokens`).
    pub(crate) fn setting(&self, per_run: &str) -> String {
        match self {
            TokenBudget::PerRun { .. } => per_run.to_string(),
            TokenBudget::DayLeft { .. } => "limits.max_tokens_per_day".to_string(),
            TokenBudget::CostLeft { .. } => "limits.max_cost_per_day".to_string(),
            TokenBudget::TreeLeft { .. } => "limits.max_tokens_per_tree".to_string(),
        }
    }

    /// The budget in words, with its setting (`per_run` as in [`TokenBudget::setting`]) and value.
    pub(crate) fn words(&self, per_run_setting: &str) -> String {
        match self {
            TokenBudget::PerRun { per_run } => {
                format!("the token budget of one run (`{per_run_setting}`, now {per_run})")
            }
            TokenBudget::DayLeft { left, per_day } => format!(
                "today's token budget (`limits.max_tokens_per_day`, now {per_day}; {left} tokens were left when \
                 this run started)"
            ),
            TokenBudget::CostLeft { left, per_day } => format!(
                "what today's money budget still paid for (`limits.max_cost_per_day`, now {per_day}; {left} \
                 tokens when this run started)"
            ),
            TokenBudget::TreeLeft { left, per_tree, parent } => format!(
                "the token budget of the tree of tasks under {parent} (`limits.max_tokens_per_tree`, now {per_tree}; \
                 {left} tokens were left when this run started)"
            ),
        }
    }
}
