//! What a run leaves on the board when it ends: its answer, always visible where it was asked
//! (a reply in the thread, the summary comment on the task), posted once, unless the run posted
//! there itself, with a line of what it spent. The words of its notice, when it failed, are
//! `picogent-notices`'.
//!
//! Invariants:
//! - the answer is posted with the idempotency key `answer-{run id}`, the same across retries and
//!   resumes, so it lands once; it passes the loop guard like every post of the agent, and names
//!   the message it answers (`reply_to`) as every post of the run does (`runtime/guard.rs`);
//! - a run that replied or commented where it was asked (seen by [`RunPosts`], which hears of
//!   every post the run's tools made) posts nothing more; empty text is never posted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::guard::{Answering, ReplyCap};
use crate::request::RunKind;
use picogent_agent::RunRecord;
use picogent_config::{Limits, Price};
use picogent_notices::AskAgain;
use picogent_tools::{PostGuard, PostPlace, PostRefused};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{MessageOut, SendMessage};
use picogent_tracker::session::SessionKey;

/// A run's post guard: what the run answers and the agent's loop guard, plus a note of every
/// session the run posted in.
pub struct RunPosts {
    cap: Arc<ReplyCap>,
    answering: Arc<Answering>,
    posted_in: Mutex<HashSet<SessionKey>>,
}

impl RunPosts {
    pub fn new(cap: Arc<ReplyCap>, answering: Arc<Answering>) -> RunPosts {
        RunPosts { cap, answering, posted_in: Mutex::new(HashSet::new()) }
    }

    /// Whether the run posted a message in `session`.
    pub fn posted_in(&self, session: &SessionKey) -> bool {
        self.posted_in.lock().is_ok_and(|posted| posted.contains(session))
    }
}

impl PostGuard for RunPosts {
    fn before_post<'a>(
        &'a self,
        place: &'a PostPlace,
        steering_taken: u32,
    ) -> BoxFuture<'a, Result<Option<String>, PostRefused>> {
        Box::pin(self.cap.clear(place, &self.answering, steering_taken))
    }

    fn posted(&self, message: &MessageOut) {
        if let Ok(mut posted) = self.posted_in.lock() {
            posted.insert(SessionKey::of_message(message));
        }
        if let Some(answered) = &message.reply_to {
            self.answering.named(answered);
        }
    }
}

/// Where a run of `kind` answers: the place to post in, and the message body without content.
fn answer_place(kind: &RunKind) -> Option<(PostPlace, SendMessage)> {
    match kind {
        RunKind::Task { task, .. } => Some((
            PostPlace::Task { task_id: task.id.clone() },
            SendMessage { task_id: Some(task.id.clone()), ..SendMessage::default() },
        )),
        RunKind::Message { message } => {
            let root = message.thread_root().to_string();
            Some((
                PostPlace::Reply { parent_id: root.clone() },
                SendMessage { parent_id: Some(root), ..SendMessage::default() },
            ))
        }
        RunKind::Schedule { firing } => firing.chat().map(|project| {
            (
                PostPlace::Chat { chat_id: project.chat_id.clone() },
                SendMessage { chat_id: Some(project.chat_id.clone()), ..SendMessage::default() },
            )
        }),
        RunKind::Prompt { .. } => None,
    }
}

/// Posts a completed run's final answer where it was asked, with the spend line, unless the run
/// posted there itself or the answer is empty. `steering_taken`: the steering inputs the run took
/// in, for what the answer names.
pub async fn post_answer(
    client: &TrackerClient,
    posts: &RunPosts,
    session: &SessionKey,
    run_id: &str,
    kind: &RunKind,
    text: String,
    steering_taken: u32,
) {
    if text.trim().is_empty() || posts.posted_in(session) {
        return;
    }
    let Some((place, body)) = answer_place(kind) else { return };
    let reply_to = match posts.before_post(&place, steering_taken).await {
        Ok(reply_to) => reply_to,
        Err(refused) => {
            tracing::warn!(%refused, "the run's answer was not posted");
            return;
        }
    };
    let body = SendMessage { content: text, reply_to, ..body };
    match client.send_message(&body, Some(&format!("answer-{run_id}"))).await {
        Ok(message) => posts.posted(&message),
        Err(error) => tracing::error!(%error, "could not post the run's answer"),
    }
}

/// The answer text as posted: the model's words, and a line of what the run spent.
/// `work`: the line naming the branch and commit of the run's coding work, picogent's own words
/// whatever the model wrote, before the spend line.
pub fn answer_text(record: &RunRecord, limits: &Limits, price: Option<&Price>, work: Option<String>) -> String {
    let mut text = record.final_message.trim().to_string();
    if text.is_empty() {
        return text;
    }
    if let Some(work) = work {
        text = format!("{text}\n\n{work}");
    }
    if !limits.spend_footer {
        return text;
    }
    format!("{text}\n\n— {}", picogent_notices::spend_line(record, price))
}

/// How a person asks for a run of `kind` again, as its notice says: a scheduled job's run is
/// fired again, every other run is asked for by a mention.
pub fn ask_again(kind: &RunKind) -> AskAgain {
    match kind {
        RunKind::Schedule { firing } => AskAgain::Schedule { job: firing.job.clone() },
        RunKind::Task { .. } | RunKind::Message { .. } | RunKind::Prompt { .. } => AskAgain::Mention,
    }
}
