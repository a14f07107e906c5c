//! What a server offers: its lists read on a fresh connection (tools after its own allow and
//! deny lists, prompts, resources) and its skills read from its `skill://` resources. The
//! refreshes on list-changed notifications (`refresh.rs`) read them again through these.

use std::sync::Arc;

use rmcp::model::{Prompt, ReadResourceRequestParams, ReadResourceResult, Resource, Tool};
use tokio_util::sync::CancellationToken;

use super::refresh::{Refreshes, forward_list_changes};
use super::{Link, ServerConnection, ServerSnapshot};
use crate::skills::{MAX_SKILLS_PER_SERVER, Skill, is_skill_uri, read_skill};

impl ServerConnection {
    /// What a fresh connection offers: the server's info, then the lists its capabilities
    /// declare (an empty list where one cannot be read).
    pub(super) async fn first_snapshot(
        &self,
        link: &Link,
        refreshes: &Arc<Refreshes>,
        connection_over: &CancellationToken,
    ) -> ServerSnapshot {
        let info = link.peer.peer_info();
        let mut snapshot = ServerSnapshot {
            has_resources: info.as_ref().is_some_and(|info| info.capabilities.resources.is_some()),
            instructions: info.as_ref().and_then(|info| info.instructions.clone()),
            protocol_version: info.as_ref().map(|info| info.protocol_version.to_string()),
            ..ServerSnapshot::default()
        };
        // From 2026-07-28 a server sends list changes only on a listen stream. It is open before
        // the lists are read, so no change between the two is missed.
        if info.as_ref().is_some_and(|info| !info.protocol_version.has_initialize())
            && let Some(subscription) = self.listen(link).await
        {
            tokio::spawn(forward_list_changes(
                self.name.clone(),
                link.peer.clone(),
                subscription,
                Arc::clone(refreshes),
                self.listen_timeout(),
                connection_over.clone(),
            ));
        }
        let capabilities = info.as_ref().map(|info| info.capabilities.clone()).unwrap_or_default();
        if capabilities.tools.is_some() {
            snapshot.tools = self.list_tools(link).await.unwrap_or_default();
        }
        if capabilities.prompts.is_some() {
            snapshot.prompts = self.list_prompts(link).await.unwrap_or_default();
        }
        if capabilities.resources.is_some() {
            snapshot.resources = self.list_resources(link).await.unwrap_or_default();
            // A reconnect reads them afresh; what was read before only spares the log.
            let previous = self.snapshot().skills;
            snapshot.skills = self.read_skills(link, &snapshot.resources, &previous).await;
        }
        snapshot
    }

    /// Every page of `tools/list`, filtered by the server's allow/deny lists. `None` (and a warning)
    /// when the server fails: the caller keeps what it had.
    pub(super) async fn list_tools(&self, link: &Link) -> Option<Vec<Tool>> {
        let never = CancellationToken::new();
        match self.request(link, &never, link.peer.list_all_tools()).await {
            Ok(tools) => Some(
                tools
                    .into_iter()
                    .filter(|tool| {
                        picogent_tools::policy::allowed_by(
                            &self.config.tools.allowed,
                            &self.config.tools.disallowed,
                            &tool.name,
                        )
                    })
                    .collect(),
            ),
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "cannot list mcp tools; keeping the previous list");
                None
            }
        }
    }

    pub(super) async fn list_prompts(&self, link: &Link) -> Option<Vec<Prompt>> {
        let never = CancellationToken::new();
        match self.request(link, &never, link.peer.list_all_prompts()).await {
            Ok(prompts) => Some(prompts),
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "cannot list mcp prompts; keeping the previous list");
                None
            }
        }
    }

    pub(super) async fn list_resources(&self, link: &Link) -> Option<Vec<Resource>> {
        let never = CancellationToken::new();
        match self.request(link, &never, link.peer.list_all_resources()).await {
            Ok(resources) => Some(resources),
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "cannot list mcp resources; keeping the previous list");
                None
            }
        }
    }

    /// The skills among `resources`, each read (`resources/read`, side by side) and made a
    /// [`Skill`], at most [`MAX_SKILLS_PER_SERVER`]. A skill that cannot be read keeps its version
    /// in `previous`, if there is one; one that is no skill is skipped; each with a warning. What
    /// a skill's frontmatter had cleared is logged once, when a skill is new or changed.
    pub(super) async fn read_skills(&self, link: &Link, resources: &[Resource], previous: &[Skill]) -> Vec<Skill> {
        let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).filter(|uri| is_skill_uri(uri)).collect();
        if uris.len() > MAX_SKILLS_PER_SERVER {
            tracing::warn!(
                server = %self.name,
                listed = uris.len(),
                kept = MAX_SKILLS_PER_SERVER,
                "mcp server lists more skills than picogent reads; the rest are skipped"
            );
        }
        let never = CancellationToken::new();
        let reads = uris.iter().take(MAX_SKILLS_PER_SERVER).map(|uri| async {
            let read = self.request(link, &never, link.peer.read_resource(ReadResourceRequestParams::new(*uri))).await;
            (*uri, read)
        });
        let mut skills = Vec::new();
        for (uri, read) in futures::future::join_all(reads).await {
            let text = match read {
                Ok(result) => skill_text(result),
                Err(error) => {
                    let kept = previous.iter().find(|skill| skill.uri == uri);
                    tracing::warn!(server = %self.name, uri, %error, kept_previous = kept.is_some(), "cannot read mcp skill");
                    skills.extend(kept.cloned());
                    continue;
                }
            };
            match text.as_deref().map(|text| read_skill(uri, text)) {
                Some(Ok(skill)) => {
                    if !skill.cleared.is_empty() && !previous.contains(&skill) {
                        tracing::info!(
                            server = %self.name,
                            skill = %skill.name,
                            uri,
                            cleared = %skill.cleared.join(", "),
                            "mcp skill: frontmatter fields cleared (a server's skill grants no tools and never starts by itself)"
                        );
                    }
                    skills.push(skill);
                }
                Some(Err(error)) => tracing::warn!(server = %self.name, uri, %error, "mcp skill skipped"),
                None => tracing::warn!(server = %self.name, uri, "mcp skill skipped: the resource has no text"),
            }
        }
        skills
    }
}

/// The text of a read skill resource: its text contents joined; `None` when it has none.
fn skill_text(result: ReadResourceResult) -> Option<String> {
    let texts: Vec<String> = result
        .contents
        .into_iter()
        .filter_map(|contents| match contents {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}
