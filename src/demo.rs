//! `picogent demo`: the whole product on loopback, offline. Starts the reference board (seeded,
//! temporary database), the offline planner model (a deterministic rule-based stand-in, not an
//! LLM) and the agent; then, as the human `alice`, assigns the agent a task and mentions it in the
//! project chat, and prints what happened.
//!
//! `picogent demo --coding` shows a coding task instead: a local bare git repository is the
//! team's remote, and the offline planner delegates the task, which names a file, to the stand-in
//! coding agent (`fixtures/coding-agent/stand-in.sh`, a shell script in the place of a coding
//! agent CLI, not one); its change is committed on `picogent/<KEY>` in the task's workspace and
//! pushed, and the answer on the task names the commit.
//!
//! `picogent demo --team` shows two agents on one board ([`team`]): a parent broken into
//! sub-tasks, each worked, reviewed by the second agent and rolled up on the parent.

pub mod team;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::config::Config;
use crate::runtime::record::one_line;
use crate::secret::Secret;
use crate::tracker::TrackerClient;
use crate::tracker::model::{CreateTask, MessageOut, MessageQuery, SendMessage, TaskOut, TaskStatus};

const AGENT_TOKEN: &str = "tok-picogent";
const ALICE_TOKEN: &str = "tok-alice";
/// The demo agent's `/mcp` token: a fixed demo value, like the seed's member tokens.
const DEMO_MCP_TOKEN: &str = "tok-mcp-demo";

/// The log filter of `picogent demo` when `RUST_LOG` is not set: warnings and errors only, so the
/// timeline it prints is what a person reads (`RUST_LOG=info` shows the agent's own lines); not
/// even SQLite's slow statements, which a busy machine makes of the demo's start.
pub const DEFAULT_LOG_FILTER: &str = "warn,sqlx::query=error";

/// The demo's schedule: a standup of the `team` project at 09:00 UTC on weekdays.
pub const DEMO_SCHEDULE: &str = "standup";

/// Everything the demo started, so `--keep` can print it and a test can inspect it.
pub struct Demo {
    pub board: crate::board::BoardHandle,
    pub model: crate::offline_model::OfflineModelHandle,
    pub agent: crate::runtime::AgentHandle,
    pub config: Config,
    pub alice: TrackerClient,
    pub dir: tempfile::TempDir,
    /// `--coding`: the bare repository standing in for the team's remote.
    pub repository: Option<PathBuf>,
}

/// What the demo did, for the timeline and for tests.
pub struct Outcome {
    pub task: TaskOut,
    pub steps: Vec<crate::tracker::model::StepOut>,
    pub comments: Vec<MessageOut>,
    pub question: MessageOut,
    pub replies: Vec<MessageOut>,
}

/// Starts board, offline model and agent on loopback ports chosen by the OS.
pub async fn start(prompts_dir: Option<PathBuf>) -> anyhow::Result<Demo> {
    start_with(prompts_dir, false).await
}

/// As [`start`]; with `coding`, a local bare repository and the stand-in coding agent too.
pub async fn start_with(prompts_dir: Option<PathBuf>, coding: bool) -> anyhow::Result<Demo> {
    start_for(prompts_dir, coding, crate::config::Api::Openai).await
}

