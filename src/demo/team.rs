//! `picogent demo --team`: two agents on one reference board, offline. The worker `picogent`
//! (the stand-in coding agent, `delegation` on) and the reviewer `reviewer` (`capabilities:
//! ["review"]`, which its presence marker says on the board, and by which the worker finds it;
//! the same repository) both answer to the offline
//! planner (a rule-based stand-in, not an LLM). As alice, the demo assigns the worker a parent
//! task labelled `epic` whose description lists three parts, the third waiting for the first;
//! alice says yes to the plan the worker asks; each part is worked on its own branch and
//! reviewed, the reviewer sends one back once (its change leaves a to-do), and the parent is
//! rolled up once every part is done.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{AGENT_TOKEN, ALICE_TOKEN, git, one_line, write_builtin_prompts};
use crate::config::Config;
use crate::secret::Secret;
use crate::tracker::TrackerClient;
use crate::tracker::model::{CreateTask, MessageOut, MessageQuery, SendMessage, TaskOut, TaskStatus};

pub(crate) const REVIEWER: &str = "reviewer";
pub(crate) const REVIEWER_TOKEN: &str = "tok-reviewer";
/// What alice answers the plan.
pub(crate) const YES: &str = "yes";
/// The parent's title and its parts: the third waits for the first; the second leaves a to-do
/// the reviewer sends back once.
pub const PARENT_TITLE: &str = "Add CSV export to the reports page";
pub const PARENT_DESCRIPTION: &str = "Export the reports as CSV.\n\
    - Backend: in src/export.py replace \"FORMATS = ()\" with \"FORMATS = ('csv',)\"\n\
    - Frontend: in web/reports.js replace \"const buttons = [];\" with \"const buttons = ['csv']; // TODO: label it Export CSV\"\n\
    - Docs: in docs/export.md replace \"Formats: none yet.\" with \"Formats: CSV.\" (after 1)";

/// Everything `--team` started.
pub struct TeamDemo {
    pub board: crate::board::BoardHandle,
    pub model: crate::offline_model::OfflineModelHandle,
    pub worker: crate::runtime::AgentHandle,
    pub reviewer: crate::runtime::AgentHandle,
    pub worker_config: Config,
    pub alice: TrackerClient,
    /// The bare repository standing in for the team's remote.
    pub repository: PathBuf,
    pub dir: tempfile::TempDir,
}

/// What the board shows at the end.
pub struct TeamOutcome {
    pub parent: TaskOut,
    pub parent_comments: Vec<MessageOut>,
    /// Each sub-task, its comments, and the commits of its branch beyond `main`.
    pub subtasks: Vec<(TaskOut, Vec<MessageOut>, Vec<String>)>,
}

/// Starts the board (the demo's seed and a second agent member), the offline planner and both agents.
pub async fn start() -> anyhow::Result<TeamDemo> {
    let dir = tempfile::tempdir().context("cannot make a temporary folder")?;
    let repository = repository(dir.path()).await?;
    let board = start_board(dir.path(), &[]).await?;
    let model = crate::offline_model::start(crate::offline_model::OfflineModelOptions::planner())
        .await
        .context("cannot start the offline model endpoint")?;
    let prompts = write_builtin_prompts(dir.path())?;
    let config = |slug: &str, capabilities: &[&str]| -> anyhow::Result<Config> {
        let config = serde_json::json!({
            "slug": slug,
            "name": slug,
            "capabilities": capabilities,
            "tracker": {"url": board.url(), "timeout_ms": 5000},
            "llm": {"base_url": model.url(), "model": "offline-planner", "max_output_tokens": 1024, "timeout_ms": 30000},
            "state": {"path": dir.path().join(format!("{slug}.db"))},
            "http": {"listen": "127.0.0.1:0"},
            "prompts_dir": prompts,
            "presence": {"heartbeat_ms": 500},
            "workspaces": {
                "root": dir.path().join(format!("{slug}-workspaces")),
                "repositories": {"app": {"url": repository, "base": "main", "projects": ["team"]}},
                "agents": {"stand-in": {"command": ["sh", dir.path().join("stand-in.sh"), "{instructions}"], "output": "jsonl"}},
                "agent": "stand-in",
            },
            // Approved work is done: the parent rolls up without a person closing each part.
            // No `reviewers`: the worker finds `reviewer` on the board, by the `review` its marker says.
            "review": {"approve_to": "done"},
            "delegation": {"max_review_rounds": 2},
        });
        serde_json::from_value(config).context("the team demo's built-in config is invalid")
    };
    let worker_config = config("picogent", &["coding"])?;
    let reviewer_config = config(REVIEWER, &["review"])?;
    let start = |config: Config, token: &str, serve_http: bool| {
        crate::runtime::start(crate::runtime::AgentOptions {
            config,
            tracker_token: Secret::new(token),
            llm_api_key: None,
            mcp_token: None,
            ui_token: None,
            stream: None,
            serve_http,
            clock: None,
        })
    };
    let worker = start(worker_config.clone(), AGENT_TOKEN, true).await.context("cannot start the worker")?;
    let reviewer = start(reviewer_config, REVIEWER_TOKEN, false).await.context("cannot start the reviewer")?;
    let alice = TrackerClient::new(&worker_config.tracker, Secret::new(ALICE_TOKEN))?;
    Ok(TeamDemo { board, model, worker, reviewer, worker_config, alice, repository, dir })
}

