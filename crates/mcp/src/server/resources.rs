//! Resources: the tracker's tasks, comments, projects and members, and with a running agent its
//! status and runs.
//!
//! Invariants:
//! - a URI is parsed once into [`ResourceUri`]; its segments are plain names (no `/`, `%`, `..`),
//!   so nothing a client sends reaches a tracker path unchecked;
//! - a thing that does not exist is `resource_not_found` (rmcp gives it the code of the peer's
//!   era); any other failure is an internal error;
//! - reads are never cached (tracker data changes under the reader); the resource list is cached
//!   only while no agent runs, since runs come and go.

use rmcp::ErrorData;
use rmcp::model::{
    CacheScope, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate,
};
use serde_json::json;

use super::{AgentControlError, JSON_MIME, McpServer, STATIC_LIST_TTL_MS};
use picogent_tracker::TrackerError;
use picogent_tracker::model::MessageQuery;

impl McpServer {
    pub(super) async fn resource_list(&self) -> ListResourcesResult {
        let mut resources = vec![
            Resource::new("board://members", "members")
                .with_title("Board members")
                .with_description("Every member of the board: slug, name, human or agent, status")
                .with_mime_type(JSON_MIME),
        ];
        if let Some(agent) = &self.inner.agent {
            resources.push(
                Resource::new("agent://status", "agent-status")
                    .with_title("Agent status")
                    .with_description("The running agent: connection, runs in flight, budgets")
                    .with_mime_type(JSON_MIME),
            );
            resources.push(
                Resource::new("run://list", "runs")
                    .with_title("Runs")
                    .with_description("Recent runs of the agent, newest first")
                    .with_mime_type(JSON_MIME),
            );
            for run in agent.list_runs().await {
                resources.push(
                    Resource::new(format!("run://{}", run.id), format!("run-{}", run.id))
                        .with_title(format!("Run {}", run.id))
                        .with_mime_type(JSON_MIME),
                );
            }
        }
        // Runs come and go, so with an agent the list is never cached.
        let ttl_ms = if self.inner.agent.is_some() { 0 } else { STATIC_LIST_TTL_MS };
        ListResourcesResult::with_all_items(resources).with_ttl_ms(ttl_ms).with_cache_scope(CacheScope::Private)
    }

    pub(super) fn resource_template_list(&self) -> ListResourceTemplatesResult {
        let mut templates = vec![
            ResourceTemplate::new("task://{key}", "task")
                .with_title("Task")
                .with_description("A task with its steps, by key (e.g. TE-15)")
                .with_mime_type(JSON_MIME),
            ResourceTemplate::new("task://{key}/messages", "task-messages")
                .with_title("Task comments")
                .with_description("The comments on a task, oldest first")
                .with_mime_type(JSON_MIME),
            ResourceTemplate::new("project://{slug}", "project")
                .with_title("Project")
                .with_description("A project by slug")
                .with_mime_type(JSON_MIME),
        ];
        if self.inner.agent.is_some() {
            templates.extend([
                ResourceTemplate::new("run://{id}", "run")
                    .with_title("Run")
                    .with_description("One run's record")
                    .with_mime_type(JSON_MIME),
                ResourceTemplate::new("run://{id}/log", "run-log")
                    .with_title("Run log")
                    .with_description("One run's log: prompts, tool calls and results")
                    .with_mime_type("text/plain"),
                ResourceTemplate::new("run://{id}/logs", "run-logs")
                    .with_title("Coding agent output")
                    .with_description("What the run's coding agent printed, as plain text (live while it runs)")
                    .with_mime_type("text/plain"),
                ResourceTemplate::new("run://{id}/result", "run-result")
                    .with_title("Run result")
                    .with_description("One run's outcome and final answer")
                    .with_mime_type(JSON_MIME),
            ]);
        }
        ListResourceTemplatesResult::with_all_items(templates)
            .with_ttl_ms(STATIC_LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private)
    }

