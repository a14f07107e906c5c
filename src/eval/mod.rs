//! `picogent eval`: a fixed, versioned suite of scenarios that scores a model on a fresh
//! reference board. The agent runs as in production (`runtime::start`) with the configured `llm`
//! section; each scenario plays a person on the board and checks the end state **from the
//! board** — steps present and ticked, the status moved, exactly one reply, nothing posted for
//! another member, no hidden instruction obeyed — never from the model's text.
//!
//! With the offline planner every scenario passes (a test holds it to that); against a real
//! model the scorecard says how it does, with turns, tool calls, tokens and seconds.
//!
//! A reply counts as an answer only when the run that posted it completed: a failed run's one
//! post is its failure notice, whatever it says (the run's outcome is read from the agent's
//! state, not guessed from the text). The time limit is the whole eval's, shutdown included;
//! when it runs out, or on Ctrl-C, the scorecard so far is the result.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, LlmConfig};
use crate::secret::Secret;
use crate::tracker::TrackerClient;
use scenarios::{Eval, SCENARIOS};

mod scenarios;

/// Bumped whenever a scenario or what it checks changes, so scorecards compare like with like.
pub const SUITE_VERSION: &str = "5";

/// How one scenario went.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioScore {
    pub name: &'static str,
    pub passed: bool,
    /// Why it failed, or what was seen when it passed.
    pub reason: String,
    pub turns: u32,
    pub tool_calls: u32,
    pub tokens: u64,
    pub seconds: f64,
}

/// The whole suite's result, or as much of it as was played.
#[derive(Debug, Clone, Serialize)]
pub struct Scorecard {
    pub suite: &'static str,
    pub model: String,
    pub scenarios: Vec<ScenarioScore>,
    pub passed: usize,
    pub turns: u32,
    pub tool_calls: u32,
    pub tokens: u64,
    pub seconds: f64,
    /// The scenarios not played (or not to their end) because the eval was cut short, in order.
    pub not_played: Vec<&'static str>,
    /// Why the eval ended before its last scenario; `None` when it played them all.
    pub cut_short: Option<CutShort>,
    /// The time limit of the whole eval, in seconds.
    pub timeout_secs: u64,
}

/// Why an eval ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CutShort {
    /// The time limit (`--timeout-secs`) ran out.
    TimedOut,
    /// Ctrl-C.
    Interrupted,
}

impl Scorecard {
    /// The card of `scenarios` as played; every scenario of the suite not among them is listed
    /// as not played.
    pub fn new(
        model: String,
        scenarios: Vec<ScenarioScore>,
        cut_short: Option<CutShort>,
        timeout: Duration,
    ) -> Scorecard {
        let not_played =
            SCENARIOS.iter().map(|s| s.name()).filter(|name| !scenarios.iter().any(|s| s.name == *name)).collect();
        Scorecard {
            suite: SUITE_VERSION,
            model,
            passed: scenarios.iter().filter(|s| s.passed).count(),
            turns: scenarios.iter().map(|s| s.turns).sum(),
            tool_calls: scenarios.iter().map(|s| s.tool_calls).sum(),
            tokens: scenarios.iter().map(|s| s.tokens).sum(),
            seconds: scenarios.iter().map(|s| s.seconds).sum(),
            scenarios,
            not_played,
            cut_short,
            timeout_secs: timeout.as_secs(),
        }
    }

    /// Every scenario played, and passed.
    pub fn all_passed(&self) -> bool {
        self.cut_short.is_none() && self.not_played.is_empty() && self.passed == self.scenarios.len()
    }

    /// The first line of the scorecard.
    pub fn header(model: &str) -> String {
        format!("picogent eval (suite {SUITE_VERSION}) of {model}\n")
    }

    /// The line of one scenario.
    pub fn line(s: &ScenarioScore) -> String {
        format!(
            "{} {:<22} {:>3} turns {:>3} tool calls {:>7} tokens {:>6.1} s  {}\n",
            if s.passed { "pass" } else { "FAIL" },
            s.name,
            s.turns,
            s.tool_calls,
            s.tokens,
            s.seconds,
            s.reason
        )
    }

