//! A Messages API request read into the project's types ([`ReadRequest`]), each element of a
//! list on its own, so a malformed one is refused naming its place as the real API does
//! ([`Malformed`]), and the cache can hash each unit as it was sent.
//!
//! The request becomes the same [`Message`] list the chat-completions path makes, so the planner,
//! the script's checks, the faults and the record are shared: the system text (a string, or each
//! text block) becomes a [`Message::System`]; in a user message each `tool_result` becomes a
//! [`Message::Tool`] (its tool's name taken from the earlier `tool_use` with that id) and each
//! text block a [`Message::User`], in their order; an assistant message becomes one
//! [`Message::Assistant`] (its texts joined), its `tool_use` inputs serialized as the calls' JSON
//! text. This is the inverse of how a client folds its messages into the API's alternating turns,
//! so the prompt's token count here is the client's estimate.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::cache::{self, Unit};
use picogent_llm::{Message, TOOL_ERROR_PREFIX, ToolCall, ToolSpec};

/// The real API's most `cache_control` breakpoints in one request.
const MAX_BREAKPOINTS: usize = 4;

// The request shape, as much of it as the endpoint reads; each element of a list is read on its
// own (`read_request`), so an error can say which one is wrong and the cache can hash it as sent.
#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    model: String,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    system: Option<Value>,
    #[serde(default)]
    messages: Option<Vec<Value>>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    temperature: Option<f64>,
}

#[derive(Deserialize)]
struct WireMessage {
    role: String,
    content: Value,
}

#[derive(Deserialize)]
struct WireTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    input_schema: Value,
    #[serde(default)]
    cache_control: Option<CacheControl>,
}

/// A content block, as much of it as the endpoint reads.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        #[serde(default)]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<Value>,
        #[serde(default)]
        is_error: bool,
        #[serde(default)]
        cache_control: Option<CacheControl>,
    },
}

/// A text block: the system's blocks and a tool result's.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireTextBlock {
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<CacheControl>,
    },
}

#[derive(Deserialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    ttl: Option<String>,
}

/// Why a request is not one the API takes: the 400 answer's message, worded as the real API words
/// it (`messages[2].content[0].input: Input should be a valid dictionary`), so a client reads it
/// as it would the real one's.
#[derive(Debug, thiserror::Error)]
pub(super) enum Malformed {
    #[error("the request body is not a messages request: {0}")]
    NotARequest(serde_json::Error),
    #[error("A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}.")]
    TooManyBreakpoints { found: usize },
    /// One field or element is wrong; `at` names it as the API does.
    #[error("{at}: {problem}")]
    At { at: String, problem: Problem },
}

/// What is wrong with one field or element of a request.
#[derive(Debug, thiserror::Error)]
pub(super) enum Problem {
    /// Not the shape its place takes (serde's words).
    #[error(transparent)]
    Shape(serde_json::Error),
    #[error("Field required")]
    Required,
    #[error("Input should be greater than or equal to 1")]
    BelowOne,
    #[error("Input should be between 0 and 1")]
    NotBetweenZeroAndOne,
    #[error("Input should be an object")]
    NotAnObject,
    #[error("Input should be a valid dictionary")]
    NotADictionary,
    #[error("Input should be 'ephemeral'")]
    NotEphemeral,
    #[error("Input should be '5m' or '1h'")]
    UnknownTtl,
    #[error("Input should be a valid string or a list of text blocks")]
    NotTextBlocks,
    #[error("Input should be a valid string or a list of content blocks")]
    NotContentBlocks,
    #[error("Input should be 'user', 'assistant' or 'system', not {0:?}")]
    UnknownRole(String),
    #[error("tool_use_id {0:?} answers no earlier tool_use block")]
    AnswersNoToolUse(String),
    #[error("a tool_use block belongs in an assistant message")]
    ToolUseInUserMessage,
    #[error("a tool_result block belongs in a user message")]
    ToolResultInAssistantMessage,
}

impl Problem {
    /// This problem, at `at`.
    fn at(self, at: impl Into<String>) -> Malformed {
        Malformed::At { at: at.into(), problem: self }
    }
}

/// `raw` read as the wire type its place `at` takes.
fn read_as<'de, T: Deserialize<'de>>(at: &str, raw: &'de Value) -> Result<T, Malformed> {
    T::deserialize(raw).map_err(|error| Problem::Shape(error).at(at))
}

/// A readable request: the project's form of it, and its units for the cache.
pub(super) struct ReadRequest {
    pub(super) model: String,
    pub(super) max_tokens: u64,
    pub(super) messages: Vec<Message>,
    pub(super) tools: Vec<ToolSpec>,
    pub(super) units: Vec<Unit>,
}

/// A unit whose token count is known once the whole request is read.
struct PendingUnit {
    content_hash: u64,
    owner: Owner,
    breakpoint: bool,
}

/// What a unit's prefix counts through: a tool of the list, or one of the project's messages.
#[derive(Clone, Copy)]
enum Owner {
    Tool(usize),
    Message(usize),
}

/// The request read so far.
#[derive(Default)]
struct Reader {
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
    units: Vec<PendingUnit>,
    breakpoints: usize,
}

