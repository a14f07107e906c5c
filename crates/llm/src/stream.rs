//! Reading a streamed answer (`llm.stream`): server-sent events of chat completion chunks, put
//! back together into one answer. The read ([`crate::http::Transport::events`]) is bounded by an
//! idle timeout between bytes, not by a deadline for the whole answer, so a slow local model that
//! keeps writing is not cut off.
//!
//! The chunk shapes are read leniently (only the fields used), as servers differ in the rest.
//!
//! The answer is whole at `[DONE]`, or, from servers that never send `[DONE]` (older
//! llama.cpp, TGI and others), once a chunk gave its `finish_reason`. A stream that closes with
//! neither was cut short: a connection error, retried as a dropped connection is — as a Messages
//! API stream that closes before `message_stop` is. A tool call's `index` past
//! [`MAX_STREAMED_BLOCKS`] is a protocol error, never an allocation.

use serde::Deserialize;

use crate::http::MAX_STREAMED_BLOCKS;
use crate::{ChatRequest, ChatResponse, FinishReason, LlmError, ToolCall, Usage};

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Deserialize)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// Why a streamed chunk could not be added to the answer: a protocol error, which the transport
/// reports as [`LlmError::BadResponse`] (a server failure, retried).
#[derive(Debug, thiserror::Error)]
pub(super) enum ChunkError {
    #[error("a streamed chunk is not valid: {0}")]
    NotJson(serde_json::Error),
    #[error("a streamed tool call has index {index}: an answer has at most {MAX_STREAMED_BLOCKS} tool calls")]
    IndexPastCap { index: usize },
}

/// An answer being put together from its chunks.
#[derive(Debug, Default)]
pub(super) struct Streamed {
    content: Option<String>,
    refusal: Option<String>,
    /// By the index the server gives each call.
    tool_calls: Vec<ToolCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    /// `[DONE]` arrived.
    done: bool,
}

