//! Where a run's posts land, what they answer, and the loop guard that cannot be talked around.
//!
//! Every post a run makes (the message tools, its answer) is cleared here first ([`ReplyCap::clear`]):
//! - it names the message it answers (`reply_to`): in the run's own thread or task, the oldest
//!   message the run was asked that no post of it has named yet (its trigger, then each message
//!   it took in as steering), else the newest; elsewhere, the message it replies to. This is what
//!   reconciliation reads to tell whether a mention was answered;
//! - the loop guard counts only posts that answer a bot (a message a bot wrote, a task a bot
//!   assigned), and refuses one once the agent has answered bots
//!   `limits.max_replies_per_thread_per_hour` times in that thread (or on that task) in the last
//!   hour. A person is always answered: their requests are bounded by the run budgets and the
//!   daily budget, not by this cap. The router checks the same count before it spends a model
//!   call on a bot's message ([`ReplyCap::capped`]).
//!
//! Invariant: two bots cannot loop. Every run that answers a bot is counted against one hourly
//! cap per thread, checked and counted in one step (across replicas too), and a bot's message
//! past it starts nothing; a run that answers a person can only post within its own budgets.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::refusal::{self, Refusal};
use picogent_state::{State, StateError};
use picogent_tools::{PostPlace, PostRefused};
use picogent_tracker::TrackerClient;
use picogent_tracker::session::SessionKey;

/// Who asked for what a run answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Asker {
    /// A person (a human member, or the operator over MCP or the command line).
    #[default]
    Person,
    /// A bot: another agent member, or a member the tracker could not tell about. The loop guard
    /// errs on the side of stopping.
    Bot,
}

/// A message a run was asked with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asked {
    pub message_id: String,
    pub asker: Asker,
}

/// One input sent to a running run (steering): the text the model reads, and the message it
/// came from, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steering {
    pub text: String,
    pub asked: Option<Asked>,
}

/// What one run answers: where it was asked, who asked for the run, the message it was asked
/// with, and each input sent to it since (in the order the loop takes them in).
#[derive(Debug)]
pub struct Answering {
    session: SessionKey,
    asker: Asker,
    log: Mutex<AskedLog>,
}

#[derive(Debug, Default)]
struct AskedLog {
    trigger: Option<Asked>,
    /// One entry per steering input sent to the run, in order.
    steering: Vec<Option<Asked>>,
    /// Messages a post of the run has named.
    named: HashSet<String>,
    /// Steering inputs not handed to the loop because the run took their message as the answer
    /// to a question of its own.
    taken_as_answers: usize,
}

impl Answering {
    /// `trigger`: the message the run was asked with (`None`: an assignment, a prompt).
    pub fn new(session: SessionKey, asker: Asker, trigger: Option<Asked>) -> Answering {
        Answering { session, asker, log: Mutex::new(AskedLog { trigger, ..AskedLog::default() }) }
    }

    /// Notes the next steering input sent to the run.
    pub fn steered(&self, asked: Option<Asked>) {
        if let Ok(mut log) = self.log.lock() {
            log.steering.push(asked);
        }
    }

    /// Notes a steering input the run took as the answer to a question instead (not handed to
    /// the loop).
    pub fn taken_as_answer(&self) {
        if let Ok(mut log) = self.log.lock() {
            log.taken_as_answers += 1;
        }
    }

    /// How many steering inputs the run took as answers: with those the loop took in, what the
    /// run consumed of its steering.
    pub fn taken_as_answers(&self) -> usize {
        self.log.lock().map(|log| log.taken_as_answers).unwrap_or(0)
    }

    /// Notes that a post of the run named `message_id`.
    pub fn named(&self, message_id: &str) {
        if let Ok(mut log) = self.log.lock() {
            log.named.insert(message_id.to_string());
        }
    }

