//! The scheduler: fires the jobs of `schedules` on time, once, and for nothing when there is
//! nothing to say. Every process runs one (a single copy, or each replica); the state decides who
//! does each firing.
//!
//! A firing goes: due (its time came, or a person asked for one now) → already claimed? done →
//! read the board as its kind says ([`picogent_schedule::board`]) → nothing to say: claimed and
//! recorded `idle`, no model call, nothing posted → else queued as a run of
//! [`RunKind::Schedule`] in the run queue, with its claim in the same transaction, carrying what it
//! read → the run posts (the digest, the nudges, the prompt's answer) and records how it ended.
//!
//! Invariants:
//! - **once**: a firing is claimed (`ClaimKind::Firing`, `{job}@{time}`) before it acts, with its
//!   run or, for one that does not run, with its record; of replicas (or a copy restarted after a
//!   crash) that find it due, exactly one acts. A run resumed after a restart or on another
//!   replica carries the same firing and posts with the same idempotency keys;
//! - **no repeat, no gap across a restart**: the job's watermark in the state says how far its
//!   firings were considered, and moves only once they were settled; what came due while the
//!   agent was away is found from it at the next start ([`picogent_schedule::plan`]): the newest
//!   within `catch_up_ms` runs once, the rest are recorded skipped with the reason;
//! - **free when idle**: a firing that finds nothing to say reads the board and nothing else;
//! - **time from the clock passed in** ([`Clock`]), so tests move it.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::request::{RunKind, RunRequest, RunServices, Trigger};
use crate::router::{Input, StartRefused};
use picogent_schedule::board::{self, StaleQuery};
use picogent_schedule::firing::{Firing, FiringWork, NudgeRecord, ProjectPlace};
use picogent_schedule::{Clock, Job, JobKind};
use picogent_state::{ClaimKind, FiringOutcome, Outage, StateError, firing_claim_key};
use picogent_tracker::TrackerError;
use picogent_tracker::model::{MemberKind, ProjectOut, SendMessage};
use picogent_tracker::session::SessionKey;

const DAY_MS: i64 = 24 * 3_600_000;

pub use picogent_schedule::{Fired, RunNowError};

enum Command {
    RunNow { job: String, reply: oneshot::Sender<Result<Fired, RunNowError>> },
}

/// The schedules as the rest of the agent sees them: their jobs and clock (for the pages), and
/// "run one now". Cheap to clone.
#[derive(Clone)]
pub struct Schedules {
    pub jobs: Arc<Vec<Job>>,
    pub clock: Arc<dyn Clock>,
    commands: mpsc::Sender<Command>,
}

impl Schedules {
    /// Fires `job` now, as a person asked (`picogent schedules run`, the inspector): read, then
    /// idle or queued like any firing, under a claim of its own.
    pub async fn run_now(&self, job: &str) -> Result<Fired, RunNowError> {
        if !self.jobs.iter().any(|known| known.name == job) {
            return Err(unknown_job(&self.jobs, job));
        }
        let (reply, answer) = oneshot::channel();
        let command = Command::RunNow { job: job.to_string(), reply };
        self.commands.send(command).await.map_err(|_| RunNowError::Stopping)?;
        answer.await.map_err(|_| RunNowError::Stopping)?
    }
}

/// The run inspector's schedules page lists the jobs and asks for a firing now through this.
impl picogent_inspector::ScheduleControl for Schedules {
    fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn run_now<'a>(&'a self, name: &'a str) -> futures::future::BoxFuture<'a, Result<Fired, RunNowError>> {
        Box::pin(Schedules::run_now(self, name))
    }
}

/// The scheduler over `jobs`, and the handle the rest of the agent asks it through; it runs once
/// [`Scheduler::run`] is spawned, and ends with `shutdown`.
pub fn new(
    jobs: Vec<Job>,
    services: Arc<RunServices>,
    clock: Arc<dyn Clock>,
    inputs: mpsc::Sender<Input>,
    shutdown: CancellationToken,
) -> (Schedules, Scheduler) {
    let jobs = Arc::new(jobs);
    let (commands, received) = mpsc::channel(16);
    let schedules = Schedules { jobs: jobs.clone(), clock: clock.clone(), commands };
    let scheduler =
        Scheduler { jobs, services, clock, inputs, commands: received, shutdown, outage: Outage::default() };
    (schedules, scheduler)
}

/// The loop that fires the jobs (see the module docs).
pub struct Scheduler {
    jobs: Arc<Vec<Job>>,
    services: Arc<RunServices>,
    clock: Arc<dyn Clock>,
    /// The router's inputs: a firing's run is queued through it, like any run.
    inputs: mpsc::Sender<Input>,
    commands: mpsc::Receiver<Command>,
    shutdown: CancellationToken,
    /// One warning per outage of the state database, not one per wake.
    outage: Outage,
}