/// As [`start_with`], the agent speaking `api` to the offline model endpoint (which serves both
/// formats): `benches/cost.rs` plays the demo once per API.
pub async fn start_for(prompts_dir: Option<PathBuf>, coding: bool, api: crate::config::Api) -> anyhow::Result<Demo> {
    let dir = tempfile::tempdir().context("cannot make a temporary folder")?;
    let (workspaces, repository) = match coding {
        true => {
            let (section, repository) = coding_setup(dir.path()).await?;
            (section, Some(repository))
        }
        false => (serde_json::json!({}), None),
    };
    let board = crate::board::start_seeded(dir.path()).await?;
    let model = crate::offline_model::start(crate::offline_model::OfflineModelOptions::planner())
        .await
        .context("cannot start the offline model endpoint")?;
    let prompts_dir = match prompts_dir {
        Some(dir) => dir,
        None => write_builtin_prompts(dir.path())?,
    };
    // Built as JSON so every field not named here takes the same default as in agent.json.
    let config: Config = serde_json::from_value(serde_json::json!({
        "slug": "picogent",
        "name": "Picogent",
        "capabilities": ["planning tasks into steps", "answering questions about the board"],
        "tracker": {"url": board.url(), "timeout_ms": 5000},
        "llm": {
            "api": api.as_str(),
            "base_url": model.url(),
            "model": "offline-planner",
            "max_output_tokens": 1024,
            "timeout_ms": 30000,
        },
        "state": {"path": dir.path().join("picogent.db")},
        "http": {"listen": "127.0.0.1:0"},
        "prompts_dir": prompts_dir,
        // The demo's board is new: a short beat makes the first start's wait short.
        "presence": {"heartbeat_ms": 500},
        "workspaces": workspaces,
        // A weekday standup in the project's chat; `--keep` says how to fire it now.
        "schedules": {DEMO_SCHEDULE: {"cron": "0 9 * * 1-5", "timezone": "UTC", "kind": "standup", "project": "team"}},
    }))
    .context("the demo's built-in config is invalid")?;
    let agent = crate::runtime::start(crate::runtime::AgentOptions {
        config: config.clone(),
        tracker_token: Secret::new(AGENT_TOKEN),
        llm_api_key: None,
        mcp_token: Some(Secret::new(DEMO_MCP_TOKEN)),
        ui_token: None,
        stream: None,
        serve_http: true,
        clock: None,
    })
    .await
    .context("cannot start the agent")?;
    let alice = TrackerClient::new(&config.tracker, Secret::new(ALICE_TOKEN))?;
    Ok(Demo { board, model, agent, config, alice, dir, repository })
}

/// The stand-in coding agent, shipped in the binary for a run outside the source tree.
const STAND_IN: &str = include_str!("../fixtures/coding-agent/stand-in.sh");

/// What the coding task asks: a change to a file the repository has.
pub(crate) const CODING_TASK: &str =
    "In src/date.py replace \"2020-01-01\" with \"2024-06-01\": dates parse to the new default.";

/// A bare repository with `src/date.py` on `main` and the stand-in coding agent, in `dir`; the
/// `workspaces` section that uses them (the repository serving the `team` project), and the
/// repository's path.
async fn coding_setup(dir: &Path) -> anyhow::Result<(serde_json::Value, PathBuf)> {
    coding_setup_for(dir, serde_json::json!({"projects": ["team"]})).await
}

/// As [`coding_setup`], the repository serving what `serves` says (`projects`, `labels`).
pub(crate) async fn coding_setup_for(
    dir: &Path,
    serves: serde_json::Value,
) -> anyhow::Result<(serde_json::Value, PathBuf)> {
    let seed = dir.join("repository-seed");
    std::fs::create_dir_all(seed.join("src"))?;
    std::fs::write(seed.join("src/date.py"), "def parse(text):\n    return text or \"2020-01-01\"\n")?;
    git(&seed, &["init", "--quiet", "-b", "main"]).await?;
    git(&seed, &["add", "--all"]).await?;
    git(&seed, &["commit", "--quiet", "-m", "A date parser"]).await?;
    let bare = dir.join("app.git");
    git(dir, &["clone", "--quiet", "--bare", "--", &seed.to_string_lossy(), &bare.to_string_lossy()]).await?;
    let agent = dir.join("stand-in.sh");
    std::fs::write(&agent, STAND_IN)?;
    let mut repository = serde_json::json!({"url": bare, "base": "main"});
    if let (Some(repository), Some(serves)) = (repository.as_object_mut(), serves.as_object()) {
        repository.extend(serves.clone());
    }
    let section = serde_json::json!({
        "root": dir.join("workspaces"),
        "repositories": {"app": repository},
        "agents": {"stand-in": {"command": ["sh", agent, "{instructions}"], "output": "jsonl"}},
        "agent": "stand-in",
        // No `links`: the demo's remote is a folder, with no web page to link to.
    });
    Ok((section, bare))
}

/// `git ARGS` in `dir` as the demo's alice (picogent's own git runner: no shell, no prompt, a
/// timeout); its output.
pub(crate) async fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let git = picogent_workspace::git::Git::new("alice", "alice@example.com");
    git.run(dir, args).await.context("picogent demo --coding needs git")
}