impl Reader {
    /// Notes a unit carrying `markers` `cache_control` markers (its own and its nested blocks');
    /// `place` and `raw` name and hash it ([`cache::content_hash`]).
    fn unit(&mut self, place: &str, raw: &Value, owner: Owner, markers: usize) {
        self.breakpoints += markers;
        let breakpoint = markers > 0;
        self.units.push(PendingUnit { content_hash: cache::content_hash(place, raw), owner, breakpoint });
    }

    /// The index the next message will have.
    fn next_message(&self) -> Owner {
        Owner::Message(self.messages.len())
    }
}

/// `cache_control` is `{type: "ephemeral"}`, with `ttl` `5m` or `1h`; anything else is refused.
fn check_cache_control(at: &str, cache_control: Option<&CacheControl>) -> Result<bool, Malformed> {
    let Some(cache_control) = cache_control else {
        return Ok(false);
    };
    if cache_control.kind != "ephemeral" {
        return Err(Problem::NotEphemeral.at(format!("{at}.cache_control.type")));
    }
    match cache_control.ttl.as_deref() {
        None | Some("5m") | Some("1h") => Ok(true),
        Some(_) => Err(Problem::UnknownTtl.at(format!("{at}.cache_control.ttl"))),
    }
}

/// Reads the wire request into the project's types; the error is the 400 answer's message.
pub(super) fn read_request(body: &Value) -> Result<ReadRequest, Malformed> {
    let request = WireRequest::deserialize(body).map_err(Malformed::NotARequest)?;
    let Some(max_tokens) = request.max_tokens else {
        return Err(Problem::Required.at("max_tokens"));
    };
    if max_tokens == 0 {
        return Err(Problem::BelowOne.at("max_tokens"));
    }
    let Some(wire_messages) = &request.messages else {
        return Err(Problem::Required.at("messages"));
    };
    if let Some(temperature) = request.temperature
        && !(0.0..=1.0).contains(&temperature)
    {
        return Err(Problem::NotBetweenZeroAndOne.at("temperature"));
    }
    let mut reader = Reader::default();
    for (index, raw) in request.tools.iter().enumerate() {
        read_tool(&mut reader, index, raw)?;
    }
    if let Some(system) = &request.system {
        read_system(&mut reader, system)?;
    }
    for (index, raw) in wire_messages.iter().enumerate() {
        read_message(&mut reader, index, raw)?;
    }
    if reader.breakpoints > MAX_BREAKPOINTS {
        return Err(Malformed::TooManyBreakpoints { found: reader.breakpoints });
    }
    let units = token_units(&reader);
    Ok(ReadRequest { model: request.model, max_tokens, messages: reader.messages, tools: reader.tools, units })
}

fn read_tool(reader: &mut Reader, index: usize, raw: &Value) -> Result<(), Malformed> {
    let at = format!("tools[{index}]");
    let tool: WireTool = read_as(&at, raw)?;
    if !tool.input_schema.is_object() {
        return Err(Problem::NotAnObject.at(format!("{at}.input_schema")));
    }
    let breakpoint = check_cache_control(&at, tool.cache_control.as_ref())?;
    reader.tools.push(crate::tool_spec(&tool.name, tool.description.as_deref(), Some(&tool.input_schema)));
    reader.unit("tool", raw, Owner::Tool(index), usize::from(breakpoint));
    Ok(())
}

/// `system` is a string, or a list of text blocks: each becomes a system message.
fn read_system(reader: &mut Reader, system: &Value) -> Result<(), Malformed> {
    match system {
        Value::String(text) => {
            reader.unit("system", &text_block(text), reader.next_message(), 0);
            reader.messages.push(Message::System { content: text.clone() });
        }
        Value::Array(blocks) => {
            for (index, raw) in blocks.iter().enumerate() {
                let at = format!("system[{index}]");
                let WireTextBlock::Text { text, cache_control } = read_as(&at, raw)?;
                let breakpoint = check_cache_control(&at, cache_control.as_ref())?;
                reader.unit("system", raw, reader.next_message(), usize::from(breakpoint));
                reader.messages.push(Message::System { content: text });
            }
        }
        _ => return Err(Problem::NotTextBlocks.at("system")),
    }
    Ok(())
}

/// A string content as the text block it stands for, so the cache sees both forms alike.
fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn read_message(reader: &mut Reader, index: usize, raw: &Value) -> Result<(), Malformed> {
    let at = format!("messages[{index}]");
    let message: WireMessage = read_as(&at, raw)?;
    let place = format!("message {index} {}", message.role);
    let string_block;
    let blocks: &[Value] = match &message.content {
        Value::String(text) => {
            string_block = [text_block(text)];
            &string_block
        }
        Value::Array(blocks) => blocks,
        _ => return Err(Problem::NotContentBlocks.at(format!("{at}.content"))),
    };
    match message.role.as_str() {
        "user" => read_user_blocks(reader, &at, &place, blocks),
        "assistant" => read_assistant_blocks(reader, &at, &place, blocks),
        "system" => read_system_blocks(reader, &at, &place, blocks),
        other => Err(Problem::UnknownRole(other.to_string()).at(format!("{at}.role"))),
    }
}

