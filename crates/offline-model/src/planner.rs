//! The offline planner: a deterministic, rule-based stand-in for a model. It is not an LLM and
//! never claims to be one; it exists so the demo and the tests run the real HTTP path offline.
//!
//! It is stateless across requests: each answer is derived from the request alone (the prompt,
//! the tool calls already made and their results, the tools offered). It only calls tools it was
//! offered, and reads argument names from each tool's JSON Schema (`task_id` or `task`, ...).
//!
//! # Prompt markers (for the runtime's prompt templates)
//!
//! The planner looks at the last user message that carries one of these markers, and only at
//! the tool calls made after it:
//!
//! - `Task: TE-3` on its own line: work the task with that key. Failing that, `task_id: TE-3` /
//!   `"task_id": "TE-3"`, and failing that the first `ABC-123`-shaped word in the message.
//! - `Task id: <uuid>` on its own line (optional): the task's id, used when `get_task` is not
//!   offered.
//! - `Message id: <uuid>` on its own line: answer that chat message in its thread. With
//!   `Thread id: <uuid>` the reply's parent is the thread's first message (the tracker attaches a
//!   reply to a reply there anyway). `Message: <text>` (the rest of the line) is quoted in the
//!   reply when present.
//!
//! `prompts/task_assigned.md` and `prompts/message_new.md` carry these lines.
//!
//! Markers count only in a prompt's own structure, outside its fences (`prompts::split_fences`):
//! a `Task:` line, a step line or anything else inside `<<untrusted-…>>` … `<<end-untrusted-…>>`
//! is text people wrote, and the planner treats it as such. Tool results are read inside their
//! fence.
//!
//! - `Digest: <project>` on its own line, with `Counts: moved N, blocked N, due N`: a scheduled
//!   standup (`prompts/standup_digest.md`). The planner answers with one sentence of the counts,
//!   as text (picogent posts it with the list of tasks), and calls no tool.
//!
//! A message with both markers is a chat mention about a task: the planner replies in the
//! thread. With no marker the planner answers with a short text saying so.
//!
//! # What it does
//!
//! For a task: `get_task` (unless the prompt shows the task, as `prompts/task_assigned.md` does); `add_step` for each bullet line (`- x`, `* x`) of the description, or
//! a default plan of three steps (skipped when the prompt lists the task's existing checklist as
//! `- [ ] title (step id X)` lines, as `prompts/task_assigned.md` does). A description's bullets
//! stop at a line that imitates the prompt's structure (`Comments so far:`, `Task: …`, `</task>`),
//! and a bullet shaped like a comment (`- @alice: …`) is no step: what a description forges is
//! not its plan; `update_task` to
//! `in_progress`; `complete_step` for each open step; `update_task` to `in_review`; then the
//! summary as its final text (the agent posts it on the task). For a mention: `reply_message` with the message id as parent (or
//! `send_message` with `parent_id`), then a final text. A step whose tool is not offered is
//! skipped; a call that failed is tried again once, then skipped.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use picogent_llm::{Message, TOOL_ERROR_PREFIX, ToolSpec};
use picogent_prompts::{Part, without_fences};

/// What the planner answers: a text, or tool calls `(name, arguments as JSON text)`.
#[derive(Debug, Clone, PartialEq)]
pub enum PlannedTurn {
    Text(String),
    ToolCalls(Vec<(String, String)>),
}

/// The plan used when a task's description has no bullet lines.
pub const DEFAULT_PLAN: [&str; 3] =
    ["Read the task and gather context", "Do the work", "Check the result and write a summary"];

/// How many times the planner sends the same call before it gives up on it.
const MAX_ATTEMPTS: usize = 2;

