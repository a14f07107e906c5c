//! Project tools: list projects and read one (its key and chat id).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ToolContext;
use crate::format;
use crate::kernel::{ToolError, ToolGroup, ToolHints, ToolOutput, TrackerTool, output_schema_for, read_only};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::ProjectOut;

/// Projects as structured content: an object, as MCP wants.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ProjectList {
    pub projects: Vec<ProjectOut>,
}

// No arguments; unknown ones are refused. (A `//` comment: a doc line would become the schema's
// description and cost tokens.)
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

// ---- list_projects ----

pub struct ListProjects;

impl TrackerTool for ListProjects {
    type Args = NoArgs;
    const NAME: &'static str = "list_projects";
    const TITLE: &'static str = "List projects";
    const DESCRIPTION: &'static str = "List projects.";
    const GROUP: ToolGroup = ToolGroup::Projects;

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<ProjectList>()
    }

    async fn run(_: NoArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let projects = client.list_projects().await?;
        let text = format::counted(&projects, "projects", format::project_line);
        ToolOutput::new(text, &ProjectList { projects })
    }
}

// ---- get_project ----

pub struct GetProject;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetProjectArgs {
    /// Project slug or id
    pub slug: String,
}

impl TrackerTool for GetProject {
    type Args = GetProjectArgs;
    const NAME: &'static str = "get_project";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_projects shows the projects and their slugs";
    const TITLE: &'static str = "Get a project";
    const DESCRIPTION: &'static str = "Read one project.";
    const GROUP: ToolGroup = ToolGroup::Projects;

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<ProjectOut>()
    }

    async fn run(args: GetProjectArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let project = client.get_project(&args.slug).await?;
        ToolOutput::new(format::project_line(&project), &project)
    }
}
