//! `plan_subtasks`: a task run proposes a breakdown of its task into sub-tasks, asks the person
//! it works for in the task's comments, and makes the sub-tasks only on their yes.
//!
//! The plan is posted as a question ([`crate::person`], the run `awaiting_input` meanwhile): a
//! numbered list of the sub-tasks with who takes each and what each waits for. A yes makes them,
//! a no drops the plan, any other words go back to the model as changes asked for, to call again
//! with the plan changed. On a yes each sub-task is made once, in order, in the task's own
//! project, as the tracker's tree vocabulary says ([`picogent_tracker::tree`]): its description
//! opens with `Part of KEY`, it carries `parent:KEY` and a `blocked_by:KEY` per sub-task it waits
//! for, it is assigned as planned. The agent then watches each one and adds a step per sub-task
//! on the parent.
//!
//! Invariants:
//! - nothing is posted or made for a plan that breaks a rule: more than `delegation.max_subtasks`
//!   sub-tasks, an assignee who is not a member, a sub-task waiting for itself or a later one
//!   (so a plan has no cycle, and no sub-task can be an ancestor of its own), a task already as
//!   deep as `delegation.max_depth` allows;
//! - a plan is made once per parent: a parent that has sub-tasks is not planned again, and the
//!   call says which ones it has;
//! - each write of a call carries a key of its own, `{call}-subtask{n}`, `{call}-watch{n}`,
//!   `{call}-step{n}` (the question: [`crate::person`]'s `{call}-plan{n}`), so a retry or a run
//!   resumed after a crash, which makes the same call with the same key, gets the same question
//!   and tasks back from the tracker. A call that finds the first sub-tasks of its plan already
//!   made (by the agent, with the plan's titles, in its order: on a yes, by a call cut short)
//!   asks with its own key and makes only the rest on a yes: a resumed call finds its question
//!   and the yes to it, so nothing is asked or made twice, and a new call that extends a plan
//!   made earlier asks anew. A plan found made whole is not asked again.

use std::collections::HashSet;
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::delegation::DelegationConfig;
use crate::person::{PersonAsker, Question, Reply, WaitEnd, reply_words};
use crate::scope::{Judgement, ReachError, RunPlace};
use crate::{CallEffect, ToolContext, ToolDefinition, ToolError, ToolResult, ToolSource};
use picogent_state::WaitKind;
use picogent_tracker::model::{CreateTask, MessageOut, TaskOut, TaskStatus};
use picogent_tracker::tree::{blocked_by_label, parent_label, parent_of};
use picogent_tracker::{TrackerClient, TrackerError};

pub const PLAN_SUBTASKS: &str = "plan_subtasks";

/// The longest sub-task title kept: a step on the parent, `KEY: title`, stays within the
/// tracker's 200 characters.
const MAX_TITLE_CHARS: usize = 160;
/// The longest sub-task description kept.
const MAX_DESCRIPTION_CHARS: usize = 4_000;
/// The longest summary of a plan posted.
const MAX_SUMMARY_CHARS: usize = 500;
/// The longest change a person asked for, as the model reads it.
const MAX_CHANGE_CHARS: usize = 2_000;
/// The tracker's longest step title.
const MAX_STEP_CHARS: usize = 200;

/// The arguments of a call.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PlanArgs {
    /// The sub-tasks, in the order they are made; a sub-task may wait only for ones before it.
    subtasks: Vec<SubtaskArgs>,
    /// What the plan does, in one sentence, for the person asked.
    #[serde(default)]
    summary: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SubtaskArgs {
    /// A short title.
    title: String,
    /// What is to be done, and how to tell it is done.
    description: String,
    /// Who takes it: `me` (the default) for yourself, a member's slug as list_members shows it,
    /// or `can:<capability>` for an agent member whose status says it can (`can:review`).
    #[serde(default)]
    assignee: Option<String>,
    /// The numbers (from 1, in this list) of earlier sub-tasks that must be done before this one.
    #[serde(default)]
    waits_for: Vec<i64>,
}

/// One sub-task of a plan that passed its checks.
#[derive(Debug, Clone, PartialEq)]
struct Subtask {
    title: String,
    description: String,
    /// A member's slug; the agent's own for `me`.
    assignee: String,
    /// 0-based indexes of earlier sub-tasks of the plan.
    waits_for: Vec<usize>,
}