    /// What the run's next post where it was asked answers, once the loop has taken in
    /// `steering_taken` steering inputs: the oldest message asked and not named yet, else the
    /// newest.
    pub fn next(&self, steering_taken: u32) -> Option<Asked> {
        let log = self.log.lock().ok()?;
        let taken = log.steering.iter().take(steering_taken as usize).flatten();
        let asked: Vec<&Asked> = log.trigger.iter().chain(taken).collect();
        asked.iter().find(|asked| !log.named.contains(&asked.message_id)).or(asked.last()).map(|asked| (*asked).clone())
    }

    /// Where the run was asked.
    pub fn session(&self) -> &SessionKey {
        &self.session
    }
}

/// The loop guard and where posts land (see the module docs).
pub struct ReplyCap {
    pub state: State,
    pub client: TrackerClient,
    pub max_per_hour: u32,
    /// Check and count in one step in this process (the store makes it one step across replicas),
    /// so two concurrent posts cannot both take the last slot.
    pub lock: Arc<tokio::sync::Mutex<()>>,
}

impl ReplyCap {
    /// The session a post to `place` lands in; `None` for a new thread, or when the tracker
    /// cannot say (the post itself will fail with the tracker's answer and let it say why).
    async fn session_of(&self, place: &PostPlace) -> Option<SessionKey> {
        match place {
            PostPlace::Reply { parent_id } => match self.client.get_message(parent_id).await {
                Ok(parent) => Some(SessionKey::of_message(&parent)),
                Err(_) => None,
            },
            PostPlace::Task { task_id } => match self.client.get_task(task_id).await {
                Ok(task) => Some(SessionKey::Task(task.id)),
                Err(_) => None,
            },
            // A new top-level message starts a thread of its own.
            PostPlace::Chat { .. } => None,
        }
    }

    /// Clears a post of the run answering `answering`, made once the loop took in
    /// `steering_taken` steering inputs: `Ok` with the message it answers (its `reply_to`), or
    /// refused by the loop guard. A refusal tells the people in that thread once.
    pub async fn clear(
        &self,
        place: &PostPlace,
        answering: &Answering,
        steering_taken: u32,
    ) -> Result<Option<String>, PostRefused> {
        let Some(session) = self.session_of(place).await else { return Ok(None) };
        let asked = answering.next(steering_taken);
        let asker = asked.as_ref().map_or(answering.asker, |asked| asked.asker);
        let reply_to = match place {
            _ if &session == answering.session() => asked.as_ref().map(|asked| asked.message_id.clone()),
            PostPlace::Reply { parent_id } => Some(parent_id.clone()),
            PostPlace::Task { .. } | PostPlace::Chat { .. } => None,
        };
        if asker == Asker::Person {
            return Ok(reply_to);
        }
        let held = self.lock.lock().await;
        match self.state.record_reply_within_hour(&session, self.max_per_hour).await? {
            None => Ok(reply_to),
            Some(count) => {
                drop(held);
                tracing::warn!(thread = %session, count, "post refused by the thread reply cap for bots");
                self.tell_people(&session, count, reply_to.as_deref()).await;
                Err(PostRefused::ReplyCap { count })
            }
        }
    }

    /// Whether the agent has answered bots `max_per_hour` times in `session` in the last hour:
    /// `Some(count)` when it has, and a bot's message there starts nothing.
    pub async fn capped(&self, session: &SessionKey) -> Result<Option<u32>, StateError> {
        let count = self.state.replies_in_last_hour(session).await?;
        Ok((count >= self.max_per_hour).then_some(count))
    }

    /// Tells the people in `session` once an hour that the agent stopped answering bots there;
    /// `capped_message`, the bot's message that was not answered, is what the notice answers.
    pub async fn tell_people(&self, session: &SessionKey, count: u32, capped_message: Option<&str>) {
        let refusal = Refusal::BotReplyCap { count, max: self.max_per_hour };
        refusal::tell_once(&self.state, &self.client, session, &refusal, capped_message).await;
    }
}
