//! Review handed to another agent: the `review` section, the worker's hand-off of a pushed
//! branch to a reviewer, and the reviewer's read of the branch's diff.
//!
//! The flow, as the task shows it (every step one comment, each with an idempotency key per task
//! and round, so a retry or a resumed run lands it once):
//! - the worker's run ends with its work pushed on `picogent/<KEY>`: [`hand_off`] labels the task
//!   `review-round:N`, comments "Review request (round N of M)…" mentioning the reviewer (a member
//!   of `review.reviewers` that is an agent, or with none named, an agent whose presence marker
//!   says it can `review`: [`find_reviewer`]), and assigns the task to it;
//! - the reviewer (a picogent whose `capabilities` hold `review`) is offered the tools of
//!   `source.rs` on that task: `review_diff` reads the branch's diff against its base from the
//!   repository's mirror (never a worktree: nothing of the branch is checked out or run), and
//!   `review_verdict` posts one comment of findings, then moves the task to `review.approve_to` or
//!   assigns it back to the agent who asked ("Changes requested");
//! - past `delegation.max_review_rounds` the worker hands nothing again: it asks the task's creator,
//!   once, and moves the task to `in_review`. Two agents cannot hand a task back and forth forever.
//!
//! What the branch holds is hostile: the diff is read with picogent's hardened git on the mirror
//! (no external diff, no text conversion), bounded, cleaned and fenced before the model sees it.

mod source;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use picogent_tools::{PostGuard, PostPlace};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{MemberKind, MessageOut, MessageQuery, SendMessage, TaskOut, TaskStatus, UpdateTask};
use picogent_tracker::presence::able_agents;

use crate::names::TaskKey;
use crate::tools::WorkDone;
use crate::workspace::{WorkspaceError, Workspaces};

pub const REVIEW_DIFF: &str = "review_diff";
pub const REVIEW_VERDICT: &str = "review_verdict";
/// The tools a review run is offered besides the tracker's (and instead of the coding tools).
pub const REVIEW_TOOLS: [&str; 2] = [REVIEW_DIFF, REVIEW_VERDICT];
/// The capability (`capabilities` in `agent.json`) that makes a picogent a reviewer.
pub const REVIEW_CAPABILITY: &str = "review";
/// The label that counts a task's review rounds: `review-round:2`.
pub const ROUND_LABEL: &str = "review-round:";
/// How a review request comment starts; the reviewer sends its changes back to its author.
pub const REQUEST_WORDS: &str = "Review request";
/// How a verdict that sends the work back starts.
pub const CHANGES_WORDS: &str = "Changes requested";
/// The most of a diff the model reads, in characters.
pub const MAX_DIFF_CHARS: usize = 24_000;

/// The `review` section: who reviews a pushed branch, for how many rounds, and where an approved
/// task goes. It joins the `delegation` section later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewConfig {
    /// Review rounds before a person is asked to decide (the round limit of two agents). Set
    /// as `delegation.max_review_rounds`, which the configuration copies here
    /// (`Config::review`): not a field of this section.
    #[serde(skip, default = "default_rounds")]
    pub max_review_rounds: u32,
    /// Member slugs of the agents that review this agent's pushed work, first present one first;
    /// none named: an agent whose marker on the board says it can `review` ([`find_reviewer`]).
    #[serde(default)]
    pub reviewers: Vec<String>,
    /// Where an approved task goes: `in_review` (a person looks last) or `done`.
    #[serde(default)]
    pub approve_to: ApproveTo,
    /// The projects whose pushed work is handed to review; none named: every project's.
    #[serde(default)]
    pub projects: Vec<String>,
}

impl Default for ReviewConfig {
    fn default() -> ReviewConfig {
        ReviewConfig {
            max_review_rounds: default_rounds(),
            reviewers: Vec::new(),
            approve_to: ApproveTo::default(),
            projects: Vec::new(),
        }
    }
}

fn default_rounds() -> u32 {
    2
}

/// Where an approved task goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApproveTo {
    #[default]
    InReview,
    Done,
}

impl ApproveTo {
    pub fn status(self) -> TaskStatus {
        match self {
            ApproveTo::InReview => TaskStatus::InReview,
            ApproveTo::Done => TaskStatus::Done,
        }
    }
}

