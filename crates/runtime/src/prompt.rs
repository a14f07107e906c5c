//! What a run tells the model: the system prompt and the request, rendered from `prompts/` with
//! fresh tracker data (or, for a chat `/mcp__<server>__<prompt>` command, an MCP server's prompt;
//! for a `$<server>:<skill>` command, the server's skill and the person's words). Everything
//! untrusted in them is cleaned and inside the run's [`Fence`].

use crate::request::{RunError, RunKind, RunServices};
use picogent_config::Config;
use picogent_mcp::host::{Expansion, SkillCall};
use picogent_prompts::{
    DigestTaskView, Fence, MAX_FIELD_CHARS, MessageNewVars, MessageView, PromptError, Prompts, Section,
    StandupDigestVars, SystemVars, TaskAssignedVars, TaskView, clean_name, clean_text,
};
use picogent_schedule::firing::{Digest, FiringWork, ProjectPlace, TaskLine};
use picogent_tracker::model::{MessageOut, MessageQuery, TaskOut};

/// How many of a task's comments, or of a thread's messages, the request shows.
const RECENT_MESSAGES: u32 = 20;

/// The request of a fresh run of `kind`. `task` is a task run's task as it is now (the
/// acknowledgement's answer, or a fresh read); the rest is read here. Messages in `steered` reach
/// the run as steering, so the comments and the thread shown leave them out: each input reaches
/// the model once. Tracker text is fenced with `fence`, the run's.
pub async fn user_prompt(
    services: &RunServices,
    kind: &RunKind,
    task: Option<TaskOut>,
    steered: &[String],
    fence: &Fence,
) -> Result<String, RunError> {
    match kind {
        RunKind::Task { task: assigned, assigned_by } => {
            let task = match task {
                Some(task) => task,
                None => services.client.get_task(&assigned.id).await.map_err(RunError::ReadTask)?,
            };
            task_prompt(services, &task, assigned_by, steered, fence).await
        }
        RunKind::Message { message } => message_prompt(services, message, steered, fence).await,
        // Given over `/mcp` or the command line by whoever runs the agent: the request itself.
        RunKind::Prompt { text } => Ok(clean_text(text, MAX_FIELD_CHARS)),
        RunKind::Schedule { firing } => match &firing.work {
            FiringWork::Standup { project, digest } => Ok(digest_prompt(&services.prompts, project, digest, fence)?),
            // The operator's own prompt file, as configured: the request itself.
            FiringWork::Prompt { text, .. } => Ok(clean_text(text, MAX_FIELD_CHARS)),
            // Nudges are picogent's own words; no model is asked.
            FiringWork::Stale { .. } => Ok(String::new()),
        },
    }
}

/// A scheduled standup's request: what moved, what is blocked and what is due, titles fenced.
fn digest_prompt(
    prompts: &Prompts,
    project: &ProjectPlace,
    digest: &Digest,
    fence: &Fence,
) -> Result<String, PromptError> {
    let view = |task: &TaskLine, due: &str| {
        DigestTaskView::new(&task.key, &task.title, &task.status, task.assignee.as_deref(), due, fence)
    };
    prompts.standup_digest(&StandupDigestVars {
        project_slug: clean_name(&project.slug),
        project_name: clean_name(&project.name),
        // picogent's own words ("Sat 5 Dec 09:00 UTC"), their spaces kept.
        since: clean_text(&digest.since_text, 64),
        counts: digest.counts(),
        moved: digest.moved.iter().map(|task| view(task, "")).collect(),
        blocked: digest.blocked.iter().map(|task| view(task, "")).collect(),
        due: digest.due.iter().map(|due| view(&due.task, &due.due)).collect(),
    })
}

