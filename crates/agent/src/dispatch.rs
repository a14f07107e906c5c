//! Running one turn's tool calls: checking names and arguments, running read-only calls
//! concurrently and the others in order, and turning each result into the text the model reads:
//! cleaned (`prompts::clean_text`), cut, and inside the run's fence, whatever its source.

use std::collections::HashSet;

use tokio::time::Instant;

use crate::record::{ToolCallOutcome, ToolCallRecord};
use picogent_llm::{Message, TOOL_ERROR_PREFIX, ToolCall, ToolSpec};
use picogent_prompts::Fence;
use picogent_tools::{ToolContext, ToolDefinition, ToolResult, ToolSource};

/// The tools offered in this run, in the source's fixed order.
pub(crate) struct OfferedTools {
    pub specs: Vec<ToolSpec>,
    /// What `specs` add to every prompt (o200k).
    pub tokens: u64,
    names: Vec<String>,
    /// Tools the source has but this run does not offer, to say so instead of "unknown".
    withheld: HashSet<String>,
    read_only: HashSet<String>,
}

impl OfferedTools {
    /// Keeps the source's tools whose names are in `offered`, in the source's order (so the tool
    /// list is byte-identical across turns whatever order the caller listed names in). An
    /// external server's tool (one with an origin in `_meta`) has its description cleaned and
    /// inside `fence`, the run's: the server wrote it, so it is data like any other.
    pub(crate) fn new(source_tools: Vec<ToolDefinition>, offered: &[String], fence: &Fence) -> OfferedTools {
        let wanted: HashSet<&str> = offered.iter().map(String::as_str).collect();
        let (mut tools, withheld): (Vec<ToolDefinition>, Vec<ToolDefinition>) =
            source_tools.into_iter().partition(|tool| wanted.contains(tool.name.as_str()));
        for tool in tools.iter_mut().filter(|tool| tool.origin.is_some()) {
            tool.description = fence.data(&tool.description, usize::MAX);
        }
        let specs: Vec<ToolSpec> = tools.iter().map(ToolDefinition::spec).collect();
        OfferedTools {
            tokens: specs.iter().map(picogent_llm::tool_tokens).sum(),
            withheld: withheld.into_iter().map(|tool| tool.name).collect(),
            specs,
            names: tools.iter().map(|tool| tool.name.clone()).collect(),
            read_only: tools.iter().filter(|tool| tool.is_trusted_read()).map(|tool| tool.name.clone()).collect(),
        }
    }

    /// What a tool's arguments look like, in words for an error: its required and other fields.
    pub(crate) fn expected_arguments(&self, name: &str) -> String {
        let Some(spec) = self.specs.iter().find(|spec| spec.name == name) else {
            return "matching the tool's schema".to_string();
        };
        let required: Vec<&str> = spec
            .parameters
            .get("required")
            .and_then(|r| r.as_array())
            .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        let fields = |wanted: bool| -> Vec<String> {
            let Some(properties) = spec.parameters.get("properties").and_then(|p| p.as_object()) else {
                return Vec::new();
            };
            properties
                .iter()
                .filter(|(field, _)| required.contains(&field.as_str()) == wanted)
                .map(|(field, schema)| match schema.get("type") {
                    Some(kind) => format!("\"{field}\" ({})", kind.to_string().trim_matches('"')),
                    None => format!("\"{field}\""),
                })
                .collect()
        };
        let (needed, optional) = (fields(true), fields(false));
        match (needed.is_empty(), optional.is_empty()) {
            (true, true) => "`{}` (this tool takes no arguments)".to_string(),
            (false, true) => format!("with the fields {}", needed.join(", ")),
            (true, false) => format!("with any of the optional fields {}", optional.join(", ")),
            (false, false) => format!("with the fields {}; optional: {}", needed.join(", "), optional.join(", ")),
        }
    }

    fn is_offered(&self, name: &str) -> bool {
        self.names.iter().any(|offered| offered == name)
    }

