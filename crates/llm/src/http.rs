//! What both wire formats share on the way to the server: the HTTP client with its timeouts, the
//! cap on requests in flight (`llm.max_concurrent_requests`), sending a body and reading a failed
//! answer's status, `Retry-After` and body, and reading server-sent events under the idle
//! timeout. The formats (`openai`, `anthropic`) own their shapes and how their
//! error bodies map to an [`LlmError`].
//!
//! Invariant: no more of an answer is read into memory than [`MAX_ANSWER_BYTES`] (a failed
//! answer's body: [`MAX_ERROR_BODY_BYTES`]); past it the rest is never read, and dropping the
//! response closes its connection.

use std::time::Duration;

use futures::StreamExt;

use crate::LlmError;
use crate::config::LlmConfig;
use picogent_support::retry::parse_retry_after;

/// Maps a failed answer (status, `Retry-After`, body) to the error the loop acts on.
pub(crate) type Classify = fn(u16, Option<Duration>, &[u8]) -> LlmError;

/// The most content blocks (Messages API) or tool calls (chat completions) one streamed answer
/// may have. Each event names the index it fills, and a server's index is not trusted with an
/// allocation: an index past this is a protocol error, a server failure to the loop.
pub(crate) const MAX_STREAMED_BLOCKS: usize = 256;