/// A system message among the others (Claude Code 2.1 sends its context so, after the first
/// user message): each text block a system message, where the client put it.
fn read_system_blocks(reader: &mut Reader, at: &str, place: &str, blocks: &[Value]) -> Result<(), Malformed> {
    for (index, raw) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{index}]");
        let WireTextBlock::Text { text, cache_control } = read_as(&at, raw)?;
        let markers = usize::from(check_cache_control(&at, cache_control.as_ref())?);
        reader.unit(place, raw, reader.next_message(), markers);
        reader.messages.push(Message::System { content: text });
    }
    Ok(())
}

/// A user message's blocks: each tool result a tool message, each text block a user message (a
/// client sends each of its messages as one block, merged into one turn as the API's alternation
/// of roles asks).
fn read_user_blocks(reader: &mut Reader, at: &str, place: &str, blocks: &[Value]) -> Result<(), Malformed> {
    for (index, raw) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{index}]");
        let (message, markers) = match read_as(&at, raw)? {
            WireBlock::Text { text, cache_control } => {
                let markers = usize::from(check_cache_control(&at, cache_control.as_ref())?);
                (Message::User { content: text }, markers)
            }
            WireBlock::ToolResult { tool_use_id, content, is_error, cache_control } => {
                let own = usize::from(check_cache_control(&at, cache_control.as_ref())?);
                let (content, nested) = tool_result_text(&at, content.as_ref())?;
                let Some(name) = crate::tool_name_of_call(&reader.messages, &tool_use_id) else {
                    return Err(Problem::AnswersNoToolUse(tool_use_id).at(at));
                };
                // The flag is the wire's word for an error; the prefix is the project's.
                let is_error = is_error || content.starts_with(TOOL_ERROR_PREFIX);
                (Message::Tool { tool_call_id: tool_use_id, name, content, is_error }, own + nested)
            }
            WireBlock::ToolUse { .. } => return Err(Problem::ToolUseInUserMessage.at(at)),
        };
        reader.unit(place, raw, reader.next_message(), markers);
        reader.messages.push(message);
    }
    Ok(())
}

/// A tool result's content (a string, or text blocks joined) and how many breakpoints its blocks
/// carry.
fn tool_result_text(at: &str, content: Option<&Value>) -> Result<(String, usize), Malformed> {
    match content {
        None | Some(Value::Null) => Ok((String::new(), 0)),
        Some(Value::String(text)) => Ok((text.clone(), 0)),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            let mut breakpoints = 0;
            for (index, raw) in blocks.iter().enumerate() {
                let at = format!("{at}.content[{index}]");
                let WireTextBlock::Text { text: part, cache_control } = read_as(&at, raw)?;
                breakpoints += usize::from(check_cache_control(&at, cache_control.as_ref())?);
                text.push_str(&part);
            }
            Ok((text, breakpoints))
        }
        Some(_) => Err(Problem::NotTextBlocks.at(format!("{at}.content"))),
    }
}

/// An assistant message's blocks: one assistant message, its text joined, its tool uses calls.
fn read_assistant_blocks(reader: &mut Reader, at: &str, place: &str, blocks: &[Value]) -> Result<(), Malformed> {
    let mut texts: Vec<String> = Vec::new();
    let mut tool_calls = Vec::new();
    let owner = reader.next_message();
    for (index, raw) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{index}]");
        let breakpoint = match read_as(&at, raw)? {
            WireBlock::Text { text, cache_control } => {
                texts.push(text);
                check_cache_control(&at, cache_control.as_ref())?
            }
            WireBlock::ToolUse { id, name, input, cache_control } => {
                if !input.is_object() {
                    return Err(Problem::NotADictionary.at(format!("{at}.input")));
                }
                tool_calls.push(ToolCall { id, name, arguments: input.to_string() });
                check_cache_control(&at, cache_control.as_ref())?
            }
            WireBlock::ToolResult { .. } => return Err(Problem::ToolResultInAssistantMessage.at(at)),
        };
        // Every block counts through the whole message: approximate inside it, exact at its end.
        reader.unit(place, raw, owner, usize::from(breakpoint));
    }
    let content = (!texts.is_empty()).then(|| texts.concat());
    reader.messages.push(Message::Assistant { content, tool_calls, refusal: None });
    Ok(())
}

/// The units with their token counts, now that every message is known.
fn token_units(reader: &Reader) -> Vec<Unit> {
    let (through_tools, through_messages) = cache::running_tokens(&reader.tools, &reader.messages);
    let last = through_messages.last().or(through_tools.last()).copied().unwrap_or(0);
    reader
        .units
        .iter()
        .map(|unit| {
            let tokens_through = match unit.owner {
                Owner::Tool(index) => through_tools.get(index),
                Owner::Message(index) => through_messages.get(index),
            };
            Unit {
                content_hash: unit.content_hash,
                tokens_through: tokens_through.copied().unwrap_or(last),
                breakpoint: unit.breakpoint,
            }
        })
        .collect()
}