    /// Up to three offered names nearest to `name` by edit distance.
    pub(crate) fn closest(&self, name: &str) -> Vec<&str> {
        picogent_support::closest::closest(name, self.names.iter().map(String::as_str))
    }
}

/// A call checked before running: either the parsed arguments, or the error the model reads.
enum Checked {
    Run { arguments: serde_json::Value, read_only: bool },
    Refused { outcome: ToolCallOutcome, message: String },
}

/// A call as the model asked for it, with its arguments read once: what goes back into the
/// conversation is always valid JSON (servers such as llama.cpp refuse every later request of a
/// conversation holding invalid JSON), and what the model wrote is kept for the record.
#[derive(Debug)]
pub(crate) struct PreparedCall {
    /// The call as the conversation keeps it: its arguments are valid JSON text.
    pub call: ToolCall,
    /// The model's own text, when it differs from `call.arguments` (repaired, or not JSON).
    pub raw_arguments: Option<String>,
    /// The arguments, or why they cannot be used.
    arguments: Result<serde_json::Value, ArgumentsError>,
    /// Set when the call must not run although its arguments are fine (cut off by the output
    /// limit, a repeat, one call per turn).
    refusal: Option<String>,
}

impl PreparedCall {
    /// Reads the arguments, repairing a fenced object or one followed by stray text.
    pub(crate) fn new(call: ToolCall, offered: &OfferedTools) -> PreparedCall {
        // Some models send an empty string for a call without arguments.
        let text = if call.arguments.trim().is_empty() { "{}" } else { call.arguments.trim() };
        let (arguments, canonical) = match read_arguments(text) {
            Ok((value, repaired)) => {
                let canonical = if repaired { Some(value.to_string()) } else { None };
                (Ok(value), canonical)
            }
            Err(problem) => (
                Err(ArgumentsError {
                    tool: call.name.clone(),
                    problem,
                    expected: offered.expected_arguments(&call.name),
                }),
                // Valid JSON in the conversation; the model reads why in the tool's answer.
                Some("{}".to_string()),
            ),
        };
        match canonical {
            Some(canonical) => {
                let raw = call.arguments.clone();
                PreparedCall {
                    call: ToolCall { arguments: canonical, ..call },
                    raw_arguments: Some(raw),
                    arguments,
                    refusal: None,
                }
            }
            None => PreparedCall { call, raw_arguments: None, arguments, refusal: None },
        }
    }

    /// The parsed arguments, when they can be used.
    pub(crate) fn arguments(&self) -> Option<&serde_json::Value> {
        self.arguments.as_ref().ok()
    }

    /// Marks the call as not to be run, saying why.
    pub(crate) fn refuse(&mut self, why: String) {
        self.refusal.get_or_insert(why);
    }
}

fn check(prepared: &PreparedCall, offered: &OfferedTools) -> Checked {
    let call = &prepared.call;
    if !offered.is_offered(&call.name) {
        let closest = offered.closest(&call.name);
        let what = if offered.withheld.contains(&call.name) {
            format!("tool `{}` is not offered in this run", call.name)
        } else {
            format!("unknown tool `{}`", call.name)
        };
        let message = if closest.is_empty() {
            format!("{what}: no tools are offered in this run")
        } else {
            format!("{what}; the closest offered tools are: {}", closest.join(", "))
        };
        return Checked::Refused { outcome: ToolCallOutcome::UnknownTool, message };
    }
    if let Some(why) = &prepared.refusal {
        return Checked::Refused { outcome: ToolCallOutcome::Refused, message: why.clone() };
    }
    match &prepared.arguments {
        Ok(arguments) => {
            Checked::Run { arguments: arguments.clone(), read_only: offered.read_only.contains(&call.name) }
        }
        Err(error) => Checked::Refused { outcome: ToolCallOutcome::InvalidArguments, message: error.to_string() },
    }
}