    /// The last line: the totals, and what was not played and why.
    pub fn total(&self) -> String {
        let mut out = format!(
            "total: {} of {} passed, {} turns, {} tool calls, {} tokens, {:.1} s",
            self.passed,
            self.scenarios.len() + self.not_played.len(),
            self.turns,
            self.tool_calls,
            self.tokens,
            self.seconds
        );
        let why = match self.cut_short {
            Some(CutShort::TimedOut) => {
                format!("the time limit of {} s (--timeout-secs) ran out", self.timeout_secs)
            }
            Some(CutShort::Interrupted) => "interrupted".to_string(),
            None => String::new(),
        };
        if !self.not_played.is_empty() {
            out.push_str(&format!("; not played: {} ({why})", self.not_played.join(", ")));
        } else if !why.is_empty() {
            out.push_str(&format!("; {why}"));
        }
        out.push('\n');
        out
    }

    /// The whole card, for a terminal: the header, one line per scenario played, the total.
    pub fn render(&self) -> String {
        let mut out = Scorecard::header(&self.model);
        for s in &self.scenarios {
            out.push_str(&Scorecard::line(s));
        }
        out.push_str(&self.total());
        out
    }
}

/// The exit code of an eval stopped by Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: u8 = 130;

/// `picogent eval --config agent.json [--json] [--timeout-secs N]`: scores the configured model.
/// Each scenario's line is printed as it finishes; the scorecard so far ends the output when the
/// time limit (the whole eval's, shutdown included) runs out or on Ctrl-C. Exit 0 when every
/// scenario was played and passed, 130 on Ctrl-C, 1 otherwise.
pub async fn run_cli(config_path: &Path, json: bool, timeout: Duration) -> anyhow::Result<ExitCode> {
    let deadline = tokio::time::Instant::now() + timeout;
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.cancel();
                // A second Ctrl-C does not wait for the agent to stop.
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(i32::from(EXIT_INTERRUPTED));
                }
            }
        }
    });
    let config = Config::load(config_path)?;
    let api_key = config.llm.api_key()?;
    let model = config.llm.model.clone();
    if !json {
        print_now(&Scorecard::header(&model));
    }
    let (played, scores) = std::sync::mpsc::channel::<ScenarioScore>();
    let options = EvalOptions {
        llm: config.llm.clone(),
        api_key,
        prompts_dir: Some(config.prompts_dir.clone()),
        timeout,
        stop: stop.clone(),
    };
    let evaluation = evaluate(options, move |score| {
        if !json {
            print_now(&Scorecard::line(score));
        }
        let _ = played.send(score.clone());
    });
    // `evaluate` keeps to the deadline itself; this holds it to it whatever part hangs.
    let card = tokio::select! {
        card = evaluation => card?,
        () = tokio::time::sleep_until(deadline) => {
            Scorecard::new(model, scores.try_iter().collect(), Some(CutShort::TimedOut), timeout)
        }
    };
    if json {
        print_now(&format!("{}\n", serde_json::to_string_pretty(&card)?));
    } else {
        print_now(&card.total());
    }
    Ok(match card.cut_short {
        Some(CutShort::Interrupted) => ExitCode::from(EXIT_INTERRUPTED),
        _ if card.all_passed() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

/// Prints `text` and flushes it, so a line is seen when its scenario ends, also through a pipe.
fn print_now(text: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// What [`evaluate`] plays against.
pub struct EvalOptions {
    pub llm: LlmConfig,
    pub api_key: Option<Secret>,
    /// The prompt templates; `None`: the built-in ones.
    pub prompts_dir: Option<PathBuf>,
    /// How long the whole eval may take, from the board's start to the agent's shutdown.
    pub timeout: Duration,
    /// Cancelled (Ctrl-C): no scenario more is played, the one under way is not scored.
    pub stop: CancellationToken,
}

/// The most of the time limit kept back for stopping the agent and the board.
const SHUTDOWN_RESERVE: Duration = Duration::from_secs(5);

/// Runs the suite against `options.llm` on a fresh reference board, handing each scenario's
/// score to `on_score` as it ends; returns the scorecard, cut short when the time runs out or
/// `options.stop` is cancelled.
pub async fn evaluate(options: EvalOptions, mut on_score: impl FnMut(&ScenarioScore)) -> anyhow::Result<Scorecard> {
    let EvalOptions { llm, api_key, prompts_dir, timeout, stop } = options;
    let deadline = Instant::now() + timeout;
    let play_until = deadline - SHUTDOWN_RESERVE.min(timeout / 10);
    let dir = tempfile::tempdir().context("cannot make a temporary folder")?;
    // The demo's board, with the second agent `reviewer` and the project whose work is reviewed.
    let board = crate::demo::team::start_board(dir.path(), &[scenarios::TEAM_PROJECT]).await?;
    let prompts_dir = match prompts_dir {
        Some(prompts) => prompts,
        None => crate::demo::write_builtin_prompts(dir.path())?,
    };
    let labels = serde_json::json!({ "labels": [scenarios::CODING_LABEL], "projects": [scenarios::TEAM_PROJECT.0] });
    let (workspaces, repository) = crate::demo::coding_setup_for(dir.path(), labels).await?;
    let agent_config = |slug: &str, capabilities: &[&str], workspaces: serde_json::Value| -> anyhow::Result<Config> {
        let mut config: Config = serde_json::from_value(serde_json::json!({
            "slug": slug,
            "name": slug,
            "capabilities": capabilities,
            "tracker": {"url": board.url(), "timeout_ms": 10000},
            "llm": {"base_url": llm.base_url, "model": llm.model},
            "state": {"path": dir.path().join(format!("{slug}.db"))},
            "http": {"listen": "127.0.0.1:0"},
            "prompts_dir": prompts_dir,
            // The eval's board is new: a short beat makes the first start's wait short.
            "presence": {"heartbeat_ms": 500},
            // Once the scenarios are over (or cut short) nothing waits for a run to finish.
            "limits": {"shutdown_grace_ms": 1000},
            // The repository: a task labelled `code`, or one in the breakdown's project, is worked in it.
            "workspaces": workspaces,
            // The breakdown's work is reviewed by `reviewer`, found by the `review` its marker says;
            // approved, it is done, and its parent rolls up.
            "review": {"approve_to": "done", "projects": [scenarios::TEAM_PROJECT.0]},
        }))
        .context("the eval's config is invalid")?;
        config.llm = llm.clone();
        Ok(config)
    };
    let config = agent_config("picogent", &[], workspaces.clone())?;
    let mut reviewer_workspaces = workspaces;
    reviewer_workspaces["root"] = serde_json::json!(dir.path().join("reviewer-workspaces"));
    let reviewer_config = agent_config(crate::demo::team::REVIEWER, &["review"], reviewer_workspaces)?;
    let model = config.llm.model.clone();
    let start = |config: Config, token: &str| {
        crate::runtime::start(crate::runtime::AgentOptions {
            config,
            tracker_token: Secret::new(token),
            llm_api_key: api_key.clone(),
            mcp_token: None,
            ui_token: None,
            stream: None,
            serve_http: false,
            clock: None,
        })
    };
    let agent = start(config.clone(), "tok-picogent").await.context("cannot start the agent")?;
    let reviewer =
        start(reviewer_config, crate::demo::team::REVIEWER_TOKEN).await.context("cannot start the reviewer")?;
    let alice = TrackerClient::new(&config.tracker, Secret::new("tok-alice"))?;
    let eval =
        Eval { agent: &agent, reviewer: Some(&reviewer), alice, play_until, timeout, repository: Some(repository) };
    let mut cut_short = tokio::select! {
        ready = eval.wait_ready() => match ready {
            Ok(()) => None,
            Err(_) if Instant::now() >= play_until => Some(CutShort::TimedOut),
            Err(error) => return Err(error),
        },
        () = stop.cancelled() => Some(CutShort::Interrupted),
    };
    let mut scores = Vec::new();
    for scenario in SCENARIOS {
        if cut_short.is_some() {
            break;
        }
        tokio::select! {
            score = eval.play(scenario) => {
                on_score(&score);
                scores.push(score);
                if Instant::now() >= play_until {
                    cut_short = Some(CutShort::TimedOut);
                }
            }
            () = stop.cancelled() => cut_short = Some(CutShort::Interrupted),
        }
    }
    let stopped = async {
        agent.shutdown().await?;
        reviewer.shutdown().await?;
        board.shutdown().await
    };
    match tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), stopped).await {
        Ok(stopped) => stopped?,
        Err(_) => tracing::warn!("the eval's agent and board had not stopped when the time limit ran out"),
    }
    Ok(Scorecard::new(model, scores, cut_short, timeout))
}
