//! The stdio transport of `picogent mcp --stdio`: newline-delimited JSON-RPC on the process's
//! pipes, decoded by rmcp's own line codec, with one difference from rmcp's `AsyncRwTransport`:
//! the `tools/list` result is serialised once and its bytes reused while the list is unchanged.
//!
//! Serialising the 23 tool definitions (22 KB of schemas and descriptions) was most of what the
//! server did for a `tools/list` (docs/performance.md, "MCP over stdio"). The cache holds the last
//! `ListToolsResult` and its JSON; an answer whose result equals it (a cheap comparison: the
//! schemas are shared `Arc`s, compared by pointer first) is written from those bytes, anything
//! else is serialised as before. What goes out is byte for byte what rmcp would have written.
//!
//! Requests for `tools/call` and `tools/list` are decoded straight into their variant
//! ([`Incoming`]'s `Decoded`); rmcp's generic decoding buffers the message and tries its request
//! types one by one, building an error for each miss, which was a fifth of the server's
//! instructions per `get_task` (docs/performance.md). Any other line, or one the short way cannot
//! read, goes through rmcp's decoding unchanged.
//!
//! Input is handled as rmcp handles it: lines over `DEFAULT_MAX_LINE_LENGTH` are dropped,
//! unparsable lines and non-standard notifications are ignored, and well-formed JSON that is not
//! a JSON-RPC message is answered with `Invalid Request`. Every write is one whole line under one
//! lock, so concurrent answers never interleave.

use std::sync::Arc;

use futures::StreamExt;
use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequest, ClientRequest, JsonRpcMessage, JsonRpcRequest, JsonRpcVersion2_0, ListToolsRequest,
    ListToolsResult, RequestId, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::{DEFAULT_MAX_LINE_LENGTH, JsonRpcMessageCodec, JsonRpcMessageCodecError};
use rmcp::transport::{StdioReader, StdioWriter, Transport};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, FramedRead};

/// The transport over the process's stdin and stdout (as pipes when they are, see
/// [`rmcp::transport::stdio_pipes`]).
pub fn stdio() -> LineTransport<StdioReader, StdioWriter> {
    let (read, write) = rmcp::transport::stdio_pipes();
    LineTransport::new(read, write)
}

/// Newline-delimited JSON-RPC over a reader and a writer, as the server side.
pub struct LineTransport<R, W> {
    read: FramedRead<R, LineDecoder>,
    write: Arc<Mutex<W>>,
    /// The last `tools/list` result sent, and its JSON.
    tools_list: Option<(ListToolsResult, Arc<[u8]>)>,
}

impl<R: AsyncRead, W> LineTransport<R, W> {
    pub fn new(read: R, write: W) -> LineTransport<R, W> {
        LineTransport {
            read: FramedRead::new(read, LineDecoder::default()),
            write: Arc::new(Mutex::new(write)),
            tools_list: None,
        }
    }
}

impl<R, W> LineTransport<R, W> {
    /// One message as one line, newline included.
    fn encode(&mut self, message: &TxJsonRpcMessage<RoleServer>) -> serde_json::Result<Vec<u8>> {
        let JsonRpcMessage::Response(response) = message else {
            return line_of(message);
        };
        let ServerResult::ListToolsResult(list) = &response.result else {
            return line_of(message);
        };
        let result = match &self.tools_list {
            Some((cached, json)) if cached == list => json.clone(),
            _ => {
                let json: Arc<[u8]> = serde_json::to_vec(list)?.into();
                self.tools_list = Some((list.clone(), json.clone()));
                json
            }
        };
        // The field order of rmcp's `JsonRpcResponse`: jsonrpc, id, result.
        let mut line = Vec::with_capacity(result.len() + 64);
        line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        serde_json::to_writer(&mut line, &response.id)?;
        line.extend_from_slice(b",\"result\":");
        line.extend_from_slice(&result);
        line.extend_from_slice(b"}\n");
        Ok(line)
    }
}

fn line_of(message: &TxJsonRpcMessage<RoleServer>) -> serde_json::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    Ok(line)
}

