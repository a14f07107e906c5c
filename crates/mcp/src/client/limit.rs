//! The size limit on what an external server sends (`mcp_servers.*.max_result_bytes`), kept
//! while its stdout is read, so no more of a message is ever held than the limit.
//!
//! rmcp's stdio transport has a line limit of its own (16 MiB), but a line over it is dropped
//! and the connection kept: the call it answered then waited its whole timeout, since its
//! answer never came. [`LimitedLines`] sits between the child's stdout and that transport and
//! counts each line as it passes:
//!
//! - a line within the limit passes unchanged;
//! - past the limit, the rest of the line is read and thrown away, never kept. What had passed
//!   is ended with one more byte and a newline: the transport's own limit is set one byte above
//!   this one ([`transport_line_limit`]), so it drops what it held without parsing it;
//! - while the rest goes by, its top-level fields are followed ([`TopLevel`]); once it shows an
//!   answer (`result` or `error`) and its `id`, an error answer for that id is handed to the
//!   transport instead, so that call fails at once and the connection stays as it was;
//! - an answer whose `id` cannot be told ends the stream with an error instead: every call
//!   waiting on the connection fails at once ([`Overflow`] says why), and the server is restarted;
//! - a request or notification of the server over the limit is dropped, with a warning.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use rmcp::model::ErrorData;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};

/// The JSON-RPC error code of the answer made for a result over the limit (in the range the
/// specification leaves to implementations).
const TOO_LARGE_CODE: i32 = -32_001;
/// The field of that answer's `data` that marks it as picogent's, holding the limit.
const TOO_LARGE_MARK: &str = "picogent_max_result_bytes";
/// The most of an `id` kept: ids are numbers or short strings.
const MAX_ID_BYTES: usize = 128;
/// Bytes read from the child at a time.
const CHUNK: usize = 8 * 1024;

/// The line limit to give rmcp's transport behind a [`LimitedLines`] of `limit`: a line of the
/// limit and its newline fit, and a cut line (the limit, one byte more and a newline) does not,
/// so the transport drops it without parsing it.
pub(super) fn transport_line_limit(limit: usize) -> usize {
    limit.saturating_add(1)
}

/// Whether `error` is the answer [`LimitedLines`] made for a result over the limit.
pub(super) fn is_too_large(error: &ErrorData) -> bool {
    error.code.0 == TOO_LARGE_CODE && error.data.as_ref().and_then(|data| data.get(TOO_LARGE_MARK)).is_some()
}

/// Told by one connection's reader, asked by its calls: whether the reader ended the connection
/// because of a message over the limit that answered no call it could tell.
#[derive(Debug, Default)]
pub(super) struct Overflow {
    cut: AtomicBool,
}

impl Overflow {
    pub(super) fn cut_connection(&self) -> bool {
        self.cut.load(Ordering::Relaxed)
    }
}

/// The child's stdout, each line of it at most `limit` bytes (see the module's docs).
pub(super) struct LimitedLines<R> {
    inner: R,
    server: String,
    limit: usize,
    overflow: Arc<Overflow>,
    /// Read from `inner`, not yet looked at: `input[position..filled]`.
    input: Box<[u8]>,
    position: usize,
    filled: usize,
    /// Made here, handed on before anything more of the input.
    made: Vec<u8>,
    made_position: usize,
    /// Bytes of the current line so far, its newline not counted.
    line_bytes: usize,
    fields: TopLevel,
    /// The current line is over the limit and is being thrown away.
    discarding: bool,
    /// For a discarded line: its error answer was made already.
    answered: bool,
    /// The stream was ended because of a message that answered no call it could tell.
    ended: bool,
}

impl<R> LimitedLines<R> {
    pub(super) fn new(inner: R, server: &str, limit: usize, overflow: Arc<Overflow>) -> LimitedLines<R> {
        LimitedLines {
            inner,
            server: server.to_string(),
            limit,
            overflow,
            input: vec![0; CHUNK].into_boxed_slice(),
            position: 0,
            filled: 0,
            made: Vec::new(),
            made_position: 0,
            line_bytes: 0,
            fields: TopLevel::default(),
            discarding: false,
            answered: false,
            ended: false,
        }
    }