/// The most bytes of one answer read into memory: a whole (non-streamed) body, or everything a
/// streamed answer sends, which bounds the content its events add up to as well. An answer past
/// it is refused with [`LlmError::AnswerTooLarge`] without reading the rest. A model's answer
/// within any output cap in use is far smaller (a million tokens of text are about 4 MiB), so
/// only a broken or hostile server meets it.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// The most of a failed answer's body read: enough for any error message, which is all that is
/// read from it (the rest is dropped unread, not refused).
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct Transport {
    http: reqwest::Client,
    timeout_ms: u64,
    /// Answers are read as server-sent events, bounded by `idle_timeout` between bytes.
    pub(crate) stream: bool,
    idle_timeout: Duration,
    slots: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

impl Transport {
    pub(crate) fn new(config: &LlmConfig) -> Result<Transport, LlmError> {
        // A streamed answer is bounded by the idle timeout between its bytes, not by one deadline.
        let builder = match config.stream {
            true => reqwest::Client::builder().connect_timeout(Duration::from_millis(config.idle_timeout_ms)),
            false => reqwest::Client::builder().timeout(Duration::from_millis(config.timeout_ms)),
        };
        let http =
            builder.build().map_err(|e| LlmError::Config { message: format!("cannot build the http client: {e}") })?;
        Ok(Transport {
            http,
            timeout_ms: config.timeout_ms,
            stream: config.stream,
            idle_timeout: Duration::from_millis(config.idle_timeout_ms),
            slots: config
                .max_concurrent_requests
                .map(|slots| std::sync::Arc::new(tokio::sync::Semaphore::new(slots.max(1) as usize))),
        })
    }

    /// A place among the requests in flight, when they are capped; held for the whole answer.
    pub(crate) async fn slot(&self) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, LlmError> {
        match &self.slots {
            Some(slots) => Ok(Some(slots.acquire().await.map_err(|_| LlmError::Config { message: "closed".into() })?)),
            None => Ok(None),
        }
    }

    /// A POST of `body` to `url`, for the caller to add its headers to.
    pub(crate) fn post(&self, url: &str, body: &bytes::Bytes) -> reqwest::RequestBuilder {
        self.http.post(url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body.clone())
    }

    /// Sends the request and checks its status; the answer's body is the caller's to read.
    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
        classify: Classify,
    ) -> Result<reqwest::Response, LlmError> {
        let sending = request.send();
        let response = match self.stream {
            // Waiting for the headers counts as idle too.
            true => tokio::time::timeout(self.idle_timeout, sending)
                .await
                .map_err(|_| LlmError::Timeout { timeout_ms: self.idle_timeout.as_millis() as u64 })?,
            false => sending.await,
        }
        .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let (bytes, _whole) =
            read_at_most(response, MAX_ERROR_BODY_BYTES).await.map_err(|e| self.transport_error(&e))?;
        Err(classify(status.as_u16(), retry_after, &bytes))
    }

    /// The whole body of a non-streamed answer, at most [`MAX_ANSWER_BYTES`]: one announced or
    /// found to be longer is refused without reading the rest.
    pub(crate) async fn body(&self, response: reqwest::Response) -> Result<Vec<u8>, LlmError> {
        let too_large = LlmError::AnswerTooLarge { limit_bytes: MAX_ANSWER_BYTES };
        if response.content_length().is_some_and(|length| length > MAX_ANSWER_BYTES as u64) {
            return Err(too_large);
        }
        match read_at_most(response, MAX_ANSWER_BYTES).await.map_err(|e| self.transport_error(&e))? {
            (body, true) => Ok(body),
            (_, false) => Err(too_large),
        }
    }

    /// Reads the `data:` lines of a streamed answer to its end, handing each to `event`, which
    /// says whether the stream is done (`[DONE]`, `message_stop`). At most the idle timeout
    /// passes without a byte. A stream that closes before `event` said it is done also returns
    /// `Ok`: whether what was read is a whole answer is the format's to judge (`stream.rs`,
    /// `anthropic.rs`), and one cut short is a connection error there. A stream that sends more
    /// than [`MAX_ANSWER_BYTES`] in all (in events or in one endless line) is refused there. An
    /// event `event` cannot read is a protocol error: [`LlmError::BadResponse`], with its words.
    pub(crate) async fn events<E: std::error::Error>(
        &self,
        response: reqwest::Response,
        mut event: impl FnMut(&str) -> Result<bool, E>,
    ) -> Result<(), LlmError> {
        let mut body = response.bytes_stream();
        let mut pending: Vec<u8> = Vec::new();
        let mut read = 0usize;
        loop {
            let piece = match tokio::time::timeout(self.idle_timeout, body.next()).await {
                Err(_) => return Err(LlmError::Timeout { timeout_ms: self.idle_timeout.as_millis() as u64 }),
                Ok(None) => return Ok(()),
                Ok(Some(Err(error))) => return Err(self.transport_error(&error)),
                Ok(Some(Ok(piece))) => piece,
            };
            read = read.saturating_add(piece.len());
            if read > MAX_ANSWER_BYTES {
                return Err(LlmError::AnswerTooLarge { limit_bytes: MAX_ANSWER_BYTES });
            }
            // Only the new bytes are searched for a line's end, and the lines read are dropped
            // once per piece: a long line costs its length, not its length squared.
            let searched = pending.len();
            pending.extend_from_slice(&piece);
            let mut line_start = 0;
            let mut search_from = searched;
            while let Some(at) = pending[search_from..].iter().position(|byte| *byte == b'\n') {
                let line_end = search_from + at;
                let line = String::from_utf8_lossy(&pending[line_start..line_end]);
                (line_start, search_from) = (line_end + 1, line_end + 1);
                let Some(data) = line.trim().strip_prefix("data:").map(str::trim) else { continue };
                if event(data).map_err(|error| LlmError::BadResponse { message: error.to_string() })? {
                    return Ok(());
                }
            }
            pending.drain(..line_start);
        }
    }

    pub(crate) fn transport_error(&self, error: &reqwest::Error) -> LlmError {
        if error.is_timeout() {
            LlmError::Timeout { timeout_ms: self.timeout_ms }
        } else {
            // Connect failures, resets and bodies cut short: all worth another attempt.
            LlmError::Connection { message: error_chain(error) }
        }
    }
}

/// The body of `response`, read up to `limit` bytes, and whether that is all of it. Reading
/// stops at the limit: the rest is never read, and the response (and with it the connection) is
/// dropped.
pub(crate) async fn read_at_most(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
