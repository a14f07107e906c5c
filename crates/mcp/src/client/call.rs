//! Calling a tool on one server: the call on a task of its own, its turn on a 2025-11-25
//! connection, the rounds of a call whose server asks the person (both protocol versions), and
//! what a call becomes when its run is stopped or the agent shuts down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, JsonObject};

use super::{Link, ServerCallError, ServerConnection};
use picogent_tools::ToolContext;

/// At a stop, how long a call whose server asked the person (and was answered `cancel`) is
/// given to end itself with that answer before it is abandoned.
const STOP_GRACE: Duration = Duration::from_secs(5);

impl ServerConnection {
    /// `tools/call` with the server's original tool name, for the run of `context`. When the
    /// server asks the person for input ([`crate::elicit`]) the call goes on once they answered:
    /// `timeout_ms` does not count the time it waited for them. On a 2025-11-25 connection the
    /// call first waits for the calls before it to end (one at a time; its run's budgets and a
    /// stop still hold).
    ///
    /// The call is carried out on a task of its own, whose cancellation dropping this future
    /// fires: a run stopped (or cut short by a shutdown) while the server asks the person drops
    /// its calls at once, and the task still ends the call as [`ServerConnection::abandon`] says
    /// (the server told `cancel` at a stop, nothing at a shutdown).
    pub async fn call_tool(
        self: &Arc<Self>,
        tool: &str,
        arguments: JsonObject,
        context: &ToolContext,
    ) -> Result<rmcp::model::CallToolResult, ServerCallError> {
        let link = self.link()?;
        let mut own = context.clone();
        own.cancel = context.cancel.child_token();
        let dropped = own.cancel.clone().drop_guard();
        let (connection, tool) = (Arc::clone(self), tool.to_string());
        let call = tokio::spawn(async move { connection.call_in_turn(&link, &tool, arguments, &own).await });
        let outcome = call.await.unwrap_or_else(|failed| {
            Err(ServerCallError::Failed { server: self.name.clone(), message: format!("the call failed: {failed}") })
        });
        dropped.disarm();
        outcome
    }

    /// The call, once it is its turn on the connection.
    async fn call_in_turn(
        &self,
        link: &Link,
        tool: &str,
        arguments: JsonObject,
        context: &ToolContext,
    ) -> Result<rmcp::model::CallToolResult, ServerCallError> {
        // Counted in `calls_waiting` until it is its turn, or it ends without one.
        let waiting = link.one_at_a_time.as_ref().map(|_| self.waiting_turn.enter());
        let _turn = match &link.one_at_a_time {
            Some(turn) => Some(tokio::select! {
                permit = turn.acquire() => permit.map_err(|_| ServerCallError::Unavailable {
                    server: self.name.clone(),
                    reason: "its connection ended".to_string(),
                })?,
                _ = context.cancel.cancelled() => return Err(ServerCallError::Cancelled { server: self.name.clone() }),
            }),
            None => None,
        };
        drop(waiting);
        let (call, asked) = self.in_flight.enter(tool, context);
        let outcome = self.call_tool_rounds(link, tool, arguments, context, &asked).await;
        self.in_flight.leave(call);
        outcome
    }