/// Why a firing could not read what its kind reads: the reason, in words, for its record and
/// the notice where the job would have posted.
#[derive(Debug, thiserror::Error)]
enum FiringError {
    #[error("the state database did not answer: {0}")]
    State(#[source] StateError),
    #[error("the firing's date is out of range")]
    DateOutOfRange,
    #[error("cannot read project {slug}: {source}")]
    Project { slug: String, source: TrackerError },
    #[error("cannot read the tasks of project {project}: {source}")]
    ProjectTasks { project: String, source: TrackerError },
    #[error("cannot read the members: {0}")]
    Members(#[source] TrackerError),
    #[error("cannot read the tasks: {0}")]
    Tasks(#[source] TrackerError),
    #[error("cannot read which tasks were nudged: {0}")]
    Nudged(#[source] StateError),
    #[error("cannot read the prompt file {}: {source}", path.display())]
    PromptFile { path: std::path::PathBuf, source: std::io::Error },
    #[error("the prompt file {} is empty", path.display())]
    EmptyPrompt { path: std::path::PathBuf },
}

/// What a firing found on the board.
enum Found {
    /// Something to do, and what its record says of it.
    Work { work: FiringWork, detail: String },
    /// Nothing to say, and why.
    Idle(String),
}

impl Scheduler {
    /// Fires the jobs as they come due, and each "run now", until the shutdown.
    pub async fn run(mut self) {
        loop {
            let now = self.clock.now_ms();
            let jobs = self.jobs.clone();
            for job in jobs.iter() {
                self.tick(job, now).await;
            }
            // The clock may end a sleep early (and a minute at most for the system's): each wake
            // looks at every job again, which reads one watermark each.
            let next = jobs.iter().filter_map(|job| job.cadence.next_after(now)).min().unwrap_or(i64::MAX);
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                command = self.commands.recv() => match command {
                    Some(Command::RunNow { job, reply }) => {
                        let fired = self.run_now(&job).await;
                        let _ = reply.send(fired);
                    }
                    None => return,
                },
                () = self.clock.sleep_until(next) => {}
            }
        }
    }

    /// Settles what came due for `job` since its watermark: skipped firings recorded, the one to
    /// run fired, and the watermark moved on once all of that held.
    async fn tick(&mut self, job: &Job, now: i64) {
        let through = match self.services.state.schedule_through(&job.name).await {
            Ok(through) => {
                self.outage.answered();
                through
            }
            Err(error) => {
                self.outage.failed("cannot read a schedule's watermark", &error);
                return;
            }
        };
        let plan = picogent_schedule::plan(&job.cadence, through, now, job.catch_up);
        let due = plan.run.is_some() || !plan.skipped.is_empty() || plan.skipped_more > 0;
        if !due && through.is_some() {
            return;
        }
        for skipped in &plan.skipped {
            self.settle(job, skipped.fire_at_ms, FiringOutcome::Skipped, skipped.reason.to_string()).await;
        }
        if plan.skipped_more > 0 {
            tracing::warn!(
                schedule = %job.name,
                more = plan.skipped_more,
                "more firings were missed while the agent was away than are recorded one by one"
            );
        }
        let settled = match plan.run {
            Some(at) => self.fire(job, at, false).await.settled(),
            None => true,
        };
        if settled && let Err(error) = self.services.state.advance_schedule_through(&job.name, plan.through).await {
            self.outage.failed("cannot move a schedule's watermark", &error);
        }
    }

    async fn run_now(&self, name: &str) -> Result<Fired, RunNowError> {
        let jobs = self.jobs.clone();
        let job = jobs.iter().find(|job| job.name == name).ok_or_else(|| unknown_job(&jobs, name))?;
        let now = self.clock.now_ms();
        Ok(self.fire(job, now, true).await)
    }

    /// One firing of `job` at `at`: read, then idle, or queued as a run.
    async fn fire(&self, job: &Job, at: i64, manual: bool) -> Fired {
        let key = firing_claim_key(&job.name, at);
        match self.services.state.is_claimed(ClaimKind::Firing, &key).await {
            Ok(true) => return Fired::Handled,
            Ok(false) => {}
            Err(error) => return Fired::NotNow { detail: format!("the state database did not answer: {error}") },
        }
        let (work, detail) = match self.read(job, at).await {
            Ok(Found::Work { work, detail }) => (work, detail),
            Ok(Found::Idle(detail)) => {
                tracing::info!(schedule = %job.name, %detail, "nothing to say: no model call, nothing posted");
                return self.settle(job, at, FiringOutcome::Idle, detail).await;
            }
            Err(error) => {
                let detail = error.to_string();
                tracing::warn!(schedule = %job.name, %detail, "a firing failed before its run");
                let fired = self.settle(job, at, FiringOutcome::Failed, detail.clone()).await;
                if matches!(fired, Fired::Failed { .. }) {
                    self.tell_failed(job, &key, &detail).await;
                }
                return fired;
            }
        };
        let session = match &work {
            FiringWork::Prompt { session, .. } => session.clone(),
            FiringWork::Standup { .. } | FiringWork::Stale { .. } => job.name.clone(),
        };
        let firing = Firing {
            job: job.name.clone(),
            fire_at_ms: at,
            manual,
            work,
            max_turns: job.budget.max_turns,
            max_tokens: job.budget.max_tokens,
        };
        let trigger = Trigger::Scheduled { job: job.name.clone(), fire_at_ms: at, manual };
        let kind = RunKind::Schedule { firing: Box::new(firing) };
        let mut request = RunRequest::new(SessionKey::Schedule(session), trigger, kind);
        request.claim = Some((ClaimKind::Firing, key));
        let (reply, answer) = oneshot::channel();
        if self.inputs.send(Input::StartRun { request: Box::new(request), reply }).await.is_err() {
            return Fired::NotNow { detail: "the agent is stopping".to_string() };
        }
        let Ok(started) = answer.await else {
            return Fired::NotNow { detail: "the agent is stopping".to_string() };
        };
        match started {
            Ok(run_id) => {
                // Only where the run has not already written how it ended.
                let queued = self.services.state.record_firing_if_absent(
                    &job.name,
                    at,
                    FiringOutcome::Queued,
                    Some(&run_id),
                    &detail,
                );
                if let Err(error) = queued.await {
                    tracing::warn!(%error, schedule = %job.name, "cannot record a queued firing");
                }
                tracing::info!(schedule = %job.name, %run_id, "fired");
                Fired::Queued { run_id }
            }
            Err(StartRefused::AlreadyHandled) => Fired::Handled,
            Err(StartRefused::Busy { run_id, .. }) => {
                let detail = format!("the run of an earlier firing ({run_id}) was still going");
                self.settle(job, at, FiringOutcome::Skipped, detail).await
            }
            Err(StartRefused::DailyBudget) => {
                let detail = "the day's budget is spent (limits.max_tokens_per_day); runs start again tomorrow (UTC)";
                self.settle(job, at, FiringOutcome::Skipped, detail.to_string()).await
            }
            Err(refused @ (StartRefused::ShuttingDown | StartRefused::State { .. })) => {
                Fired::NotNow { detail: refused.to_string() }
            }
        }
    }

    /// Claims a firing that does not run and records how it ended; `Handled` when another
    /// process (or this one, before a restart) claimed it first.
    async fn settle(&self, job: &Job, at: i64, outcome: FiringOutcome, detail: String) -> Fired {
        let state = &self.services.state;
        match state.claim(ClaimKind::Firing, &firing_claim_key(&job.name, at)).await {
            Ok(true) => {}
            Ok(false) => return Fired::Handled,
            Err(error) => return Fired::NotNow { detail: format!("the state database did not answer: {error}") },
        }
        if let Err(error) = state.record_firing(&job.name, at, outcome, None, &detail).await {
            tracing::warn!(%error, schedule = %job.name, "cannot record a firing");
        }
        self.services.metrics.firing(&job.name, outcome);
        match outcome {
            FiringOutcome::Idle => Fired::Idle { detail },
            FiringOutcome::Skipped => Fired::Skipped { detail },
            _ => Fired::Failed { detail },
        }
    }

    /// Reads what the job's kind reads, and decides whether the firing has anything to say.
    async fn read(&self, job: &Job, at: i64) -> Result<Found, FiringError> {
        let client = &self.services.client;
        let config = &self.services.config;
        let link = |id: &str| config.http.task_link(&config.tracker.url, id);
        match &job.kind {
            JobKind::Standup { project, blocked_labels, due_within_days } => {
                let project = self.project(project).await?;
                // From how far the last digest read the board (the tracker's clock, so a clock
                // apart from it changes nothing); the first one looks one day back.
                let seen = self.services.state.schedule_seen(&job.name).await;
                let since = seen.map_err(FiringError::State)?.unwrap_or(at - DAY_MS);
                let today = job.cadence.local_date(at).ok_or(FiringError::DateOutOfRange)?;
                let mut digest =
                    board::read_digest(client, &project, since, today, blocked_labels, *due_within_days, &link)
                        .await
                        .map_err(|source| FiringError::ProjectTasks { project: project.slug.clone(), source })?;
                digest.since_text = job.cadence.local_time(since);
                if digest.is_idle() {
                    return Ok(Found::Idle(format!("no task moved since {}", digest.since_text)));
                }
                let work = FiringWork::Standup { project: place(&project), digest };
                Ok(Found::Work { detail: work.detail(), work })
            }
            JobKind::Stale { project, days } => {
                let members = client.list_members().await.map_err(FiringError::Members)?;
                let humans: HashSet<String> = members
                    .into_iter()
                    .filter(|member| member.kind == MemberKind::Human)
                    .map(|member| member.slug)
                    .collect();
                let nudged = self.nudged_within(job, at, *days).await?;
                let query = StaleQuery {
                    project: project.as_deref(),
                    days: *days,
                    now_ms: at,
                    agent_slug: &config.slug,
                    humans: &humans,
                    nudged: &nudged,
                    link: &link,
                };
                let tasks = board::read_stale(client, &query).await.map_err(FiringError::Tasks)?;
                if tasks.is_empty() {
                    return Ok(Found::Idle(format!("no task assigned to a person was untouched for {days} days")));
                }
                let project = match project {
                    Some(slug) => Some(place(&self.project(slug).await?)),
                    None => None,
                };
                let work = FiringWork::Stale { days: *days, tasks, project };
                Ok(Found::Work { detail: work.detail(), work })
            }
            JobKind::Prompt { prompt, project, session } => {
                let text = tokio::fs::read_to_string(prompt)
                    .await
                    .map_err(|source| FiringError::PromptFile { path: prompt.clone(), source })?;
                if text.trim().is_empty() {
                    return Err(FiringError::EmptyPrompt { path: prompt.clone() });
                }
                let project = match project {
                    Some(slug) => Some(place(&self.project(slug).await?)),
                    None => None,
                };
                Ok(Found::Work {
                    work: FiringWork::Prompt { text, session: session.clone(), project },
                    detail: String::new(),
                })
            }
        }
    }

    async fn project(&self, slug: &str) -> Result<ProjectOut, FiringError> {
        let read = self.services.client.get_project(slug).await;
        read.map_err(|source| FiringError::Project { slug: slug.to_string(), source })
    }

    /// The tasks the job nudged (or is about to) within `days` before `at`: left alone now. The
    /// job's firings in that window are read page by page (an often-firing job has many, most
    /// of them idle). `Err` when the state did not answer: nudging blind could nudge twice.
    async fn nudged_within(&self, job: &Job, at: i64, days: u32) -> Result<HashSet<String>, FiringError> {
        const PAGE: u32 = 1_000;
        let mut nudged = HashSet::new();
        let mut after = at - i64::from(days) * DAY_MS;
        loop {
            let rows = self.services.state.firings_after(&job.name, after, PAGE).await.map_err(FiringError::Nudged)?;
            let full = rows.len() == PAGE as usize;
            for row in rows {
                after = row.fire_at_ms;
                if matches!(row.outcome, FiringOutcome::Queued | FiringOutcome::Posted)
                    && let Ok(record) = serde_json::from_str::<NudgeRecord>(&row.detail)
                {
                    nudged.extend(record.nudged);
                }
            }
            if !full {
                return Ok(nudged);
            }
        }
    }

    /// Leaves one notice where the job would have posted, when it has a project: its firing
    /// failed before its run. Keyed by the firing, so it is posted once.
    async fn tell_failed(&self, job: &Job, key: &str, detail: &str) {
        let Some(slug) = job.kind.project() else { return };
        let Ok(project) = self.services.client.get_project(slug).await else { return };
        let text = picogent_notices::run::firing_failed(job.kind.name(), &job.name, detail);
        let message = SendMessage { content: text, chat_id: Some(project.chat_id), ..SendMessage::default() };
        if let Err(error) = self.services.client.send_message(&message, Some(&format!("notice-firing-{key}"))).await {
            tracing::warn!(%error, schedule = %job.name, "could not post the notice of a failed firing");
        }
    }
}

/// The refusal of a firing asked for by a name no job has, listing the names there are.
fn unknown_job(jobs: &[Job], name: &str) -> RunNowError {
    let known: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    let known = if known.is_empty() { "none (agent.json has no `schedules`)".to_string() } else { known.join(", ") };
    RunNowError::Unknown { name: name.to_string(), known }
}

fn place(project: &ProjectOut) -> ProjectPlace {
    ProjectPlace { slug: project.slug.clone(), name: project.name.clone(), chat_id: project.chat_id.clone() }
}
