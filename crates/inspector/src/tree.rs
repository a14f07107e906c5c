//! The page of a task tree (`/tree/{key}`): the parent, a row per sub-task with its state,
//! assignee, blockers, branch, review round and what this agent's runs of it spent, and the
//! tree's spend against `limits.max_tokens_per_tree`. The tree is read through [`TreeSource`]
//! (the runtime's, over the board and the state); a key that is not a task key's shape, or names
//! no task, is a 404 page.
//!
//! [`TreeSource`]: crate::live::TreeSource

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use serde_json::json;

use crate::Inspector;
use crate::live::{TaskTree, TreeError, TreeTask};
use crate::pages::{error_page, render, state_failed};
use crate::settings::Settings;
use picogent_notices::thousands;
use picogent_web::view as context;

/// How much of a key that is not one the 404 page quotes.
const KEY_QUOTED: usize = 40;

/// A task of the tree as its page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TaskLine {
    pub key: String,
    pub title: String,
    pub status: &'static str,
    pub assignee: Option<String>,
    /// The board's page of the task.
    pub link: String,
}

/// One sub-task's row.
#[derive(Debug, Clone, Serialize)]
pub struct SubTaskRow {
    pub task: TaskLine,
    pub blockers: Vec<String>,
    pub review_round: Option<u32>,
    pub branch: Option<String>,
    pub tokens: String,
    pub cost: Option<String>,
    pub latest_run: Option<String>,
    pub latest_run_short: Option<String>,
}

/// The tree's page.
#[derive(Debug, Clone, Serialize)]
pub struct TreePage {
    pub parent: TaskLine,
    pub part_of: Option<String>,
    pub sub_tasks: Vec<SubTaskRow>,
    pub tokens: String,
    pub per_tree: String,
    /// The tree's spend, in percent of `limits.max_tokens_per_tree` (at most 100).
    pub percent: u64,
    pub cost: Option<String>,
}

/// What the page shows of `tree`; money only where `llm.price` is set.
pub fn tree_page_view(tree: &TaskTree, settings: &Settings) -> TreePage {
    let cost = |cost: f64| settings.priced.then(|| format!("{cost:.4}"));
    let sub_tasks = tree
        .sub_tasks
        .iter()
        .map(|sub_task| SubTaskRow {
            task: task_line(&sub_task.task, settings),
            blockers: sub_task.blockers.clone(),
            review_round: sub_task.review_round,
            branch: sub_task.branch.clone(),
            tokens: thousands(sub_task.spent.tokens),
            cost: cost(sub_task.spent.cost),
            latest_run: sub_task.latest_run.clone(),
            latest_run_short: sub_task.latest_run.as_ref().map(|id| id.chars().take(8).collect()),
        })
        .collect();
    let per_tree = settings.limits.max_tokens_per_tree;
    TreePage {
        parent: task_line(&tree.parent, settings),
        part_of: tree.part_of.clone(),
        sub_tasks,
        tokens: thousands(tree.spent.tokens),
        per_tree: thousands(per_tree),
        percent: tree.spent.tokens.saturating_mul(100).checked_div(per_tree).unwrap_or(0).min(100),
        cost: cost(tree.spent.cost),
    }
}

fn task_line(task: &TreeTask, settings: &Settings) -> TaskLine {
    TaskLine {
        key: task.key.clone(),
        title: task.title.clone(),
        status: task.status.as_str(),
        assignee: task.assignee.clone(),
        link: settings.task_link(&task.id),
    }
}

pub(crate) async fn tree_page(State(inspector): State<Inspector>, Path(key): Path<String>) -> Response {
    if !picogent_tracker::tree::is_task_key(&key) {
        let quoted = crate::record::one_line(&key, KEY_QUOTED);
        let message = format!("{quoted} is not a task key: a tree is named by its parent's key, such as TE-12");
        return error_page(StatusCode::NOT_FOUND, &message);
    }
    let Some(trees) = &inspector.trees else {
        return error_page(StatusCode::NOT_FOUND, "task trees are read from the board by the running agent, not here");
    };
    match trees.tree(&key).await {
        Ok(tree) => {
            let view = tree_page_view(&tree, &inspector.settings);
            let view = json!({"tree": view, "slug": inspector.settings.slug, "sign_out": inspector.access.signs_in()});
            render(StatusCode::OK, "inspector_tree.html", context(view))
        }
        Err(TreeError::NotFound { key }) => error_page(StatusCode::NOT_FOUND, &format!("no task {key} on the board")),
        Err(TreeError::State(error)) => state_failed(error),
        Err(error @ TreeError::Board(_)) => {
            tracing::warn!(%error, key, "the inspector cannot read a task tree");
            error_page(StatusCode::BAD_GATEWAY, "the board could not be read for this tree; see the agent's log")
        }
    }
}
