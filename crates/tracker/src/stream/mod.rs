//! The tracker's event stream: one WebSocket to `{api_base}/ws`, kept alive and caught up.
//!
//! [`spawn_into`] runs a task that connects with the agent's bearer token, sends `resume` with the
//! last processed seq after every (re)connect, pings on a heartbeat, and reconnects with
//! exponential backoff and jitter when the link drops or goes quiet. Events and link status
//! changes go into one `mpsc` channel, in the order they arrived: the consumer's own (the
//! router's input channel), so nothing forwards from one channel to another. Each frame is
//! parsed once, here (`frame.rs`), into its typed [`StreamItem`].
//!
//! Where it begins ([`StreamStart`], reported once as [`LinkStatus::Began`]): at the recorded
//! position; on a first start (nothing recorded), at the tracker's head. The contract gives no
//! other way to learn the head than `resume`, so a first start resumes from 0, reads the replay
//! through without passing it on, and records the `resumed` seq as its position; past events are
//! reconciliation's to judge, not the stream's to act on. `--from-start` replays and passes on
//! the whole log instead (planned in `start.rs`).
//!
//! Invariants:
//! - nothing is lost: a frame that parses as an event of a known name is put into the channel
//!   before the next frame is read; the stream itself never marks anything processed (its
//!   consumer does, and tells it through [`ResumePosition`]: the runtime's router records each
//!   event in the state, which implements it), so a resume after a reconnect asks again for
//!   everything not yet recorded;
//! - the stream does not dedupe: a replay may repeat events the router already recorded, and
//!   the router drops them by event id;
//! - input from the network never panics the task: an unparsable frame or an unknown event is
//!   logged and skipped; a frame over the size limit is refused by the WebSocket layer and the
//!   connection is recycled (a tracker that kept replaying such a frame would be refused at
//!   every reconnect; the contract forbids frames over 1 MiB, so the reference board never does);
//! - a token the tracker refuses (401/403 at the handshake) ends the task with
//!   [`StreamError::Unauthorized`]; it is never retried;
//! - the token is sent only in the `Authorization` header and never logged.
//!
//! `wss://` (a tracker at `https://`) is spoken with rustls and the system's root certificates.

mod frame;
mod probe;
mod start;

pub use frame::{Frame, parse_frame};
pub use probe::{StreamProbeError, probe};
pub use start::{StartMode, StreamStart};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode, header};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;

use crate::TrackerClient;
use crate::config::TrackerConfig;
use crate::model::{ClientFrame, ReceivedEvent, limits};
use picogent_support::retry::reconnect_delay;

use frame::{Cursor, client_frame, describe_read_error, read_message};
use start::{Opening, begin, caught_up_at, plan_start};

/// How the stream behaves. [`StreamOptions::new`] gives the production values; tests shorten
/// the times.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamOptions {
    /// How often a `{"type":"ping"}` is sent. With no frame at all from the server for two of
    /// these, the link is taken for dead and recycled.
    pub heartbeat_interval: Duration,
    /// The first reconnect delay; it doubles with each failed attempt.
    pub initial_backoff: Duration,
    /// No reconnect delay is longer than this.
    pub max_backoff: Duration,
    /// A connection that stayed up this long resets the backoff to `initial_backoff`.
    pub stable_after: Duration,
    /// Time allowed for the TCP connect plus the WebSocket handshake.
    pub connect_timeout: Duration,
    /// Frames and messages larger than this are refused.
    pub max_frame_bytes: usize,
    /// Items buffered between the stream and its consumer; when full, the stream stops reading
    /// (backpressure) rather than drop anything.
    pub channel_capacity: usize,
    /// The environment variable the token came from, named in the error when it is refused.
    pub token_env: String,
    /// Where the first connection of this process begins.
    pub start: StreamStart,
}

impl StreamOptions {
    pub fn new(token_env: impl Into<String>) -> StreamOptions {
        StreamOptions {
            heartbeat_interval: Duration::from_secs(20),
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(30),
            stable_after: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_frame_bytes: limits::FRAME_BYTES,
            channel_capacity: 256,
            token_env: token_env.into(),
            start: StreamStart::Recorded,
        }
    }

    /// The production values, with the token variable named in the `tracker` section.
    pub fn from_config(tracker: &TrackerConfig) -> StreamOptions {
        StreamOptions::new(tracker.token_env.clone())
    }
}