    pub(super) async fn read_resource_uri(&self, uri: &str) -> Result<ReadResourceResult, ErrorData> {
        let Some(resource) = ResourceUri::parse(uri) else {
            return Err(not_found(uri, "no such resource: resources/list and resources/templates/list name them"));
        };
        let contents = self.read(uri, resource).await?;
        // Tracker data changes under the reader, and it is the caller's own view.
        Ok(ReadResourceResult::new(vec![contents]).with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    async fn read(&self, uri: &str, resource: ResourceUri) -> Result<ResourceContents, ErrorData> {
        let tracker = &self.inner.tracker;
        // A thing the tracker does not have is a missing resource; other failures are internal.
        let missing = |error: TrackerError| match error {
            TrackerError::NotFound { .. } => not_found(uri, "resource not found"),
            other => ErrorData::internal_error(format!("cannot read {uri}: {other}"), None),
        };
        match resource {
            ResourceUri::Task(key) => {
                let task = tracker.get_task(&key).await.map_err(missing)?;
                let steps = tracker.list_steps(&task.id).await.map_err(missing)?;
                json_contents(uri, &json!({ "task": task, "steps": steps }))
            }
            ResourceUri::TaskMessages(key) => {
                let task = tracker.get_task(&key).await.map_err(missing)?;
                let query = MessageQuery { task_id: Some(task.id.clone()), limit: Some(200), ..Default::default() };
                let messages = tracker.list_messages(&query).await.map_err(missing)?;
                json_contents(uri, &messages)
            }
            ResourceUri::Project(slug) => {
                let project = tracker.get_project(&slug).await.map_err(missing)?;
                json_contents(uri, &project)
            }
            ResourceUri::Members => {
                let members = tracker.list_members().await.map_err(missing)?;
                json_contents(uri, &members)
            }
            ResourceUri::AgentStatus
            | ResourceUri::RunList
            | ResourceUri::Run(_)
            | ResourceUri::RunLog(_)
            | ResourceUri::RunLogs(_)
            | ResourceUri::RunResult(_) => self.read_agent_resource(uri, resource).await,
        }
    }

    async fn read_agent_resource(&self, uri: &str, resource: ResourceUri) -> Result<ResourceContents, ErrorData> {
        let Some(agent) = &self.inner.agent else {
            return Err(not_found(uri, "run resources are served by `picogent run` only"));
        };
        let missing = |error: AgentControlError| match error {
            AgentControlError::NotFound { .. } => not_found(uri, &error.to_string()),
            other => ErrorData::internal_error(format!("cannot read {uri}: {other}"), None),
        };
        match resource {
            ResourceUri::AgentStatus => sorted_json_contents(uri, &agent.status().await),
            ResourceUri::RunList => sorted_json_contents(uri, &agent.list_runs().await),
            ResourceUri::Run(run_id) => sorted_json_contents(uri, &agent.get_run(&run_id).await.map_err(missing)?),
            ResourceUri::RunResult(run_id) => {
                sorted_json_contents(uri, &agent.run_result(&run_id).await.map_err(missing)?)
            }
            ResourceUri::RunLog(_) | ResourceUri::RunLogs(_) => {
                let text = match &resource {
                    ResourceUri::RunLog(run_id) => agent.run_log(run_id).await,
                    ResourceUri::RunLogs(run_id) => agent.coding_output(run_id).await,
                    _ => unreachable!("matched above"),
                }
                .map_err(missing)?;
                Ok(ResourceContents::TextResourceContents {
                    uri: uri.to_string(),
                    mime_type: Some("text/plain".to_string()),
                    text,
                    meta: None,
                })
            }
            ResourceUri::Task(_) | ResourceUri::TaskMessages(_) | ResourceUri::Project(_) | ResourceUri::Members => {
                Err(not_found(uri, "resource not found"))
            }
        }
    }
}

/// A resource URI this server understands, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ResourceUri {
    Task(String),
    TaskMessages(String),
    Project(String),
    Members,
    AgentStatus,
    RunList,
    Run(String),
    RunLog(String),
    /// The run's coding agent output (`run://{id}/logs`).
    RunLogs(String),
    RunResult(String),
}

impl ResourceUri {
    fn parse(uri: &str) -> Option<ResourceUri> {
        let (scheme, rest) = uri.split_once("://")?;
        let segments: Vec<&str> = rest.split('/').collect();
        let plain = |segment: &str| -> Option<String> {
            let ok = !segment.is_empty()
                && segment.len() <= 200
                && segment.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            ok.then(|| segment.to_string())
        };
        match (scheme, segments.as_slice()) {
            ("task", [key]) => Some(ResourceUri::Task(plain(key)?)),
            ("task", [key, "messages"]) => Some(ResourceUri::TaskMessages(plain(key)?)),
            ("project", [slug]) => Some(ResourceUri::Project(plain(slug)?)),
            ("board", ["members"]) => Some(ResourceUri::Members),
            ("agent", ["status"]) => Some(ResourceUri::AgentStatus),
            ("run", ["list"]) => Some(ResourceUri::RunList),
            ("run", [id]) => Some(ResourceUri::Run(plain(id)?)),
            ("run", [id, "log"]) => Some(ResourceUri::RunLog(plain(id)?)),
            ("run", [id, "logs"]) => Some(ResourceUri::RunLogs(plain(id)?)),
            ("run", [id, "result"]) => Some(ResourceUri::RunResult(plain(id)?)),
            _ => None,
        }
    }
}

pub(super) fn not_found(uri: &str, message: &str) -> ErrorData {
    ErrorData::resource_not_found(format!("{message}: {uri}"), Some(json!({ "uri": uri })))
}

fn json_contents(uri: &str, value: &impl serde::Serialize) -> Result<ResourceContents, ErrorData> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| ErrorData::internal_error(format!("cannot encode {uri}: {e}"), None))?;
    Ok(ResourceContents::TextResourceContents {
        uri: uri.to_string(),
        mime_type: Some(JSON_MIME.to_string()),
        text,
        meta: None,
    })
}

