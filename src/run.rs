//! `picogent run`: the agent as a command. Loads the config and the secrets from the
//! environment, sends the start-up model probe in the background, starts the agent
//! ([`picogent_runtime::start`]) and runs it until a signal, a fatal error or a newer copy taking
//! over, each with its exit code. The agent itself is the runtime's; what belongs to a process
//! (signals, exit codes) is here.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;

use picogent_config::Config;
use picogent_runtime::presence::{self, PresenceError};
use picogent_runtime::status::StatusBoard;
use picogent_runtime::{AgentHandle, AgentOptions};
use picogent_support::secret::Secret;
use picogent_tracker::stream::{StreamOptions, StreamStart};

/// `picogent run`: loads the config and the secrets from the environment, starts the agent, and
/// runs until SIGINT/SIGTERM (exit 0 after a graceful shutdown) or a fatal error (exit 1).
/// `start`: where the event stream begins (`--from-start`: the whole log).
pub async fn run_cli(config_path: &Path, start: StreamStart) -> anyhow::Result<ExitCode> {
    make_state_folder(config_path)?;
    let config = Config::load(config_path)?;
    let tracker_token = Secret::from_env(&config.tracker.token_env)?;
    let llm_api_key = config.llm.api_key()?;
    let mcp_token = Secret::from_env(&config.mcp.token_env).ok();
    let ui_token = Secret::from_env(&config.http.ui_token_env).ok();
    let stream = StreamOptions { start, ..StreamOptions::from_config(&config.tracker) };
    // The model probe of `picogent check`, sent at once and answered in the background: the start
    // does not wait for it.
    let llm = config.llm.clone();
    let probe_key = llm_api_key.clone();
    let probe = tokio::spawn(async move {
        // A model the server does not list (a typo in llm.model) is said once, at start, as
        // `picogent check` says it; a server that lists none, or cannot be reached, is left to
        // the tool-call probe's own words.
        if let Err(error @ picogent_llm::probe::ProbeError::ModelNotListed { .. }) =
            picogent_llm::probe::probe(&llm, probe_key.clone()).await
        {
            tracing::warn!("model check: {error}; runs will fail until llm.model names a model the server serves");
        }
        picogent_llm::probe::check_model(&llm, probe_key).await
    });
    let probing = picogent_llm::probe::ModelCheck::probing(&config.llm);
    let started = picogent_runtime::start(AgentOptions {
        config,
        tracker_token,
        llm_api_key,
        mcp_token,
        ui_token,
        stream: Some(stream),
        serve_http: true,
        clock: None,
    });
    // A signal while it starts (waiting on a tracker that does not answer, say) stops it cleanly.
    let started = tokio::select! {
        started = started => started,
        _ = shutdown_signal() => {
            tracing::info!("signal received while starting: stopping");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let agent = match started {
        Ok(agent) => agent,
        Err(error) => match error.downcast_ref::<PresenceError>() {
            Some(refusal @ PresenceError::AnotherCopy { .. }) => {
                tracing::error!("{refusal}");
                return Ok(ExitCode::from(presence::EXIT_ANOTHER_COPY));
            }
            _ => return Err(error),
        },
    };
    let probe = keep_model_check(probe, probing, agent.status.clone());
    let stopped_by_signal = tokio::select! {
        _ = shutdown_signal() => true,
        _ = wait_finished(&agent) => false,
        _ = agent.superseded() => false,
    };
    if agent.is_superseded() {
        probe.abort();
        agent.stand_down().await;
        return Ok(ExitCode::from(presence::EXIT_ANOTHER_COPY));
    }
    if stopped_by_signal {
        tracing::info!("signal received: stopping");
    }
    probe.abort();
    agent.shutdown().await?;
    Ok(ExitCode::SUCCESS)
}

/// Shows the start-up model probe as out, then keeps what it found for `/readyz` and the notices,
/// and logs it once: at info when the model calls tools, else one warning with the fix.
fn keep_model_check(
    probe: tokio::task::JoinHandle<picogent_llm::probe::ModelCheck>,
    probing: picogent_llm::probe::ModelCheck,
    status: Arc<StatusBoard>,
) -> tokio::task::JoinHandle<()> {
    status.set_model(probing);
    tokio::spawn(async move {
        let Ok(check) = probe.await else { return };
        match &check.fix {
            None => tracing::info!(verdict = check.verdict.as_str(), "model check: {}", check.detail),
            Some(fix) => tracing::warn!(
                verdict = check.verdict.as_str(),
                "model check: {}; runs will fail until this is fixed: {fix}",
                check.detail
            ),
        }
        status.set_model(check);
    })
}

/// `picogent run` on a new machine: the folder of `state.path` is made when it is missing (the
/// state file, its lock and external tools' artifacts go there). A config that does not load is
/// left to [`run_cli`] to report.
fn make_state_folder(config_path: &Path) -> anyhow::Result<()> {
    let Ok(config) = Config::load(config_path) else { return Ok(()) };
    let folder = config.state.folder();
    if folder.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(folder).with_context(|| {
        format!(
            "cannot make the state folder {} (the folder of state.path): make it, or set state.path to a file in a \
             folder this user may write",
            folder.display()
        )
    })?;
    tracing::info!(folder = %folder.display(), "made the state folder");
    Ok(())
}

/// Resolves once the agent stopped on its own (a fatal stream error such as a refused token).
async fn wait_finished(agent: &AgentHandle) {
    while !agent.is_finished() {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
