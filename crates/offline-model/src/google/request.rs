//! A Gemini API `generateContent` request read into the project's types ([`ReadRequest`]), each
//! content and part on its own, so a malformed one is refused naming its place
//! (`contents[2].parts[0]: …`), as the real API names the field it cannot read.
//!
//! The request becomes the same [`Message`] list the other APIs make: each text part of
//! `systemInstruction` a [`Message::System`]; in a `user` content each `functionResponse` a
//! [`Message::Tool`] and each text part a [`Message::User`], in their order; a `model` content one
//! [`Message::Assistant`] (its texts joined, thought parts left out), its `functionCall`s calls
//! with their `args` serialized as the calls' JSON text.
//!
//! Gemini's calls need not carry ids: a call without one is given `call_<content>_<part>`, and a
//! `functionResponse` answers the earliest unanswered call of the latest `model` content with its
//! `id`, or else with its `name`. A response that answers no call is refused.

use serde::Deserialize;
use serde_json::Value;

use picogent_llm::{Message, TOOL_ERROR_PREFIX, ToolCall, ToolSpec};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest {
    #[serde(default)]
    contents: Option<Vec<Value>>,
    #[serde(default)]
    system_instruction: Option<Value>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    generation_config: Option<WireGenerationConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireGenerationConfig {
    #[serde(default)]
    max_output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WireContent {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    parts: Vec<Value>,
}

/// A tool entry: function declarations, or one of the API's own tools (search, code execution),
/// which the endpoint does not offer and leaves out.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireTool {
    #[serde(default)]
    function_declarations: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireFunctionDeclaration {
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// The OpenAPI subset of a schema …
    #[serde(default)]
    parameters: Option<Value>,
    /// … or a JSON Schema (Gemini CLI sends this one).
    #[serde(default)]
    parameters_json_schema: Option<Value>,
}

/// A part, as much of it as the endpoint reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart {
    #[serde(default)]
    text: Option<String>,
    /// A thought summary: not part of the answer's text.
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    function_call: Option<WireFunctionCall>,
    #[serde(default)]
    function_response: Option<WireFunctionResponse>,
    #[serde(default)]
    inline_data: Option<WireData>,
    #[serde(default)]
    file_data: Option<WireData>,
}

#[derive(Deserialize)]
struct WireFunctionCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
struct WireFunctionResponse {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    response: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireData {
    #[serde(default)]
    mime_type: Option<String>,
}

/// Why a request is not one the API takes: the 400 answer's message, naming the field.
#[derive(Debug, thiserror::Error)]
pub(super) enum Malformed {
    #[error("the request body is not a generateContent request: {0}")]
    NotARequest(serde_json::Error),
    /// One field or element is wrong; `at` names it.
    #[error("{at}: {problem}")]
    At { at: String, problem: Problem },
}

#[derive(Debug, thiserror::Error)]
pub(super) enum Problem {
    /// Not the shape its place takes (serde's words).
    #[error(transparent)]
    Shape(serde_json::Error),
    #[error("contents is not specified")]
    NoContents,
    #[error("Please use a valid role: user, model.")]
    UnknownRole(String),
    #[error("a part needs text, functionCall, functionResponse, inlineData or fileData")]
    EmptyPart,
    #[error("functionCall belongs in a model content")]
    CallInUserContent,
    #[error("functionResponse belongs in a user content")]
    ResponseInModelContent,
    #[error("functionCall.args should be an object")]
    ArgsNotAnObject,
    #[error("functionResponse {0:?} answers no function call of the previous model content")]
    AnswersNoCall(String),
}

impl Problem {
    fn at(self, at: impl Into<String>) -> Malformed {
        Malformed::At { at: at.into(), problem: self }
    }
}

fn read_as<'de, T: Deserialize<'de>>(at: &str, raw: &'de Value) -> Result<T, Malformed> {
    T::deserialize(raw).map_err(|error| Problem::Shape(error).at(at))
}

/// A readable request, in the project's form.
pub(super) struct ReadRequest {
    pub(super) max_tokens: Option<u64>,
    pub(super) messages: Vec<Message>,
    pub(super) tools: Vec<ToolSpec>,
}

/// The request read so far: its messages, and the calls of the latest model content not yet
/// answered (id, name).
#[derive(Default)]
struct Reader {
    messages: Vec<Message>,
    unanswered: Vec<(String, String)>,
}

/// Reads the wire request into the project's types; the error is the 400 answer's message.
pub(super) fn read_request(body: &Value) -> Result<ReadRequest, Malformed> {
    let request = WireRequest::deserialize(body).map_err(Malformed::NotARequest)?;
    let Some(contents) = &request.contents else {
        return Err(Problem::NoContents.at("contents"));
    };
    let mut tools = Vec::new();
    for (index, raw) in request.tools.iter().enumerate() {
        let at = format!("tools[{index}]");
        let tool: WireTool = read_as(&at, raw)?;
        for (number, raw) in tool.function_declarations.iter().enumerate() {
            let at = format!("{at}.functionDeclarations[{number}]");
            let declaration: WireFunctionDeclaration = read_as(&at, raw)?;
            let schema = declaration.parameters_json_schema.as_ref().or(declaration.parameters.as_ref());
            tools.push(crate::tool_spec(&declaration.name, declaration.description.as_deref(), schema));
        }
    }
    let mut reader = Reader::default();
    if let Some(system) = &request.system_instruction {
        read_system(&mut reader, system)?;
    }
    for (index, raw) in contents.iter().enumerate() {
        read_content(&mut reader, index, raw)?;
    }
    let max_tokens = request.generation_config.and_then(|config| config.max_output_tokens);
    Ok(ReadRequest { max_tokens, messages: reader.messages, tools })
}

/// `systemInstruction`: a content (its role ignored), or a string; each text part a system message.
fn read_system(reader: &mut Reader, raw: &Value) -> Result<(), Malformed> {
    if let Value::String(text) = raw {
        reader.messages.push(Message::System { content: text.clone() });
        return Ok(());
    }
    let content: WireContent = read_as("systemInstruction", raw)?;
    for (index, raw) in content.parts.iter().enumerate() {
        let at = format!("systemInstruction.parts[{index}]");
        let part: WirePart = read_as(&at, raw)?;
        if let Some(text) = part.text {
            reader.messages.push(Message::System { content: text });
        }
    }
    Ok(())
}

fn read_content(reader: &mut Reader, index: usize, raw: &Value) -> Result<(), Malformed> {
    let at = format!("contents[{index}]");
    let content: WireContent = read_as(&at, raw)?;
    // A content without a role is the user's, as the API takes it; `function` is the role older
    // clients give function responses.
    match content.role.as_deref().unwrap_or("user") {
        "user" | "function" => read_user_parts(reader, &at, &content.parts),
        "model" => read_model_parts(reader, index, &at, &content.parts),
        other => Err(Problem::UnknownRole(other.to_string()).at(format!("{at}.role"))),
    }
}

/// A user content's parts: each function response a tool message, each text (or data) part a
/// user message.
fn read_user_parts(reader: &mut Reader, at: &str, parts: &[Value]) -> Result<(), Malformed> {
    for (index, raw) in parts.iter().enumerate() {
        let at = format!("{at}.parts[{index}]");
        let part: WirePart = read_as(&at, raw)?;
        if part.function_call.is_some() {
            return Err(Problem::CallInUserContent.at(at));
        }
        if let Some(response) = part.function_response {
            let message = tool_message(reader, &at, response)?;
            reader.messages.push(message);
        } else if let Some(text) = part_text(&part) {
            reader.messages.push(Message::User { content: text });
        } else {
            return Err(Problem::EmptyPart.at(at));
        }
    }
    Ok(())
}

/// A part's text, or a note of its data (the endpoint reads no images).
fn part_text(part: &WirePart) -> Option<String> {
    if let Some(text) = &part.text {
        return Some(text.clone());
    }
    let data = part.inline_data.as_ref().or(part.file_data.as_ref())?;
    Some(format!("[{} data]", data.mime_type.as_deref().unwrap_or("binary")))
}

/// A function response as a tool message: its `output` (text as it is, anything else as JSON),
/// an error when the response is `{"error": …}`.
fn tool_message(reader: &mut Reader, at: &str, response: WireFunctionResponse) -> Result<Message, Malformed> {
    let position = match &response.id {
        Some(id) => reader.unanswered.iter().position(|(call, _)| call == id),
        None => None,
    }
    .or_else(|| reader.unanswered.iter().position(|(_, name)| *name == response.name));
    let Some(position) = position else {
        return Err(Problem::AnswersNoCall(response.name).at(format!("{at}.functionResponse")));
    };
    let (tool_call_id, name) = reader.unanswered.remove(position);
    let body = response.response.unwrap_or(Value::Null);
    let (content, is_error) = match (body.get("output"), body.get("error")) {
        (_, Some(error)) => (format!("{TOOL_ERROR_PREFIX}{}", value_text(error)), true),
        (Some(output), None) => (value_text(output), false),
        (None, None) => (value_text(&body), false),
    };
    let is_error = is_error || content.starts_with(TOOL_ERROR_PREFIX);
    Ok(Message::Tool { tool_call_id, name, content, is_error })
}

/// A string as it is, anything else as its JSON text.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A model content's parts: one assistant message, its text joined, its function calls calls.
fn read_model_parts(reader: &mut Reader, content: usize, at: &str, parts: &[Value]) -> Result<(), Malformed> {
    let mut texts: Vec<String> = Vec::new();
    let mut tool_calls = Vec::new();
    for (index, raw) in parts.iter().enumerate() {
        let at = format!("{at}.parts[{index}]");
        let part: WirePart = read_as(&at, raw)?;
        if part.function_response.is_some() {
            return Err(Problem::ResponseInModelContent.at(at));
        }
        if let Some(call) = part.function_call {
            let arguments = match call.args {
                None | Some(Value::Null) => "{}".to_string(),
                Some(object @ Value::Object(_)) => object.to_string(),
                Some(_) => return Err(Problem::ArgsNotAnObject.at(format!("{at}.functionCall.args"))),
            };
            let id = call.id.unwrap_or_else(|| format!("call_{content}_{index}"));
            tool_calls.push(ToolCall { id, name: call.name, arguments });
        } else if part.thought {
            continue;
        } else if let Some(text) = part_text(&part) {
            texts.push(text);
        }
        // A part with nothing the endpoint reads (a bare thought signature) adds nothing.
    }
    reader.unanswered = tool_calls.iter().map(|call| (call.id.clone(), call.name.clone())).collect();
    let content = (!texts.is_empty()).then(|| texts.concat());
    reader.messages.push(Message::Assistant { content, tool_calls, refusal: None });
    Ok(())
}