/// Why the arguments the model wrote for a call cannot be used: they are not one JSON object.
/// The call is not run; the model reads this text as the tool's error, with what the tool's
/// arguments look like.
#[derive(Debug, thiserror::Error)]
#[error("the arguments of `{tool}` are not one JSON object ({problem}); send exactly one JSON object, {expected}")]
struct ArgumentsError {
    /// The tool the model called.
    tool: String,
    /// What is wrong with the text.
    #[source]
    problem: NotOneObject,
    /// What the tool's arguments look like ([`OfferedTools::expected_arguments`]).
    expected: String,
}

/// How the text of a call's arguments fails to be one JSON object ([`read_arguments`]).
#[derive(Debug, thiserror::Error)]
enum NotOneObject {
    /// Valid JSON, but not an object: "an array", "a string".
    #[error("got {0}")]
    NotAnObject(&'static str),
    /// No `{` anywhere in the text.
    #[error("no JSON object found")]
    NoObject,
    /// The first `{` is never closed: the text is cut off, or its braces do not balance.
    #[error("the JSON object is cut off or unbalanced")]
    Unbalanced,
    /// Two objects (or an object after a stray `}`): guessing which one is meant is not safe.
    #[error("more than one JSON value: which one is meant is not clear")]
    SeveralValues,
    /// The balanced braces hold text that does not parse as JSON.
    #[error("not valid JSON: {0}")]
    InvalidJson(#[source] serde_json::Error),
}

/// Reads tool arguments: one JSON object, also when wrapped in a Markdown code fence or followed
/// by stray text, as long as exactly one object is there. Returns it and whether it had to be
/// repaired, or what is wrong.
fn read_arguments(text: &str) -> Result<(serde_json::Value, bool), NotOneObject> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value @ serde_json::Value::Object(_)) => return Ok((value, false)),
        Ok(other) => return Err(NotOneObject::NotAnObject(json_kind(&other))),
        Err(_) => {}
    }
    let unfenced = strip_fence(text);
    let start = unfenced.find('{').ok_or(NotOneObject::NoObject)?;
    let end = object_end(&unfenced[start..]).ok_or(NotOneObject::Unbalanced)?;
    let (object, rest) = unfenced[start..].split_at(end);
    // Text around the object is tolerated; a second object is ambiguous.
    if unfenced[..start].contains('}') || rest.contains('{') {
        return Err(NotOneObject::SeveralValues);
    }
    match serde_json::from_str::<serde_json::Value>(object) {
        Ok(value @ serde_json::Value::Object(_)) => Ok((value, true)),
        Ok(other) => Err(NotOneObject::NotAnObject(json_kind(&other))),
        Err(error) => Err(NotOneObject::InvalidJson(error)),
    }
}

/// `text` without a surrounding Markdown code fence (```` ```json … ``` ````).
fn strip_fence(text: &str) -> &str {
    let text = text.trim();
    let Some(inner) = text.strip_prefix("```") else { return text };
    // A language tag (`json`) runs to the end of the first line; the object search skips it
    // when the fence has no line break.
    let inner = inner.split_once('\n').map_or(inner, |(_language, body)| body);
    inner.trim_end().strip_suffix("```").unwrap_or(inner).trim()
}

/// The length of the JSON object `text` starts with (a `{`), counting braces outside strings;
/// `None` if it never closes.
fn object_end(text: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (index, c) in text.char_indices() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') => in_string = false,
            (true, false, _) => {}
            (false, _, '"') => in_string = true,
            (false, _, '{') => depth += 1,
            (false, _, '}') => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(index + 1);
                }
            }
            (false, _, _) => {}
        }
    }
    None
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// What one finished call produced: its record and the tool message for the conversation.
pub(crate) type CallResult = (ToolCallRecord, Message);

/// Everything a turn's calls need, borrowed from the run.
pub(crate) struct TurnContext<'a> {
    pub source: &'a dyn ToolSource,
    pub offered: &'a OfferedTools,
    pub tool_context: &'a ToolContext,
    pub run_start: Instant,
    pub turn: u32,
    pub max_result_bytes: usize,
}