/// A person's answer to a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Yes,
    No,
    /// Any other words: what they want changed.
    Changes(String),
}

/// The tool, over the tracker.
#[derive(Debug, Clone)]
pub struct PlanTool {
    asker: PersonAsker,
    client: TrackerClient,
    config: DelegationConfig,
    timeout: Duration,
}

/// Whether a run of `task` is offered `plan_subtasks`: delegation is on, and the task is not a
/// sub-task already as deep as a tree may grow (known from its own labels at depth 1; deeper
/// limits are checked by the call, which reads the ancestors).
pub fn offered_for(task: &TaskOut, config: &DelegationConfig) -> bool {
    config.enabled && (config.max_depth > 1 || parent_of(task).is_none())
}

impl PlanTool {
    pub fn new(client: TrackerClient, config: DelegationConfig, timeout: Duration) -> PlanTool {
        PlanTool { asker: PersonAsker::new(client.clone()), client, config, timeout }
    }

    pub fn with_poll_interval(mut self, interval: Duration) -> PlanTool {
        self.asker = self.asker.with_poll_interval(interval);
        self
    }

    fn definition(&self) -> ToolDefinition {
        let schema = crate::schema::input_schema_for::<PlanArgs>();
        ToolDefinition::new(
            PLAN_SUBTASKS,
            format!(
                "Propose a breakdown of your task into at most {} sub-tasks, and wait while the person you work for \
                 approves it in the task's comments. On their yes the sub-tasks are created in the task's project, \
                 each assigned as planned, watched by you and a step on your task; their answer comes back as this \
                 tool's result. Call it once, before working the task, when the task asks for a breakdown or is too \
                 big for one piece of work.",
                self.config.max_subtasks
            ),
            crate::definition::object_schema(schema),
        )
        .with_hints(crate::kernel::write(false, false))
    }

    async fn plan(&self, arguments: serde_json::Value, context: &ToolContext) -> ToolResult {
        let Some(RunPlace::Task(task_id)) = RunPlace::of(context) else {
            return refused("plan_subtasks breaks down the task of a task run; this run has no task of its own");
        };
        if !self.config.enabled {
            return refused("delegation is off here (delegation.enabled): work the task without a breakdown");
        }
        let args: PlanArgs = match serde_json::from_value(arguments) {
            Ok(args) => args,
            Err(error) => {
                let expected = "`subtasks`: a list of {title, description, assignee?, waits_for?}, and a `summary`";
                return ToolError::invalid("", expected, error.to_string()).into_result();
            }
        };
        let max = self.config.max_subtasks as usize;
        if args.subtasks.is_empty() || args.subtasks.len() > max {
            return refused(&format!(
                "a plan has 1 to {max} sub-tasks (delegation.max_subtasks), this one has {}: nothing was posted or \
                 created. Propose at most {max}, each a larger piece of work, or work the task without a breakdown",
                args.subtasks.len()
            ));
        }
        match self.checked_plan(args, &task_id, context).await {
            Ok(Checked::Refused(result)) => result,
            // Made whole earlier, on a yes to this plan: nothing new to ask about (the watches and
            // steps a call cut short left out are made).
            Ok(Checked::Plan { parent, subtasks, made, .. }) if made.len() == subtasks.len() => {
                self.make(&parent, &subtasks, made, context).await
            }
            Ok(Checked::Plan { parent, subtasks, summary, made }) => {
                self.ask_and_make(&parent, &subtasks, &summary, made, context).await
            }
            Err(error) => ToolError::Tracker(error).into_result(),
        }
    }

