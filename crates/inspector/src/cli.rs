//! `picogent runs list` and `picogent runs show ID`: the inspector's runs and run pages as text,
//! read from the state database of a config, for servers without a browser. The binary loads the
//! config and hands over its `state` section and the inspector's [`Settings`].

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::settings::Settings;
use crate::view::{self, RunDetail, RunFilter, RunLine};
use picogent_state::{State, StateConfig};

/// The state database the config names (`state`, of the agent `slug`), for the commands that
/// read it.
pub(crate) async fn open_state(state: &StateConfig, slug: &str) -> anyhow::Result<State> {
    State::open_from_config(state, slug)
        .await
        .context("cannot open the state database the config names (state.path or state.url)")
}

/// `picogent runs list`: the newest `limit` runs, newest first, filtered, from the state
/// database `state`.
pub async fn list(settings: &Settings, state: &StateConfig, limit: u32, filter: RunFilter) -> anyhow::Result<ExitCode> {
    let state = open_state(state, &settings.slug).await?;
    let runs = state.list_runs(limit).await;
    state.close().await;
    let summaries: Vec<RunLine> = runs
        .context("cannot read the runs")?
        .iter()
        .filter(|run| filter.keeps(run))
        .map(|run| view::summary(run, settings))
        .collect();
    print!("{}", list_text(&summaries, time::OffsetDateTime::now_utc()));
    Ok(ExitCode::SUCCESS)
}

/// The widest line `picogent runs list` prints: a terminal of 120 columns shows each run on
/// one line.
pub const LIST_WIDTH: usize = 120;

/// The runs as a table, one line each, each at most [`LIST_WIDTH`] characters: the short id
/// (`runs show` takes it), the counts, when it started, and what started it with its outcome,
/// cut to fit.
pub fn list_text(runs: &[RunLine], now: time::OffsetDateTime) -> String {
    if runs.is_empty() {
        return "no runs\n".to_string();
    }
    let mut out = format!(
        "{:<8}  {:<11}  {:>5}  {:>5}  {:>7}  {:>9}  {:<12}  what: outcome\n",
        "run", "status", "turns", "calls", "tokens", "duration", "started"
    );
    for run in runs {
        let started = picogent_web::readable::parse(&run.started_at)
            .map(|at| picogent_web::readable::ago(at, now))
            .unwrap_or_else(|| run.started_at.clone());
        let columns = format!(
            "{:<8}  {:<11}  {:>5}  {:>5}  {:>7}  {:>9}  {:<12}  ",
            run.short_id, run.status, run.turns, run.tool_calls, run.tokens, run.duration, started
        );
        // A chat message's words, quoted, say what it was without `message.new` before them;
        // the room is better spent on the outcome.
        let name = match &run.words {
            Some(words) if run.trigger_kind == "message.new" => format!("\"{words}\""),
            _ => view::run_name(run),
        };
        let what = match run.outcome.as_str() {
            "" => name,
            outcome => format!("{name}: {outcome}"),
        };
        let room = LIST_WIDTH.saturating_sub(columns.chars().count()).max(1);
        let what = if what.chars().count() > room {
            format!("{}…", what.chars().take(room - 1).collect::<String>())
        } else {
            what
        };
        let _ = writeln!(out, "{columns}{what}");
    }
    out
}

