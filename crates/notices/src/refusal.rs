//! What a person reads when a cap, a budget or a setting refused what they asked: the setting by
//! its name in agent.json, and when or how the agent answers again. Telling it once per place and
//! window is the runtime's (`runtime/refusal.rs`).

use time::OffsetDateTime;

use picogent_tracker::session::SessionKey;

/// What refused a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The agent answered bots `max` times in this thread in the last hour
    /// (`limits.max_replies_per_thread_per_hour`); it answers bots here again within the hour.
    BotReplyCap { count: u32, max: u32 },
    /// The day's model budget is spent; new work starts again at 00:00 UTC.
    DailyBudget {
        /// `limits.max_tokens_per_day` or `limits.max_cost_per_day`.
        setting: &'static str,
        /// The budget in words: `2500 tokens`, `1.5 in cost`.
        budget: String,
    },
    /// `chat_listen` is `none`: the agent works only its tasks.
    ChatOff,
    /// The run could not be recorded in the state database, so it was not started.
    NotRecorded,
}

impl Refusal {
    /// The notice, as the person reads it at `now`.
    pub fn text(&self, session: &SessionKey, now: OffsetDateTime) -> String {
        let here = match session {
            SessionKey::Task(_) => "on this task",
            SessionKey::Thread(_) | SessionKey::Prompt(_) | SessionKey::Schedule(_) => "in this thread",
        };
        match self {
            Refusal::BotReplyCap { count, max } => {
                let until = now + time::Duration::HOUR;
                format!(
                    "I have stopped answering bots {here} for now: I answered bots here {count} times in the last hour, \
                     and `limits.max_replies_per_thread_per_hour` allows {max}. I answer bots here again by {:02}:{:02} \
                     UTC; people are answered as always.",
                    until.hour(),
                    until.minute()
                )
            }
            Refusal::DailyBudget { setting, budget } => {
                let left = until_midnight(now);
                format!(
                    "I have used my daily model budget ({budget}) and will not start new work until 00:00 UTC \
                     (in {} h {:02} min). Mention me again then, or ask an admin to raise `{setting}` if this is urgent.",
                    left.whole_hours(),
                    left.whole_minutes() % 60
                )
            }
            Refusal::ChatOff => "I do not answer messages: `chat_listen` is `none` in my configuration, so I only \
                                 work the tasks assigned to me. Assign me a task, or ask an admin to set \
                                 `chat_listen` to `mentions`."
                .to_string(),
            Refusal::NotRecorded => "I could not take this up: my state database did not record it (`state.path` or \
                                     `state.url`), so I did not start. Mention me again in a few minutes; if it \
                                     keeps failing, an admin should look at my log."
                .to_string(),
        }
    }
}

/// How long from `now` to the next 00:00 UTC.
fn until_midnight(now: OffsetDateTime) -> time::Duration {
    let next = now.date().next_day().map(|day| day.midnight().assume_utc());
    next.map_or(time::Duration::ZERO, |midnight| midnight - now)
}