/// What the coding demo did: the task, its comments, and the branch on the remote.
pub struct CodingOutcome {
    pub task: TaskOut,
    pub comments: Vec<MessageOut>,
    pub branch: String,
    /// `sha subject` of each commit on the branch beyond `main`.
    pub commits: Vec<String>,
    /// `src/date.py` on the branch.
    pub file: String,
}

/// The templates shipped in the binary, for a run outside the source tree.
pub(crate) fn write_builtin_prompts(dir: &Path) -> anyhow::Result<PathBuf> {
    let prompts = dir.join("prompts");
    std::fs::create_dir_all(&prompts)?;
    for (name, text) in [
        (crate::prompts::SYSTEM, include_str!("../prompts/system.md")),
        (crate::prompts::TASK_ASSIGNED, include_str!("../prompts/task_assigned.md")),
        (crate::prompts::MESSAGE_NEW, include_str!("../prompts/message_new.md")),
        (crate::prompts::STANDUP, include_str!("../prompts/standup.md")),
        (crate::prompts::STANDUP_DIGEST, include_str!("../prompts/standup_digest.md")),
        (crate::prompts::STALE_NUDGE, include_str!("../prompts/stale_nudge.md")),
    ] {
        std::fs::write(prompts.join(name), text)?;
    }
    Ok(prompts)
}