async fn write_line<W: AsyncWrite + Unpin>(write: &Mutex<W>, line: &[u8]) -> std::io::Result<()> {
    let mut write = write.lock().await;
    write.write_all(line).await?;
    write.flush().await
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Encoded here, in order, so the cache needs no lock; written in the returned future,
        // which rmcp may run alongside others.
        let line = self.encode(&item);
        let write = self.write.clone();
        async move { write_line(&write, &line?).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read.next().await? {
                Ok(Incoming::Message(message)) => return Some(message),
                Ok(Incoming::Ignored) => {}
                Ok(Incoming::Invalid) => {
                    // Written by its own task: `receive` may be cancelled at any await, and half
                    // a line on stdout would break the stream.
                    let error: TxJsonRpcMessage<RoleServer> =
                        JsonRpcMessage::error(ErrorData::invalid_request("Invalid request", None), None);
                    let write = self.write.clone();
                    tokio::spawn(async move {
                        let written = match line_of(&error) {
                            Ok(line) => write_line(&write, &line).await,
                            Err(error) => Err(error.into()),
                        };
                        if let Err(error) = written {
                            tracing::debug!(%error, "cannot answer an invalid request");
                        }
                    });
                }
                Err(error) => {
                    tracing::error!(%error, "cannot read from the MCP client");
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.shutdown().await
    }
}

/// What one line of input turned out to be.
#[expect(clippy::large_enum_variant, reason = "made once per line and moved once; a box would cost an allocation")]
enum Incoming {
    Message(RxJsonRpcMessage<RoleServer>),
    /// Not JSON, too long, or a notification this server does not know: dropped.
    Ignored,
    /// JSON, but not a JSON-RPC message: answered with `Invalid Request`.
    Invalid,
}

/// rmcp's line codec, with its per-line errors turned into [`Incoming`] so one bad line does not
/// end the stream (a codec error would end the `FramedRead`).
struct LineDecoder {
    codec: JsonRpcMessageCodec<Decoded>,
}

impl Default for LineDecoder {
    fn default() -> LineDecoder {
        LineDecoder { codec: JsonRpcMessageCodec::new_with_max_length(DEFAULT_MAX_LINE_LENGTH) }
    }
}

impl Decoder for LineDecoder {
    type Item = Incoming;
    type Error = std::io::Error;

    fn decode(&mut self, buffer: &mut BytesMut) -> Result<Option<Incoming>, std::io::Error> {
        let buffered = buffer.len();
        match self.codec.decode(buffer) {
            Ok(Some(Decoded(message))) => Ok(Some(Incoming::Message(message))),
            // The codec also answers `None` when it consumed a line it skips (a non-standard
            // notification it cannot parse) or discards (too long): the lines after it must not
            // wait for more input.
            Ok(None) if buffer.len() < buffered => Ok(Some(Incoming::Ignored)),
            Ok(None) => Ok(None),
            Err(JsonRpcMessageCodecError::Serde(error)) => match error.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                    tracing::debug!(%error, "ignoring an unparsable line");
                    Ok(Some(Incoming::Ignored))
                }
                serde_json::error::Category::Data | serde_json::error::Category::Io => {
                    tracing::debug!(%error, "a line that is not a JSON-RPC message");
                    Ok(Some(Incoming::Invalid))
                }
            },
            Err(JsonRpcMessageCodecError::MaxLineLengthExceeded) => {
                tracing::error!(max_line_length = DEFAULT_MAX_LINE_LENGTH, "dropping an over-long line");
                Ok(Some(Incoming::Ignored))
            }
            Err(JsonRpcMessageCodecError::Io(error)) => Err(error),
            Err(error) => Err(std::io::Error::other(error)),
        }
    }

    /// A last line without its newline is incomplete: nothing to deliver (as rmcp does).
    fn decode_eof(&mut self, buffer: &mut BytesMut) -> Result<Option<Incoming>, std::io::Error> {
        let decoded = self.decode(buffer)?;
        if decoded.is_none() {
            buffer.clear();
        }
        Ok(decoded)
    }
}

/// One client message, read by [`Decoded::from_line`]. rmcp's codec finds the lines, skips the
/// ones it skips and classifies errors as before; only the decoding of a line is ours.
struct Decoded(RxJsonRpcMessage<RoleServer>);

impl<'de> serde::Deserialize<'de> for Decoded {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Decoded, D::Error> {
        // The codec decodes with serde_json from the line's bytes, so the line can be borrowed
        // whole. A syntax error surfaces here with its own category, as before.
        let line = <&serde_json::value::RawValue>::deserialize(deserializer)?;
        Decoded::from_line(line.get()).map_err(serde::de::Error::custom)
    }
}

/// The members that tell a message's kind and method, borrowed; the rest is skipped unread.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "jsonrpc")]
    _jsonrpc: JsonRpcVersion2_0,
    id: Option<RequestId>,
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    /// Present at all (even `null`): the message is a response or an error, not a request.
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(deserializer).map(|_| true)
}

impl Decoded {
    fn from_line(line: &str) -> serde_json::Result<Decoded> {
        if let Some(message) = Decoded::tool_request(line) {
            return Ok(Decoded(message));
        }
        serde_json::from_str(line).map(Decoded)
    }