/// A task run's request: the task with its steps and latest comments.
async fn task_prompt(
    services: &RunServices,
    task: &TaskOut,
    assigned_by: &str,
    steered: &[String],
    fence: &Fence,
) -> Result<String, RunError> {
    let client = &services.client;
    let comments_query =
        MessageQuery { task_id: Some(task.id.clone()), limit: Some(RECENT_MESSAGES), ..MessageQuery::default() };
    // A read that fails leaves its part of the prompt empty; the model can read it with a tool.
    let (steps, comments) = tokio::join!(client.list_steps(&task.id), client.list_messages(&comments_query));
    let (steps, comments) = (steps.unwrap_or_default(), comments.unwrap_or_default());
    let review = picogent_workspace::review::is_review(&services.config.capabilities, task);
    let vars = TaskAssignedVars {
        task: TaskView::new(task, &steps, fence),
        assigned_by: clean_name(assigned_by),
        comments: comments
            .iter()
            .filter(|m| !steered.contains(&m.id))
            .map(|message| MessageView::new(message, fence))
            .collect(),
        propose_breakdown: !review && {
            let delegation = &services.config.delegation;
            delegation.asks_for_breakdown(&task.labels) && picogent_tools::plan::offered_for(task, delegation)
        },
    };
    // A task handed to this agent for review gets the review's request (`prompts/review.md`).
    Ok(match review {
        true => services.prompts.review(&vars)?,
        false => services.prompts.task_assigned(&vars)?,
    })
}

/// A chat run's request: the message, its thread and the task it is about, if any.
async fn message_prompt(
    services: &RunServices,
    message: &MessageOut,
    steered: &[String],
    fence: &Fence,
) -> Result<String, RunError> {
    // `/mcp__<server>__<prompt> key=value ...`: the server's rendered prompt is the request;
    // `$<server>:<skill> words`: the skill and the words are.
    if let Some(expanded) = services.host.expand_command(&message.content).await {
        let thread_id = clean_name(message.thread_root());
        let head = format!("Message id: {}\nThread id: {thread_id}", clean_name(&message.id));
        let author = clean_name(&message.author_slug);
        let answer = format!("answer in the thread with reply_message (parent_id {thread_id}), once");
        return Ok(match expanded.map_err(RunError::Command)? {
            Expansion::Prompt(prompt) => format!(
                "{head}\n@{author} asked you to run an MCP prompt. It follows as the server rendered it, fenced: do \
                 what it asks as far as your rules allow, then {answer}.\n\n{}",
                fence.data(&prompt, MAX_FIELD_CHARS)
            ),
            Expansion::Skill(call) => format!(
                "{head}\n{}\n\nDo what the skill says for this request as far as your rules allow, then {answer}.",
                skill_request(&call, &author, |text, max_chars| fence.data(text, max_chars))
            ),
        });
    }
    let client = &services.client;
    let thread_query = MessageQuery {
        parent_id: Some(message.thread_root().to_string()),
        limit: Some(RECENT_MESSAGES),
        ..MessageQuery::default()
    };
    let task = async {
        match &message.task_id {
            Some(task_id) => client.get_task(task_id).await.ok().map(|task| TaskView::new(&task, &[], fence)),
            None => None,
        }
    };
    let (thread, task) = tokio::join!(client.list_messages(&thread_query), task);
    let thread = thread.unwrap_or_default();
    Ok(services.prompts.message_new(&MessageNewVars {
        message: MessageView::new(message, fence),
        thread: thread
            .iter()
            .filter(|m| m.id != message.id && !steered.contains(&m.id))
            .map(|earlier| MessageView::new(earlier, fence))
            .collect(),
        task,
        agent_slug: services.config.slug.clone(),
    })?)
}

/// A skill a person called, as the model reads it: who asked for which skill, their words, and
/// the skill's text under the heading picogent writes (`SkillCall::section`). `fenced` cleans,
/// caps and fences text: with the run's fence, or a pending one for steering. The skill's text
/// was capped when it was read, so it is not capped again here.
pub(crate) fn skill_request(call: &SkillCall, author: &str, fenced: impl Fn(&str, usize) -> String) -> String {
    let words = match call.arguments.trim() {
        "" => "nothing more".to_string(),
        words => fenced(words, MAX_FIELD_CHARS),
    };
    format!(
        "@{author} asked you to use the skill `{}` of the MCP server `{}`, with these words: {words}\n\n{}",
        // Made of the server's configured name and a valid public name: nothing to clean.
        call.command,
        clean_name(&call.server),
        call.section(|body| fenced(body, usize::MAX))
    )
}

/// The system prompt: who the agent is, plus one section per external MCP server's instructions
/// (fenced by the host with the run's fence).
pub fn system_prompt(config: &Config, prompts: &Prompts, extra_sections: Vec<Section>) -> Result<String, PromptError> {
    prompts.system(&SystemVars {
        name: config.name.clone(),
        slug: config.slug.clone(),
        capabilities: config.capabilities.clone(),
        extra_sections,
    })
}
