//! A streamed Messages API answer put together from its server-sent events, into the
//! [`WireAnswer`] a whole answer would have been. A block's `index` past [`MAX_STREAMED_BLOCKS`]
//! is a protocol error, never an allocation.

use serde::Deserialize;
use serde_json::json;

use super::{ErrorObject, WireAnswer, WireBlock, WireUsage, classify_error};
use crate::LlmError;
use crate::http::MAX_STREAMED_BLOCKS;

/// Why a streamed event could not be added to the answer: a protocol error, which the transport
/// reports as [`LlmError::BadResponse`] (a server failure, retried).
#[derive(Debug, thiserror::Error)]
pub(super) enum EventError {
    #[error("a streamed event is not valid: {0}")]
    NotJson(serde_json::Error),
    #[error("a streamed content block has index {index}: an answer has at most {MAX_STREAMED_BLOCKS} blocks")]
    IndexPastCap { index: usize },
}

/// A streamed answer being put together from its events: `message_start` (the usage so far),
/// `content_block_start` / `_delta` / `_stop` per block, `message_delta` (the stop reason and the
/// final usage), `message_stop`; an `error` event ends it with that error. A stream that closes
/// before `message_stop` was cut short: a connection error, retried as a dropped connection is.
#[derive(Debug, Default)]
pub(super) struct Streamed {
    /// By the block's index: text, or a tool call whose input arrives as JSON pieces. At most
    /// [`MAX_STREAMED_BLOCKS`]: an index past it is a protocol error, not an allocation.
    pub(super) blocks: Vec<StreamedBlock>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
    error: Option<ErrorObject>,
    /// `message_stop` arrived: the answer is whole.
    stopped: bool,
}

#[derive(Debug, Default)]
pub(super) enum StreamedBlock {
    #[default]
    Other,
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: EventMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: WireBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Error {
        error: ErrorObject,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct EventMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

impl Streamed {
    /// Adds one event's `data`; `true` at `message_stop`.
    pub(super) fn add_event(&mut self, data: &str) -> Result<bool, EventError> {
        let event: Event = serde_json::from_str(data).map_err(EventError::NotJson)?;
        match event {
            Event::MessageStart { message } => self.usage = message.usage,
            Event::ContentBlockStart { index, content_block } => {
                if index >= MAX_STREAMED_BLOCKS {
                    return Err(EventError::IndexPastCap { index });
                }
                while self.blocks.len() <= index {
                    self.blocks.push(StreamedBlock::Other);
                }
                self.blocks[index] = match content_block {
                    WireBlock::Text { text } => StreamedBlock::Text(text),
                    WireBlock::ToolUse { id, name, input } => {
                        // The input comes in the deltas; the start carries `{}`.
                        let input = if input.as_object().is_some_and(|o| !o.is_empty()) {
                            input.to_string()
                        } else {
                            String::new()
                        };
                        StreamedBlock::ToolUse { id, name, input }
                    }
                    WireBlock::Other | WireBlock::RawToolUse { .. } => StreamedBlock::Other,
                };
            }
            Event::ContentBlockDelta { index, delta } => match (self.blocks.get_mut(index), delta) {
                (Some(StreamedBlock::Text(text)), Delta::Text { text: piece }) => text.push_str(&piece),
                (Some(StreamedBlock::ToolUse { input, .. }), Delta::InputJson { partial_json }) => {
                    input.push_str(&partial_json)
                }
                _ => {}
            },
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if let Some(later) = usage {
                    self.usage.get_or_insert_with(WireUsage::default).update(later);
                }
            }
            Event::MessageStop => {
                self.stopped = true;
                return Ok(true);
            }
            Event::Error { error } => {
                self.error = Some(error);
                return Ok(true);
            }
            Event::Other => {}
        }
        Ok(false)
    }

    pub(super) fn into_answer(self) -> Result<WireAnswer, LlmError> {
        if let Some(error) = self.error {
            // An error mid-stream (`overloaded_error` most often) is classified as the same
            // error before the stream would have been, with the status its type stands for.
            let status = match error.kind.as_str() {
                "overloaded_error" => 529,
                "rate_limit_error" => 429,
                _ => 500,
            };
            let body =
                serde_json::to_vec(&json!({"type": "error", "error": {"type": error.kind, "message": error.message}}))
                    .unwrap_or_default();
            return Err(classify_error(status, None, &body));
        }
        if !self.stopped {
            return Err(LlmError::Connection {
                message: "the answer's stream ended before `message_stop`: it was cut short".to_string(),
            });
        }
        let content = self
            .blocks
            .into_iter()
            .map(|block| match block {
                StreamedBlock::Text(text) => WireBlock::Text { text },
                StreamedBlock::ToolUse { id, name, input } if input.trim().is_empty() => {
                    WireBlock::ToolUse { id, name, input: json!({}) }
                }
                StreamedBlock::ToolUse { id, name, input } => match serde_json::from_str(&input) {
                    Ok(parsed) => WireBlock::ToolUse { id, name, input: parsed },
                    // Arguments that are not JSON stay the model's text, for the loop to repair
                    // (a fenced object) or refuse, as on the other API.
                    Err(_) => WireBlock::RawToolUse { id, name, arguments: input },
                },
                StreamedBlock::Other => WireBlock::Other,
            })
            .collect();
        Ok(WireAnswer { content, stop_reason: self.stop_reason, usage: self.usage })
    }
}