impl Demo {
    /// Plays alice: assigns a task and asks a question in the project chat, then waits until the
    /// agent has handled both (or `timeout`).
    pub async fn play(&self, timeout: Duration) -> anyhow::Result<Outcome> {
        let deadline = Instant::now() + timeout;
        while !self.agent.status.caught_up() {
            anyhow::ensure!(Instant::now() < deadline, "the agent did not connect to the board in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let project = self.alice.get_project("team").await?;
        let created = self
            .alice
            .create_task(
                &CreateTask {
                    project_slug: project.slug.clone(),
                    title: "Prepare the release notes for 1.4".into(),
                    description: Some(
                        "Collect what changed since 1.3.\n- list merged pull requests\n- group them by area\n- draft the notes"
                            .into(),
                    ),
                    assignee_slug: Some("picogent".into()),
                    ..CreateTask::default()
                },
                None,
            )
            .await?;
        println!("alice    assigned {} \"{}\" to @picogent", created.key, created.title);
        let question = self
            .alice
            .send_message(
                &SendMessage {
                    content: "@picogent what is on the board for the release?".into(),
                    chat_id: Some(project.chat_id.clone()),
                    ..SendMessage::default()
                },
                None,
            )
            .await?;
        println!("alice    asked in #{}: {}", project.slug, question.content);

        loop {
            let task = self.alice.get_task(&created.id).await?;
            let replies: Vec<MessageOut> = self
                .alice
                .list_messages(&MessageQuery { parent_id: Some(question.id.clone()), ..MessageQuery::default() })
                .await?
                .into_iter()
                .filter(|m| m.author_slug == "picogent")
                .collect();
            if task.status == TaskStatus::InReview && !replies.is_empty() && self.agent.status.active_runs() == 0 {
                let steps = self.alice.list_steps(&task.id).await?;
                let comments = self
                    .alice
                    .list_messages(&MessageQuery { task_id: Some(task.id.clone()), ..MessageQuery::default() })
                    .await?;
                return Ok(Outcome { task, steps, comments, question, replies });
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the agent did not finish in {timeout:?}: task {} is {}, {} replies",
                task.key,
                task.status,
                replies.len()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Plays alice for `--coding`: assigns a task that names a file, then waits until the agent
    /// has worked it (or `timeout`) and reads the branch on the remote.
    pub async fn play_coding(&self, timeout: Duration) -> anyhow::Result<CodingOutcome> {
        let repository = self.repository.clone().context("the demo was started without --coding")?;
        let deadline = Instant::now() + timeout;
        while !self.agent.status.caught_up() {
            anyhow::ensure!(Instant::now() < deadline, "the agent did not connect to the board in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let create = CreateTask {
            project_slug: "team".into(),
            title: "Fix the date parser's default".into(),
            description: Some(CODING_TASK.into()),
            assignee_slug: Some("picogent".into()),
            ..CreateTask::default()
        };
        let created = self.alice.create_task(&create, None).await?;
        println!("alice    assigned {} \"{}\" to @picogent", created.key, created.title);
        println!("         {CODING_TASK}");
        loop {
            let task = self.alice.get_task(&created.id).await?;
            if task.status == TaskStatus::InReview && self.agent.status.active_runs() == 0 {
                let query = MessageQuery { task_id: Some(task.id.clone()), ..MessageQuery::default() };
                let comments = self.alice.list_messages(&query).await?;
                let branch = format!("picogent/{}", task.key);
                let log = git(&repository, &["log", "--format=%h %s", &format!("main..{branch}")]).await?;
                let file = git(&repository, &["show", &format!("{branch}:src/date.py")]).await?;
                let commits = log.lines().map(str::to_string).collect();
                return Ok(CodingOutcome { task, comments, branch, commits, file });
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the agent did not finish in {timeout:?}: task {} is {}",
                task.key,
                task.status
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.agent.shutdown().await?;
        self.model.shutdown().await;
        self.board.shutdown().await?;
        Ok(())
    }
}

/// Prints the timeline of every run from the agent's own records.
async fn print_timeline(demo: &Demo) -> anyhow::Result<()> {
    let mut runs = demo.agent.state.list_runs(20).await?;
    runs.reverse();
    for run in runs {
        let summary = crate::inspector::view::summary(&run, &crate::runtime::inspector_settings(&demo.config));
        println!();
        println!("event    {} (run {})", crate::inspector::view::run_name(&summary), summary.short_id);
        for line in crate::runtime::record::timeline_lines(&run) {
            println!("  {line}");
        }
    }
    Ok(())
}

fn print_outcome(outcome: &Outcome) {
    println!();
    let status = crate::web::readable::status_label(outcome.task.status.as_str()).to_lowercase();
    println!("final    {} \"{}\" is {status}", outcome.task.key, outcome.task.title);
    for step in &outcome.steps {
        println!("  [{}] {}", if step.done { "x" } else { " " }, step.title);
    }
    for comment in &outcome.comments {
        println!("  comment @{}: {}", comment.author_slug, one_line(&comment.content, 160));
    }
    println!("chat     @alice: {}", outcome.question.content);
    for reply in &outcome.replies {
        println!("  reply @{}: {}", reply.author_slug, one_line(&reply.content, 160));
    }
}

pub async fn run_cli(keep: bool, coding: bool, team: bool) -> anyhow::Result<ExitCode> {
    if team {
        return team::run_cli(keep).await;
    }
    let started = Instant::now();
    let local_prompts = PathBuf::from("prompts");
    let prompts = local_prompts.join(crate::prompts::SYSTEM).exists().then_some(local_prompts);
    let demo = start_with(prompts, coding).await?;
    println!("picogent demo — reference board, offline planner model (a rule-based stand-in, not an LLM), agent");
    println!("board    {}", demo.board.url());
    println!("model    {} (offline planner)", demo.model.url());
    if std::env::var_os("RUST_LOG").is_none() {
        println!("log      warnings only; RUST_LOG=info picogent demo shows the agent's log on stderr");
    }
    if let Some(repository) = &demo.repository {
        println!("remote   {} (a local bare git repository)", repository.display());
        println!(
            "coding   the stand-in coding agent (fixtures/coding-agent/stand-in.sh: a script, not a coding agent)"
        );
    }
    println!();
    if coding {
        return run_coding(demo, started, keep).await;
    }
    let outcome = demo.play(Duration::from_secs(30)).await;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            let _ = print_timeline(&demo).await;
            let _ = demo.shutdown().await;
            return Err(error);
        }
    };
    print_timeline(&demo).await?;
    print_outcome(&outcome);
    println!();
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    if keep {
        print_keep(&demo);
        tokio::signal::ctrl_c().await.context("cannot wait for ctrl-c")?;
    }
    demo.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

async fn run_coding(demo: Demo, started: Instant, keep: bool) -> anyhow::Result<ExitCode> {
    let outcome = match demo.play_coding(Duration::from_secs(60)).await {
        Ok(outcome) => outcome,
        Err(error) => {
            let _ = print_timeline(&demo).await;
            let _ = demo.shutdown().await;
            return Err(error);
        }
    };
    print_timeline(&demo).await?;
    println!();
    let status = crate::web::readable::status_label(outcome.task.status.as_str()).to_lowercase();
    println!("final    {} \"{}\" is {status}", outcome.task.key, outcome.task.title);
    for comment in &outcome.comments {
        println!("  comment @{}: {}", comment.author_slug, one_line(&comment.content, 400));
    }
    println!("remote   branch {} (main untouched):", outcome.branch);
    for commit in &outcome.commits {
        println!("  {commit}");
    }
    println!("  src/date.py on the branch:");
    for line in outcome.file.lines() {
        println!("    {line}");
    }
    println!();
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    if keep {
        print_keep(&demo);
        tokio::signal::ctrl_c().await.context("cannot wait for ctrl-c")?;
    }
    demo.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

fn print_keep(demo: &Demo) {
    let board = demo.board.url();
    println!();
    println!("everything keeps running; ctrl-c stops it.");
    println!("open in a browser:");
    println!("  board page      {board}/   (sign in as alice; assign a task to @picogent and watch its steps tick)");
    if let Some(addr) = demo.agent.http_addr {
        println!("  run inspector   http://{addr}/   (every run: prompts, turns, tool calls, budgets; events; spend)");
    }
    println!("  board     {board}/api   (WebSocket {})", demo.alice.ws_url());
    println!("  model     {}   (offline planner)", demo.model.url());
    if let Some(addr) = demo.agent.http_addr {
        println!("  agent     http://{addr}/healthz  /readyz  /metrics");
        println!("  agent MCP http://{addr}/mcp   (Authorization: Bearer {DEMO_MCP_TOKEN})");
    }
    println!("  tokens    alice=tok-alice  bob=tok-bob  picogent=tok-picogent  otherbot=tok-otherbot");
    println!("  state     {}", demo.config.state.path.display());
    println!();
    println!("assign another task to the agent, as alice:");
    println!(
        "  curl -s -X POST {board}/api/tasks -H 'Authorization: Bearer tok-alice' -H 'Content-Type: application/json' \\\n    -d '{{\"project_slug\":\"team\",\"title\":\"Write a changelog\",\"assignee_slug\":\"picogent\"}}'"
    );
    match demo.write_config() {
        Ok(path) => {
            println!("connect an MCP client to the board's tools:");
            println!("  TEAMBOARD_TOKEN=tok-picogent picogent mcp --stdio --config {}", path.display());
            println!("see what the agent did, from the state:");
            println!("  picogent runs list --config {}", path.display());
            println!(
                "see one firing of the schedule `{DEMO_SCHEDULE}` (a digest of what moved on the board, posted in #team; \
                 weekdays at 09:00 UTC) now:"
            );
            println!("  picogent schedules run {DEMO_SCHEDULE} --config {}", path.display());
            println!("  picogent schedules list --config {}   (next firing, last outcome, cost)", path.display());
            if let Some(addr) = demo.agent.http_addr {
                println!("  or the Run now button at http://{addr}/schedules");
            }
        }
        Err(error) => println!("(the demo's config could not be written for `picogent schedules`: {error:#})"),
    }
}

impl Demo {
    /// Writes the running demo's config to `agent.json` in its folder, with the agent's real
    /// address in `http.listen`, for the commands that read a config (`picogent schedules`).
    pub fn write_config(&self) -> anyhow::Result<PathBuf> {
        let mut config = self.config.clone();
        if let Some(addr) = self.agent.http_addr {
            config.http.listen = addr.to_string();
        }
        // Read from anywhere: the templates by their full path, not the demo's working folder's.
        if let Ok(prompts) = std::fs::canonicalize(&config.prompts_dir) {
            config.prompts_dir = prompts;
        }
        let path = self.dir.path().join("agent.json");
        std::fs::write(&path, serde_json::to_string_pretty(&config)?).context("cannot write the demo's config")?;
        Ok(path)
    }
}
