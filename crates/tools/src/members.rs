//! Member tools: who is on the board, and the agent's own status line.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ToolContext;
use crate::format;
use crate::kernel::{
    Target, ToolError, ToolGroup, ToolHints, ToolOutput, TrackerTool, output_schema_for, read_only, write,
};
use crate::projects::NoArgs;
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{MemberOut, StatusOut, limits};

/// Members as structured content: an object, as MCP wants.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MemberList {
    pub members: Vec<MemberOut>,
}

// ---- list_members ----

pub struct ListMembers;

impl TrackerTool for ListMembers {
    type Args = NoArgs;
    const NAME: &'static str = "list_members";
    const TITLE: &'static str = "List members";
    const DESCRIPTION: &'static str = "List members.";
    const GROUP: ToolGroup = ToolGroup::Members;

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<MemberList>()
    }

    async fn run(_: NoArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let members = client.list_members().await?;
        let text = format::counted(&members, "members", format::member_line);
        ToolOutput::new(text, &MemberList { members })
    }
}

// ---- get_member ----

pub struct GetMember;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetMemberArgs {
    /// Member slug or me
    pub slug: String,
}

impl TrackerTool for GetMember {
    type Args = GetMemberArgs;
    const NAME: &'static str = "get_member";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_members shows the members and their slugs";
    const TITLE: &'static str = "Get a member";
    const DESCRIPTION: &'static str = "Read one member.";
    const GROUP: ToolGroup = ToolGroup::Members;

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<MemberOut>()
    }

    async fn run(args: GetMemberArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let member = client.get_member(&args.slug).await?;
        ToolOutput::new(format::member_line(&member), &member)
    }
}

// ---- update_my_status ----

pub struct UpdateMyStatus;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMyStatusArgs {
    #[schemars(length(max = limits::STATUS))]
    pub status: String,
}

impl TrackerTool for UpdateMyStatus {
    type Args = UpdateMyStatusArgs;
    const NAME: &'static str = "update_my_status";
    const TITLE: &'static str = "Update my status";
    const DESCRIPTION: &'static str = "Set your own status line.";
    const GROUP: ToolGroup = ToolGroup::Members;

    fn annotations() -> ToolHints {
        write(false, true)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<StatusOut>()
    }

    /// The agent's own status is no one else's.
    fn target(_: &Self::Args, _: &ToolContext) -> Target {
        Target::Nothing
    }

    async fn run(args: UpdateMyStatusArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let answer = client.update_my_status(&args.status).await?;
        ToolOutput::new(format!("status: {}", answer.status), &answer)
    }
}