/// Why a hand-off or a review step could not be done.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("cannot reach the tracker: {0}")]
    Tracker(#[from] picogent_tracker::TrackerError),
    #[error("this run is not a task's run: a review works only on a task")]
    NotATask,
    #[error("task {0} is not under review: it carries no review-round label")]
    NotUnderReview(String),
    #[error("task {key} has no repository: none in workspaces.repositories serves project `{project}`")]
    NoRepository { key: String, project: String },
    #[error(transparent)]
    Key(#[from] crate::names::BadTaskKey),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("the branch {0} is not on the repository: nothing to review")]
    NoBranch(String),
    #[error("no agent asked for this review (no \"{REQUEST_WORDS}\" comment by an agent): assign it back by hand")]
    NoRequester,
    #[error(transparent)]
    Refused(#[from] picogent_tools::PostRefused),
}

/// The review round a task is in: its highest `review-round:N` label.
pub fn round_of(labels: &[String]) -> Option<u32> {
    labels.iter().filter_map(|label| label.strip_prefix(ROUND_LABEL)?.parse().ok()).max()
}

/// Whether an agent with `capabilities` reviews `task` on this run: it is a reviewer and the
/// task is in a review round.
pub fn is_review(capabilities: &[String], task: &TaskOut) -> bool {
    capabilities.iter().any(|capability| capability == REVIEW_CAPABILITY) && round_of(&task.labels).is_some()
}

/// The tools a run is offered, the review tools put in place of the coding tools on a review run
/// and taken out of every other run.
pub fn offered(review: bool, offered: Vec<String>) -> Vec<String> {
    let mut offered: Vec<String> = offered
        .into_iter()
        .filter(|name| !REVIEW_TOOLS.contains(&name.as_str()))
        .filter(|name| !review || !crate::CODING_TOOLS.contains(&name.as_str()))
        .collect();
    if review {
        offered.extend(REVIEW_TOOLS.iter().map(|name| name.to_string()));
    }
    offered
}

/// Who reviews `me`'s work: the first member `review.reviewers` names that is an agent (never
/// `me`); when it names none, the first agent member whose presence marker says it can
/// `review` (its `capabilities`, as the board shows them: `[picogent copy … can review]`), one
/// running before one stopped. `None`: nobody, and nothing is handed.
pub async fn find_reviewer(
    client: &TrackerClient,
    review: &ReviewConfig,
    me: &str,
) -> Result<Option<String>, ReviewError> {
    if review.reviewers.is_empty() {
        let members = client.list_members().await?;
        let able = able_agents(&members, REVIEW_CAPABILITY);
        return Ok(able.into_iter().find(|slug| *slug != me).map(str::to_string));
    }
    for slug in review.reviewers.iter().filter(|slug| slug.as_str() != me) {
        match client.get_member(slug).await {
            Ok(member) if member.kind == MemberKind::Agent => return Ok(Some(member.slug)),
            Ok(_) => tracing::warn!(member = %slug, "review.reviewers names a person, not an agent; skipped"),
            Err(error) => {
                tracing::warn!(member = %slug, %error, "a member of review.reviewers cannot be read; skipped")
            }
        }
    }
    Ok(None)
}

/// What [`hand_off`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandOff {
    /// Nothing to hand: no commit on the branch, or no reviewer configured or present.
    Nothing,
    /// Handed to `reviewer` for round `round`.
    Requested { reviewer: String, round: u32 },
    /// The rounds are spent: `person` was asked to decide.
    PersonAsked { person: String },
}

/// The worker's side: a run that ended with `work` pushed (compared with `base`) hands its task to
/// its reviewer ([`find_reviewer`]), or, past the round limit, asks the task's creator. Each write
/// carries a key of the task and the round: a repeat lands nothing.
pub async fn hand_off(
    client: &TrackerClient,
    review: &ReviewConfig,
    me: &str,
    task_id: &str,
    work: &WorkDone,
    base: &str,
    guard: Option<&dyn PostGuard>,
) -> Result<HandOff, ReviewError> {
    if work.commit.is_none() {
        return Ok(HandOff::Nothing);
    }
    let task = client.get_task(task_id).await?;
    if !review.projects.is_empty() && !review.projects.contains(&task.project_slug) {
        return Ok(HandOff::Nothing);
    }
    let Some(reviewer) = find_reviewer(client, review, me).await? else { return Ok(HandOff::Nothing) };
    let done = round_of(&task.labels).unwrap_or(0);
    let max = review.max_review_rounds;
    let branch = &work.branch;
    if done >= max {
        let person = task.created_by.clone();
        let text = format!(
            "@{person} this work went through {done} review round(s), the limit (delegation.max_review_rounds is {max}): \
             please decide whether branch `{branch}` is done, or what it still needs."
        );
        post(client, guard, &task, &text, vec![person.clone()], &format!("review-person:{}:{done}", task.id)).await?;
        if task.status != TaskStatus::InReview {
            let update = UpdateTask { status: Some(TaskStatus::InReview), ..UpdateTask::default() };
            client.update_task(&task.id, &update).await?;
        }
        return Ok(HandOff::PersonAsked { person });
    }
    let round = done + 1;
    let mut labels: Vec<String> = task.labels.iter().filter(|label| !label.starts_with(ROUND_LABEL)).cloned().collect();
    labels.push(format!("{ROUND_LABEL}{round}"));
    client.update_task(&task.id, &UpdateTask { labels: Some(labels), ..UpdateTask::default() }).await?;
    let text = format!(
        "{REQUEST_WORDS} (round {round} of {max}) for @{reviewer}: branch `{branch}` against `{base}` — {}",
        one_line(&task.title)
    );
    post(client, guard, &task, &text, vec![reviewer.clone()], &format!("review-request:{}:{round}", task.id)).await?;
    client.assign_task(&task.id, &reviewer, Some(&format!("review-assign:{}:{round}", task.id))).await?;
    Ok(HandOff::Requested { reviewer, round })
}

/// A task title on one line, as a comment quotes it.
fn one_line(title: &str) -> String {
    title.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One comment on `task`, past the run's post guard (the loop guard counts it), with `key`.
async fn post(
    client: &TrackerClient,
    guard: Option<&dyn PostGuard>,
    task: &TaskOut,
    text: &str,
    mentions: Vec<String>,
    key: &str,
) -> Result<MessageOut, ReviewError> {
    let place = PostPlace::Task { task_id: task.id.clone() };
    let reply_to = match guard {
        Some(guard) => guard.before_post(&place, 0).await?,
        None => None,
    };
    let body = SendMessage {
        content: text.to_string(),
        task_id: Some(task.id.clone()),
        mentions: Some(mentions),
        reply_to,
        ..SendMessage::default()
    };
    let message = client.send_message(&body, Some(key)).await?;
    if let Some(guard) = guard {
        guard.posted(&message);
    }
    Ok(message)
}

/// A branch's diff against its base, as the reviewer reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BranchDiff {
    pub branch: String,
    pub base: String,
    /// The files the diff touches.
    pub files: Vec<String>,
    /// `git diff <base>...<branch>`, unbounded here (the tool caps it).
    pub text: String,
}

/// The reviewer's side: `git diff <base>...picogent/<KEY>` of the task's repository, read from
/// the repository's mirror, fetched first.
pub async fn branch_diff(workspaces: &Workspaces, task: &TaskOut) -> Result<BranchDiff, ReviewError> {
    let (name, repo) = workspaces
        .config()
        .repository_for(&task.project_slug, &task.labels)
        .ok_or_else(|| ReviewError::NoRepository { key: task.key.clone(), project: task.project_slug.clone() })?;
    let (name, repo) = (name.to_string(), repo.clone());
    let key = TaskKey::new(&task.key)?;
    let branch = key.branch();
    let lock = workspaces.mirror_lock(&name);
    let _held = lock.lock().await;
    let mirror = workspaces.fetch_mirror(&name, &repo).await?;
    let git = crate::git::Git::new("picogent", "picogent@picogent.invalid");
    let head = format!("refs/remotes/origin/{branch}");
    let base = format!("refs/remotes/origin/{}", repo.base);
    let exists =
        git.succeeds(&mirror, &["rev-parse", "--verify", "--quiet", &head]).await.map_err(WorkspaceError::from)?;
    if !exists {
        return Err(ReviewError::NoBranch(branch));
    }
    let range = format!("{base}...{head}");
    let plain = ["diff", "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames"];
    let mut names = plain.to_vec();
    names.extend(["--name-only", &range, "--"]);
    let files = git.run(&mirror, &names).await.map_err(WorkspaceError::from)?;
    let mut full = plain.to_vec();
    full.extend([&range as &str, "--"]);
    let text = git.run(&mirror, &full).await.map_err(WorkspaceError::from)?;
    Ok(BranchDiff {
        branch,
        base: repo.base.clone(),
        files: files.lines().map(str::to_string).filter(|line| !line.is_empty()).collect(),
        text,
    })
}

/// The author of the latest review request on the task, when an agent wrote it: who a
/// "changes requested" goes back to.
pub async fn requester(client: &TrackerClient, task_id: &str) -> Result<String, ReviewError> {
    let query = MessageQuery { task_id: Some(task_id.to_string()), limit: Some(200), ..MessageQuery::default() };
    let messages = client.list_messages(&query).await?;
    let latest = messages.iter().rev().find(|message| message.content.starts_with(REQUEST_WORDS));
    let Some(message) = latest else { return Err(ReviewError::NoRequester) };
    match client.get_member(&message.author_slug).await?.kind {
        MemberKind::Agent => Ok(message.author_slug.clone()),
        _ => Err(ReviewError::NoRequester),
    }
}

/// The review tools over every task's repository: `review_diff` and `review_verdict`.
pub struct ReviewTools {
    workspaces: Arc<Workspaces>,
    client: TrackerClient,
    config: ReviewConfig,
}

impl ReviewTools {
    pub fn new(workspaces: Arc<Workspaces>, client: TrackerClient, config: ReviewConfig) -> ReviewTools {
        ReviewTools { workspaces, client, config }
    }
}

#[cfg(test)]
mod tests;
