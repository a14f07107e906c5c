//! A one-shot check of the event stream for `picogent check`: connect, ping, expect a pong.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message};

use super::build_request;
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{ClientFrame, ServerControl};

/// Connects to the event stream of `client`'s member, sends `ping` and waits for `pong`.
/// The error says what failed and what to check.
pub async fn probe(client: &TrackerClient, timeout: Duration) -> Result<(), String> {
    let url = client.ws_url();
    let bearer = format!("Bearer {}", client.token().expose());
    let request = build_request(&url, &bearer, "the token").map_err(|e| e.to_string())?;
    let target = url.clone();
    let attempt = tokio::time::timeout(timeout, async move {
        let url = target;
        let (mut socket, _) = match tokio_tungstenite::connect_async(request).await {
            Ok(connected) => connected,
            Err(tungstenite::Error::Http(response)) => {
                return Err(format!("{url} refused the token (HTTP {}): check the token", response.status().as_u16()));
            }
            Err(error) => return Err(format!("cannot connect to {url}: {error}")),
        };
        let ping = serde_json::to_string(&ClientFrame::Ping).map_err(|e| e.to_string())?;
        socket.send(Message::text(ping)).await.map_err(|e| format!("cannot send a ping to {url}: {e}"))?;
        while let Some(frame) = socket.next().await {
            let frame = frame.map_err(|e| format!("the event stream at {url} failed: {e}"))?;
            if let Message::Text(text) = frame
                && let Ok(ServerControl::Pong) = serde_json::from_str::<ServerControl>(&text)
            {
                let _ = socket.close(None).await;
                return Ok(());
            }
        }
        Err(format!("{url} closed the connection without answering the ping"))
    })
    .await;
    attempt.unwrap_or_else(|_| Err(format!("no answer from {url} within {} s", timeout.as_secs())))
}
