//! The durable per-member event log and the WebSocket that delivers it.
//!
//! Invariants:
//! - an event is written to `events` in the same transaction as the change that causes it, with
//!   `seq` one more than the member's previous event, so the log never has a gap or a repeat;
//! - after the transaction commits, the recipients are "poked" through a per-member
//!   `tokio::sync::watch` channel; the poke carries nothing, it only says "read the log";
//! - each connection keeps `last_sent` and, on a poke or a `resume`, sends the logged events with
//!   `seq > last_sent` in order. Because the log is the only source of frames, a live event can
//!   never overtake a replayed one, and none is sent twice.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use sqlx::{SqliteConnection, SqlitePool};
use tokio::sync::watch;

use crate::BoardState;
use crate::db;
use crate::error::BoardError;
use crate::extract::{authenticate, bearer_token};
use picogent_tracker::model::{ClientFrame, EventEnvelope, ServerControl, limits};

/// Wakes the connections of members who have new events.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    senders: Mutex<HashMap<String, watch::Sender<()>>>,
}

impl Hub {
    /// A receiver that changes whenever `member` gets a new event.
    pub(crate) fn subscribe(&self, member: &str) -> watch::Receiver<()> {
        let mut senders = self.senders.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        senders.entry(member.to_string()).or_insert_with(|| watch::channel(()).0).subscribe()
    }

    /// Tells the connections of these members to read their log.
    pub(crate) fn poke<'a>(&self, members: impl IntoIterator<Item = &'a String>) {
        let senders = self.senders.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for member in members {
            if let Some(sender) = senders.get(member) {
                sender.send_replace(());
            }
        }
    }
}

/// The members who got events in a transaction, to poke once it has committed.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub members: Vec<String>,
}

impl Outbox {
    /// Appends one event to `member`'s log, inside the caller's transaction.
    pub(crate) async fn log(
        &mut self,
        conn: &mut SqliteConnection,
        member: &str,
        event: &str,
        data: serde_json::Value,
    ) -> Result<(), BoardError> {
        sqlx::query(
            "INSERT INTO events (member_slug, seq, id, event, data, ts) VALUES \
             (?1, COALESCE((SELECT MAX(seq) FROM events WHERE member_slug = ?1), 0) + 1, ?2, ?3, ?4, ?5)",
        )
        .bind(member)
        .bind(db::new_id())
        .bind(event)
        .bind(data.to_string())
        .bind(db::now())
        .execute(conn)
        .await?;
        if !self.members.iter().any(|m| m == member) {
            self.members.push(member.to_string());
        }
        Ok(())
    }

    /// Logs the same event for each member, once each, in the order given.
    pub(crate) async fn log_to_all(
        &mut self,
        conn: &mut SqliteConnection,
        members: &[String],
        event: &str,
        data: &serde_json::Value,
    ) -> Result<(), BoardError> {
        let mut seen: Vec<&String> = Vec::new();
        for member in members {
            if !seen.contains(&member) {
                seen.push(member);
                self.log(conn, member, event, data.clone()).await?;
            }
        }
        Ok(())
    }
}

async fn max_seq(pool: &SqlitePool, member: &str) -> Result<i64, BoardError> {
    Ok(sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM events WHERE member_slug = ?1")
        .bind(member)
        .fetch_one(pool)
        .await?)
}

