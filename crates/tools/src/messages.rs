//! Message tools: post to a project chat or a task's comments, read them, reply in a thread.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::format;
use crate::kernel::{
    Target, ToolError, ToolGroup, ToolHints, ToolOutput, TrackerTool, output_schema_for, read_only, write,
};
use crate::{PostPlace, ToolContext};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{self, MessageOut, limits};

/// Messages as structured content: an object, as MCP wants.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MessageList {
    pub messages: Vec<MessageOut>,
}

/// The names of the fields given, out of `fields`.
fn given<'a>(fields: &[(&'a str, bool)]) -> Vec<&'a str> {
    fields.iter().filter(|(_, present)| *present).map(|(name, _)| *name).collect()
}

// ---- send_message ----

pub struct SendMessage;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageArgs {
    #[schemars(length(max = limits::CONTENT))]
    pub content: String,
    /// Project chat id
    pub chat_id: Option<String>,
    /// Task key or id
    pub task_id: Option<String>,
    /// Message id to reply to
    pub parent_id: Option<String>,
    /// Member slugs to notify
    #[schemars(length(max = limits::MENTIONS))]
    pub mentions: Option<Vec<String>>,
}

impl TrackerTool for SendMessage {
    type Args = SendMessageArgs;
    const NAME: &'static str = "send_message";
    const NOT_FOUND_HINT: &'static str =
        "check the id or key: list_messages shows message ids, list_tasks task keys, list_projects the chats";
    const TITLE: &'static str = "Send a message";
    const DESCRIPTION: &'static str = "Post a message; give one of chat_id, task_id, parent_id.";
    const GROUP: ToolGroup = ToolGroup::Messages;

    fn annotations() -> ToolHints {
        write(false, false)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<MessageOut>()
    }

    /// Where the message would go; a call naming no place or several is refused by `run` itself.
    fn target(args: &SendMessageArgs, _: &ToolContext) -> Target {
        match (&args.chat_id, &args.task_id, &args.parent_id) {
            (None, None, Some(parent_id)) => Target::Post(PostPlace::Reply { parent_id: parent_id.clone() }),
            (None, Some(task_id), None) => Target::Post(PostPlace::Task { task_id: task_id.clone() }),
            (Some(chat_id), None, None) => Target::Post(PostPlace::Chat { chat_id: chat_id.clone() }),
            _ => Target::Nothing,
        }
    }

    async fn run(
        args: SendMessageArgs,
        client: &TrackerClient,
        context: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let places = given(&[
            ("chat_id", args.chat_id.is_some()),
            ("task_id", args.task_id.is_some()),
            ("parent_id", args.parent_id.is_some()),
        ]);
        if places.len() != 1 {
            let got = if places.is_empty() { "none".to_string() } else { places.join(" and ") };
            return Err(ToolError::invalid("chat_id", "exactly one of chat_id, task_id, parent_id", got));
        }
        let place = if let Some(parent_id) = &args.parent_id {
            PostPlace::Reply { parent_id: parent_id.clone() }
        } else if let Some(task_id) = &args.task_id {
            PostPlace::Task { task_id: task_id.clone() }
        } else {
            PostPlace::Chat { chat_id: args.chat_id.clone().unwrap_or_default() }
        };
        let reply_to = guard(context, &place).await?;
        let body = model::SendMessage {
            content: args.content,
            chat_id: args.chat_id,
            task_id: args.task_id,
            parent_id: args.parent_id,
            mentions: args.mentions,
            reply_to,
        };
        let message = client.send_message(&body, context.idempotency_key.as_deref()).await?;
        posted(context, &message);
        ToolOutput::new(format!("sent {}", format::message_line(&message)), &message)
    }
}

// ---- list_messages ----

pub struct ListMessages;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListMessagesArgs {
    pub chat_id: Option<String>,
    /// Task key or id
    pub task_id: Option<String>,
    /// Thread's message id
    pub parent_id: Option<String>,
    /// Member slug
    pub mentioning: Option<String>,
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<u32>,
    /// Older than message id
    pub before: Option<String>,
    /// Newer than message id
    pub after: Option<String>,
}