    async fn call_tool_rounds(
        &self,
        link: &Link,
        tool: &str,
        arguments: JsonObject,
        context: &ToolContext,
        asked: &AtomicBool,
    ) -> Result<rmcp::model::CallToolResult, ServerCallError> {
        use rmcp::model::CallToolResponse;
        let failed = |message: String| ServerCallError::Failed { server: self.name.clone(), message };
        // At a shutdown the person's answer never comes: the call ends, and the server is told nothing.
        let interrupted = || ServerCallError::Cancelled { server: self.name.clone() };
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let (mut rounds, mut url_tries) = (0usize, 0u32);
        loop {
            let limit = self.timeout();
            let deadline = tokio::time::Instant::now() + limit;
            let mut sent = Sent::call(link, params.clone());
            let answer = tokio::select! {
                answer = sent.answer() => answer,
                _ = context.wait_clock.passed(deadline) => {
                    return Err(ServerCallError::TimedOut { server: self.name.clone(), timeout_ms: limit.as_millis() as u64 });
                }
                _ = context.cancel.cancelled() => {
                    return Err(self.abandon(sent, context, asked.load(Ordering::Relaxed)).await);
                }
            };
            match answer {
                Ok(CallToolResponse::Complete(result)) => return Ok(result),
                // 2026-07-28: the result asks for input; the call is made again with the answers.
                Ok(CallToolResponse::InputRequired(input)) => {
                    rounds += 1;
                    if rounds > rmcp::model::DEFAULT_MRTR_MAX_ROUNDS {
                        return Err(failed(format!("it asked for input more than {} times in one call", rounds - 1)));
                    }
                    let mut responses = rmcp::model::InputResponses::new();
                    for (key, request) in input.input_requests.unwrap_or_default() {
                        let rmcp::model::InputRequest::Elicitation(request) = request else {
                            return Err(failed(
                                "it asked for input picogent does not give (sampling or roots)".to_string(),
                            ));
                        };
                        asked.store(true, Ordering::Relaxed);
                        let Some(answer) =
                            self.elicitation.answer(&self.name, tool, &request.params, Some(context)).await
                        else {
                            return Err(interrupted());
                        };
                        responses.insert(key, serde_json::to_value(answer).unwrap_or_default());
                    }
                    params.input_responses = Some(responses);
                    params.request_state = input.request_state;
                }
                Ok(_) => return Err(failed("it answered with a task, which picogent does not follow".to_string())),
                // 2025-11-25: the call needs the person to complete a link first, then again.
                Err(ServiceError::McpError(data)) if data.code.0 == crate::elicit::URL_ELICITATION_REQUIRED => {
                    let retries = self.elicitation.people().map_or(0, |people| people.url_retries);
                    url_tries += 1;
                    if url_tries > retries {
                        return Err(failed(format!(
                            "it still needs a link completed after {retries} tries (elicitation.url_retries): {}",
                            data.message
                        )));
                    }
                    let links: Vec<rmcp::model::ElicitRequestParams> = data
                        .data
                        .as_ref()
                        .and_then(|data| data.get("elicitations"))
                        .and_then(|list| serde_json::from_value(list.clone()).ok())
                        .unwrap_or_default();
                    if links.is_empty() {
                        return Err(failed(format!("it needs a link completed but sent none: {}", data.message)));
                    }
                    for link in &links {
                        let Some(answer) = self.elicitation.answer(&self.name, tool, link, Some(context)).await else {
                            return Err(interrupted());
                        };
                        if answer.action != rmcp::model::ElicitationAction::Accept {
                            return Ok(rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                                format!(
                                    "mcp server {} needs a link completed for this call, and it was not ({:?}); \
                                     nothing was done",
                                    self.name, answer.action
                                ),
                            )]));
                        }
                    }
                }
                Err(error) => return Err(self.failed(error, link)),
            }
        }
    }

    /// The run of a call was cancelled while the call was out. A call that asked nobody is
    /// abandoned at once: dropped, and the server is sent `notifications/cancelled`. A call whose
    /// server asked the person: at a stop, it was answered `cancel` and is given a moment to end
    /// itself with that answer (then abandoned); at a shutdown, it is let go unanswered and ends
    /// with the connection, so the server is told nothing (the resumed run calls and asks again).
    async fn abandon(&self, mut sent: Sent, context: &ToolContext, asked: bool) -> ServerCallError {
        let shutdown = context.waits.as_ref().is_some_and(|waits| waits.shutting_down());
        match (asked, shutdown) {
            (true, true) => sent.let_go(),
            (true, false) => {
                let _ = tokio::time::timeout(self.timeout().min(STOP_GRACE), sent.answer()).await;
            }
            (false, _) => {}
        }
        ServerCallError::Cancelled { server: self.name.clone() }
    }
}

/// One `tools/call` sent on a task of its own, so that it can be let go at a shutdown. Dropped
/// before its answer came, it is abandoned: rmcp then sends the server `notifications/cancelled`.
struct Sent(Option<tokio::task::JoinHandle<Result<rmcp::model::CallToolResponse, ServiceError>>>);

impl Sent {
    fn call(link: &Link, params: CallToolRequestParams) -> Sent {
        let peer = link.peer.clone();
        Sent(Some(tokio::spawn(async move { peer.call_tool_once(params).await })))
    }

    /// The server's answer (once; a call let go never answers).
    async fn answer(&mut self) -> Result<rmcp::model::CallToolResponse, ServiceError> {
        match self.0.as_mut() {
            Some(task) => {
                let answer = task.await;
                self.0 = None;
                answer.unwrap_or_else(|failed| Err(ServiceError::Cancelled { reason: Some(failed.to_string()) }))
            }
            None => std::future::pending().await,
        }
    }

    /// Lets the call go on unheard, until the connection ends.
    fn let_go(&mut self) {
        self.0 = None;
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}