    /// The plan checked against its rules and the board: the parent, the sub-tasks cleaned, and
    /// those of them the board already has; or why it is refused.
    async fn checked_plan(
        &self,
        args: PlanArgs,
        task_id: &str,
        context: &ToolContext,
    ) -> Result<Checked, TrackerError> {
        let parent = self.client.get_task(task_id).await?;
        if let Some(above) = self.too_deep(&parent).await? {
            return Ok(Checked::Refused(refused(&format!(
                "{} is itself a sub-task ({above}), and tasks are broken down no deeper than delegation.max_depth ({}): \
                 work it as it is",
                parent.key, self.config.max_depth
            ))));
        }
        let members = Members::of(self.client.list_members().await?);
        let mut subtasks = Vec::with_capacity(args.subtasks.len());
        for (index, arg) in args.subtasks.into_iter().enumerate() {
            match subtask(arg, index, &context.agent_slug, &members) {
                Ok(subtask) => subtasks.push(subtask),
                Err(why) => return Ok(Checked::Refused(refused(&format!("{why}: nothing was posted or created")))),
            }
        }
        let summary = args.summary.map(|summary| one_line(&summary, MAX_SUMMARY_CHARS)).unwrap_or_default();
        let existing = self.subtasks_of(&parent).await?;
        let own_plan = existing.len() <= subtasks.len()
            && existing
                .iter()
                .zip(&subtasks)
                .all(|(task, planned)| task.created_by == context.agent_slug && task.title == planned.title);
        if !existing.is_empty() && !own_plan {
            let listed: Vec<String> = existing.iter().map(describe).collect();
            return Ok(Checked::Refused(
                ToolResult::error(format!(
                    "{} already has sub-tasks: {}. A task is broken down once: work with these (read, comment on or \
                     update them) instead of planning again.",
                    parent.key,
                    listed.join("; ")
                ))
                .with_structured(json!({"error": {"code": "planned", "subtasks": keys(&existing)}})),
            ));
        }
        Ok(Checked::Plan { parent: Box::new(parent), subtasks, summary, made: existing })
    }

    /// `Some(ancestor key)` when `task` is as deep in its tree as `delegation.max_depth` allows:
    /// its `parent:` labels lead up that many tasks (a missing one ends the climb).
    async fn too_deep(&self, task: &TaskOut) -> Result<Option<String>, TrackerError> {
        let mut depth = 0;
        let mut above = parent_of(task).map(str::to_string);
        let mut first = None;
        while let Some(key) = above {
            depth += 1;
            first.get_or_insert_with(|| format!("part of {key}"));
            if depth >= self.config.max_depth {
                return Ok(first);
            }
            above = match self.client.get_task(&key).await {
                Ok(ancestor) => parent_of(&ancestor).map(str::to_string),
                Err(TrackerError::NotFound { .. }) => None,
                Err(error) => return Err(error),
            };
        }
        Ok(None)
    }

    /// The tasks of `parent`'s project labelled `parent:KEY`, in the order they were made.
    async fn subtasks_of(&self, parent: &TaskOut) -> Result<Vec<TaskOut>, TrackerError> {
        let mut tasks = picogent_tracker::tree::subtasks(&self.client, &parent.project_slug, &parent.key).await?;
        tasks.sort_by_key(|task| key_number(&task.key));
        Ok(tasks)
    }

    /// Posts the plan as a question and acts on the answer; `made` are its first sub-tasks, made
    /// before (a resumed call gets its question and the yes to it back: the question's key is
    /// the call's).
    async fn ask_and_make(
        &self,
        parent: &TaskOut,
        subtasks: &[Subtask],
        summary: &str,
        made: Vec<TaskOut>,
        context: &ToolContext,
    ) -> ToolResult {
        let minutes = self.timeout.as_secs().div_ceil(60);
        let question = Question {
            kind: WaitKind::Plan,
            what: format!("may I create {} sub-tasks of {}?", subtasks.len(), parent.key),
            text: plan_text(parent, subtasks, summary, &context.agent_slug, minutes),
            person: context.requester.clone(),
            timeout: self.timeout,
        };
        let ended = |verdict: &Verdict| match verdict {
            Verdict::No => WaitEnd::Declined,
            Verdict::Yes | Verdict::Changes(_) => WaitEnd::Answered,
        };
        match self.asker.ask(context, &question, |message: &MessageOut| verdict(&message.content), ended).await {
            Reply::Answer { value: Verdict::Yes, .. } => self.make(parent, subtasks, made, context).await,
            Reply::Answer { value: Verdict::No, by } => ToolResult::success(format!(
                "@{by} declined the plan: no sub-task was created. Work {} as it is, without a breakdown.",
                parent.key
            ))
            .with_structured(json!({"decision": "declined", "by": by})),
            Reply::Answer { value: Verdict::Changes(words), by } => {
                // The words are the person's, data like every tool result: the loop fences them.
                let words = picogent_prompts::clean_text(&words, MAX_CHANGE_CHARS);
                ToolResult::success(format!(
                    "@{by} did not approve the plan as it is and asked for changes; no sub-task was created. Their \
                     words: \"{words}\". Call plan_subtasks again with the plan changed as they ask (they are asked \
                     again), or, if they do not want a breakdown, work {} as it is.",
                    parent.key
                ))
                .with_structured(json!({"decision": "changes", "by": by, "words": words}))
            }
            Reply::TimedOut => {
                let told = format!("No answer within {minutes} minutes: I did not create the sub-tasks of this plan.");
                if let Err(error) = self.asker.tell(context, &told, "timeout").await {
                    tracing::warn!(%error, "cannot tell the task that a plan timed out");
                }
                ToolResult::error(format!(
                    "No answer within {} s: no sub-task was created. Work {} without a breakdown, and say in your \
                     answer that the plan was not approved.",
                    self.timeout.as_secs(),
                    parent.key
                ))
            }
            Reply::Stopped | Reply::Interrupted => {
                ToolResult::error("The run was stopped while it waited: no sub-task was created.")
            }
            Reply::Unavailable { reason } => ToolResult::error(format!(
                "The plan could not be asked: {reason}. No sub-task was created; work the task without a breakdown."
            )),
        }
    }