impl TrackerTool for ListMessages {
    type Args = ListMessagesArgs;
    const NAME: &'static str = "list_messages";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_tasks shows task keys, list_projects the chats";
    const TITLE: &'static str = "List messages";
    const DESCRIPTION: &'static str =
        "Read messages, oldest first; give one of chat_id, task_id, parent_id, mentioning.";
    const GROUP: ToolGroup = ToolGroup::Messages;
    const PAGING_HINT: &'static str = "use a smaller limit and page with before or after";

    fn annotations() -> ToolHints {
        read_only()
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<MessageList>()
    }

    async fn run(args: ListMessagesArgs, client: &TrackerClient, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let filters = given(&[
            ("chat_id", args.chat_id.is_some()),
            ("task_id", args.task_id.is_some()),
            ("parent_id", args.parent_id.is_some()),
            ("mentioning", args.mentioning.is_some()),
        ]);
        if filters.len() != 1 {
            let got = if filters.is_empty() { "none".to_string() } else { filters.join(" and ") };
            return Err(ToolError::invalid("chat_id", "exactly one of chat_id, task_id, parent_id, mentioning", got));
        }
        let query = model::MessageQuery {
            chat_id: args.chat_id,
            task_id: args.task_id,
            parent_id: args.parent_id,
            mentioning: args.mentioning,
            limit: args.limit,
            before: args.before,
            after: args.after,
        };
        let messages = client.list_messages(&query).await?;
        let text = format::counted(&messages, "messages", format::message_line);
        ToolOutput::new(text, &MessageList { messages })
    }
}

// ---- reply_message ----

pub struct ReplyMessage;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyMessageArgs {
    pub parent_id: String,
    #[schemars(length(max = limits::CONTENT))]
    pub content: String,
    /// Member slugs to notify
    #[schemars(length(max = limits::MENTIONS))]
    pub mentions: Option<Vec<String>>,
}

impl TrackerTool for ReplyMessage {
    type Args = ReplyMessageArgs;
    const NAME: &'static str = "reply_message";
    const NOT_FOUND_HINT: &'static str = "check the id or key: list_messages shows the messages and their ids";
    const TITLE: &'static str = "Reply to a message";
    const DESCRIPTION: &'static str = "Reply in a message's thread.";
    const GROUP: ToolGroup = ToolGroup::Messages;

    fn annotations() -> ToolHints {
        write(false, false)
    }

    fn output_schema() -> Option<serde_json::Value> {
        output_schema_for::<MessageOut>()
    }

    fn target(args: &ReplyMessageArgs, _: &ToolContext) -> Target {
        Target::Post(PostPlace::Reply { parent_id: args.parent_id.clone() })
    }

    async fn run(
        args: ReplyMessageArgs,
        client: &TrackerClient,
        context: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let reply_to = guard(context, &PostPlace::Reply { parent_id: args.parent_id.clone() }).await?;
        let body = model::ReplyMessage { content: args.content, mentions: args.mentions, reply_to };
        let message = client.reply_message(&args.parent_id, &body, context.idempotency_key.as_deref()).await?;
        posted(context, &message);
        ToolOutput::new(format!("sent {}", format::message_line(&message)), &message)
    }
}

/// Asks the context's post guard (the loop guard) whether this post may go out, and which
/// message it answers (none without a guard: the MCP server and the command line post for a
/// person, who names nothing).
async fn guard(context: &ToolContext, place: &PostPlace) -> Result<Option<String>, ToolError> {
    match &context.post_guard {
        Some(guard) => guard
            .before_post(place, context.steering_taken)
            .await
            .map_err(|refused| ToolError::Refused { message: refused.to_string() }),
        None => Ok(None),
    }
}

/// Tells the context's post guard that a post landed.
fn posted(context: &ToolContext, message: &model::MessageOut) {
    if let Some(guard) = &context.post_guard {
        guard.posted(message);
    }
}