    /// Looks at the input from `position` on, passing what may pass into `out`, until the input
    /// is used up, `out` is full, or something was made (which must go first).
    fn pass(&mut self, out: &mut ReadBuf<'_>) {
        while self.position < self.filled && out.remaining() > 0 && self.made.is_empty() && !self.ended {
            if self.discarding {
                self.discard();
                continue;
            }
            let start = self.position;
            let end = self.filled.min(start + out.remaining());
            let mut at = start;
            while at < end {
                let byte = self.input[at];
                if byte == b'\n' {
                    at += 1;
                    self.line_bytes = 0;
                    self.fields = TopLevel::default();
                    continue;
                }
                if self.line_bytes == self.limit {
                    // Over the limit: what passed is ended as a line just over the transport's
                    // limit, which it drops unparsed; the rest of the line goes.
                    self.discarding = true;
                    self.answered = false;
                    self.made.extend_from_slice(b" \n");
                    break;
                }
                self.line_bytes += 1;
                self.fields.feed(byte);
                at += 1;
            }
            out.put_slice(&self.input[start..at]);
            self.position = at;
        }
    }

    /// Throws input away up to the end of the line over the limit, making its error answer once
    /// its id is known.
    fn discard(&mut self) {
        while self.position < self.filled {
            let byte = self.input[self.position];
            self.position += 1;
            if byte == b'\n' {
                self.end_of_discarded_line();
                return;
            }
            self.fields.feed(byte);
            if !self.answered
                && let Some(id) = self.fields.answered_id()
            {
                self.answered = true;
                tracing::warn!(server = %self.server, limit = self.limit, %id, "mcp server answered over max_result_bytes; failing that call");
                self.made.extend(too_large_answer(&id, self.limit));
                return;
            }
        }
    }

    fn end_of_discarded_line(&mut self) {
        let fields = std::mem::take(&mut self.fields);
        self.discarding = false;
        self.line_bytes = 0;
        if self.answered {
            return;
        }
        if fields.has_method {
            tracing::warn!(server = %self.server, limit = self.limit, "mcp server sent a request or notification over max_result_bytes; dropped it");
            return;
        }
        // An answer (or something else) whose call cannot be told: the connection ends, so no
        // call waits for it until its timeout.
        tracing::warn!(server = %self.server, limit = self.limit, "mcp server sent a message over max_result_bytes that answers no call picogent can tell; restarting the connection");
        self.overflow.cut.store(true, Ordering::Relaxed);
        self.ended = true;
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LimitedLines<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.made_position < this.made.len() {
                let n = out.remaining().min(this.made.len() - this.made_position);
                out.put_slice(&this.made[this.made_position..this.made_position + n]);
                this.made_position += n;
                if this.made_position == this.made.len() {
                    this.made.clear();
                    this.made_position = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a message over max_result_bytes ({} bytes) that answers no known call", this.limit),
                )));
            }
            if this.position == this.filled {
                let mut chunk = ReadBuf::new(&mut this.input);
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut chunk))?;
                let read = chunk.filled().len();
                if read == 0 {
                    return Poll::Ready(Ok(()));
                }
                this.position = 0;
                this.filled = read;
            }
            let before = out.filled().len();
            this.pass(out);
            if out.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// A JSON-RPC error answer to `id` saying its result was over the limit.
fn too_large_answer(id: &Value, limit: usize) -> Vec<u8> {
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": TOO_LARGE_CODE,
            "message": format!("the result is over max_result_bytes ({limit} bytes)"),
            "data": {TOO_LARGE_MARK: limit},
        },
    });
    let mut line = serde_json::to_vec(&answer).unwrap_or_default();
    line.push(b'\n');
    line
}

