//! What both wire formats share on the way to the server: the HTTP client with its timeouts, the
//! cap on requests in flight (`llm.max_concurrent_requests`), sending a body and reading a failed
//! answer's status, `Retry-After` and body, and reading server-sent events under the idle
//! timeout. The formats (`openai`, `anthropic`) own their shapes and how their
//! error bodies map to an [`LlmError`].

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
        let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
        Err(classify(status.as_u16(), retry_after, &bytes))
    }

    /// The whole body of a non-streamed answer.
    pub(crate) async fn body(&self, response: reqwest::Response) -> Result<bytes::Bytes, LlmError> {
        response.bytes().await.map_err(|e| self.transport_error(&e))
    }

    /// Reads the `data:` lines of a streamed answer to its end, handing each to `event`, which
    /// says whether the stream is done (`[DONE]`, `message_stop`). At most the idle timeout
    /// passes without a byte. A stream that closes before `event` said it is done also returns
    /// `Ok`: whether what was read is a whole answer is the format's to judge (`stream.rs`,
    /// `anthropic.rs`), and one cut short is a connection error there.
    pub(crate) async fn events(
        &self,
        response: reqwest::Response,
        mut event: impl FnMut(&str) -> Result<bool, String>,
    ) -> Result<(), LlmError> {
        let mut body = response.bytes_stream();
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let piece = match tokio::time::timeout(self.idle_timeout, body.next()).await {
                Err(_) => return Err(LlmError::Timeout { timeout_ms: self.idle_timeout.as_millis() as u64 }),
                Ok(None) => return Ok(()),
                Ok(Some(Err(error))) => return Err(self.transport_error(&error)),
                Ok(Some(Ok(piece))) => piece,
            };
            pending.extend_from_slice(&piece);
            while let Some(end) = pending.iter().position(|byte| *byte == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                let Some(data) = line.trim().strip_prefix("data:").map(str::trim) else { continue };
                if event(data).map_err(|message| LlmError::BadResponse { message })? {
                    return Ok(());
                }
            }
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