/// What the stream hands its consumer.
// Events are the common item and status changes are rare, so boxing the big variant would cost
// an allocation per event to save a few hundred bytes per channel slot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// An event of a name this build knows, with its data typed. Record its id as processed
    /// before acting on it.
    Event(ReceivedEvent),
    /// The link changed state.
    Status(LinkStatus),
}

/// The state of the link, reported on every change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkStatus {
    /// The handshake succeeded; `resume` has been sent.
    Connected,
    /// The server replayed everything after our resume point; live events follow.
    CaughtUp { last_seq: u64 },
    /// The link dropped, or (once, until the next `Connected`) a connection attempt failed; the
    /// stream keeps reconnecting.
    Disconnected { reason: String },
    /// The stream began (once per process, just before the first `CaughtUp`): how, from which
    /// seq (the head, the recorded position, or 0), and how many past events it read without
    /// passing them on (at the head).
    Began { mode: StartMode, from_seq: u64, skipped: u64 },
    /// Events `from..=to` are missing from the tracker's log: asking again
    /// [`MAX_GAP_TRIES`] times did not bring them, so the stream went on without them. The
    /// consumer reconciles through REST for what they carried.
    GapAccepted { from: u64, to: u64 },
}

/// How many times in a row a missing seq is asked for again (by resuming from before it) before
/// the stream accepts that the tracker's log does not have it.
pub const MAX_GAP_TRIES: u32 = 3;

/// Why the stream task ended other than by cancellation or by the consumer going away.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(
        "the tracker refused the token in {token_env} (HTTP {status} at {url}): check that {token_env} holds \
         this agent's bearer token for this tracker"
    )]
    Unauthorized { token_env: String, status: u16, url: String },
    #[error("the token in {token_env} cannot be sent in an HTTP header: {message}")]
    InvalidToken { token_env: String, message: String },
    #[error("the event stream URL {url} is not valid: {message}; check `tracker.url` and `tracker.api_prefix`")]
    InvalidUrl { url: String, message: String },
}

/// Where the stream reads the resume point from before each `resume`: the consumer's record of
/// what it processed (the runtime's state implements it, in `picogent_state`).
pub trait ResumePosition: Send + Sync + 'static {
    /// Why the position could not be read or recorded; the stream logs it and tries again at the
    /// next connection.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The highest seq already processed; the server replays everything after it.
    fn last_processed_seq(&self) -> BoxFuture<'_, Result<u64, Self::Error>>;

    /// The resume point, or `None` when nothing was ever recorded (a first start). By default a
    /// position is always recorded.
    fn recorded_position(&self) -> BoxFuture<'_, Result<Option<u64>, Self::Error>> {
        Box::pin(async move { self.last_processed_seq().await.map(Some) })
    }

    /// Records that a first start began at the tracker's head `seq`.
    fn record_head(&self, seq: u64) -> BoxFuture<'_, Result<(), Self::Error>> {
        let _ = seq;
        Box::pin(async { Ok(()) })
    }
}

/// A counter kept by the consumer (tools and tests that keep no database).
impl ResumePosition for Arc<AtomicU64> {
    type Error = std::convert::Infallible;

    fn last_processed_seq(&self) -> BoxFuture<'_, Result<u64, Self::Error>> {
        let seq = self.load(Ordering::SeqCst);
        Box::pin(async move { Ok(seq) })
    }

    fn record_head(&self, seq: u64) -> BoxFuture<'_, Result<(), Self::Error>> {
        self.fetch_max(seq, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    }
}

/// Starts the event stream of `client`'s member on a channel of its own (for tools and tests
/// that read the stream alone). See [`spawn_into`].
pub fn spawn(
    options: StreamOptions,
    client: &TrackerClient,
    resume: impl ResumePosition,
    cancel: CancellationToken,
) -> (mpsc::Receiver<StreamItem>, JoinHandle<Result<(), StreamError>>) {
    let (sender, receiver) = mpsc::channel(options.channel_capacity.max(1));
    (receiver, spawn_into(options, client, resume, sender, cancel))
}

/// Starts the event stream of `client`'s member, putting its items into `sink` (any channel
/// whose items can be made from a [`StreamItem`]). The task runs until `cancel` fires (`Ok`),
/// the receiver is dropped (`Ok`), or the token is refused (`Err`).
pub fn spawn_into<T: From<StreamItem> + Send + 'static>(
    options: StreamOptions,
    client: &TrackerClient,
    resume: impl ResumePosition,
    sink: mpsc::Sender<T>,
    cancel: CancellationToken,
) -> JoinHandle<Result<(), StreamError>> {
    let url = client.ws_url();
    let bearer = format!("Bearer {}", client.token().expose());
    tokio::spawn(run(options, url, bearer, resume, sink, cancel))
}