/// The reference board of the demo's seed with the agent member `reviewer` (token
/// `tok-reviewer`), and `projects` (`(slug, key)`) besides `team`, on a database in `dir`.
pub(crate) async fn start_board(dir: &Path, projects: &[(&str, &str)]) -> anyhow::Result<crate::board::BoardHandle> {
    let mut seed: serde_json::Value = serde_json::from_str(crate::board::DEMO_SEED)?;
    let member = serde_json::json!({"slug": REVIEWER, "name": "Reviewer", "kind": "agent", "token": REVIEWER_TOKEN});
    seed["members"].as_array_mut().context("the demo seed has no members")?.push(member);
    for (slug, key) in projects {
        let project = serde_json::json!({"slug": slug, "key": key, "name": slug});
        seed["projects"].as_array_mut().context("the demo seed has no projects")?.push(project);
    }
    let seed_path = dir.join("team-seed.json");
    std::fs::write(&seed_path, seed.to_string())?;
    let options = crate::board::BoardOptions::loopback(dir.join("board.db"), Some(seed_path));
    crate::board::start(options).await.context("cannot start the reference board")
}

/// The team's remote: a bare repository with the three files the parts change, and the stand-in
/// coding agent beside it (`stand-in.sh`).
pub async fn repository(dir: &Path) -> anyhow::Result<PathBuf> {
    let seed = dir.join("repository-seed");
    for (path, text) in [
        (
            "src/export.py",
            "FORMATS = ()\n\n\ndef export(rows, fmt):\n    if fmt not in FORMATS:\n        raise ValueError(fmt)\n    return rows\n",
        ),
        ("web/reports.js", "const buttons = [];\n\nexport function render() {\n  return buttons;\n}\n"),
        ("docs/export.md", "# Export\n\nFormats: none yet.\n"),
    ] {
        let path = seed.join(path);
        std::fs::create_dir_all(path.parent().context("a file has a folder")?)?;
        std::fs::write(path, text)?;
    }
    git(&seed, &["init", "--quiet", "-b", "main"]).await?;
    git(&seed, &["add", "--all"]).await?;
    git(&seed, &["commit", "--quiet", "-m", "Reports without export"]).await?;
    let bare = dir.join("app.git");
    git(dir, &["clone", "--quiet", "--bare", "--", &seed.to_string_lossy(), &bare.to_string_lossy()]).await?;
    std::fs::write(dir.join("stand-in.sh"), super::STAND_IN)?;
    Ok(bare)
}

