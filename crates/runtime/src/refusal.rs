//! Telling a person that a cap, a budget or a policy refused what they asked: once in that thread
//! (or on that task) per window, naming the setting and when the agent answers again.
//!
//! Invariants:
//! - one notice per place and window, not one per message: the window's claim is taken in the
//!   state database before the notice is posted (so a restart or a second replica does not post
//!   it again), and the post carries an idempotency key made of the same words (so a retried post
//!   lands once); when the state database itself failed, the key alone keeps it to one;
//! - the notice says why (the setting, by its name in agent.json) and when or how the agent
//!   answers again;
//! - the refusal of a bot is said only where a person can read it (a thread with a human in it);
//!   nothing is said where nobody asked (a prompt over MCP or the command line answers its caller).

use time::OffsetDateTime;

use picogent_state::{ClaimKind, State};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{MemberKind, MessageQuery, SendMessage};
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

    /// The window this refusal is told once in, for `session` at `now`: a claim's kind and key,
    /// the key starting with the UTC day (retention prunes such claims by it). `None`: nothing to
    /// claim (the state database failed).
    fn claim(&self, session: &SessionKey, now: OffsetDateTime) -> Option<(ClaimKind, String)> {
        let day = now.date();
        let hour = now.hour();
        match self {
            Refusal::BotReplyCap { .. } => {
                Some((ClaimKind::LimitNotice, format!("{day}T{hour:02}/reply_cap/{session}")))
            }
            Refusal::DailyBudget { .. } => Some((ClaimKind::SpendNotice, format!("{day}/{session}"))),
            Refusal::ChatOff => Some((ClaimKind::LimitNotice, format!("{day}/chat_listen/{session}"))),
            Refusal::NotRecorded => None,
        }
    }

    /// The post's idempotency key: the same words as its window.
    fn idempotency_key(&self, session: &SessionKey, now: OffsetDateTime) -> String {
        match self.claim(session, now) {
            Some((kind, key)) => format!("{}-{}", kind.as_str(), key.replace('/', "-")),
            None => format!("not_recorded-{}T{:02}-{session}", now.date(), now.hour()),
        }
    }
}

/// Tells `session` of `refusal` once in its window (see the module docs); `reply_to` is the
/// message the notice answers.
pub async fn tell_once(
    state: &State,
    client: &TrackerClient,
    session: &SessionKey,
    refusal: &Refusal,
    reply_to: Option<&str>,
) {
    let now = OffsetDateTime::now_utc();
    let body = match session {
        SessionKey::Task(task_id) => SendMessage { task_id: Some(task_id.clone()), ..SendMessage::default() },
        SessionKey::Thread(root) => SendMessage { parent_id: Some(root.clone()), ..SendMessage::default() },
        SessionKey::Prompt(_) | SessionKey::Schedule(_) => return,
    };
    if let Some((kind, key)) = refusal.claim(session, now) {
        match state.is_claimed(kind, &key).await {
            Ok(false) => {}
            Ok(true) => return,
            Err(error) => {
                tracing::error!(%error, "cannot read whether a refusal was told; not telling it");
                return;
            }
        }
        if matches!(refusal, Refusal::BotReplyCap { .. }) && !has_people(client, session).await {
            return;
        }
        match state.claim(kind, &key).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::error!(%error, "cannot claim a refusal's notice; not posting it");
                return;
            }
        }
        // The claim must outlive a power cut before the notice is posted.
        if let Err(error) = state.sync().await {
            tracing::error!(%error, "not posting a notice the state could not record");
            return;
        }
    }
    let body = SendMessage { content: refusal.text(session, now), reply_to: reply_to.map(str::to_string), ..body };
    match client.send_message(&body, Some(&refusal.idempotency_key(session, now))).await {
        Ok(_) => tracing::info!(%session, refusal = ?refusal, "told the people there once"),
        Err(error) => tracing::error!(%error, %session, "could not post a refusal's notice"),
    }
}

/// Whether a human wrote in `session` (among its newest messages). When the tracker cannot say,
/// it counts as yes: a notice too many is better than a person left without one.
async fn has_people(client: &TrackerClient, session: &SessionKey) -> bool {
    let query = match session {
        SessionKey::Task(task_id) => MessageQuery { task_id: Some(task_id.clone()), ..MessageQuery::default() },
        SessionKey::Thread(root) => MessageQuery { parent_id: Some(root.clone()), ..MessageQuery::default() },
        SessionKey::Prompt(_) | SessionKey::Schedule(_) => return false,
    };
    let query = MessageQuery { limit: Some(200), ..query };
    let (Ok(messages), Ok(members)) = (client.list_messages(&query).await, client.list_members().await) else {
        return true;
    };
    messages.iter().any(|message| {
        members.iter().any(|member| member.slug == message.author_slug && member.kind == MemberKind::Human)
    })
}

/// How long from `now` to the next 00:00 UTC.
fn until_midnight(now: OffsetDateTime) -> time::Duration {
    let next = now.date().next_day().map(|day| day.midnight().assume_utc());
    next.map_or(time::Duration::ZERO, |midnight| midnight - now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_notice_names_its_setting_and_when_and_its_window() {
        let now = time::macros::datetime!(2026-03-04 22:15:30 UTC);
        let thread = SessionKey::Thread("m1".into());
        let task = SessionKey::Task("t1".into());
        let cases = [
            (Refusal::BotReplyCap { count: 6, max: 6 }, "limits.max_replies_per_thread_per_hour", "by 23:15 UTC"),
            (
                Refusal::DailyBudget { setting: "limits.max_tokens_per_day", budget: "2500 tokens".into() },
                "limits.max_tokens_per_day",
                "00:00 UTC (in 1 h 44 min)",
            ),
            (Refusal::ChatOff, "chat_listen", "Assign me a task"),
            (Refusal::NotRecorded, "state.path", "Mention me again"),
        ];
        for (refusal, setting, when) in cases {
            let text = refusal.text(&thread, now);
            assert!(text.contains(setting) && text.contains(when), "{refusal:?}: {text}");
            let key = refusal.idempotency_key(&thread, now);
            assert!(key.len() <= 200 && key.chars().all(|c| c.is_ascii_graphic()), "{key}");
            // One window per place: another thread or task is told on its own.
            assert_ne!(key, refusal.idempotency_key(&task, now), "{refusal:?}");
        }
        assert!(Refusal::ChatOff.text(&task, now).contains("do not answer"));
        let cap = Refusal::BotReplyCap { count: 6, max: 6 };
        assert!(cap.text(&task, now).contains("on this task"));
        // The cap's window is the hour, the budget's the day; both keys start with the day.
        let (_, key) = cap.claim(&thread, now).unwrap();
        assert_eq!(key, "2026-03-04T22/reply_cap/thread:m1");
        assert_ne!(cap.claim(&thread, now + time::Duration::HOUR), cap.claim(&thread, now));
        let budget = Refusal::DailyBudget { setting: "limits.max_tokens_per_day", budget: "1 token".into() };
        assert_eq!(budget.claim(&thread, now).unwrap().1, "2026-03-04/thread:m1");
        assert_eq!(Refusal::NotRecorded.claim(&thread, now), None);
    }
}