    /// Makes the sub-tasks not in `made` (the first ones, made before), watches each and adds
    /// its step on the parent; answers with their keys.
    async fn make(
        &self,
        parent: &TaskOut,
        subtasks: &[Subtask],
        mut made: Vec<TaskOut>,
        context: &ToolContext,
    ) -> ToolResult {
        let already = made.len();
        let call = context.idempotency_key.as_deref();
        let keyed = |what: &str, n: usize| call.map(|call| format!("{call}-{what}{n}"));
        for (index, planned) in subtasks.iter().enumerate().skip(already) {
            if context.cancel.is_cancelled() {
                return partial(parent, &made, subtasks.len(), "the run was stopped");
            }
            let mut labels = vec![parent_label(&parent.key)];
            labels.extend(planned.waits_for.iter().map(|earlier| blocked_by_label(&made[*earlier].key)));
            let body = CreateTask {
                project_slug: parent.project_slug.clone(),
                title: planned.title.clone(),
                description: Some(format!("Part of {}\n\n{}", parent.key, planned.description)),
                assignee_slug: Some(planned.assignee.clone()),
                labels: Some(labels),
                status: Some(TaskStatus::Todo),
                ..CreateTask::default()
            };
            match self.client.create_task(&body, keyed("subtask", index + 1).as_deref()).await {
                Ok(task) => made.push(task),
                Err(error) => return partial(parent, &made, subtasks.len(), &error.to_string()),
            }
        }
        let steps: HashSet<String> = match self.client.list_steps(&parent.id).await {
            Ok(steps) => steps.into_iter().map(|step| step.title).collect(),
            Err(error) => return partial(parent, &made, subtasks.len(), &error.to_string()),
        };
        for (index, task) in made.iter().enumerate() {
            if let Err(error) =
                self.client.watch_task(&task.key, &context.agent_slug, keyed("watch", index + 1).as_deref()).await
            {
                return partial(parent, &made, subtasks.len(), &format!("cannot watch {}: {error}", task.key));
            }
            let title = step_title(task);
            if steps.contains(&title) {
                continue;
            }
            if let Err(error) = self.client.add_step(&parent.id, &title, keyed("step", index + 1).as_deref()).await {
                return partial(
                    parent,
                    &made,
                    subtasks.len(),
                    &format!("cannot add the step of {}: {error}", task.key),
                );
            }
        }
        let listed: Vec<String> = made.iter().map(describe).collect();
        let text = if already == made.len() {
            format!(
                "The sub-tasks of {} were created earlier, on a yes to this plan: {}.",
                parent.key,
                listed.join("; ")
            )
        } else {
            let before = match already {
                0 => String::new(),
                n => format!(" ({n} of them before this call)"),
            };
            format!(
                "Created {} sub-tasks of {}{before}, each watched by you and a step on {}: {}. Go on with your own \
                 part; the others are worked by their assignees.",
                made.len(),
                parent.key,
                parent.key,
                listed.join("; ")
            )
        };
        ToolResult::success(text).with_structured(json!({"decision": "approved", "subtasks": keys(&made)}))
    }
}

/// A plan checked, or the answer refusing it.
enum Checked {
    Refused(ToolResult),
    Plan { parent: Box<TaskOut>, subtasks: Vec<Subtask>, summary: String, made: Vec<TaskOut> },
}

