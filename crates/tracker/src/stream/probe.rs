//! A one-shot check of the event stream for `picogent check`: connect, ping, expect a pong.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message};

use super::frame::client_frame;
use super::{StreamError, build_request};
use crate::TrackerClient;
use crate::model::{ClientFrame, ServerControl};

/// Why the event stream did not answer the probe's ping. Each message names the stream's `url`
/// and says what failed.
#[derive(Debug, thiserror::Error)]
pub enum StreamProbeError {
    /// The request could not be made: a bad URL, or a token that cannot go in a header.
    #[error(transparent)]
    Request(#[from] StreamError),
    /// The handshake was answered with an HTTP status: the token was refused.
    #[error("{url} refused the token (HTTP {status}): check the token")]
    Refused { url: String, status: u16 },
    /// No connection: the tracker is down, or the URL points elsewhere.
    #[error("cannot connect to {url}: {source}")]
    Connect { url: String, source: Box<tungstenite::Error> },
    /// The connection took no ping.
    #[error("cannot send a ping to {url}: {source}")]
    Send { url: String, source: Box<tungstenite::Error> },
    /// The connection broke while waiting for the pong.
    #[error("the event stream at {url} failed: {source}")]
    Failed { url: String, source: Box<tungstenite::Error> },
    /// The server closed the connection without a pong.
    #[error("{url} closed the connection without answering the ping")]
    Closed { url: String },
    /// No pong within the probe's time.
    #[error("no answer from {url} within {seconds} s")]
    TimedOut { url: String, seconds: u64 },
}

/// Connects to the event stream of `client`'s member, sends `ping` and waits for `pong`.
/// The error says what failed and what to check.
pub async fn probe(client: &TrackerClient, timeout: Duration) -> Result<(), StreamProbeError> {
    let url = client.ws_url();
    let bearer = format!("Bearer {}", client.token().expose());
    let request = build_request(&url, &bearer, "the token")?;
    let target = url.clone();
    let attempt = tokio::time::timeout(timeout, async move {
        let url = target;
        let (mut socket, _) = match tokio_tungstenite::connect_async(request).await {
            Ok(connected) => connected,
            Err(tungstenite::Error::Http(response)) => {
                return Err(StreamProbeError::Refused { url, status: response.status().as_u16() });
            }
            Err(error) => return Err(StreamProbeError::Connect { url, source: Box::new(error) }),
        };
        if let Err(error) = socket.send(client_frame(&ClientFrame::Ping)).await {
            return Err(StreamProbeError::Send { url, source: Box::new(error) });
        }
        while let Some(frame) = socket.next().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(error) => return Err(StreamProbeError::Failed { url, source: Box::new(error) }),
            };
            if let Message::Text(text) = frame
                && let Ok(ServerControl::Pong) = serde_json::from_str::<ServerControl>(&text)
            {
                let _ = socket.close(None).await;
                return Ok(());
            }
        }
        Err(StreamProbeError::Closed { url })
    })
    .await;
    attempt.unwrap_or_else(|_| Err(StreamProbeError::TimedOut { url, seconds: timeout.as_secs() }))
}