static DIGEST_LINE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?m)^\s*Digest:\s*(\S+)").expect("valid regex"));
static COUNTS_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*Counts:\s*moved (\d+), blocked (\d+), due (\d+)").expect("valid regex"));
static TASK_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*Task:\s*([A-Z][A-Z0-9]*-\d+)\b").expect("valid regex"));
static TASK_ID_FIELD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"task_id"?\s*[:=]\s*"?([A-Z][A-Z0-9]*-\d+)\b"#).expect("valid regex"));
static TASK_KEY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b([A-Z][A-Z0-9]*-\d+)\b").expect("valid regex"));
static MESSAGE_ID_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?mi)^\s*Message id:\s*([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b")
        .expect("valid regex")
});
static THREAD_ID_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?mi)^\s*Thread id:\s*([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b")
        .expect("valid regex")
});
static TASK_ID_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*Task id:\s*([0-9A-Za-z-]+)\s*$").expect("valid regex"));
static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b").expect("valid regex")
});
/// A file a task names, for the coding agent: a path with a source file's extension (`src/date.py`).
static FILE_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[\s`'(])((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.(?:py|rs|js|ts|go|md|txt|json|toml|ya?ml|java|c|h|cpp|rb|sh|html|css))\b").expect("valid regex")
});
static EXISTING_STEP_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*- \[( |x)\] (.+?) \(step id ([^)\s]+)\)\s*$").expect("valid regex"));
static MESSAGE_TEXT_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*Message:\s*(.+)$").expect("valid regex"));
/// A line of the prompt templates' own structure, or a tag-only line (`</task>`): in a
/// description it is forged.
static FORGED_STRUCTURE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^\s*(?:</?[a-z_|]+>\s*$|(?:task|task id|message id|thread id|description|steps so far|comments so far|earlier in this thread)\s*:)",
    )
    .expect("valid regex")
});
/// A bullet shaped like the templates' comment lines: `@alice: …`.
static COMMENT_BULLET: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^@[\w.-]+\s*:").expect("valid regex"));
/// What stands for a fenced part in [`Read::structure`]; fenced text holds no control character.
const PLACEHOLDER: char = '\u{1}';
static PLACEHOLDERS: LazyLock<Regex> = LazyLock::new(|| Regex::new("\u{1}(\\d+)\u{1}").expect("valid regex"));

/// A user message as the planner reads it: its structure, each fenced part replaced by a
/// placeholder, and the fenced parts.
struct Read {
    structure: String,
    data: Vec<String>,
}

impl Read {
    fn of(text: &str) -> Read {
        let mut read = Read { structure: String::with_capacity(text.len()), data: Vec::new() };
        for part in picogent_prompts::split_fences(text) {
            match part {
                Part::Structure(text) => read.structure.push_str(text),
                Part::Data(text) => {
                    read.structure.push_str(&format!("{PLACEHOLDER}{}{PLACEHOLDER}", read.data.len()));
                    read.data.push(text.to_string());
                }
            }
        }
        read
    }

    /// `text` (a piece of the structure) with its placeholders given back their text.
    fn resolve(&self, text: &str) -> String {
        PLACEHOLDERS
            .replace_all(text, |found: &regex::Captures| {
                found[1].parse::<usize>().ok().and_then(|index| self.data.get(index)).cloned().unwrap_or_default()
            })
            .into_owned()
    }
}

/// The job a prompt asks for.
#[derive(Debug, Clone, PartialEq)]
enum Job {
    Task {
        key: String,
        id: Option<String>,
    },
    Mention {
        message_id: String,
        text: Option<String>,
    },
    /// A scheduled standup of `project`, with its counts (moved, blocked, due).
    Digest {
        project: String,
        counts: (u32, u32, u32),
    },
}

fn find_job(text: &str) -> Option<Job> {
    let read = Read::of(text);
    find_job_in(&read)
}

/// The job the structure of `read` asks for: markers inside fences do not count.
fn find_job_in(read: &Read) -> Option<Job> {
    let text = read.structure.as_str();
    if let Some(found) = DIGEST_LINE.captures(text) {
        let counts = COUNTS_LINE
            .captures(text)
            .map(|c| (c[1].parse().unwrap_or(0), c[2].parse().unwrap_or(0), c[3].parse().unwrap_or(0)))
            .unwrap_or_default();
        return Some(Job::Digest { project: found[1].to_string(), counts });
    }
    if let Some(found) = THREAD_ID_LINE.captures(text).or_else(|| MESSAGE_ID_LINE.captures(text)) {
        let text = MESSAGE_TEXT_LINE.captures(text).map(|c| read.resolve(c[1].trim()));
        return Some(Job::Mention { message_id: found[1].to_lowercase(), text });
    }
    let key = TASK_LINE
        .captures(text)
        .or_else(|| TASK_ID_FIELD.captures(text))
        .or_else(|| TASK_KEY.captures(text))
        .map(|c| c[1].to_string())?;
    let id = TASK_ID_LINE.captures(text).map(|c| c[1].to_string());
    Some(Job::Task { key, id })
}

/// One tool call made after the prompt, with its result.
struct Done {
    name: String,
    arguments: Value,
    result: Outcome,
}

/// What came back for a tool call, as the planner reads it. Only a success is looked into: a
/// failed call counts as an attempt, whatever its error says.
enum Outcome {
    /// No result yet.
    Pending,
    /// The result: parsed JSON, or the raw text as a string.
    Succeeded(Value),
    /// The tool reported an error: its text, without the fences.
    Failed(String),
}

/// The state of the conversation since the prompt that set the job.
struct History {
    /// The user message that set the job.
    prompt: Read,
    done: Vec<Done>,
}

impl History {
    fn read(messages: &[Message]) -> Option<(Job, History)> {
        let (start, job, prompt) = messages.iter().enumerate().rev().find_map(|(index, message)| match message {
            Message::User { content } => {
                let read = Read::of(content);
                find_job_in(&read).map(|job| (index, job, read))
            }
            _ => None,
        })?;
        let mut done: Vec<(String, Done)> = Vec::new();
        for message in &messages[start + 1..] {
            match message {
                Message::Assistant { tool_calls, .. } => {
                    for call in tool_calls {
                        let arguments = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                        done.push((
                            call.id.clone(),
                            Done { name: call.name.clone(), arguments, result: Outcome::Pending },
                        ));
                    }
                }
                Message::Tool { tool_call_id, content, .. } => {
                    if let Some((_, entry)) = done.iter_mut().find(|(id, _)| id == tool_call_id) {
                        // A result is read inside its fence.
                        entry.result = if let Some(error) = content.strip_prefix(TOOL_ERROR_PREFIX) {
                            Outcome::Failed(without_fences(error))
                        } else {
                            let content = without_fences(content);
                            Outcome::Succeeded(serde_json::from_str(&content).unwrap_or(Value::String(content)))
                        };
                    }
                }
                _ => {}
            }
        }
        Some((job, History { prompt, done: done.into_iter().map(|(_, d)| d).collect() }))
    }

    /// Successful results of `name` whose arguments satisfy `matches`.
    fn successes<'a>(
        &'a self,
        name: &'a str,
        matches: impl Fn(&Value) -> bool + 'a,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.done.iter().filter(move |d| d.name == name && matches(&d.arguments)).filter_map(|d| match &d.result {
            Outcome::Succeeded(value) => Some(value),
            Outcome::Pending | Outcome::Failed(_) => None,
        })
    }

    /// The error text of the last failed call of `name`.
    fn last_failure(&self, name: &str) -> Option<&str> {
        self.done.iter().rev().filter(|d| d.name == name).find_map(|d| match &d.result {
            Outcome::Failed(error) => Some(error.as_str()),
            _ => None,
        })
    }

    fn attempts(&self, name: &str, matches: impl Fn(&Value) -> bool) -> usize {
        self.done.iter().filter(|d| d.name == name && matches(&d.arguments)).count()
    }

    /// Whether a call still needs making: no success yet and attempts left.
    fn wanted(&self, name: &str, matches: impl Fn(&Value) -> bool + Copy) -> bool {
        self.successes(name, matches).next().is_none() && self.attempts(name, matches) < MAX_ATTEMPTS
    }
}

/// The offered tools, and the argument names their schemas use.
struct Offered<'a> {
    tools: &'a [ToolSpec],
}

impl Offered<'_> {
    fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|tool| tool.name == name)
    }

    /// The first of `candidates` that the tool's schema names as a property (or the first
    /// candidate when the schema lists none).
    fn argument(&self, tool: &str, candidates: &[&str]) -> String {
        let properties = self.get(tool).and_then(|t| t.parameters.get("properties")).and_then(Value::as_object);
        candidates
            .iter()
            .find(|candidate| properties.is_some_and(|p| p.contains_key(**candidate)))
            .unwrap_or(&candidates[0])
            .to_string()
    }
}

/// The id in a tool result: the `id` field of a JSON result, or the first UUID of a text one
/// (the registry's text puts an item's id first: `id <uuid> ...`, `(id <uuid>)`).
fn result_id(result: &Value) -> Option<String> {
    match result {
        Value::String(text) => UUID.find(text).map(|m| m.as_str().to_string()),
        other => other.get("id").and_then(Value::as_str).map(str::to_string),
    }
}

/// A task's description in a tool result: the JSON field, or the whole text (only its bullet
/// lines are used, and the registry's header lines are not bullets).
/// The task as the prompt shows it, when it does (`task_assigned.md`: a `Title:` line, then the
/// description after `Description:`), in the shape of a text `get_task` result.
fn prompt_task(read: &Read) -> Option<Value> {
    let structure = read.structure.as_str();
    if !structure.contains("\nTitle: ") {
        return None;
    }
    const MARK: &str = "\nDescription:\n";
    let description = match structure.find(MARK) {
        Some(start) => read.resolve(structure[start + MARK.len()..].split('\n').next().unwrap_or_default()),
        None => String::new(),
    };
    Some(Value::String(description))
}

fn result_description(result: &Value) -> &str {
    match result {
        Value::String(text) => text,
        other => other.get("description").and_then(Value::as_str).unwrap_or_default(),
    }
}

const TASK_ARGUMENT: [&str; 5] = ["task_id", "task", "key", "task_key", "id"];
const CONTENT_ARGUMENT: [&str; 4] = ["content", "text", "body", "message"];

/// Decides the next turn from the request alone.
pub fn plan(messages: &[Message], tools: &[ToolSpec]) -> PlannedTurn {
    let offered = Offered { tools };
    match History::read(messages) {
        None if let Some(turn) = plan_health_check(messages, &offered) => turn,
        None => PlannedTurn::Text(
            "The offline planner (a rule-based stand-in, not an LLM) found no `Task: KEY` or `Message id: <uuid>` \
             line in the prompt, so there is nothing for it to do."
                .to_string(),
        ),
        Some((Job::Task { key, id }, history)) => plan_task(&key, id.as_deref(), &history, &offered),
        Some((Job::Mention { message_id, text }, history)) => {
            plan_mention(&message_id, text.as_deref(), &history, &offered)
        }
        Some((Job::Digest { project, counts }, _)) => PlannedTurn::Text(digest_words(&project, counts)),
    }
}

/// A standup's few words, from its counts: what a model would lead the digest with.
fn digest_words(project: &str, (moved, blocked, due): (u32, u32, u32)) -> String {
    let tasks = |n: u32| if n == 1 { "1 task".to_string() } else { format!("{n} tasks") };
    let mut words = format!("Standup for {project}: {} moved since the last one", tasks(moved));
    if blocked > 0 {
        words.push_str(&format!(", {} {} blocked", tasks(blocked), if blocked == 1 { "is" } else { "are" }));
    }
    if due > 0 {
        words.push_str(&format!(", {} {} due soon", tasks(due), if due == 1 { "is" } else { "are" }));
    }
    words.push_str(". (offline planner)");
    words
}

/// `picogent check` asks "Call <tool> with status \"ready\"": the tool is called once, each of its
/// required fields given the quoted word, and the answer after it is a short text.
fn plan_health_check(messages: &[Message], offered: &Offered) -> Option<PlannedTurn> {
    let Some(Message::User { content }) = messages.iter().rev().find(|m| matches!(m, Message::User { .. })) else {
        return None;
    };
    if messages.iter().any(|m| matches!(m, Message::Tool { .. })) {
        return Some(PlannedTurn::Text("Status reported. (offline planner)".to_string()));
    }
    let name = content.strip_prefix("Call ")?.split_whitespace().next()?;
    let tool = offered.get(name)?;
    let word = content.split('"').nth(1).unwrap_or("ready");
    let required = tool.parameters.get("required").and_then(Value::as_array).cloned().unwrap_or_default();
    let arguments: serde_json::Map<String, Value> =
        required.iter().filter_map(Value::as_str).map(|field| (field.to_string(), json!(word))).collect();
    Some(PlannedTurn::ToolCalls(vec![call(name, Value::Object(arguments))]))
}

fn call(name: &str, arguments: Value) -> (String, String) {
    (name.to_string(), arguments.to_string())
}

// One function on purpose: the planner's rules for a task run, numbered, in the order it follows
// them; each returns the next turn. Split up, the order would be spread over several places.
fn plan_task(key: &str, task_id: Option<&str>, history: &History, offered: &Offered) -> PlannedTurn {
    let any = |_: &Value| true;
    // 1. Read the task, unless the prompt shows it as it is now (`Title:` and the description):
    //    reading it again would only repeat it.
    let shown = prompt_task(&history.prompt);
    if shown.is_none() && offered.get("get_task").is_some() && history.wanted("get_task", any) {
        let argument = offered.argument("get_task", &TASK_ARGUMENT);
        return PlannedTurn::ToolCalls(vec![call("get_task", json!({ argument: key }))]);
    }
    let read = history.successes("get_task", any).next().cloned();
    // Later calls address the task by its id when the tracker gave one (a key works in paths,
    // but `task_id` in a message body wants the id): from the result, or the prompt's
    // `Task id:` line (never from the description, whose text is anyone's).
    let task_ref = read.as_ref().and_then(result_id).or(task_id.map(str::to_string)).unwrap_or_else(|| key.to_string());
    let task = read.or(shown).unwrap_or(Value::Null);

    // 1b. A review run reviews; a task labelled for a breakdown is planned, not worked here.
    if let Some(turn) = team::plan_review(key, history, offered) {
        return turn;
    }
    if team::breakdown_asked(history, offered) {
        return team::plan_breakdown(key, &task_ref, &task, history, offered);
    }

    // 2. Lay out the steps, unless the prompt lists the task's existing checklist
    //    (`- [ ] title (step id X)`): then that is the plan, and only its open steps are ticked.
    let existing: Vec<(bool, String, String)> = EXISTING_STEP_LINE
        .captures_iter(&history.prompt.structure)
        .map(|c| (&c[1] == "x", history.prompt.resolve(&c[2]), c[3].to_string()))
        .collect();
    let plan: Vec<String> = if existing.is_empty() {
        plan_steps(result_description(&task))
    } else {
        existing.iter().map(|(_, title, _)| title.clone()).collect()
    };
    if existing.is_empty() && offered.get("add_step").is_some() {
        let task_argument = offered.argument("add_step", &TASK_ARGUMENT);
        let title_argument = offered.argument("add_step", &["title", "name", "text"]);
        let missing: Vec<(String, String)> = plan
            .iter()
            .filter(|title| {
                history.wanted("add_step", |a| a.get(&title_argument).and_then(Value::as_str) == Some(title))
            })
            .map(|title| call("add_step", json!({ task_argument.clone(): task_ref, title_argument.clone(): title })))
            .collect();
        if !missing.is_empty() {
            return PlannedTurn::ToolCalls(missing);
        }
    }
    let steps: Vec<String> = existing
        .iter()
        .filter(|(done, _, _)| !done)
        .map(|(_, _, id)| id.clone())
        .chain(history.successes("add_step", |_| true).filter_map(result_id))
        .collect();
    let already_done = existing.iter().filter(|(done, _, _)| *done).count();

    // 3. Start it.
    if let Some(turn) = set_status(history, offered, &task_ref, "in_progress") {
        return turn;
    }

    // 3b. A task that names a file, on a run offered the coding tools: the coding agent makes the
    //     change (once: a coding agent that failed is reported, not run again), then the
    //     workspace is looked at.
    if offered.get(RUN_CODING_AGENT).is_some() && names_a_file(&task) {
        if history.attempts(RUN_CODING_AGENT, any) == 0 {
            // After a review sent the work back, what it asked for; else the task's text.
            let instructions = team::rework(key, &history.prompt)
                .unwrap_or_else(|| format!("Task {key}: {}", task_text(&task).trim()));
            return PlannedTurn::ToolCalls(vec![call(RUN_CODING_AGENT, json!({ "instructions": instructions }))]);
        }
        if history.successes(RUN_CODING_AGENT, any).next().is_none() {
            // Whose step failed, as the tool said: picogent's own (the workspace, the push) or the
            // coding agent's.
            let said = history.last_failure(RUN_CODING_AGENT).unwrap_or("").trim();
            let said = said.lines().find(|line| !line.trim().is_empty()).unwrap_or("it did not say why");
            let said: String = said.chars().take(400).collect();
            let failed = match said.starts_with("could not prepare the workspace") {
                true => format!("I {said}"),
                false => format!("it did not succeed: {said}"),
            };
            return PlannedTurn::Text(format!(
                "The offline planner (a rule-based stand-in, not an LLM) delegated {key} to the coding agent, \
                 and {failed}. The task stays in progress."
            ));
        }
        if offered.get(WORKSPACE_STATUS).is_some() && history.wanted(WORKSPACE_STATUS, any) {
            return PlannedTurn::ToolCalls(vec![call(WORKSPACE_STATUS, json!({}))]);
        }
    }

    // 4. Tick the steps.
    if offered.get("complete_step").is_some() {
        let task_argument = offered.argument("complete_step", &TASK_ARGUMENT);
        let step_argument = offered.argument("complete_step", &["step_id", "step", "id"]);
        let open: Vec<(String, String)> = steps
            .iter()
            .filter(|id| history.wanted("complete_step", |a| a.get(&step_argument).and_then(Value::as_str) == Some(id)))
            .map(|id| call("complete_step", json!({ task_argument.clone(): task_ref, step_argument.clone(): id })))
            .collect();
        if !open.is_empty() {
            return PlannedTurn::ToolCalls(open);
        }
    }

    // 5. Hand it over for review.
    if let Some(turn) = set_status(history, offered, &task_ref, "in_review") {
        return turn;
    }

    // 6. The summary, as the final answer: the agent posts it on the task.
    let reworked = match team::rework(key, &history.prompt) {
        Some(_) if history.successes(RUN_CODING_AGENT, any).next().is_some() => "Reworked as the review asked. ",
        _ => "",
    };
    PlannedTurn::Text(format!(
        "{reworked}Summary from the offline planner (a rule-based stand-in, not an LLM) for {key}: {} of {} steps done — \
         {}. Status set to in_review: ready for review.",
        already_done + history.successes("complete_step", |_| true).count(),
        plan.len(),
        plan.join("; ")
    ))
}

/// The coding tools' names (`picogent_workspace::tools`), as a model sees them offered.
const RUN_CODING_AGENT: &str = "run_coding_agent";
const WORKSPACE_STATUS: &str = "workspace_status";

/// The task's title and description in a `get_task` result (the whole text of a text result).
fn task_text(task: &Value) -> String {
    match task {
        Value::String(text) => text.clone(),
        other => {
            let field = |name: &str| other.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
            format!("{}\n\n{}", field("title"), field("description"))
        }
    }
}

/// Whether the task's text names a file.
fn names_a_file(task: &Value) -> bool {
    FILE_NAME.is_match(&task_text(task))
}

fn set_status(history: &History, offered: &Offered, task_ref: &str, status: &str) -> Option<PlannedTurn> {
    offered.get("update_task")?;
    let status_argument = offered.argument("update_task", &["status"]);
    let matches = |a: &Value| a.get(&status_argument).and_then(Value::as_str) == Some(status);
    if !history.wanted("update_task", matches) {
        return None;
    }
    let task_argument = offered.argument("update_task", &TASK_ARGUMENT);
    Some(PlannedTurn::ToolCalls(vec![call(
        "update_task",
        json!({ task_argument: task_ref, status_argument.clone(): status }),
    )]))
}

/// The task's checklist: its description's bullet lines, or [`DEFAULT_PLAN`]. At most ten steps
/// of at most 200 characters (the tracker's limit). The bullets stop at a line that imitates the
/// prompt's structure, and a bullet shaped like a comment is left out: a description that forges
/// a "Comments so far:" section gets no step from it.
pub fn plan_steps(description: &str) -> Vec<String> {
    let bullets: Vec<String> = description
        .lines()
        .take_while(|line| !FORGED_STRUCTURE.is_match(line))
        .filter_map(|line| {
            let line = line.trim();
            line.strip_prefix("- ").or_else(|| line.strip_prefix("* "))
        })
        .map(|item| item.trim_start_matches("[ ] ").trim_start_matches("[x] ").trim())
        .filter(|item| !item.is_empty() && !COMMENT_BULLET.is_match(item))
        .map(|item| item.chars().take(200).collect())
        .take(10)
        .collect();
    if bullets.is_empty() { DEFAULT_PLAN.iter().map(|s| s.to_string()).collect() } else { bullets }
}

/// A mention answered the way many real models answer: in plain text, with no reply tool (the
/// agent posts the answer). `None` when the prompt is not a mention.
pub fn plain_text_reply(messages: &[Message]) -> Option<PlannedTurn> {
    match History::read(messages) {
        Some((Job::Mention { text, .. }, _)) => Some(PlannedTurn::Text(mention_reply(text.as_deref()))),
        _ => None,
    }
}

fn mention_reply(text: Option<&str>) -> String {
    match text {
        Some(text) => {
            let excerpt: String = text.chars().take(120).collect();
            format!("Hello from the offline planner (a rule-based stand-in, not an LLM). I read: \"{excerpt}\".")
        }
        None => "Hello from the offline planner (a rule-based stand-in, not an LLM). I read your message.".to_string(),
    }
}

fn plan_mention(message_id: &str, text: Option<&str>, history: &History, offered: &Offered) -> PlannedTurn {
    let reply = mention_reply(text);
    let any = |_: &Value| true;
    if offered.get("reply_message").is_some() {
        if history.wanted("reply_message", any) {
            let parent = offered.argument("reply_message", &["parent_id", "message_id", "id"]);
            let content = offered.argument("reply_message", &CONTENT_ARGUMENT);
            return PlannedTurn::ToolCalls(vec![call("reply_message", json!({ parent: message_id, content: reply }))]);
        }
    } else if offered.get("send_message").is_some() && history.wanted("send_message", any) {
        let content = offered.argument("send_message", &CONTENT_ARGUMENT);
        return PlannedTurn::ToolCalls(vec![call("send_message", json!({ "parent_id": message_id, content: reply }))]);
    }
    let replied = history.successes("reply_message", any).next().is_some()
        || history.successes("send_message", any).next().is_some();
    PlannedTurn::Text(if replied {
        "Replied in the thread. (offline planner)".to_string()
    } else {
        "I could not reply in the thread: no reply tool worked. (offline planner)".to_string()
    })
}

/// The faulty "endless tool calling" mode: every turn asks for two reads of the task (or two
/// calls of the first tool offered), never a final answer. For budget tests.
pub fn endless(messages: &[Message], tools: &[ToolSpec]) -> PlannedTurn {
    let offered = Offered { tools };
    let key = messages
        .iter()
        .find_map(|m| match (m, find_job(m.text())) {
            (Message::User { .. }, Some(Job::Task { key, .. })) => Some(key),
            _ => None,
        })
        .unwrap_or_else(|| "TE-1".to_string());
    let (name, arguments) = match offered.get("get_task") {
        Some(_) => ("get_task", json!({ offered.argument("get_task", &TASK_ARGUMENT): key })),
        None => match tools.first() {
            Some(tool) => (tool.name.as_str(), json!({})),
            None => return PlannedTurn::Text("no tools are offered (offline planner)".to_string()),
        },
    };
    PlannedTurn::ToolCalls(vec![call(name, arguments.clone()), call(name, arguments)])
}

mod team;

#[cfg(test)]
mod tests;