/// `picogent runs show ID`: one run in full; `ID` is a run's id or its start (the 8-character
/// short id `runs list` and the inspector show), from the state database `state`. Exit 1 when no
/// run, or several, match.
pub async fn show(settings: &Settings, state: &StateConfig, run_id: &str) -> anyhow::Result<ExitCode> {
    let state = open_state(state, &settings.slug).await?;
    let found = find_run(&state, run_id).await;
    let location = state.location();
    state.close().await;
    match found.context("cannot read the run")? {
        Found::One(run) => {
            print!("{}", show_text(&view::detail(&run, settings, None)));
            Ok(ExitCode::SUCCESS)
        }
        Found::None if run_id.trim().is_empty() => {
            eprintln!("error: give a run's id, or its start (the short id): `picogent runs list` shows them");
            Ok(ExitCode::FAILURE)
        }
        Found::None => {
            eprintln!("error: no run {run_id} in {location}: `picogent runs list` shows the runs kept");
            Ok(ExitCode::FAILURE)
        }
        Found::Several(ids) => {
            let shown = ids.iter().take(SEVERAL_SHOWN).map(String::as_str).collect::<Vec<_>>().join("\n  ");
            let more = if ids.len() > SEVERAL_SHOWN { "\n  …" } else { "" };
            eprintln!("error: {run_id} is the start of several runs' ids; give more of it:\n  {shown}{more}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// How many ids an ambiguous prefix lists.
const SEVERAL_SHOWN: usize = 10;

/// What a run id, or the start of one, names.
enum Found {
    One(Box<picogent_state::RunRow>),
    None,
    Several(Vec<String>),
}

/// The run `id` names: the run with that id, or else the one run whose id starts with it.
async fn find_run(state: &State, id: &str) -> Result<Found, picogent_state::StateError> {
    let id = id.trim();
    if id.is_empty() {
        return Ok(Found::None);
    }
    if let Some(run) = state.get_run(id).await? {
        return Ok(Found::One(Box::new(run)));
    }
    // One more than are listed, to know there are more.
    let ids = state.run_ids_starting_with(id, SEVERAL_SHOWN as u32 + 1).await?;
    match ids.as_slice() {
        [] => Ok(Found::None),
        [only] => Ok(state.get_run(only).await?.map_or(Found::None, |run| Found::One(Box::new(run)))),
        _ => Ok(Found::Several(ids)),
    }
}

/// One run as text: its summary, budgets, prompts, turns and ending. It prints every field of the
/// view the run's page shows (the destructuring names each one, so a field added to
/// [`RunDetail`] is added here too, or left out by name).
pub fn show_text(run: &RunDetail) -> String {
    let RunDetail {
        summary,
        session_key: _, // in the trigger line
        system_prompt: _,
        prompt: _,
        earlier_messages: _,
        transcript: _,
        final_message: _,
        detail,
        error: _,
        notice: _,
        budgets: _,
        prompt_cache,
        context_trims,
        coding: _,
        waiting,
        tree,
        breaks_down,
    } = run;
    let mut out = String::new();
    let _ = writeln!(out, "run      {}  {}", summary.id, picogent_web::readable::status_label(summary.status));
    let _ = writeln!(
        out,
        "trigger  {}{}",
        view::run_name(summary),
        summary.link.as_ref().map(|link| format!("  ({link})")).unwrap_or_default()
    );
    let started = match picogent_web::readable::parse(&summary.started_at) {
        Some(at) => {
            let ago = picogent_web::readable::ago(at, time::OffsetDateTime::now_utc());
            format!("{} ({ago})", picogent_web::readable::exact(at))
        }
        None => summary.started_at.clone(),
    };
    let _ = writeln!(
        out,
        "started  {}  {}  {} tokens{}",
        started,
        summary.duration,
        summary.tokens,
        summary.cost.as_ref().map(|c| format!("  cost {c}")).unwrap_or_default()
    );
    if let Some(parent) = tree {
        let _ = writeln!(out, "tree     a sub-task of {parent}  (the inspector's /tree/{parent})");
    }
    if let Some(key) = breaks_down {
        let _ = writeln!(out, "tree     asked to break {key} down  (the inspector's /tree/{key})");
    }
    if let Some(cache) = prompt_cache {
        let _ = writeln!(out, "cache    {cache}");
    }
    if let Some(waiting) = waiting {
        let _ = writeln!(out, "waiting  {} (since {}, until {})", waiting.line, waiting.since, waiting.until);
    }
    for trim in context_trims {
        let _ = writeln!(out, "context  {trim}");
    }
    for budget in &run.budgets {
        let _ = writeln!(out, "budget   {}: {} of {} ({}%)", budget.name, budget.used, budget.limit, budget.percent);
    }
    if let Some(system) = &run.system_prompt {
        let _ = writeln!(out, "\n== system prompt\n{}", system.trim_end());
    }
    if let Some(prompt) = &run.prompt {
        let _ = writeln!(out, "\n== prompt (after {} earlier messages)\n{}", run.earlier_messages, prompt.trim_end());
    }
    for entry in &run.transcript {
        if entry.kind == "input" {
            let _ = writeln!(
                out,
                "\n== input joined after turn {}\n{}",
                entry.number,
                entry.text.as_deref().unwrap_or("").trim_end()
            );
            continue;
        }
        let _ = writeln!(out, "\n== turn {}", entry.number);
        if let Some(text) = &entry.text {
            let _ = writeln!(out, "{}", text.trim_end());
        }
        if let Some(refusal) = &entry.refusal {
            let _ = writeln!(out, "refused: {refusal}");
        }
        for call in &entry.calls {
            let mark = if call.is_error { "✗" } else { "→" };
            let _ = writeln!(
                out,
                "tool {} {} [{}]",
                call.name,
                crate::record::one_line(&call.arguments, 200),
                call.outcome.unwrap_or("?")
            );
            let _ = writeln!(
                out,
                "  {mark} {}",
                call.result.as_deref().map(|r| crate::record::one_line(r, 400)).unwrap_or_else(|| "no result".into())
            );
        }
    }
    if let Some(coding) = &run.coding {
        let _ = writeln!(out, "\n== coding agent");
        for hook in &coding.hooks {
            let _ = writeln!(out, "hook     {hook}");
        }
        if let Some(branch) = &coding.branch {
            let commit = match (&coding.commit, &coding.diff) {
                (Some(commit), Some(diff)) => {
                    format!("commit {commit} ({diff}){}", if coding.pushed { ", pushed" } else { "" })
                }
                _ => "no commit".to_string(),
            };
            let _ = writeln!(out, "work     branch {branch}, {commit}");
        }
        let _ = write!(out, "{}", coding.log);
    }
    if let Some(notice) = &run.notice {
        let _ = writeln!(out, "\n== notice left\n{notice}");
    }
    if let Some(error) = &run.error {
        let _ = writeln!(out, "error    {error}");
    }
    if let Some(detail) = detail {
        let _ = writeln!(out, "detail   {detail}");
    }
    if let Some(text) = &run.final_message {
        let _ = writeln!(
            out,
            "\n== {}\n{}",
            if summary.status == "completed" { "final answer" } else { "why it stopped" },
            text.trim_end()
        );
    }
    out
}