/// The board's members, as a plan names them: by slug, or an agent by what its presence marker
/// says it can do ([`picogent_tracker::presence::able_agents`]).
struct Members {
    list: Vec<picogent_tracker::model::MemberOut>,
    slugs: HashSet<String>,
}

impl Members {
    fn of(list: Vec<picogent_tracker::model::MemberOut>) -> Members {
        let slugs = list.iter().map(|member| member.slug.clone()).collect();
        Members { list, slugs }
    }

    /// The first agent member that says it can do `capability`, a running one first.
    fn able(&self, capability: &str) -> Option<&str> {
        picogent_tracker::presence::able_agents(&self.list, capability).first().copied()
    }
}

/// Why a sub-task of a plan is refused: the whole plan is, before anything is posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadSubtask {
    #[error("sub-task {number} has no title")]
    NoTitle { number: usize },
    #[error(
        "the assignee `{assignee}` of sub-task {number} is not a member of the board: use a slug list_members \
         shows, or `me`"
    )]
    NotAMember { number: usize, assignee: String },
    #[error(
        "no agent member of the board says it can `{capability}` (sub-task {number}): name a member's slug \
         list_members shows, or `me`"
    )]
    NoneCan { number: usize, capability: String },
    #[error("sub-task {number} waits for {earlier}: waits_for names only earlier sub-tasks of this list ({})",
        earlier_ones(*.number))]
    NotEarlier { number: usize, earlier: i64 },
}

/// The numbers sub-task `number` may wait for, in words.
fn earlier_ones(number: usize) -> String {
    if number <= 1 { "none, it is the first".to_string() } else { format!("1 to {}", number - 1) }
}

/// One sub-task's arguments checked: its words cleaned, its assignee a member, what it waits
/// for earlier in the plan. `index` is its place in the plan, from 0.
fn subtask(arg: SubtaskArgs, index: usize, agent_slug: &str, members: &Members) -> Result<Subtask, BadSubtask> {
    let number = index + 1;
    let title = one_line(&arg.title, MAX_TITLE_CHARS);
    if title.is_empty() {
        return Err(BadSubtask::NoTitle { number });
    }
    let description = picogent_prompts::clean_text(arg.description.trim(), MAX_DESCRIPTION_CHARS);
    let named = arg.assignee.as_deref().map(|slug| slug.trim().trim_start_matches('@')).unwrap_or_default();
    let assignee = if named.is_empty() || named.eq_ignore_ascii_case("me") {
        agent_slug.to_string()
    } else if let Some(capability) = named.strip_prefix("can:").map(str::trim) {
        match members.able(capability) {
            Some(slug) => slug.to_string(),
            None => return Err(BadSubtask::NoneCan { number, capability: picogent_prompts::clean_name(capability) }),
        }
    } else if members.slugs.contains(named) {
        named.to_string()
    } else {
        return Err(BadSubtask::NotAMember { number, assignee: picogent_prompts::clean_name(named) });
    };
    let mut waits_for = Vec::new();
    for earlier in arg.waits_for {
        let known = usize::try_from(earlier).ok().filter(|earlier| (1..number).contains(earlier));
        let Some(earlier) = known else {
            return Err(BadSubtask::NotEarlier { number, earlier });
        };
        if !waits_for.contains(&(earlier - 1)) {
            waits_for.push(earlier - 1);
        }
    }
    Ok(Subtask { title, description, assignee, waits_for })
}

/// A person's reply to the plan: `None` for one with no words (a bare mention).
fn verdict(content: &str) -> Option<Verdict> {
    let words = reply_words(content);
    if words.is_empty() {
        return None;
    }
    let plain = words.trim_end_matches(['.', '!']).trim().to_lowercase();
    Some(match plain.as_str() {
        "yes" | "y" | "ok" | "okay" | "approve" | "approved" | "go ahead" | "yes please" | "lgtm" => Verdict::Yes,
        "no" | "n" | "nope" | "decline" | "declined" | "cancel" | "drop it" | "no thanks" => Verdict::No,
        _ => Verdict::Changes(words.to_string()),
    })
}

