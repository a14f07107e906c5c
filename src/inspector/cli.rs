//! `picogent runs list` and `picogent runs show ID`: the inspector's runs and run pages as text,
//! read from the state database of a config, for servers without a browser.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use super::view::{self, RunDetail, RunFilter, RunSummary};
use crate::config::Config;
use crate::state::State;

async fn open_state(config: &Config) -> anyhow::Result<State> {
    State::open_from_config(&config.state, &config.slug)
        .await
        .context("cannot open the state database the config names (state.path or state.url)")
}

/// `picogent runs list`: the newest `limit` runs, newest first, filtered.
pub async fn list(config_path: &std::path::Path, limit: u32, filter: RunFilter) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let state = open_state(&config).await?;
    let runs = state.list_runs(limit).await;
    state.close().await;
    let summaries: Vec<RunSummary> = runs
        .context("cannot read the runs")?
        .iter()
        .filter(|run| filter.keeps(run))
        .map(|run| view::summary(run, &config))
        .collect();
    print!("{}", list_text(&summaries));
    Ok(ExitCode::SUCCESS)
}

/// The runs as a table, one line each.
pub fn list_text(runs: &[RunSummary]) -> String {
    if runs.is_empty() {
        return "no runs\n".to_string();
    }
    let mut out = format!(
        "{:<36}  {:<11}  {:>5}  {:>5}  {:>8}  {:>10}  {:<20}  trigger: outcome\n",
        "run", "status", "turns", "calls", "tokens", "duration", "started"
    );
    for run in runs {
        let _ = writeln!(
            out,
            "{:<36}  {:<11}  {:>5}  {:>5}  {:>8}  {:>10}  {:<20}  {}: {}",
            run.id,
            run.status,
            run.turns,
            run.tool_calls,
            run.tokens,
            run.duration,
            run.started_at,
            run.trigger,
            run.outcome
        );
    }
    out
}

/// `picogent runs show ID`: one run in full; exit 1 when there is no such run.
pub async fn show(config_path: &std::path::Path, run_id: &str) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let state = open_state(&config).await?;
    let run = state.get_run(run_id).await;
    let location = state.location();
    state.close().await;
    match run.context("cannot read the run")? {
        Some(run) => {
            print!("{}", show_text(&view::detail(&run, &config)));
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("no run {run_id} in {}: `picogent runs list` shows the runs kept", location);
            Ok(ExitCode::FAILURE)
        }
    }
}

/// One run as text: its summary, budgets, prompts, turns and ending.
pub fn show_text(run: &RunDetail) -> String {
    let summary = &run.summary;
    let mut out = String::new();
    let _ = writeln!(out, "run      {}  {}", summary.id, summary.status);
    let _ = writeln!(
        out,
        "trigger  {}{}",
        summary.trigger,
        summary.link.as_ref().map(|link| format!("  ({link})")).unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "started  {}  {}  {} tokens{}",
        summary.started_at,
        summary.duration,
        summary.tokens,
        summary.cost.as_ref().map(|c| format!("  cost {c}")).unwrap_or_default()
    );
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
                crate::runtime::record::one_line(&call.arguments, 200),
                call.outcome.unwrap_or("?")
            );
            let _ = writeln!(
                out,
                "  {mark} {}",
                call.result
                    .as_deref()
                    .map(|r| crate::runtime::record::one_line(r, 400))
                    .unwrap_or_else(|| "no result".into())
            );
        }
    }
    if let Some(notice) = &run.notice {
        let _ = writeln!(out, "\n== notice left\n{notice}");
    }
    if let Some(error) = &run.error {
        let _ = writeln!(out, "error    {error}");
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