/// [`json_contents`] with every object's fields in name order, as `report_run` lists the same
/// records (through a `serde_json::Value`), so the two views of a run read alike.
fn sorted_json_contents(uri: &str, value: &impl serde::Serialize) -> Result<ResourceContents, ErrorData> {
    let value = serde_json::to_value(value)
        .map_err(|e| ErrorData::internal_error(format!("cannot encode {uri}: {e}"), None))?;
    json_contents(uri, &value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_uris_parse() {
        let cases = [
            ("task://TE-15", Some(ResourceUri::Task("TE-15".into()))),
            ("task://TE-15/messages", Some(ResourceUri::TaskMessages("TE-15".into()))),
            ("project://team", Some(ResourceUri::Project("team".into()))),
            ("board://members", Some(ResourceUri::Members)),
            ("agent://status", Some(ResourceUri::AgentStatus)),
            ("run://list", Some(ResourceUri::RunList)),
            ("run://r-1", Some(ResourceUri::Run("r-1".into()))),
            ("run://r-1/log", Some(ResourceUri::RunLog("r-1".into()))),
            ("run://r-1/logs", Some(ResourceUri::RunLogs("r-1".into()))),
            ("run://r-1/result", Some(ResourceUri::RunResult("r-1".into()))),
            ("task://", None),
            ("task://../x", None),
            ("task://TE-1/steps", None),
            ("task://a%2Fb", None),
            ("board://tasks", None),
            ("file:///etc/passwd", None),
            ("TE-15", None),
        ];
        for (uri, expected) in cases {
            assert_eq!(ResourceUri::parse(uri), expected, "{uri}");
        }
    }
}
