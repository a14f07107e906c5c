//! Asking a person and waiting for the reply, in the run's task or thread: what `ask` mode's
//! approvals, an MCP server's elicitation and the model's clarifying question share.
//!
//! While a run waits it is recorded as `awaiting_input`, with what it waits for, and gives its
//! slot back (both through the run's [`Waits`], set by the runtime); it holds no model request.
//! Every question mentions the person it waits for, and only their reply answers it: the person
//! the run works for ([`ToolContext::requester`]) when they are a human member; when the run has
//! none, or it is a bot (a task a bot assigned), any human member's reply answers.
//!
//! Each question of a call is posted with an idempotency key of its own: the call's key, the
//! kind of wait and the question's number in the call (`{call}-elicitation1`), counted per call
//! ([`Questions`]). A run resumed after a restart makes the same calls with the same keys and
//! asks its questions in the same order, so it asks the same messages again (the tracker answers
//! with the ones it has), reads the replies that came meanwhile, and waits only for what is left
//! of the timeout, counted from the question's time. Two questions of one call (an approval then
//! a link, two forms, two rounds) are two messages, each answered by a reply of its own.
//!
//! The reply taken as the answer is told to the run's [`Waits`] (`answered`), so the run does not
//! take it in a second time as steering. People's replies read and not taken (another person's,
//! a stop, words that do not answer) are counted in the run's waiting record (`passed_over`), so
//! whoever looks at the run sees that they were read and why it still waits. A stop of the run
//! ends the wait at once ([`Reply::Stopped`]); a shutdown ends it too, but the run resumes at the
//! next start and asks again ([`Reply::Interrupted`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::ToolContext;
use picogent_state::{PassedOver, WaitKind, Waiting};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{MemberKind, MessageOut, MessageQuery, SendMessage};
use picogent_tracker::session::SessionKey;

/// How a wait for a person ended, as `/metrics` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitEnd {
    /// The person answered (yes, the fields, the words asked for).
    Answered,
    /// The person said no, declined or cancelled.
    Declined,
    /// No answer within the timeout.
    TimedOut,
    /// The run was stopped while it waited.
    Stopped,
    /// The agent shut down while the run waited: the run resumes at the next start and asks
    /// again.
    Interrupted,
    /// The question could not be asked or its replies not read.
    Failed,
}

impl WaitEnd {
    pub const ALL: [WaitEnd; 6] = [
        WaitEnd::Answered,
        WaitEnd::Declined,
        WaitEnd::TimedOut,
        WaitEnd::Stopped,
        WaitEnd::Interrupted,
        WaitEnd::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WaitEnd::Answered => "answered",
            WaitEnd::Declined => "declined",
            WaitEnd::TimedOut => "timed_out",
            WaitEnd::Stopped => "stopped",
            WaitEnd::Interrupted => "interrupted",
            WaitEnd::Failed => "failed",
        }
    }
}

/// The runtime's side of a wait: it records the run as `awaiting_input` and frees its slot at
/// the start, and at the end records that it waits no more, counts how it ended, and takes a
/// slot again (waiting for one) before the run goes on.
pub trait Waits: Send + Sync + std::fmt::Debug {
    fn begin<'a>(&'a self, run_id: &'a str, waiting: &'a Waiting) -> BoxFuture<'a, ()>;
    fn end<'a>(&'a self, run_id: &'a str, kind: WaitKind, end: WaitEnd) -> BoxFuture<'a, ()>;

    /// The run `run_id` read people's replies to its question and passed them over: `waiting`
    /// is its wait as it stands now, with [`Waiting::passed_over`] counting them.
    fn passed_over<'a>(&'a self, _run_id: &'a str, _waiting: &'a Waiting) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// The message `message_id` was taken as the answer of a question of the run `run_id` (told
    /// before [`Waits::end`]): it is not steering for the run.
    fn answered(&self, _run_id: &str, _message_id: &str) {}

    /// Whether the agent is shutting down: a wait its run's cancellation ends is then
    /// [`WaitEnd::Interrupted`], not stopped.
    fn shutting_down(&self) -> bool {
        false
    }
}