/// `GET {prefix}/ws`: authenticates by header or `?token=`, then upgrades.
pub(crate) async fn ws_handler(
    State(state): State<BoardState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let query_token = query.as_deref().and_then(|q| {
        form_urlencoded::parse(q.as_bytes()).find(|(name, _)| name == "token").map(|(_, value)| value.into_owned())
    });
    let token = bearer_token(&headers).map(str::to_string).or(query_token);
    let caller = match authenticate(&state, token.as_deref()) {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    // Subscribe before reading the newest seq, and both before answering the handshake: an
    // event logged after this point is sent, one logged before is not (until a `resume`).
    let receiver = state.hub.subscribe(&caller.slug);
    let last_sent = match max_seq(&state.pool, &caller.slug).await {
        Ok(seq) => seq,
        Err(error) => return error.into_response(),
    };
    let tasks = state.tasks.clone();
    upgrade
        .max_message_size(limits::FRAME_BYTES)
        .max_frame_size(limits::FRAME_BYTES)
        .on_upgrade(move |socket| tasks.track_future(serve_connection(state, socket, caller.slug, last_sent, receiver)))
}

async fn serve_connection(
    state: BoardState,
    socket: WebSocket,
    member: String,
    mut last_sent: i64,
    mut receiver: watch::Receiver<()>,
) {
    tracing::debug!(member, last_sent, "event stream connected");
    let (mut sink, mut stream) = socket.split();
    loop {
        let outcome = tokio::select! {
            _ = state.shutdown.cancelled() => {
                let _ = sink.send(Message::Close(None)).await;
                break;
            }
            changed = receiver.changed() => match changed {
                Ok(()) => send_pending(&state.pool, &mut sink, &member, &mut last_sent).await,
                Err(_) => break,
            },
            frame = stream.next() => match frame {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
                Some(Ok(Message::Text(text))) => match serde_json::from_str::<ClientFrame>(text.as_str()) {
                    Ok(ClientFrame::Ping) => send_control(&mut sink, &ServerControl::Pong).await,
                    Ok(ClientFrame::Resume { after_seq }) => {
                        // A seq past the end of the log (a client that knew an older database)
                        // resumes from the end, so the events to come are not skipped.
                        match max_seq(&state.pool, &member).await {
                            Ok(newest) => last_sent = i64::try_from(after_seq).unwrap_or(i64::MAX).min(newest),
                            Err(error) => {
                                tracing::warn!(member, %error, "cannot read the event log");
                                break;
                            }
                        }
                        match send_pending(&state.pool, &mut sink, &member, &mut last_sent).await {
                            Ok(()) => {
                                let last_seq = u64::try_from(last_sent).unwrap_or(0);
                                send_control(&mut sink, &ServerControl::Resumed { last_seq }).await
                            }
                            Err(error) => Err(error),
                        }
                    }
                    Err(error) => {
                        // Not fatal: a client may speak a newer dialect. Say nothing, carry on.
                        tracing::debug!(member, %error, "ignoring an unknown frame on the event stream");
                        Ok(())
                    }
                },
                // Protocol pings are answered by the WebSocket layer itself; binary is not spoken.
                Some(Ok(_)) => Ok(()),
            },
        };
        if let Err(error) = outcome {
            tracing::debug!(member, %error, "event stream closed");
            break;
        }
    }
    tracing::debug!(member, last_sent, "event stream disconnected");
}

type Sink = futures::stream::SplitSink<WebSocket, Message>;

#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("cannot send: {0}")]
    Send(#[from] axum::Error),
    #[error("cannot read the event log: {0}")]
    Log(#[from] BoardError),
}

async fn send_control(sink: &mut Sink, control: &ServerControl) -> Result<(), StreamError> {
    let text = serde_json::to_string(control).map_err(|e| BoardError::Internal(e.to_string()))?;
    sink.send(Message::Text(text.into())).await?;
    Ok(())
}

#[derive(Debug, sqlx::FromRow)]
struct EventRow {
    seq: i64,
    id: String,
    event: String,
    data: String,
    ts: String,
}

/// Sends every logged event after `last_sent`, in order, advancing `last_sent` as it goes.
async fn send_pending(
    pool: &SqlitePool,
    sink: &mut Sink,
    member: &str,
    last_sent: &mut i64,
) -> Result<(), StreamError> {
    loop {
        let rows: Vec<EventRow> = sqlx::query_as(
            "SELECT seq, id, event, data, ts FROM events WHERE member_slug = ?1 AND seq > ?2 ORDER BY seq LIMIT 256",
        )
        .bind(member)
        .bind(*last_sent)
        .fetch_all(pool)
        .await
        .map_err(BoardError::from)?;
        if rows.is_empty() {
            return Ok(());
        }
        for row in rows {
            let data = serde_json::from_str(&row.data)
                .map_err(|e| BoardError::Internal(format!("event {} holds bad JSON: {e}", row.id)))?;
            let envelope = EventEnvelope {
                id: row.id,
                seq: u64::try_from(row.seq).unwrap_or(0),
                event: row.event,
                data,
                ts: row.ts,
            };
            let text = serde_json::to_string(&envelope).map_err(|e| BoardError::Internal(e.to_string()))?;
            sink.send(Message::Text(text.into())).await?;
            *last_sent = row.seq;
        }
    }
}
