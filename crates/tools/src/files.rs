//! File tools: attach a file to a message, list attachments, read one.
//!
//! The tracker moves file bytes as base64. A model writes text far more reliably than base64, so
//! `upload_file` takes text by default and base64 only when asked; `download_file` shows text
//! files as text and keeps the base64 in the structured content.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ToolContext;
use crate::format;
use crate::kernel::{
    Target, ToolError, ToolGroup, ToolHints, ToolOutput, TrackerTool, output_schema_for, read_only, write,
};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{self, AttachmentOut, FileContent, limits};

/// Attachments as structured content: an object, as MCP wants.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileList {
    pub files: Vec<AttachmentOut>,
}

// ---- upload_file ----

pub struct UploadFile;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadFileArgs {
    pub message_id: String,
    #[schemars(length(max = limits::FILENAME))]
    pub filename: String,
    /// Text, or base64 if base64
    pub content: String,
    pub base64: Option<bool>,
    pub mime_type: Option<String>,
}

impl TrackerTool for UploadFile {
    type Args = UploadFileArgs;
    const NAME: &'static str = "upload_file";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_messages shows the messages and their ids";
    const TITLE: &'static str = "Upload a file";
    const DESCRIPTION: &'static str = "Attach a file to a message.";
    const GROUP: ToolGroup = ToolGroup::Files;

    fn annotations() -> ToolHints {
        write(false, false)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<AttachmentOut>()
    }

    fn target(args: &UploadFileArgs, _: &ToolContext) -> Target {
        Target::Message { message_id: args.message_id.clone() }
    }

    async fn run(args: UploadFileArgs, client: &TrackerClient, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let content = if args.base64.unwrap_or(false) {
            // Check it here so the model hears which field is wrong, not a tracker 422.
            BASE64
                .decode(args.content.trim())
                .map_err(|e| ToolError::invalid("content", "valid base64 (base64 is true)", e.to_string()))?;
            args.content.trim().to_string()
        } else {
            BASE64.encode(args.content.as_bytes())
        };
        let body = model::UploadFile { filename: args.filename, content, mime_type: args.mime_type };
        let file = client.upload_file(&args.message_id, &body, context.idempotency_key.as_deref()).await?;
        ToolOutput::new(format!("uploaded {}", format::attachment_line(&file)), &file)
    }
}

// ---- list_files ----

pub struct ListFiles;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Task key or id
    pub task_id: Option<String>,
    /// Project slug or id
    pub project_id: Option<String>,
    pub message_id: Option<String>,
}

impl TrackerTool for ListFiles {
    type Args = ListFilesArgs;
    const NAME: &'static str = "list_files";
    const TITLE: &'static str = "List files";
    const DESCRIPTION: &'static str = "List attachments; give one of task_id, project_id, message_id.";
    const GROUP: ToolGroup = ToolGroup::Files;

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<FileList>()
    }

    async fn run(args: ListFilesArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let given: Vec<&str> =
            [("task_id", &args.task_id), ("project_id", &args.project_id), ("message_id", &args.message_id)]
                .into_iter()
                .filter(|(_, value)| value.is_some())
                .map(|(name, _)| name)
                .collect();
        if given.len() != 1 {
            let got = if given.is_empty() { "none".to_string() } else { given.join(" and ") };
            return Err(ToolError::invalid("task_id", "exactly one of task_id, project_id, message_id", got));
        }
        let query =
            model::FileQuery { task_id: args.task_id, project_id: args.project_id, message_id: args.message_id };
        let files = client.list_files(&query).await?;
        let text = format::counted(&files, "files", format::attachment_line);
        ToolOutput::new(text, &FileList { files })
    }
}

// ---- download_file ----

pub struct DownloadFile;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadFileArgs {
    /// Attachment id
    pub file_id: String,
}

impl TrackerTool for DownloadFile {
    type Args = DownloadFileArgs;
    const NAME: &'static str = "download_file";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_files shows the attachments and their ids";
    const TITLE: &'static str = "Download a file";
    const DESCRIPTION: &'static str = "Read an attachment.";
    const GROUP: ToolGroup = ToolGroup::Files;
    const PAGING_HINT: &'static str = "the whole file is in the structured content";

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<FileContent>()
    }

    async fn run(args: DownloadFileArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let file = client.download_file(&args.file_id).await?;
        let bytes = BASE64.decode(file.content.trim()).map_err(|e| {
            ToolError::Tracker(picogent_tracker::TrackerError::Decode {
                message: format!("attachment {} is not valid base64: {e}", args.file_id),
            })
        })?;
        let header = format!("{} ({}, {} bytes)", file.filename, file.mime_type, bytes.len());
        let text = match String::from_utf8(bytes) {
            Ok(text) if is_textual(&file.mime_type) => format!("{header}:\n{text}"),
            _ => format!("{header}: binary, not shown; its base64 is in the structured content"),
        };
        ToolOutput::new(text, &file)
    }
}

/// Whether a MIME type is text a model can read.
fn is_textual(mime_type: &str) -> bool {
    let mime_type = mime_type.to_ascii_lowercase();
    mime_type.starts_with("text/")
        || ["json", "xml", "yaml", "toml", "csv", "javascript"].iter().any(|kind| mime_type.contains(kind))
}
