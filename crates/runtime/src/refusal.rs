//! Telling a person that a cap, a budget or a policy refused what they asked: once in that thread
//! (or on that task) per window. What it says (the setting, and when the agent answers again)
//! is `picogent_notices::Refusal`'s.
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

/// What refused a request; its words are `picogent-notices`'.
pub use picogent_notices::Refusal;

/// The window `refusal` is told once in, for `session` at `now`: a claim's kind and key, the key
/// starting with the UTC day (retention prunes such claims by it). `None`: nothing to claim (the
/// state database failed).
fn window(refusal: &Refusal, session: &SessionKey, now: OffsetDateTime) -> Option<(ClaimKind, String)> {
    let day = now.date();
    let hour = now.hour();
    match refusal {
        Refusal::BotReplyCap { .. } => Some((ClaimKind::LimitNotice, format!("{day}T{hour:02}/reply_cap/{session}"))),
        Refusal::DailyBudget { .. } => Some((ClaimKind::SpendNotice, format!("{day}/{session}"))),
        Refusal::ChatOff => Some((ClaimKind::LimitNotice, format!("{day}/chat_listen/{session}"))),
        Refusal::NotRecorded => None,
    }
}

/// The post's idempotency key: the same words as its window.
fn idempotency_key(refusal: &Refusal, session: &SessionKey, now: OffsetDateTime) -> String {
    match window(refusal, session, now) {
        Some((kind, key)) => format!("{}-{}", kind.as_str(), key.replace('/', "-")),
        None => format!("not_recorded-{}T{:02}-{session}", now.date(), now.hour()),
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
    if let Some((kind, key)) = window(refusal, session, now) {
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
    match client.send_message(&body, Some(&idempotency_key(refusal, session, now))).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_is_told_once_per_place_and_window() {
        let now = time::macros::datetime!(2026-03-04 22:15:30 UTC);
        let thread = SessionKey::Thread("m1".into());
        let task = SessionKey::Task("t1".into());
        let refusals = [
            Refusal::BotReplyCap { count: 6, max: 6 },
            Refusal::DailyBudget { setting: "limits.max_tokens_per_day", budget: "2500 tokens".into() },
            Refusal::ChatOff,
            Refusal::NotRecorded,
        ];
        for refusal in refusals {
            let key = idempotency_key(&refusal, &thread, now);
            assert!(key.len() <= 200 && key.chars().all(|c| c.is_ascii_graphic()), "{key}");
            // One window per place: another thread or task is told on its own.
            assert_ne!(key, idempotency_key(&refusal, &task, now), "{refusal:?}");
        }
        // The cap's window is the hour, the budget's the day; both keys start with the day.
        let cap = Refusal::BotReplyCap { count: 6, max: 6 };
        let (_, key) = window(&cap, &thread, now).unwrap();
        assert_eq!(key, "2026-03-04T22/reply_cap/thread:m1");
        assert_ne!(window(&cap, &thread, now + time::Duration::HOUR), window(&cap, &thread, now));
        let budget = Refusal::DailyBudget { setting: "limits.max_tokens_per_day", budget: "1 token".into() };
        assert_eq!(window(&budget, &thread, now).unwrap().1, "2026-03-04/thread:m1");
        assert_eq!(window(&Refusal::NotRecorded, &thread, now), None);
    }
}