/// How one connection ended.
enum SessionEnd {
    /// Event `got` arrived where `due` was due: one went missing on the way or from the log.
    Gap {
        due: u64,
        got: u64,
    },
    Cancelled,
    ConsumerGone,
    Lost(String),
}

async fn run<T: From<StreamItem>>(
    options: StreamOptions,
    url: String,
    bearer: String,
    resume: impl ResumePosition,
    sender: mpsc::Sender<T>,
    cancel: CancellationToken,
) -> Result<(), StreamError> {
    let request = build_request(&url, &bearer, &options.token_env)?;
    drop(bearer);
    // From here the URL is only named (logs, errors): without any user info it carried.
    let url = picogent_support::secret::shown_url(&url);
    let config = WebSocketConfig::default()
        .max_message_size(Some(options.max_frame_bytes))
        .max_frame_size(Some(options.max_frame_bytes));
    let mut failed_attempts: u32 = 0;
    // The seq last found missing, and how many sessions in a row found it so.
    let mut gap: Option<(u64, u32)> = None;
    // Whether the consumer has been told the link is down since it was last up (or since the
    // start), so a tracker that stays unreachable is reported once, not at every attempt.
    let mut down_reported = false;
    // How this process's connections began: the first one's start, and whether `Began` went out.
    let mut opening = Opening::default();
    loop {
        let attempt = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            attempt = tokio::time::timeout(
                options.connect_timeout,
                tokio_tungstenite::connect_async_with_config(request.clone(), Some(config), true),
            ) => attempt,
        };
        let reason = match attempt {
            Ok(Ok((socket, _response))) => {
                down_reported = false;
                let accept_gap = gap.filter(|(_, tries)| *tries >= MAX_GAP_TRIES).map(|(due, _)| due);
                let connection = Connection { options: &options, url: &url, resume: &resume, sender: &sender };
                match serve(socket, &connection, &cancel, &mut failed_attempts, accept_gap, &mut opening).await {
                    Served::Stop => return Ok(()),
                    Served::Lost(reason) => reason,
                    Served::Gap { due, reason } => {
                        gap = match gap {
                            Some((known, tries)) if known == due => Some((due, tries + 1)),
                            _ => Some((due, 1)),
                        };
                        reason
                    }
                    Served::GapAccepted(reason) => {
                        gap = None;
                        reason
                    }
                }
            }
            Ok(Err(error)) => {
                let reason = connect_failure(error, &options, &url)?;
                cannot_connect(&url, &reason, down_reported);
                reason
            }
            Err(_elapsed) => {
                let reason = format!("no handshake within {} ms", options.connect_timeout.as_millis());
                cannot_connect(&url, &reason, down_reported);
                reason
            }
        };
        if !down_reported {
            down_reported = true;
            let status = StreamItem::Status(LinkStatus::Disconnected { reason: reason.clone() });
            if deliver(&sender, status, &cancel).await.is_err() {
                return Ok(());
            }
        }
        let delay = reconnect_delay(failed_attempts, options.initial_backoff, options.max_backoff, &mut rand::rng());
        failed_attempts = failed_attempts.saturating_add(1);
        tracing::debug!(url = %url, %reason, delay_ms = delay.as_millis() as u64, "event stream reconnecting after delay");
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Why a connection attempt failed, to retry; a refused token ends the stream.
fn connect_failure(error: tungstenite::Error, options: &StreamOptions, url: &str) -> Result<String, StreamError> {
    if let tungstenite::Error::Http(response) = &error
        && matches!(response.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
    {
        let error = StreamError::Unauthorized {
            token_env: options.token_env.clone(),
            status: response.status().as_u16(),
            url: url.to_string(),
        };
        tracing::error!(%error, "event stream refused");
        return Err(error);
    }
    Ok(describe_connect_error(&error))
}

/// Logs a failed connection attempt: a warning for the first since the link was last up (or
/// since the start), debug for the rest, so a tracker that stays down is not warned of at every
/// attempt.
fn cannot_connect(url: &str, reason: &str, down_reported: bool) {
    if down_reported {
        tracing::debug!(url = %url, %reason, "event stream still cannot connect; retrying");
    } else {
        tracing::warn!(url = %url, %reason, "event stream cannot connect; retrying (said once until it connects)");
    }
}

/// What one connection needs from the stream.
struct Connection<'a, R, T> {
    options: &'a StreamOptions,
    url: &'a str,
    resume: &'a R,
    sender: &'a mpsc::Sender<T>,
}

/// How serving one connection ended.
enum Served {
    /// Cancelled, or the consumer is gone: the stream stops.
    Stop,
    Lost(String),
    /// A seq was missing.
    Gap {
        due: u64,
        reason: String,
    },
    /// A missing seq was accepted, and the connection was lost later.
    GapAccepted(String),
}

/// Serves one established connection: reports it, runs the session, and resets the backoff if
/// the connection made progress. `accept_gap`: a seq asked for too often, to go on without.
async fn serve<R: ResumePosition, T: From<StreamItem>>(
    socket: Socket,
    connection: &Connection<'_, R, T>,
    cancel: &CancellationToken,
    failed_attempts: &mut u32,
    accept_gap: Option<u64>,
    opening: &mut Opening,
) -> Served {
    let Connection { options, url, resume, sender } = connection;
    tracing::info!(url = %url, "event stream connected");
    if deliver(sender, StreamItem::Status(LinkStatus::Connected), cancel).await.is_err() {
        return Served::Stop;
    }
    let connected_at = Instant::now();
    let mut delivered_events = false;
    let mut session = Session { delivered_events: false, accept_gap, accepted: false, opening: *opening };
    let end = session_loop(socket, options, *resume, *sender, cancel, &mut session).await;
    delivered_events |= session.delivered_events;
    *opening = session.opening;
    // A connection that passed events on made progress: a link that keeps dropping while it
    // delivers (a lossy proxy) must not back off towards `max_backoff`.
    if delivered_events || connected_at.elapsed() >= options.stable_after {
        *failed_attempts = 0;
    }
    match end {
        SessionEnd::Cancelled | SessionEnd::ConsumerGone => Served::Stop,
        SessionEnd::Gap { due, got } => {
            let reason = format!("event seq {got} arrived where {due} was due: a frame went missing; resuming");
            tracing::warn!(url = %url, %reason, "event stream disconnected; reconnecting");
            Served::Gap { due, reason }
        }
        SessionEnd::Lost(reason) => {
            tracing::warn!(url = %url, %reason, "event stream disconnected; reconnecting");
            if session.accepted { Served::GapAccepted(reason) } else { Served::Lost(reason) }
        }
    }
}

/// What one session did and may do.
struct Session {
    delivered_events: bool,
    /// The seq to go on without, if it is missing again.
    accept_gap: Option<u64>,
    /// Set when it was.
    accepted: bool,
    /// How the stream's connections so far began; this one's start is added to it.
    opening: Opening,
}

fn build_request(url: &str, bearer: &str, token_env: &str) -> Result<Request, StreamError> {
    let mut request = url.into_client_request().map_err(|e| StreamError::InvalidUrl {
        url: picogent_support::secret::shown_url(url),
        message: e.to_string(),
    })?;
    let mut value = HeaderValue::from_str(bearer).map_err(|_| StreamError::InvalidToken {
        token_env: token_env.to_string(),
        message: "it holds characters not allowed in a header (a newline or a control character?)".to_string(),
    })?;
    value.set_sensitive(true);
    request.headers_mut().insert(header::AUTHORIZATION, value);
    Ok(request)
}

fn describe_connect_error(error: &tungstenite::Error) -> String {
    match error {
        tungstenite::Error::Http(response) => {
            format!("the tracker answered the handshake with HTTP {}", response.status())
        }
        other => format!("cannot connect: {other}"),
    }
}

/// Puts `item` into the channel, waiting for room; fails if the consumer is gone or on cancel.
async fn deliver<T: From<StreamItem>>(
    sender: &mpsc::Sender<T>,
    item: StreamItem,
    cancel: &CancellationToken,
) -> Result<(), SessionEnd> {
    tokio::select! {
        _ = cancel.cancelled() => Err(SessionEnd::Cancelled),
        sent = sender.send(T::from(item)) => sent.map_err(|_| SessionEnd::ConsumerGone),
    }
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Serves one connection until it is lost, cancelled, or the consumer goes away.
async fn session_loop<T: From<StreamItem>>(
    socket: Socket,
    options: &StreamOptions,
    resume: &impl ResumePosition,
    sender: &mpsc::Sender<T>,
    cancel: &CancellationToken,
    session: &mut Session,
) -> SessionEnd {
    let (mut outgoing, mut incoming) = socket.split();
    let interval = options.heartbeat_interval;
    let silence_limit = interval * 2;
    let start = match plan_start(options.start, session.opening.first.is_none(), resume).await {
        Ok(start) => start,
        Err(error) => return SessionEnd::Lost(format!("cannot read the resume point: {error}")),
    };
    let first = *session.opening.first.get_or_insert(start);
    let after_seq = start.after_seq;
    if let Err(end) = send_resume(&mut outgoing, after_seq, silence_limit).await {
        return end;
    }

    let mut pings = tokio::time::interval_at(Instant::now() + interval, interval);
    pings.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_heard = Instant::now();
    // The contract numbers a member's events one by one with no gap, and replays from
    // `after_seq + 1`: the seq due next. An event past it means one went missing on the way
    // (dropped or reordered by something between us and the tracker); the link is recycled
    // before that event is passed on, so the resume asks again from the last one processed. A seq
    // still missing after `MAX_GAP_TRIES` resumes is not in the tracker's log any more: the stream
    // goes on without it and says so (`LinkStatus::GapAccepted`). A seq below it (a repeat) is
    // passed on; the router drops repeats by event id.
    let mut cursor =
        Cursor { next_seq: after_seq.saturating_add(1), reading_history: start.mode == StartMode::Head, skipped: 0 };

    let end = loop {
        tokio::select! {
            // Frames first: a frame already waiting must not lose a race with the silence timer.
            biased;
            _ = cancel.cancelled() => break SessionEnd::Cancelled,
            frame = incoming.next() => {
                let message = match frame {
                    None => break SessionEnd::Lost("the server closed the connection".to_string()),
                    Some(Err(error)) => break SessionEnd::Lost(describe_read_error(&error, options.max_frame_bytes)),
                    Some(Ok(message)) => message,
                };
                let mut items = match read_message(message, &mut cursor, after_seq, &mut session.accept_gap) {
                    Ok(items) => items,
                    Err(end) => break end,
                };
                if !session.opening.reported && let Some(caught_up) = caught_up_at(&items) {
                    items.insert(0, begin(start, first, caught_up, cursor.skipped, resume).await);
                    session.opening.reported = true;
                }
                session.accepted |= items.iter().any(|item| matches!(item, StreamItem::Status(LinkStatus::GapAccepted { .. })));
                let mut end = None;
                for item in items {
                    let is_event = matches!(item, StreamItem::Event(_));
                    if let Err(ended) = deliver(sender, item, cancel).await {
                        end = Some(ended);
                        break;
                    }
                    session.delivered_events |= is_event;
                }
                if let Some(end) = end {
                    break end;
                }
                // Time spent waiting for room in the channel is not the server's silence.
                last_heard = Instant::now();
            }
            _ = tokio::time::sleep_until(last_heard + silence_limit) => {
                break SessionEnd::Lost(format!(
                    "no frame from the server for {} ms (two heartbeats): the link is dead",
                    silence_limit.as_millis()
                ));
            }
            _ = pings.tick() => {
                match tokio::time::timeout(silence_limit, outgoing.send(client_frame(&ClientFrame::Ping))).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => break SessionEnd::Lost(format!("cannot send a heartbeat: {error}")),
                    Err(_) => break SessionEnd::Lost("a heartbeat could not be sent: the link is dead".to_string()),
                }
            }
        }
    };
    // Say goodbye where the link still works, but never wait long on one that does not.
    let _ = tokio::time::timeout(Duration::from_millis(500), outgoing.close()).await;
    end
}

/// Sends `resume` with `after_seq`.
async fn send_resume(
    outgoing: &mut futures::stream::SplitSink<Socket, Message>,
    after_seq: u64,
    silence_limit: Duration,
) -> Result<(), SessionEnd> {
    // A send that cannot finish within the silence limit means a link as dead as a silent one;
    // without the bound, a full send buffer would hang the session past the heartbeat check.
    match tokio::time::timeout(silence_limit, outgoing.send(client_frame(&ClientFrame::Resume { after_seq }))).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return Err(SessionEnd::Lost(format!("cannot send resume: {error}"))),
        Err(_) => return Err(SessionEnd::Lost("the resume could not be sent: the link is dead".to_string())),
    }
    tracing::debug!(after_seq, "event stream resuming");
    Ok(())
}

#[cfg(test)]
mod tests;