impl TeamDemo {
    /// Plays alice: assigns the parent, says yes to the plan once it is asked, and waits until
    /// the parent is rolled up and both agents are idle (or `timeout`).
    pub async fn play(&self, timeout: Duration) -> anyhow::Result<TeamOutcome> {
        let deadline = Instant::now() + timeout;
        let waited = |what: &str| anyhow::anyhow!("the team demo did not finish in {timeout:?}: {what}");
        while !(self.worker.status.caught_up() && self.reviewer.status.caught_up()) {
            anyhow::ensure!(Instant::now() < deadline, waited("the agents did not connect to the board"));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let create = CreateTask {
            project_slug: "team".into(),
            title: PARENT_TITLE.into(),
            description: Some(PARENT_DESCRIPTION.into()),
            assignee_slug: Some("picogent".into()),
            labels: Some(vec!["epic".into()]),
            ..CreateTask::default()
        };
        let parent = self.alice.create_task(&create, None).await?;
        println!("alice     assigned {} \"{}\" (label epic) to @picogent", parent.key, parent.title);
        for line in PARENT_DESCRIPTION.lines() {
            println!("          {line}");
        }
        let on_parent = MessageQuery { task_id: Some(parent.id.clone()), ..MessageQuery::default() };
        let asked = loop {
            let comments = self.alice.list_messages(&on_parent).await?;
            if let Some(asked) = comments.into_iter().find(|m| m.author_slug == "picogent") {
                break asked;
            }
            anyhow::ensure!(Instant::now() < deadline, waited("no plan was asked"));
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        println!("picogent  asked on {}: {}", parent.key, one_line(&asked.content, 300));
        let yes = SendMessage { content: YES.into(), task_id: Some(parent.id.clone()), ..SendMessage::default() };
        self.alice.send_message(&yes, None).await?;
        println!("alice     answered on {}: {YES}", parent.key);
        loop {
            let parent = self.alice.get_task(&parent.id).await?;
            // Only the roll-up moves the parent on: the run that planned it leaves it in progress.
            let idle = self.worker.status.active_runs() == 0 && self.reviewer.status.active_runs() == 0;
            if parent.status == TaskStatus::InReview && idle {
                return self.outcome(parent).await;
            }
            anyhow::ensure!(Instant::now() < deadline, waited(&format!("{} is {}", parent.key, parent.status)));
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    async fn outcome(&self, parent: TaskOut) -> anyhow::Result<TeamOutcome> {
        let comments_of = |task: &TaskOut| {
            let query = MessageQuery { task_id: Some(task.id.clone()), ..MessageQuery::default() };
            async move { self.alice.list_messages(&query).await }
        };
        let parent_comments = comments_of(&parent).await?;
        let mut subtasks = Vec::new();
        for task in crate::tracker::tree::subtasks(&self.alice, &parent.project_slug, &parent.key).await? {
            let comments = comments_of(&task).await?;
            let branch = format!("picogent/{}", task.key);
            let log = git(&self.repository, &["log", "--format=%h %s", &format!("main..{branch}")]).await;
            let commits = log.map(|log| log.lines().map(str::to_string).collect()).unwrap_or_default();
            subtasks.push((task, comments, commits));
        }
        subtasks.sort_by_key(|(task, _, _)| task.key.rsplit('-').next().and_then(|n| n.parse::<u64>().ok()));
        Ok(TeamOutcome { parent, parent_comments, subtasks })
    }

    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.worker.shutdown().await?;
        self.reviewer.shutdown().await?;
        self.model.shutdown().await;
        self.board.shutdown().await?;
        Ok(())
    }
}

fn print_outcome(outcome: &TeamOutcome) {
    let status = |task: &TaskOut| crate::web::readable::status_label(task.status.as_str()).to_lowercase();
    for (task, comments, commits) in &outcome.subtasks {
        println!();
        let labels = task.labels.join(", ");
        println!("sub-task  {} \"{}\" is {} · labels {labels}", task.key, task.title, status(task));
        for comment in comments {
            println!("  @{}: {}", comment.author_slug, one_line(&comment.content, 200));
        }
        println!("  branch picogent/{}: {}", task.key, commits.join(" · "));
    }
    let parent = &outcome.parent;
    println!();
    println!("parent    {} \"{}\" is {}", parent.key, parent.title, status(parent));
    for comment in &outcome.parent_comments {
        println!("  @{}: {}", comment.author_slug, one_line(&comment.content, 400));
    }
}

pub async fn run_cli(keep: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let demo = start().await?;
    println!("picogent demo --team — reference board, offline planner model (a rule-based stand-in, not an LLM),");
    println!("two agents: @picogent works (the stand-in coding agent, a script), @reviewer reviews");
    println!("board     {}", demo.board.url());
    println!("remote    {} (a local bare git repository)", demo.repository.display());
    println!();
    let outcome = match demo.play(Duration::from_secs(90)).await {
        Ok(outcome) => outcome,
        Err(error) => {
            let _ = demo.shutdown().await;
            return Err(error);
        }
    };
    print_outcome(&outcome);
    println!();
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    if keep {
        println!();
        println!("everything keeps running; ctrl-c stops it.");
        println!("  board page  {}/   (sign in as alice)", demo.board.url());
        if let Some(addr) = demo.worker.http_addr {
            println!("  the tree    http://{addr}/tree/{}   (the worker's inspector)", outcome.parent.key);
        }
        println!("  tokens      alice=tok-alice  picogent=tok-picogent  reviewer=tok-reviewer");
        println!("  state       {}", demo.worker_config.state.path.display());
        tokio::signal::ctrl_c().await.context("cannot wait for ctrl-c")?;
    }
    demo.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}
