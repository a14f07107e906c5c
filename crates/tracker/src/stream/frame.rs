//! One message from the server, read once: [`parse_frame`] types a text frame, `read_message`
//! turns it into the items to pass on (or the end of the connection) and checks the seqs for
//! gaps; `client_frame` writes what the stream sends.

use tokio_tungstenite::tungstenite::{self, Message};

use super::{LinkStatus, MAX_GAP_TRIES, SessionEnd, StreamItem};
use crate::model::{ClientFrame, Event, EventEnvelope, ReceivedEvent, ServerControl};

/// Where a session is in the log.
#[derive(Debug)]
pub(super) struct Cursor {
    /// The seq due next, for the gap check.
    pub(super) next_seq: u64,
    /// At the head: until `resumed`, frames are the past, counted and not passed on (nor checked
    /// for gaps: a log pruned at its start is not a gap).
    pub(super) reading_history: bool,
    /// How many past events were read without being passed on.
    pub(super) skipped: u64,
}

/// What one message from the server means: an item to pass on, nothing, or the end of the
/// connection. `cursor.next_seq` is the seq due next; it moves as events arrive in order.
/// `accept_gap`: a seq that was asked for too often; if it is missing again, the stream goes on
/// without it (once: it is taken).
pub(super) fn read_message(
    message: Message,
    cursor: &mut Cursor,
    after_seq: u64,
    accept_gap: &mut Option<u64>,
) -> Result<Vec<StreamItem>, SessionEnd> {
    match message {
        Message::Text(text) => {
            let frame = parse_frame(text.as_str());
            let mut items = Vec::new();
            if cursor.reading_history {
                match &frame {
                    Frame::Numbered { .. } => {
                        cursor.skipped += 1;
                        return Ok(items);
                    }
                    Frame::Status(LinkStatus::CaughtUp { last_seq }) => {
                        cursor.reading_history = false;
                        cursor.next_seq = last_seq.saturating_add(1);
                    }
                    Frame::Status(_) | Frame::Skipped => {}
                }
            }
            let next_seq = &mut cursor.next_seq;
            if let Frame::Numbered { seq, .. } = &frame {
                if *seq > *next_seq {
                    if accept_gap.take_if(|due| *due == *next_seq).is_none() {
                        return Err(SessionEnd::Gap { due: *next_seq, got: *seq });
                    }
                    tracing::warn!(
                        missing_from = *next_seq,
                        missing_to = *seq - 1,
                        tries = MAX_GAP_TRIES,
                        "the tracker's event log is missing events; going on without them and reconciling"
                    );
                    items.push(StreamItem::Status(LinkStatus::GapAccepted { from: *next_seq, to: *seq - 1 }));
                    *next_seq = *seq;
                }
                if *seq == *next_seq {
                    *next_seq += 1;
                }
            }
            let item = frame.into_item();
            if let Some(StreamItem::Status(LinkStatus::CaughtUp { last_seq })) = &item
                && *last_seq < after_seq
            {
                // Seqs only grow, so a log behind our resume point was reset or replaced: events
                // numbered up to `after_seq` will not be replayed.
                tracing::warn!(
                    after_seq,
                    server_last_seq = *last_seq,
                    "the tracker's event log ends before the last processed seq: was the tracker reset?"
                );
            }
            items.extend(item);
            Ok(items)
        }
        Message::Binary(bytes) => {
            tracing::warn!(bytes = bytes.len(), "event stream: skipped a binary frame (the tracker sends text)");
            Ok(Vec::new())
        }
        Message::Close(frame) => Err(SessionEnd::Lost(match frame {
            Some(frame) => format!("the server closed the connection ({} {})", frame.code, frame.reason),
            None => "the server closed the connection".to_string(),
        })),
        // Protocol pings are answered by tungstenite; any frame proves the link alive.
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => Ok(Vec::new()),
    }
}

pub(super) fn client_frame(frame: &ClientFrame) -> Message {
    // A unit-like enum of plain fields always serializes; the fallback keeps this panic-free.
    Message::text(serde_json::to_string(frame).unwrap_or_else(|_| r#"{"type":"ping"}"#.to_string()))
}

pub(super) fn describe_read_error(error: &tungstenite::Error, max_frame_bytes: usize) -> String {
    match error {
        tungstenite::Error::Capacity(detail) => {
            format!("refused a frame over the {max_frame_bytes}-byte limit ({detail}); reconnecting")
        }
        other => format!("read failed: {other}"),
    }
}

/// One text frame, read once.
// Short-lived (read and taken apart at once), so the big variant is not boxed; see StreamItem.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Frame {
    /// A frame with a seq: an event, passed on if its name is known and its data well formed
    /// (`None` otherwise: it is logged and skipped, but its seq still counts).
    Numbered { seq: u64, event: Option<ReceivedEvent> },
    /// A control frame worth reporting.
    Status(LinkStatus),
    /// A pong, junk, or an unknown control frame.
    Skipped,
}

impl Frame {
    /// What the consumer is given for it, if anything.
    pub fn into_item(self) -> Option<StreamItem> {
        match self {
            Frame::Numbered { event, .. } => event.map(StreamItem::Event),
            Frame::Status(status) => Some(StreamItem::Status(status)),
            Frame::Skipped => None,
        }
    }
}

/// Reads one text frame: an event to pass on, a control frame to report, or junk to skip. The
/// text is parsed once; the envelope and its data are typed from that parse.
pub fn parse_frame(text: &str) -> Frame {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(error) => {
            tracing::warn!(%error, frame = %preview(text), "event stream: skipped a frame that is not JSON");
            return Frame::Skipped;
        }
    };
    if value.get("type").is_some() {
        return match serde_json::from_value::<ServerControl>(value) {
            Ok(ServerControl::Pong) => Frame::Skipped,
            Ok(ServerControl::Resumed { last_seq }) => {
                tracing::debug!(last_seq, "event stream caught up");
                Frame::Status(LinkStatus::CaughtUp { last_seq })
            }
            Err(error) => {
                tracing::warn!(%error, frame = %preview(text), "event stream: skipped an unknown control frame");
                Frame::Skipped
            }
        };
    }
    let Some(seq) = value.get("seq").and_then(serde_json::Value::as_u64) else {
        tracing::warn!(frame = %preview(text), "event stream: skipped a frame that is not an event");
        return Frame::Skipped;
    };
    let envelope: EventEnvelope = match serde_json::from_value(value) {
        Ok(envelope) => envelope,
        Err(error) => {
            tracing::warn!(%error, frame = %preview(text), "event stream: skipped a frame that is not an event");
            return Frame::Numbered { seq, event: None };
        }
    };
    let event = match envelope.into_received() {
        Ok(ReceivedEvent { event: Event::Unknown(name), id, .. }) => {
            tracing::debug!(event = %name, %id, seq, "event stream: ignored an unknown event");
            None
        }
        Ok(event) => Some(event),
        Err(error) => {
            tracing::warn!(seq, "event stream: skipped an event: {error}");
            None
        }
    };
    Frame::Numbered { seq, event }
}

/// The start of a frame, for a log line.
pub(super) fn preview(text: &str) -> String {
    const LIMIT: usize = 200;
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
        None => text.to_string(),
    }
}
