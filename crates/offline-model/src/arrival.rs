//! What every API's handler shares: the request recorded as it arrives, counted in flight until
//! its answer is out, its answer decided before the endpoint's delay, then shaped by the API.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use crate::{Fault, ServerState, lock, parse_body, record_request};

/// A request being answered: counted from its arrival until its answer is out.
pub(crate) struct InFlight(Arc<ServerState>);

impl InFlight {
    pub(crate) fn new(state: Arc<ServerState>) -> InFlight {
        {
            let mut counters = lock(&state.counters);
            counters.in_flight += 1;
            counters.max_in_flight = counters.max_in_flight.max(counters.in_flight);
        }
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        lock(&self.0.counters).in_flight -= 1;
    }
}

/// Waits the endpoint's delay before a whole answer; a streamed one spreads it over its events
/// instead, so its bytes keep coming.
pub(crate) async fn delay_whole_answer(state: &ServerState, stream: bool) {
    if !state.options.delay.is_zero() && !stream {
        tokio::time::sleep(state.options.delay).await;
    }
}

/// A request of any of the APIs as it arrives: recorded (see [`record_request`]), and its body
/// as JSON.
pub(crate) fn received(
    state: &ServerState,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
    query_key: Option<String>,
) -> Result<Value, serde_json::Error> {
    let parsed = parse_body(body);
    record_request(state, path, headers, body, parsed.as_ref().ok(), query_key);
    parsed
}

/// Whether the request asks for its answer streamed (`"stream": true`).
pub(crate) fn wants_stream(parsed: &Result<Value, serde_json::Error>) -> bool {
    parsed.as_ref().ok().and_then(|request| request.get("stream")).and_then(Value::as_bool) == Some(true)
}

/// What every API's handler shares once the request is read: it counts in flight from now, its
/// answer is decided before the delay (a whole answer waits the delay out, a stream spreads it
/// over its pieces), then `fault` shapes a refusal in the API's words and `respond` the answer,
/// given the in-flight count to hold until a stream's last piece is out.
pub(crate) async fn answer<D>(
    state: &Arc<ServerState>,
    stream: bool,
    decide: impl FnOnce() -> Result<D, Fault>,
    fault: fn(&Fault) -> Response,
    respond: impl FnOnce(D, InFlight) -> Response,
) -> Response {
    let in_flight = InFlight::new(state.clone());
    let decided = decide();
    delay_whole_answer(state, stream).await;
    match decided {
        Err(refused) => fault(&refused),
        Ok(decided) => respond(decided, in_flight),
    }
}