/// The question: the numbered plan, who takes each sub-task and what it waits for.
fn plan_text(parent: &TaskOut, subtasks: &[Subtask], summary: &str, agent_slug: &str, minutes: u64) -> String {
    let mut text = format!("Plan for {}, in {} sub-tasks", parent.key, subtasks.len());
    if !summary.is_empty() {
        text.push_str(&format!(": {}", unmentioned(summary)));
    }
    text.push('\n');
    for (index, planned) in subtasks.iter().enumerate() {
        let who = if planned.assignee == agent_slug { "me".to_string() } else { planned.assignee.clone() };
        text.push_str(&format!("{}. {} (for {who}", index + 1, unmentioned(&planned.title)));
        if !planned.waits_for.is_empty() {
            let earlier: Vec<String> = planned.waits_for.iter().map(|earlier| (earlier + 1).to_string()).collect();
            text.push_str(&format!(", waits for {}", earlier.join(", ")));
        }
        text.push_str(")\n");
    }
    text.push_str(&format!(
        "Each becomes a task in project `{}`, part of {}.\nReply yes to create them, no to drop the plan, or say what \
         to change, within {minutes} minutes.",
        parent.project_slug, parent.key
    ));
    text
}

/// Text the model wrote, posted without mentioning anyone: the board reads `@slug` as a mention.
fn unmentioned(text: &str) -> String {
    text.replace('@', "＠")
}

/// `text` cleaned, on one line, at most `max_chars` characters.
fn one_line(text: &str, max_chars: usize) -> String {
    let cleaned = picogent_prompts::clean_text(text, usize::MAX);
    let line = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max_chars {
        return line;
    }
    let mut cut: String = line.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The parent's step for a sub-task: `KEY: title`.
fn step_title(task: &TaskOut) -> String {
    one_line(&format!("{}: {}", task.key, task.title), MAX_STEP_CHARS)
}

/// A sub-task as the model reads it: `TE-2 "title" (@bob, waits for TE-1)`.
fn describe(task: &TaskOut) -> String {
    let who = task.assignee_slug.as_deref().map_or_else(|| "unassigned".to_string(), |slug| format!("@{slug}"));
    let waits = picogent_tracker::tree::blockers_of(task);
    let waits = if waits.is_empty() { String::new() } else { format!(", waits for {}", waits.join(", ")) };
    format!("{} \"{}\" ({who}, {}{waits})", task.key, task.title, task.status.as_str())
}

fn keys(tasks: &[TaskOut]) -> Vec<&str> {
    tasks.iter().map(|task| task.key.as_str()).collect()
}

/// The number of a task key (`TE-12` → 12): the order tasks were made in a project.
fn key_number(key: &str) -> u64 {
    key.rsplit_once('-').and_then(|(_, number)| number.parse().ok()).unwrap_or(u64::MAX)
}

/// The answer when making stopped at `why` with `made` made.
fn partial(parent: &TaskOut, made: &[TaskOut], planned: usize, why: &str) -> ToolResult {
    let listed: Vec<String> = made.iter().map(describe).collect();
    let so_far = if made.is_empty() { "none".to_string() } else { listed.join("; ") };
    ToolResult::error(format!(
        "The plan for {} was approved, but making it stopped ({why}) with {} of {planned} sub-tasks made: {so_far}. \
         Call plan_subtasks again with the same plan to finish it: what was made is found, not made again.",
        parent.key,
        made.len()
    ))
    .with_structured(json!({"error": {"code": "partial", "subtasks": keys(made)}}))
}

fn refused(message: &str) -> ToolResult {
    ToolError::Refused { message: message.to_string() }.into_result()
}

impl ToolSource for PlanTool {
    fn tools(&self) -> Vec<ToolDefinition> {
        vec![self.definition()]
    }

    /// The plan asks the person itself: nothing for `ask` mode to ask about.
    fn effect(&self, name: &str, _arguments: &serde_json::Value, _context: &ToolContext) -> Option<CallEffect> {
        (name == PLAN_SUBTASKS).then_some(CallEffect::Routine)
    }

    /// It writes only its run's task (a question, steps) and, on a yes, that task's sub-tasks in
    /// its own project: the run's own tree.
    fn reach<'a>(
        &'a self,
        name: &'a str,
        _arguments: &'a serde_json::Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Option<Result<Judgement, ReachError>>> {
        Box::pin(async move { (name == PLAN_SUBTASKS).then(|| Ok(Judgement::within_run())) })
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            if name != PLAN_SUBTASKS {
                return ToolResult::error(format!("unknown tool `{name}`"));
            }
            self.plan(arguments, context).await
        })
    }
}

#[cfg(test)]
mod tests;