/// How many questions each call of a run has asked so far, by the call's idempotency key: the
/// number in a question's key. Shared by the clones of a run's context; a resumed run starts
/// afresh and makes the same calls, so it counts the same numbers.
#[derive(Debug, Clone, Default)]
pub struct Questions(Arc<Mutex<HashMap<String, u32>>>);

impl Questions {
    /// The number of the next question (or notice) of the call `call_key`, from 0.
    pub fn next(&self, call_key: &str) -> u32 {
        let mut asked = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = asked.entry(call_key.to_string()).or_default();
        let this = *count;
        *count += 1;
        this
    }
}

/// The time a run spent waiting for people, which its wall-clock budget
/// (`limits.run_timeout_ms`) does not count. Shared by the clones of a run's context.
#[derive(Debug, Clone, Default)]
pub struct WaitClock(std::sync::Arc<std::sync::Mutex<ClockHands>>);

#[derive(Debug, Default)]
struct ClockHands {
    /// How many waits go on now, and since when the first of them.
    open: usize,
    since: Option<tokio::time::Instant>,
    total: Duration,
}

impl WaitClock {
    fn hands(&self) -> std::sync::MutexGuard<'_, ClockHands> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn pause(&self) {
        let mut hands = self.hands();
        hands.open += 1;
        hands.since.get_or_insert_with(tokio::time::Instant::now);
    }

    pub fn resume(&self) {
        let mut hands = self.hands();
        hands.open = hands.open.saturating_sub(1);
        if hands.open == 0
            && let Some(since) = hands.since.take()
        {
            hands.total += since.elapsed();
        }
    }

    /// `deadline` moved on by the time waited so far; `None` while a wait goes on (it cannot
    /// pass then).
    pub fn moved(&self, deadline: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let hands = self.hands();
        if hands.open > 0 { None } else { Some(deadline + hands.total) }
    }

    /// Resolves once `deadline`, moved on by the waits, has passed.
    pub async fn passed(&self, deadline: tokio::time::Instant) {
        loop {
            match self.moved(deadline) {
                Some(at) if tokio::time::Instant::now() >= at => return,
                Some(at) => {
                    tokio::time::sleep_until(at.min(tokio::time::Instant::now() + Duration::from_secs(1))).await
                }
                None => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// Whether `deadline`, moved on by the waits, has passed.
    pub fn has_passed(&self, deadline: tokio::time::Instant) -> bool {
        self.moved(deadline).is_some_and(|at| tokio::time::Instant::now() >= at)
    }
}

/// What to ask.
#[derive(Debug, Clone)]
pub struct Question {
    pub kind: WaitKind,
    /// What is asked, in a sentence, for the run's record and the inspector.
    pub what: String,
    /// The message posted, after a mention of the person asked.
    pub text: String,
    /// Only this person's replies count (their slug), when they are a human member; `None`, or
    /// a bot: any human member's.
    pub person: Option<String>,
    pub timeout: Duration,
}

/// What came of a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<T> {
    /// A reply `read` took, and who wrote it.
    Answer {
        value: T,
        by: String,
    },
    TimedOut,
    /// The run was stopped while it waited.
    Stopped,
    /// The agent shut down while the run waited; the run asks again when it resumes.
    Interrupted,
    /// The question could not be asked: no task or thread to ask in, or the tracker failed.
    Unavailable {
        reason: String,
    },
}

/// Asks in the run's task or thread on the tracker and reads the replies.
#[derive(Debug, Clone)]
pub struct PersonAsker {
    client: TrackerClient,
    poll_interval: Duration,
}

impl PersonAsker {
    pub fn new(client: TrackerClient) -> PersonAsker {
        PersonAsker { client, poll_interval: Duration::from_millis(500) }
    }

    pub fn with_poll_interval(mut self, interval: Duration) -> PersonAsker {
        self.poll_interval = interval;
        self
    }

    /// Posts `question` where the run was asked, mentioning the person asked, and waits for a
    /// reply of theirs that `read` takes (`Some`); replies it leaves (`None`) are passed over.
    /// Whatever the end, the run's [`Waits`] hear of it, and of the message taken as the answer.
    /// `ended` says how an answer counts in `/metrics` (`Answered`, or `Declined` for a no).
    pub async fn ask<T>(
        &self,
        context: &ToolContext,
        question: &Question,
        mut read: impl FnMut(&MessageOut) -> Option<T>,
        ended: impl Fn(&T) -> WaitEnd,
    ) -> Reply<T> {
        let Some((mut body, query)) = place(context) else {
            return Reply::Unavailable { reason: "the run has no task or thread to ask in".to_string() };
        };
        let humans: HashSet<String> = match self.client.list_members().await {
            Ok(members) => members.into_iter().filter(|m| m.kind == MemberKind::Human).map(|m| m.slug).collect(),
            Err(error) => return Reply::Unavailable { reason: format!("cannot list members: {error}") },
        };
        // A bot that asked for the run cannot answer (only people's replies are read): then any
        // person may.
        let person = question.person.clone().filter(|person| humans.contains(person));
        let mention = person.as_ref().map(|person| format!("@{person} ")).unwrap_or_default();
        body.content = format!("{mention}{}", question.text.trim());
        let key = question_key(context, question.kind.as_str());
        let asked = match self.client.send_message(&body, key.as_deref()).await {
            Ok(message) => message,
            Err(error) => return Reply::Unavailable { reason: format!("cannot post the question: {error}") },
        };
        // Counted from the question's time: a run resumed after a restart waits only what is left.
        let asked_at = parse_time(&asked.created_at).unwrap_or_else(now_ms);
        let until_ms = asked_at.saturating_add(i64::try_from(question.timeout.as_millis()).unwrap_or(i64::MAX));
        let mut waiting = Waiting {
            kind: question.kind,
            what: question.what.clone(),
            person: person.clone(),
            asked_message_id: Some(asked.id.clone()),
            since_ms: asked_at,
            until_ms,
            passed_over: None,
        };
        let run_id = context.run_id.as_deref().unwrap_or("");
        context.wait_clock.pause();
        if let Some(waits) = &context.waits {
            waits.begin(run_id, &waiting).await;
        }
        let listen =
            Listen { query: &query, asked_id: &asked.id, until_ms, humans: &humans, person: person.as_deref() };
        let (reply, answer_id) = self.read_replies(context, &listen, &mut waiting, &mut read).await;
        context.wait_clock.resume();
        let end = match &reply {
            Reply::Answer { value, .. } => ended(value),
            Reply::TimedOut => WaitEnd::TimedOut,
            Reply::Stopped => WaitEnd::Stopped,
            Reply::Interrupted => WaitEnd::Interrupted,
            Reply::Unavailable { .. } => WaitEnd::Failed,
        };
        if let Some(waits) = &context.waits {
            if let Some(answer_id) = &answer_id {
                waits.answered(run_id, answer_id);
            }
            waits.end(run_id, question.kind, end).await;
        }
        reply
    }

    /// Says `text` where the run was asked, once per call and `suffix` (its idempotency key
    /// numbers it among the call's questions and notices).
    pub async fn tell(
        &self,
        context: &ToolContext,
        text: &str,
        suffix: &str,
    ) -> Result<(), picogent_tracker::TrackerError> {
        let Some((mut body, _)) = place(context) else { return Ok(()) };
        body.content = text.trim().to_string();
        let key = question_key(context, &format!("tell-{suffix}"));
        self.client.send_message(&body, key.as_deref()).await.map(|_| ())
    }

    /// Reads the replies after the question until `read` takes one (the answer, with its
    /// message's id), the timeout passes or the run is cancelled. People's replies it passes
    /// over are counted in `waiting`, and the run's [`Waits`] hear of them.
    async fn read_replies<T>(
        &self,
        context: &ToolContext,
        listen: &Listen<'_>,
        waiting: &mut Waiting,
        read: &mut impl FnMut(&MessageOut) -> Option<T>,
    ) -> (Reply<T>, Option<String>) {
        let mut after = listen.asked_id.to_string();
        loop {
            let page = MessageQuery { after: Some(after.clone()), limit: Some(200), ..listen.query.clone() };
            match self.client.list_messages(&page).await {
                Ok(messages) => {
                    let passed_before = waiting.passed_over.clone();
                    for message in &messages {
                        let human = listen.humans.contains(&message.author_slug);
                        let counts = human && listen.person.is_none_or(|person| person == message.author_slug);
                        // A stop is the router's to obey: the wait ends with the run.
                        if counts
                            && !is_stop(&message.content)
                            && let Some(value) = read(message)
                        {
                            let answer = Reply::Answer { value, by: message.author_slug.clone() };
                            return (answer, Some(message.id.clone()));
                        }
                        if human {
                            let count = waiting.passed_over.as_ref().map_or(0, |passed| passed.count);
                            waiting.passed_over = Some(PassedOver {
                                count: count.saturating_add(1),
                                last_message_id: message.id.clone(),
                                last_by: message.author_slug.clone(),
                            });
                        }
                    }
                    if waiting.passed_over != passed_before
                        && let Some(waits) = &context.waits
                    {
                        waits.passed_over(context.run_id.as_deref().unwrap_or(""), waiting).await;
                    }
                    if let Some(last) = messages.last() {
                        after = last.id.clone();
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot read the replies to a question; trying again"),
            }
            let left = listen.until_ms.saturating_sub(now_ms());
            if left <= 0 {
                return (Reply::TimedOut, None);
            }
            let pause = self.poll_interval.min(Duration::from_millis(u64::try_from(left).unwrap_or(0)));
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = context.cancel.cancelled() => {
                    let shutdown = context.waits.as_ref().is_some_and(|waits| waits.shutting_down());
                    return (if shutdown { Reply::Interrupted } else { Reply::Stopped }, None);
                }
            }
        }
    }
}

/// Where and from whom the replies to a question are read.
struct Listen<'a> {
    query: &'a MessageQuery,
    asked_id: &'a str,
    until_ms: i64,
    humans: &'a HashSet<String>,
    /// Only this person's replies count; `None`: any human's.
    person: Option<&'a str>,
}

/// The idempotency key of the next question (or notice) `what` of the call of `context`:
/// `{call}-{what}{n}`, `n` counting the call's questions and notices. `None` where the call has
/// no key (a fresh one is used).
fn question_key(context: &ToolContext, what: &str) -> Option<String> {
    let call = context.idempotency_key.as_ref()?;
    Some(format!("{call}-{what}{}", context.questions.next(call)))
}

/// Where the run of `context` asks, and how its replies are listed there.
fn place(context: &ToolContext) -> Option<(SendMessage, MessageQuery)> {
    match &context.session {
        Some(SessionKey::Task(task_id)) => Some((
            SendMessage { task_id: Some(task_id.clone()), ..SendMessage::default() },
            MessageQuery { task_id: Some(task_id.clone()), ..MessageQuery::default() },
        )),
        Some(SessionKey::Thread(root)) => Some((
            SendMessage { parent_id: Some(root.clone()), ..SendMessage::default() },
            MessageQuery { parent_id: Some(root.clone()), ..MessageQuery::default() },
        )),
        // A prompt and a scheduled job's run have nobody who asked, and no thread to ask in.
        Some(SessionKey::Prompt(_) | SessionKey::Schedule(_)) | None => None,
    }
}

fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// An RFC 3339 time as Unix ms; `None` when it is not one.
fn parse_time(text: &str) -> Option<i64> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Whether a reply says only `stop`: the run is being stopped, and this is no answer.
fn is_stop(content: &str) -> bool {
    reply_words(content).trim_end_matches(['.', '!']).eq_ignore_ascii_case("stop")
}

/// The words of a reply after any `@mentions` that open it.
pub fn reply_words(content: &str) -> &str {
    let mut rest = content.trim_start();
    while rest.starts_with('@') {
        rest = rest.split_once(char::is_whitespace).map_or("", |(_, tail)| tail.trim_start());
    }
    rest.trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_of_a_reply_come_after_its_mentions() {
        assert_eq!(reply_words("@picogent @bob  party_size: 4"), "party_size: 4");
        assert_eq!(reply_words("done"), "done");
        assert_eq!(reply_words("@picogent"), "");
    }

    #[test]
    fn a_question_time_is_read_as_unix_ms() {
        assert_eq!(parse_time("1970-01-01T00:00:01.5Z"), Some(1_500));
        assert_eq!(parse_time("yesterday"), None);
    }
}