    /// A `tools/call` or `tools/list` request, decoded as its own type (the same `Deserialize`
    /// rmcp reaches in the end, `_meta` included); `None` for anything else, or anything this
    /// cannot read, which rmcp's decoding then handles (and reports) as it would have.
    fn tool_request(line: &str) -> Option<RxJsonRpcMessage<RoleServer>> {
        let envelope: Envelope = serde_json::from_str(line).ok()?;
        let (Some(id), Some(method), false, false) = (envelope.id, envelope.method, envelope.result, envelope.error)
        else {
            return None;
        };
        let request = match &*method {
            "tools/call" => ClientRequest::CallToolRequest(serde_json::from_str::<CallToolRequest>(line).ok()?),
            "tools/list" => ClientRequest::ListToolsRequest(serde_json::from_str::<ListToolsRequest>(line).ok()?),
            _ => return None,
        };
        Some(JsonRpcMessage::Request(JsonRpcRequest::new(id, request)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CacheScope, RequestId, Tool};
    use serde_json::json;
    use tokio::io::{AsyncBufReadExt, BufReader};

    fn tools() -> Vec<Tool> {
        let schema = json!({"type": "object", "properties": {"task_id": {"type": "string"}}});
        vec![Tool::new("get_task", "Reads one \"task\".\n", Arc::new(schema.as_object().unwrap().clone()))]
    }

    fn list_answer(id: RequestId, tools: Vec<Tool>) -> TxJsonRpcMessage<RoleServer> {
        let result = ListToolsResult::with_all_items(tools).with_ttl_ms(60_000).with_cache_scope(CacheScope::Private);
        JsonRpcMessage::response(ServerResult::ListToolsResult(result), id)
    }

    #[test]
    fn cached_tools_list_answers_are_what_rmcp_writes() {
        let (read, _) = tokio::io::duplex(64);
        let mut transport = LineTransport::new(read, Vec::<u8>::new());
        for id in [RequestId::Number(7), RequestId::String("a\"b".into()), RequestId::Number(8)] {
            let message = list_answer(id, tools());
            let ours = transport.encode(&message).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), String::from_utf8(line_of(&message).unwrap()).unwrap());
        }
        // A different list is serialised again, not answered from the cache.
        let mut changed = tools();
        changed[0].description = Some("Something else".into());
        let message = list_answer(RequestId::Number(9), changed);
        assert_eq!(transport.encode(&message).unwrap(), line_of(&message).unwrap());
    }

    /// What rmcp's own decoding makes of a line, as JSON (the message types have no `PartialEq`;
    /// serialising shows every member, `_meta` from the extensions included).
    fn rmcp_reads(line: &str) -> Result<serde_json::Value, String> {
        serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(line)
            .map(|message| serde_json::to_value(message).unwrap())
            .map_err(|e| format!("{:?}", e.classify()))
    }

    fn we_read(line: &str) -> Result<serde_json::Value, String> {
        serde_json::from_str::<Decoded>(line)
            .map(|Decoded(message)| serde_json::to_value(message).unwrap())
            .map_err(|e| format!("{:?}", e.classify()))
    }

    #[test]
    fn tool_requests_decode_as_rmcp_decodes_them_and_everything_else_goes_to_rmcp() {
        let lines = [
            // The short way.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_task","arguments":{"task_id":"TE-1"}}}"#,
            r#"{"id":"a\"b","params":{"name":"x","_meta":{"progressToken":7}},"method":"tools/call","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools\/call","params":{"name":"x","arguments":{},"task":{"ttl":5}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"cursor":"c1","_meta":{"k":[1]}}}"#,
            // rmcp's way: other methods, shapes and mistakes.
            r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":6,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","result":null,"params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","error":{"code":1,"message":"m"},"params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"1.0","id":9,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"id":10,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","method":"tools/list","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":14.5,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":15,"method":"tools/list","params":7}"#,
            r#"{"hello":1}"#,
            r#"[1,2]"#,
            r#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"x"}"#,
            "not json",
        ];
        for line in lines {
            assert_eq!(we_read(line), rmcp_reads(line), "{line}");
        }
        // The first five took the short way; a line that it cannot read is left to rmcp.
        for line in &lines[..5] {
            assert!(Decoded::tool_request(line).is_some(), "{line}");
        }
        for line in &lines[5..] {
            assert!(Decoded::tool_request(line).is_none(), "{line}");
        }
    }

    #[tokio::test]
    async fn bad_lines_are_ignored_or_refused_and_the_stream_goes_on() {
        let (client, server) = tokio::io::duplex(4096);
        let (server_read, server_write) = tokio::io::split(server);
        let mut transport = LineTransport::new(server_read, server_write);
        let (client_read, mut client_write) = tokio::io::split(client);
        client_write
            .write_all(
                b"not json\n\
                  {\"jsonrpc\":\"2.0\",\"method\":\"notifications/custom-thing\"}\n\
                  {\"jsonrpc\":\"2.0\",\"method\":\"notifications/odd\",\"params\":7}\n\
                  {\"hello\":1}\n\
                  {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n",
            )
            .await
            .unwrap();
        // The unknown notification may be dropped here or passed on for rmcp to ignore.
        // Every line is already buffered: nothing may wait for more input (hence the timeout).
        let within = std::time::Duration::from_secs(10);
        let request = loop {
            let received = tokio::time::timeout(within, transport.receive()).await.expect("no line waits");
            match received.expect("the ping") {
                JsonRpcMessage::Request(request) => break request,
                JsonRpcMessage::Notification(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(request.id, RequestId::Number(1));
        let mut answers = BufReader::new(client_read);
        let mut line = String::new();
        answers.read_line(&mut line).await.unwrap();
        let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");
        client_write.shutdown().await.unwrap();
        assert!(transport.receive().await.is_none(), "the end of input ends the stream");
    }
}