impl Streamed {
    /// Adds one event's `data`; `true` once the stream says it is done.
    pub(super) fn add_event(&mut self, data: &str) -> Result<bool, ChunkError> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(ChunkError::NotJson)?;
        self.add(chunk)?;
        Ok(false)
    }

    fn add(&mut self, chunk: Chunk) -> Result<(), ChunkError> {
        if let Some(usage) = chunk.usage {
            let cached = usage.prompt_tokens_details.and_then(|details| details.cached_tokens).unwrap_or(0);
            self.usage = Some(Usage {
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                cached_tokens: cached.min(usage.prompt_tokens),
                cache_write_tokens: 0,
                estimated: false,
            });
        }
        let Some(choice) = chunk.choices.into_iter().next() else { return Ok(()) };
        if let Some(text) = choice.delta.content {
            self.content.get_or_insert_with(String::new).push_str(&text);
        }
        if let Some(text) = choice.delta.refusal {
            self.refusal.get_or_insert_with(String::new).push_str(&text);
        }
        for delta in choice.delta.tool_calls {
            if delta.index >= MAX_STREAMED_BLOCKS {
                return Err(ChunkError::IndexPastCap { index: delta.index });
            }
            while self.tool_calls.len() <= delta.index {
                self.tool_calls.push(ToolCall { id: String::new(), name: String::new(), arguments: String::new() });
            }
            let call = &mut self.tool_calls[delta.index];
            if let Some(id) = delta.id {
                call.id = id;
            }
            if let Some(function) = delta.function {
                if let Some(name) = function.name {
                    call.name.push_str(&name);
                }
                if let Some(arguments) = function.arguments {
                    call.arguments.push_str(&arguments);
                }
            }
        }
        if choice.finish_reason.is_some() {
            self.finish_reason = choice.finish_reason;
        }
        Ok(())
    }

    /// The whole answer, as a non-streamed one would have been read.
    pub(super) fn into_response(self, request: &ChatRequest<'_>) -> Result<ChatResponse, LlmError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(LlmError::Connection {
                message: "the answer's stream ended before a finish_reason or [DONE]: it was cut short".to_string(),
            });
        }
        let finish_reason = match self.finish_reason.as_deref() {
            Some("stop") => FinishReason::Stop,
            Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
            Some("length") => FinishReason::Length,
            Some("content_filter") => FinishReason::ContentFilter,
            _ => FinishReason::Other,
        };
        let tool_calls: Vec<ToolCall> = self.tool_calls.into_iter().filter(|call| !call.name.is_empty()).collect();
        let usage = self.usage.unwrap_or_else(|| {
            crate::estimated_usage(request, self.content.as_deref(), self.refusal.as_deref(), &tool_calls)
        });
        let content = self.content.map(|text| crate::strip_reasoning(&text));
        Ok(ChatResponse { content, tool_calls, refusal: self.refusal, finish_reason, usage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_add_up_to_one_answer() {
        let mut answer = Streamed::default();
        let chunks = [
            r#"{"choices":[{"delta":{"role":"assistant","content":"<think>x</think>Hel"}}]}"#,
            r#"{"choices":[{"delta":{"content":"lo"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"get_task","arguments":"{\"task"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"_id\": \"TE-1\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5}}"#,
        ];
        for chunk in chunks {
            answer.add(serde_json::from_str(chunk).unwrap()).unwrap();
        }
        let request = ChatRequest { messages: &[], tools: &[], max_output_tokens: None };
        let response = answer.into_response(&request).unwrap();
        assert_eq!(response.content.as_deref(), Some("Hello"));
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].id, "c1");
        assert_eq!(response.tool_calls[0].arguments, r#"{"task_id": "TE-1"}"#);
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!((response.usage.prompt_tokens, response.usage.estimated), (12, false));
    }

    #[test]
    fn a_stream_cut_short_is_a_connection_error_and_one_without_done_after_its_finish_reason_is_whole() {
        use picogent_support::retry::{RetryDecision, Retryable};
        let request = ChatRequest { messages: &[], tools: &[], max_output_tokens: None };
        let text = r#"{"choices":[{"delta":{"content":"Hel"}}]}"#;
        // Closed after some text: neither a finish_reason nor [DONE].
        let mut cut = Streamed::default();
        assert!(!cut.add_event(text).unwrap());
        let error = cut.into_response(&request).unwrap_err();
        assert!(matches!(error, LlmError::Connection { .. }), "{error:?}");
        assert_eq!(error.retry_decision(), RetryDecision::Retry, "retried as a dropped connection");
        // A server that never sends [DONE]: whole once the finish_reason came.
        let mut undone = Streamed::default();
        undone.add_event(text).unwrap();
        undone.add_event(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#).unwrap();
        assert_eq!(undone.into_response(&request).unwrap().content.as_deref(), Some("Hel"));
        // [DONE] alone ends it too.
        let mut done = Streamed::default();
        done.add_event(text).unwrap();
        assert!(done.add_event("[DONE]").unwrap());
        assert_eq!(done.into_response(&request).unwrap().finish_reason, FinishReason::Other);
    }

    #[test]
    fn a_tool_call_index_past_the_cap_is_refused_without_allocating() {
        let mut answer = Streamed::default();
        let huge = format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{},"id":"c","function":{{"name":"get_task"}}}}]}}}}]}}"#,
            usize::MAX / 2
        );
        let error = answer.add_event(&huge).unwrap_err();
        assert!(matches!(error, ChunkError::IndexPastCap { index } if index == usize::MAX / 2), "{error:?}");
        assert!(error.to_string().contains("at most 256 tool calls"), "{error}");
        assert!(answer.tool_calls.capacity() <= MAX_STREAMED_BLOCKS, "nothing was allocated for it");
        let last = MAX_STREAMED_BLOCKS - 1;
        let fits = format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{last},"id":"c","function":{{"name":"get_task"}}}}]}}}}]}}"#
        );
        answer.add_event(&fits).unwrap();
        assert_eq!(answer.tool_calls.len(), MAX_STREAMED_BLOCKS);
    }
}