/// Runs `calls` and writes each result into the same index of `results` as soon as it is known,
/// so a caller that stops this future early (cancellation, deadline) keeps the finished ones.
/// Consecutive read-only calls run concurrently; any other call runs alone, in the given order.
pub(crate) async fn run_calls(context: &TurnContext<'_>, calls: &[PreparedCall], results: &mut [Option<CallResult>]) {
    let checked: Vec<Checked> = calls.iter().map(|call| check(call, context.offered)).collect();
    let mut index = 0;
    while index < calls.len() {
        let batch_end = match &checked[index] {
            Checked::Run { read_only: true, .. } => {
                let mut end = index + 1;
                while end < calls.len() && matches!(checked[end], Checked::Run { read_only: true, .. }) {
                    end += 1;
                }
                end
            }
            _ => index + 1,
        };
        let batch = (index..batch_end).map(|i| run_one(context, &calls[i], &checked[i], i));
        for (i, result) in futures::future::join_all(batch).await {
            results[i] = Some(result);
        }
        index = batch_end;
    }
}

async fn run_one(
    context: &TurnContext<'_>,
    prepared: &PreparedCall,
    checked: &Checked,
    index: usize,
) -> (usize, CallResult) {
    let call = &prepared.call;
    let started_us = micros_since(context.run_start);
    let (outcome, content) = match checked {
        Checked::Refused { outcome, message } => (*outcome, message.clone()),
        Checked::Run { arguments, .. } => {
            let mut tool_context = context.tool_context.clone();
            // A stable key per (run, turn, call position): a replayed run makes the same writes once.
            tool_context.idempotency_key =
                context.tool_context.idempotency_key.as_ref().map(|key| format!("{key}-t{}-c{index}", context.turn));
            let result = context.source.call(&call.name, arguments.clone(), &tool_context).await;
            let outcome = if result.is_error { ToolCallOutcome::Error } else { ToolCallOutcome::Ok };
            // Whatever the source, its result is data: cleaned, cut, then fenced (so the cut
            // never takes the close). Refusals above are the loop's own words, not fenced.
            (outcome, context.tool_context.fence.wrap(&result_text(&result, context.max_result_bytes)))
        }
    };
    let is_error = outcome != ToolCallOutcome::Ok;
    let record = ToolCallRecord {
        id: call.id.clone(),
        name: call.name.clone(),
        turn: context.turn,
        outcome,
        started_us,
        ended_us: micros_since(context.run_start),
        raw_arguments: prepared.raw_arguments.clone(),
    };
    let content = if is_error { format!("{TOOL_ERROR_PREFIX}{content}") } else { content };
    (index, (record, Message::Tool { tool_call_id: call.id.clone(), name: call.name.clone(), content, is_error }))
}

/// The result a call gets when it was never run (budget spent, run stopped); the conversation
/// still needs an answer to every call the model made.
pub(crate) fn not_run(call: &ToolCall, turn: u32, at_us: u64, reason: &str) -> CallResult {
    let record = ToolCallRecord {
        id: call.id.clone(),
        name: call.name.clone(),
        turn,
        outcome: ToolCallOutcome::NotRun,
        started_us: at_us,
        ended_us: at_us,
        raw_arguments: None,
    };
    let message = Message::Tool {
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        content: format!("{TOOL_ERROR_PREFIX}not run: {reason}"),
        is_error: true,
    };
    (record, message)
}