/// The top-level fields of one JSON object, followed byte by byte with a few bytes of memory:
/// enough to tell an answer (`result` or `error`) from a request or notification (`method`), and
/// to read its `id`, wherever they stand in the object.
#[derive(Debug, Default)]
struct TopLevel {
    phase: Phase,
    /// Brackets open inside the current value.
    nesting: u32,
    in_string: bool,
    escaped: bool,
    /// The current key (only short keys matter).
    key: Vec<u8>,
    field: Field,
    id: Vec<u8>,
    id_complete: bool,
    id_too_long: bool,
    has_answer: bool,
    has_method: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Phase {
    #[default]
    Start,
    /// Before a key, or the end of the object.
    Key,
    InKey,
    Colon,
    Value,
    InString,
    InContainer,
    InScalar,
    AfterValue,
    /// The object ended, or this is not an object.
    Done,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Field {
    #[default]
    Other,
    Id,
}

impl TopLevel {
    fn feed(&mut self, byte: u8) {
        let space = matches!(byte, b' ' | b'\t' | b'\r' | b'\n');
        match self.phase {
            Phase::Start if space => {}
            Phase::Start => self.phase = if byte == b'{' { Phase::Key } else { Phase::Done },
            Phase::Key if space || byte == b',' => {}
            Phase::Key => match byte {
                b'"' => {
                    self.key.clear();
                    self.phase = Phase::InKey;
                }
                _ => self.phase = Phase::Done,
            },
            Phase::InKey => {
                if self.escaped {
                    self.escaped = false;
                    self.key.push(0);
                } else if byte == b'\\' {
                    // An escaped key is none of the ones looked for.
                    self.escaped = true;
                } else if byte == b'"' {
                    self.field = Field::Other;
                    match self.key.as_slice() {
                        b"id" => self.field = Field::Id,
                        b"result" | b"error" => self.has_answer = true,
                        b"method" => self.has_method = true,
                        _ => {}
                    }
                    self.phase = Phase::Colon;
                } else if self.key.len() < 8 {
                    self.key.push(byte);
                } else {
                    self.key.push(0);
                }
            }
            Phase::Colon if space => {}
            Phase::Colon => self.phase = if byte == b':' { Phase::Value } else { Phase::Done },
            Phase::Value if space => {}
            Phase::Value => {
                self.keep(byte);
                self.phase = match byte {
                    b'"' => Phase::InString,
                    b'{' | b'[' => {
                        self.nesting = 1;
                        Phase::InContainer
                    }
                    _ => Phase::InScalar,
                };
            }
            Phase::InString => {
                self.keep(byte);
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.value_ended();
                    self.phase = Phase::AfterValue;
                }
            }
            Phase::InContainer => {
                if self.in_string {
                    if self.escaped {
                        self.escaped = false;
                    } else if byte == b'\\' {
                        self.escaped = true;
                    } else if byte == b'"' {
                        self.in_string = false;
                    }
                } else {
                    match byte {
                        b'"' => self.in_string = true,
                        b'{' | b'[' => self.nesting += 1,
                        b'}' | b']' => {
                            self.nesting -= 1;
                            if self.nesting == 0 {
                                self.value_ended();
                                self.phase = Phase::AfterValue;
                            }
                        }
                        _ => {}
                    }
                }
                // A container is never a usable id.
                if self.field == Field::Id {
                    self.id_too_long = true;
                }
            }
            Phase::InScalar => match byte {
                b',' => {
                    self.value_ended();
                    self.phase = Phase::Key;
                }
                b'}' => {
                    self.value_ended();
                    self.phase = Phase::Done;
                }
                _ if space => {
                    self.value_ended();
                    self.phase = Phase::AfterValue;
                }
                _ => self.keep(byte),
            },
            Phase::AfterValue if space => {}
            Phase::AfterValue => {
                self.phase = match byte {
                    b',' => Phase::Key,
                    _ => Phase::Done,
                }
            }
            Phase::Done => {}
        }
    }

    /// Keeps a byte of the `id` value.
    fn keep(&mut self, byte: u8) {
        if self.field == Field::Id {
            if self.id.len() < MAX_ID_BYTES {
                self.id.push(byte);
            } else {
                self.id_too_long = true;
            }
        }
    }

    fn value_ended(&mut self) {
        if self.field == Field::Id {
            self.id_complete = true;
        }
        self.field = Field::Other;
    }

    /// The id of an answer, once both are known: a number or a string.
    fn answered_id(&self) -> Option<Value> {
        let usable = self.has_answer && !self.has_method && self.id_complete && !self.id_too_long;
        if !usable {
            return None;
        }
        match serde_json::from_slice::<Value>(&self.id).ok()? {
            id @ (Value::Number(_) | Value::String(_)) => Some(id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// Everything `input` becomes through [`LimitedLines`] with `limit`, read in small pieces;
    /// and whether the reader ended it for an answer it could not route.
    async fn through(input: &[u8], limit: usize) -> (Vec<u8>, bool, Arc<Overflow>) {
        let overflow = Arc::new(Overflow::default());
        let mut reader = LimitedLines::new(input, "s", limit, Arc::clone(&overflow));
        let mut out = Vec::new();
        let mut piece = [0u8; 7];
        loop {
            match reader.read(&mut piece).await {
                Ok(0) => return (out, false, overflow),
                Ok(n) => out.extend_from_slice(&piece[..n]),
                Err(error) => {
                    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
                    return (out, true, overflow);
                }
            }
        }
    }

    fn lines(out: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(out).lines().map(str::to_string).collect()
    }

    fn too_large_id(line: &str) -> Option<Value> {
        let message: Value = serde_json::from_str(line).ok()?;
        let error: ErrorData = serde_json::from_value(message.get("error")?.clone()).ok()?;
        is_too_large(&error).then(|| message["id"].clone())
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_unchanged() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n{\"a\":\"x\\\"y\"}\r\nlast without newline";
        let (out, ended, _) = through(input, 40).await;
        assert_eq!(out, input.to_vec());
        assert!(!ended);
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_becomes_an_error_for_its_id_wherever_the_id_stands() {
        let big = "x".repeat(500);
        let cases = [
            (
                format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{big}"}}]}}}}"#),
                json!(7),
            ),
            (format!(r#"{{"result":{{"text":"{big} \" }} ] {{"}},"jsonrpc":"2.0","id":"req-9"}}"#), json!("req-9")),
            (format!(r#"{{ "jsonrpc" : "2.0" , "error" : {{"message":"{big}"}} , "id" : 12 }}"#), json!(12)),
        ];
        for (line, id) in cases {
            let input = format!("{{\"before\":1}}\n{line}\n{{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{{}}}}\n");
            let (out, ended, overflow) = through(input.as_bytes(), 100).await;
            assert!(!ended && !overflow.cut_connection(), "{line}");
            let out = lines(&out);
            assert_eq!(out.len(), 4, "{out:?}");
            assert_eq!(out[0], "{\"before\":1}");
            assert_eq!(out[1].len(), 101, "the cut line: the limit and one byte more");
            assert!(out[1].len() + 1 > transport_line_limit(100), "the transport drops it unparsed");
            assert_eq!(too_large_id(&out[2]), Some(id), "{out:?}");
            assert_eq!(out[3], "{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}", "what follows passes");
        }
    }

    #[tokio::test]
    async fn the_error_comes_as_soon_as_the_id_is_known_not_at_the_end_of_the_line() {
        let overflow = Arc::new(Overflow::default());
        // A line that never ends: the error must come all the same.
        let (mut write, read) = tokio::io::duplex(64 * 1024);
        let mut reader = LimitedLines::new(read, "s", 50, overflow);
        tokio::io::AsyncWriteExt::write_all(&mut write, br#"{"jsonrpc":"2.0","id":3,"result":{"text":""#)
            .await
            .unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut write, &[b'y'; 4096]).await.unwrap();
        // The cut line, then the error answer: two newlines.
        let mut seen = Vec::new();
        while seen.iter().filter(|byte| **byte == b'\n').count() < 2 {
            let mut piece = [0u8; 256];
            let n = reader.read(&mut piece).await.unwrap();
            assert!(n > 0, "the stream ended: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&piece[..n]);
        }
        let out = lines(&seen);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(too_large_id(&out[1]), Some(json!(3)), "{out:?}");
    }

    #[tokio::test]
    async fn an_answer_whose_id_cannot_be_told_ends_the_stream() {
        let big = "z".repeat(300);
        for line in [
            format!(r#"{{"jsonrpc":"2.0","result":{{"text":"{big}"}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":{{"odd":1}},"result":"{big}"}}"#),
            format!("[{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"{big}\"}}]"),
            big.clone(),
        ] {
            let input = format!("{line}\n{{\"id\":1,\"result\":{{}}}}\n");
            let (_, ended, overflow) = through(input.as_bytes(), 100).await;
            assert!(ended && overflow.cut_connection(), "{line}");
        }
    }

    #[tokio::test]
    async fn a_notification_over_the_limit_is_dropped_and_the_stream_goes_on() {
        let big = "n".repeat(300);
        let input = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{\"data\":\"{big}\"}}}}\n{{\"id\":1,\"result\":{{}}}}\n"
        );
        let (out, ended, _) = through(input.as_bytes(), 100).await;
        assert!(!ended);
        let out = lines(&out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[1], "{\"id\":1,\"result\":{}}");
    }
}