pub(crate) fn micros_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The text the model reads for a result: the text blocks (a tool's dense, model-facing form),
/// or the structured content as JSON when there is no text; cut at `max_bytes`.
fn result_text(result: &ToolResult, max_bytes: usize) -> String {
    let text = match (&result.structured, result.text.trim().is_empty()) {
        (Some(value), true) => value.to_string(),
        _ => result.text.clone(),
    };
    // Tracker text (and an external server's) reaches the model through results too: it passes
    // the same cleaning as prompts, so hidden text never reaches the model from any path.
    truncate(picogent_prompts::clean_text(&text, usize::MAX), max_bytes)
}

fn truncate(text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… [cut: {} more bytes]", &text[..cut], text.len() - cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(names: &[&str]) -> OfferedTools {
        let tools = names
            .iter()
            .map(|name| ToolDefinition::new(name.to_string(), "d", std::sync::Arc::new(serde_json::Map::new())))
            .collect();
        OfferedTools::new(tools, &names.iter().map(|n| n.to_string()).collect::<Vec<_>>(), &Fence::random())
    }

    #[test]
    fn unknown_names_suggest_the_closest() {
        let tools = offered(&["get_task", "list_tasks", "send_message", "get_member"]);
        let call = ToolCall { id: "1".into(), name: "get_taks".into(), arguments: "{}".into() };
        let Checked::Refused { outcome, message } = check(&PreparedCall::new(call, &tools), &tools) else {
            panic!("accepted")
        };
        assert_eq!(outcome, ToolCallOutcome::UnknownTool);
        assert!(message.contains("closest offered tools are: get_task"), "{message}");
    }

    #[test]
    fn malformed_and_non_object_arguments_are_refused() {
        let tools = offered(&["get_task"]);
        let cases = [
            ("{\"task_id\": ", "cut off"),
            ("[1]", "got an array"),
            ("{\"a\": 1} {\"b\": 2}", "more than one"),
            ("not json", "no JSON object"),
        ];
        for (arguments, expected) in cases {
            let call = ToolCall { id: "1".into(), name: "get_task".into(), arguments: arguments.into() };
            let prepared = PreparedCall::new(call, &tools);
            assert_eq!(prepared.call.arguments, "{}", "the conversation keeps valid JSON");
            assert_eq!(prepared.raw_arguments.as_deref(), Some(arguments), "the record keeps the model's text");
            let Checked::Refused { outcome, message } = check(&prepared, &tools) else { panic!("accepted") };
            assert_eq!(outcome, ToolCallOutcome::InvalidArguments);
            assert!(message.contains(expected), "{message}");
            assert!(message.contains("send exactly one JSON object"), "{message}");
        }
        let call = ToolCall { id: "1".into(), name: "get_task".into(), arguments: "".into() };
        assert!(matches!(check(&PreparedCall::new(call, &tools), &tools), Checked::Run { .. }));
    }

    #[test]
    fn fenced_arguments_and_stray_text_are_repaired() {
        let tools = offered(&["get_task"]);
        let cases = [
            "```json\n{\"task_id\": \"TE-1\"}\n```",
            "```\n{\"task_id\": \"TE-1\"}```",
            "{\"task_id\": \"TE-1\"} I will now read the task.",
            "Arguments: {\"task_id\": \"TE-1\"}",
            "{\"task_id\": \"TE-1\"}}",
        ];
        for arguments in cases {
            let call = ToolCall { id: "1".into(), name: "get_task".into(), arguments: arguments.into() };
            let prepared = PreparedCall::new(call, &tools);
            assert_eq!(prepared.call.arguments, r#"{"task_id":"TE-1"}"#, "{arguments}");
            assert_eq!(prepared.raw_arguments.as_deref(), Some(arguments));
            let Checked::Run { arguments: parsed, .. } = check(&prepared, &tools) else {
                panic!("refused {arguments}")
            };
            assert_eq!(parsed["task_id"], "TE-1");
        }
        // A brace inside a string does not confuse the repair.
        let call =
            ToolCall { id: "1".into(), name: "get_task".into(), arguments: "```{\"task_id\": \"a}b\"}```".into() };
        assert_eq!(PreparedCall::new(call, &tools).arguments().unwrap()["task_id"], "a}b");
    }

    #[test]
    fn truncates_on_a_char_boundary() {
        assert_eq!(truncate("héllo".to_string(), 2), "h… [cut: 5 more bytes]");
        assert_eq!(truncate("short".to_string(), 10), "short");
    }

    #[test]
    fn offered_tools_keep_the_source_order() {
        let tools = ["a", "b", "c"]
            .iter()
            .map(|n| ToolDefinition::new(n.to_string(), "d", std::sync::Arc::new(serde_json::Map::new())))
            .collect();
        let offered = OfferedTools::new(tools, &["c".to_string(), "a".to_string()], &Fence::random());
        let names: Vec<&str> = offered.specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
    }
}
