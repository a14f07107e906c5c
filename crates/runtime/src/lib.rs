//! The long-lived agent (`picogent run`): wires the event stream ([`picogent_tracker::stream`]), the router
//! ([`router`]), the runs ([`run`], speaking [`request`]'s words), the state database, the run
//! inspector (`picogent_inspector`) and the HTTP listener together, and shuts them down in order. This
//! file assembles; the modules never import it, and no two of them import each other.
//!
//! Shutdown: one `CancellationToken`. Cancelling it stops the stream (no new events), lets
//! running runs finish within `limits.shutdown_grace_ms`, leaves what is unfinished recorded as
//! running (resumed at the next start), closes the database and stops the HTTP listener.
//!
//! Codemap, in the order an event flows: the event stream (`picogent_tracker::stream`) →
//! [`router`] (filters, claims, the run queue) → [`run`] with [`prompt`] (what the model is told),
//! [`guard`] (where posts land, the loop guard), [`answer`] (what a run leaves on the board) and
//! [`record`] (what is stored with it); [`refusal`] tells a person what a cap or budget refused.
//! Beside them: [`scheduler`] (the `schedules`: firings on time, once, queued as runs; a
//! `stale` firing's run is [`nudge`]), [`presence`] and [`replicas`] (which copy acts), [`retention`] (pruning),
//! [`status`], [`metrics`], [`http`] (`/healthz`, `/readyz`, `/metrics`),
//! the run inspector (`picogent_inspector`, wired here) and [`control`] (the agent as MCP sees it).
//!
//! Invariants:
//! - every event is recorded before anything acts on it, and every run goes through the state's
//!   run queue with its claim, for one copy as for replicas ([`router`]); this file is the one
//!   place that chooses between them (the store, whether to poll, who may hold a lease);
//! - a copy that another took over from (on the tracker, or the agent's lock in PostgreSQL)
//!   writes nothing more: its writes are refused, its stream stopped, and `/readyz` says why;
//! - nothing served (`/metrics`, `/readyz`, the inspector, MCP) holds a secret, and every metric
//!   label comes from a bounded set ([`metrics`]).
//!
//! Where things are: `router/` (`Router`: one closed loop over `Input`; `filter.rs`: the pure
//! filters, `message_fate`; `runs.rs`: a run's life in the router; `reconcile.rs`: `Reconciler`,
//! what is still open and unanswered, judged from the board; `queue.rs`: `QueueSetup`, each tick of
//! a shared queue; `tree.rs`: a task tree's order, roll-up, stop and what its parent hears;
//! `outcome.rs`); `watchdog.rs` (a quiet sub-task said on its parent); `request.rs` (`RunRequest`, `RunKind`, `Trigger`, `RunDone`: what
//! the router and a run say to each other); `run.rs` (`execute`: acknowledge, read, render, record
//! the start, loop, post, save; `offered_tools`); `answer.rs` (`RunPosts`, `post_answer`: the
//! answer posted once with its spend line); `review.rs` (a run's side of review handed to another
//! agent: the hand-off of pushed work, the review tools on a review run); `guard.rs` (`ReplyCap`, asked before every post;
//! `Answering`); `refusal.rs` (`tell_once`); `waits.rs` (`RunSlots`, the one count of this
//! process's slots); `direct.rs` (direct mode); `state_lock.rs` (`StateLock`: the OS lock or the
//! agent's `PostgresLock`, kept by `LockKeeper`); `presence.rs` (`claim` at start, `Heartbeat`,
//! `EXIT_ANOTHER_COPY`); `replicas.rs` (`StreamKeeper`: standby until it takes the stream's lease);
//! `retention.rs` (`Pruner`: the schedule, and the artifacts of pruned runs); `metrics.rs` (every
//! label from a bounded set, `EventName`); `http.rs`; `control.rs` (`RuntimeControl`, the agent
//! over `/mcp`); `tree_view.rs` (`TreeView`: a task tree for the inspector's `/tree/{key}`).

pub mod answer;
pub mod control;
pub mod direct;
pub mod guard;
pub mod http;
pub mod metrics;
pub mod nudge;
pub mod presence;
pub mod prompt;
/// What is stored with a run: written here, read by the inspector (whose it is) and MCP.
pub use picogent_inspector::record;
pub mod refusal;
pub mod replicas;
pub mod request;
pub mod retention;
pub mod review;
pub mod router;
pub mod run;
pub mod scheduler;
mod state_lock;
pub mod status;
#[cfg(test)]
mod tests;
mod tree_view;
pub mod waits;
mod watchdog;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::router::{Input, Router};
use metrics::Metrics;
use picogent_config::Config;
use picogent_prompts::Prompts;
use picogent_state::State;
use picogent_state::lock_state;
use picogent_support::secret::Secret;
use picogent_tools::ToolSource;
use picogent_tracker::TrackerClient;
use picogent_tracker::stream::StreamOptions;
use request::RunServices;
use state_lock::{StandDown, StateLock, TakenLock};
use status::StatusBoard;

/// What `start` needs beyond the config: the secrets (read from the environment by the caller),
/// where the event stream begins, and whether to serve HTTP (`picogent eval` does not).
pub struct AgentOptions {
    pub config: Config,
    pub tracker_token: Secret,
    pub llm_api_key: Option<Secret>,
    /// The bearer token MCP clients must send to `/mcp`; `None` leaves `/mcp` off.
    pub mcp_token: Option<Secret>,
    /// The run inspector's token (`http.ui_token_env`), needed off loopback; `None` there leaves
    /// the inspector off.
    pub ui_token: Option<Secret>,
    /// The event stream's options; `None`: the config's ([`StreamOptions::from_config`]).
    pub stream: Option<StreamOptions>,
    /// Serve `http.listen` (false for `picogent eval` and tests that need no HTTP).
    pub serve_http: bool,
    /// The clock the schedules fire by; `None`: the machine's ([`picogent_schedule::SystemClock`]).
    pub clock: Option<Arc<dyn picogent_schedule::Clock>>,
}

/// A running agent.
pub struct AgentHandle {
    pub metrics: Arc<Metrics>,
    pub status: Arc<StatusBoard>,
    pub state: State,
    pub http_addr: Option<SocketAddr>,
    /// Sends commands (start or stop a run) into the router.
    pub inputs: mpsc::Sender<Input>,
    shutdown: CancellationToken,
    router: tokio::task::JoinHandle<()>,
    stream: tokio::task::JoinHandle<Result<(), picogent_tracker::stream::StreamError>>,
    http: Option<tokio::task::JoinHandle<()>>,
    /// The pruning schedule of the state database; ends with the shutdown.
    retention: tokio::task::JoinHandle<()>,
    host: Arc<picogent_mcp::host::McpHost>,
    /// Keeps this copy's marker moving on the tracker (`presence.check`); `None` when off.
    presence: Option<presence::Heartbeat>,
    /// Cancelled once a newer copy took over (on the tracker, or the agent's lock in PostgreSQL).
    superseded: CancellationToken,
    /// The lock that keeps a second agent off the same state; released with the handle.
    _state_lock: StateLock,
    /// The schedules (`schedules`): their jobs, and a firing now.
    pub schedules: scheduler::Schedules,
    /// The scheduler; ends with the shutdown.
    scheduler: tokio::task::JoinHandle<()>,
}

impl AgentHandle {
    /// Stops taking events, lets runs finish within the grace period, and closes everything.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let _ = self.scheduler.await;
        let _ = self.router.await;
        let stream = self.stream.await;
        if let Some(http) = self.http {
            let _ = http.await;
        }
        let _ = self.retention.await;
        self.host.shutdown().await;
        // Last: the runs that finished above needed the lease for their writes.
        if let Some(presence) = self.presence {
            presence.finish().await;
        }
        self.state.close().await;
        match stream {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error.into()),
            Err(join) => Err(anyhow::anyhow!("the event stream task failed: {join}")),
        }
    }

    /// Resolves when the agent stops on its own (a fatal stream error such as a refused token).
    pub fn is_finished(&self) -> bool {
        self.stream.is_finished() || self.router.is_finished()
    }

    /// Resolves once a newer copy of the agent took over: on the tracker (`presence.check`), or
    /// the agent's lock in PostgreSQL while this copy's connection was down; by then this copy
    /// writes nothing more and its event stream is stopped.
    pub async fn superseded(&self) {
        self.superseded.cancelled().await
    }

    pub fn is_superseded(&self) -> bool {
        self.superseded.is_cancelled()
    }

    /// Stops a copy a newer one took over from: it already writes nothing and hears no events.
    /// It goes on saying why on `/readyz` for a moment, then stops without waiting out the runs'
    /// grace period (whatever they would still do is refused).
    pub async fn stand_down(self) {
        let linger = self.presence.as_ref().map_or(std::time::Duration::ZERO, presence::Heartbeat::linger);
        tokio::time::sleep(linger).await;
        match tokio::time::timeout(SUPERSEDED_SHUTDOWN, self.shutdown()).await {
            Ok(Ok(())) | Ok(Err(_)) => {}
            Err(_) => tracing::warn!("runs still going as this copy exits; none of them can write to the tracker"),
        }
    }
}

/// How long a superseded agent gives its runs to notice that their writes are refused.
const SUPERSEDED_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(3);

/// Starts the agent: opens the state, loads the prompts, connects the stream and the model.
pub async fn start(options: AgentOptions) -> anyhow::Result<AgentHandle> {
    let AgentOptions { config, tracker_token, llm_api_key, mcp_token, ui_token, stream, serve_http, clock } = options;
    let config = Arc::new(config);
    // What a coding agent's push may never carry, each named by its setting.
    let held_secrets: Vec<(String, Secret)> = [
        (format!("the tracker's token ({})", config.tracker.token_env), Some(tracker_token.clone())),
        (
            format!("the model's key ({})", config.llm.api_key_env.as_deref().unwrap_or("llm.api_key_env")),
            llm_api_key.clone(),
        ),
        (format!("the MCP token ({})", config.mcp.token_env), mcp_token.clone()),
        (format!("the inspector's token ({})", config.http.ui_token_env), ui_token.clone()),
    ]
    .into_iter()
    .filter_map(|(what, secret)| secret.map(|secret| (what, secret)))
    .collect();
    // The schedules' mistakes (a pattern, a zone, a prompt file) stop the start, naming the job.
    let jobs = picogent_schedule::jobs(&config.schedules, std::path::Path::new("."))
        .map_err(|problem| anyhow::anyhow!("schedules: field `{}`: {}", problem.field, problem.message))?;
    if serve_http && mcp_token.is_some() {
        // `/mcp` here follows the rule of `picogent mcp --http`: off loopback only for the host
        // names `mcp.allowed_hosts` lists. Checked before anything is locked, claimed or connected.
        let listen: SocketAddr = config.http.listen.parse().context("http.listen is not an address")?;
        picogent_mcp::server::check_listen_address(listen, &config.mcp).with_context(|| {
            format!(
                "/mcp is served on http.listen because {} is set (unset it to run without /mcp)",
                config.mcp.token_env
            )
        })?;
    }
    let prompts = Arc::new(Prompts::load(&config.prompts_dir)?);
    // One copy per state: the SQLite file's lock, or the agent's lock in the PostgreSQL database.
    let (taken_lock, state) = match &config.state.postgres_url {
        None => {
            let lock = TakenLock::File(lock_state(&config.state.path)?);
            let state = State::open(&config.state.path).await?;
            if let Some(to) = state.get_value(picogent_state::migrate::MOVED_TO).await? {
                state.close().await;
                anyhow::bail!(
                    "the state file {} was moved to {to} by `picogent state migrate`: set state.url to that database \
                     (and drop state.path) to run the agent there; starting on the file would answer again what the \
                     agent did since. To start this agent afresh instead, delete the file",
                    config.state.path.display()
                );
            }
            (lock, state)
        }
        Some(url) => {
            let state = State::open_postgres(url, &config.slug).await?;
            let lock = picogent_state::PostgresLock::take(url, &config.slug, config.replicas.enabled).await?;
            (TakenLock::Postgres(lock), state)
        }
    };
    // Every run goes through the run queue, held by this process under an id of its own. Where
    // the single copy and replicas differ is chosen here, once: replicas share the queue (the
    // spend is read afresh, the queue is polled, the stream goes to the holder of its lease); a
    // single copy holds the agent's state to itself, so the runs a crash or a shutdown left
    // running are its own, and their leases go at once so they resume now.
    let shared = config.replicas.enabled;
    if shared && state.path().is_some() {
        anyhow::bail!("replicas need their state in PostgreSQL (state.url)");
    }
    let holder = replica_id();
    // The listener first, before anything waits on the tracker: `/healthz` answers and `/readyz`
    // says what the start waits for, until the agent's own routes are served.
    let shutdown = CancellationToken::new();
    let door = match serve_http {
        true => {
            let listen: SocketAddr = config.http.listen.parse().context("http.listen is not an address")?;
            let waiting = format!(
                "checking on the tracker at {} (tracker.url) that no other copy of this agent is active",
                picogent_support::secret::shown_url(&config.tracker.url)
            );
            let door = http::Door::bind(listen, config.http.doors(), shutdown.child_token(), waiting)
                .await
                .with_context(|| format!("cannot listen on {listen} (http.listen)"))?;
            Some(door)
        }
        false => None,
    };
    // A start that fails from here on closes the listener again.
    let close_on_failure = shutdown.clone().drop_guard();
    let (state, queue) = state.for_holder(&holder, shared);
    if shared {
        tracing::info!(replica = %holder, "starting as one replica of agent {}", config.slug);
    } else {
        queue.release_all().await.context("cannot read the runs left running in the state")?;
    }
    let client =
        TrackerClient::new(&config.tracker, tracker_token.clone()).context("cannot build the tracker client")?;
    // Before anything connects or acts: is another copy of this agent active on the tracker?
    let claimed = if config.presence.check {
        let presence_client = TrackerClient::new(&presence::tracker_config(&config), tracker_token)
            .context("cannot build the tracker client")?;
        Some(presence::claim(&config, presence_client, &state).await?)
    } else {
        tracing::warn!(
            "presence.check is off: nothing stops a second copy of this agent, with other state, from answering \
             everything a second time"
        );
        None
    };
    let client = match &claimed {
        Some(claimed) => client.with_gate(claimed.gate()),
        None => client,
    };
    check_schedule_projects(&jobs, &client).await?;
    let registry: Arc<dyn ToolSource> = Arc::new(build_tools(&config, &client)?);
    // External MCP servers join the tracker's tools; one permission policy governs them all.
    let host = Arc::new(picogent_mcp::host::McpHost::start(&config.mcp_servers, &config.state, &config.limits).await);
    let model = picogent_llm::chat_model(&config.llm, llm_api_key).context("cannot build the model client")?;
    // A server's elicitation is asked of the person the run works for, in its thread; a reply in
    // plain words is fitted to the form by the model.
    host.set_people(picogent_mcp::elicit::People {
        asker: picogent_tools::person::PersonAsker::new(client.clone()),
        timeout: std::time::Duration::from_millis(config.elicitation.timeout_ms),
        url_retries: config.elicitation.url_retries,
        model: Some(model.clone()),
    });
    let coding = coding_tools(&config, &client, held_secrets)?;
    // The model's clarifying question, asked where the run was asked (`tools::question`).
    let question = picogent_tools::question::QuestionTool::new(
        client.clone(),
        std::time::Duration::from_millis(config.elicitation.timeout_ms),
    );
    // A breakdown of a task run's task into sub-tasks, asked as the question is (`tools::plan`).
    let plan = picogent_tools::plan::PlanTool::new(
        client.clone(),
        config.delegation.clone(),
        std::time::Duration::from_millis(config.elicitation.timeout_ms),
    );
    let mut sources = vec![
        registry,
        host.clone() as Arc<dyn ToolSource>,
        Arc::new(question) as Arc<dyn ToolSource>,
        Arc::new(plan) as Arc<dyn ToolSource>,
    ];
    sources.extend(coding.clone().map(|coding| coding as Arc<dyn ToolSource>));
    if let Some(coding) = coding.as_ref().filter(|_| config.capabilities.iter().any(|c| c == "review")) {
        let review = picogent_workspace::ReviewTools::new(coding.workspaces().clone(), client.clone(), config.review());
        sources.push(Arc::new(review));
    }
    let tools: Arc<dyn ToolSource> = Arc::new(picogent_tools::governed(sources, &config.permissions, &client));
    let metrics = Arc::new(Metrics::default());
    let status = Arc::new(StatusBoard::default());
    if let Some(coding) = &coding {
        tend_workspaces(coding.clone(), status.clone(), shutdown.clone());
    }

    let services = Arc::new(RunServices {
        config: config.clone(),
        client: client.clone(),
        state: state.clone(),
        metrics: metrics.clone(),
        status: status.clone(),
        prompts,
        tools,
        model,
        shutdown: shutdown.clone(),
        host: host.clone(),
        post_guard: Arc::new(guard::ReplyCap {
            state: state.clone(),
            client: client.clone(),
            max_per_hour: config.limits.max_replies_per_thread_per_hour,
            lock: Default::default(),
        }),
        coding,
        slots: Arc::new(crate::waits::RunSlots::new(
            config.limits.max_concurrent_runs as usize,
            state.clone(),
            metrics.clone(),
            status.clone(),
        )),
    });

    let (inputs_tx, inputs_rx) = mpsc::channel::<Input>(1024);
    let wake = inputs_tx.clone();
    services.slots.connect_router(move || {
        let _ = wake.try_send(Input::SlotFreed);
    });
    let clock = clock.unwrap_or_else(|| Arc::new(picogent_schedule::SystemClock));
    let (schedules, scheduler) =
        scheduler::new(jobs, services.clone(), clock, inputs_tx.clone(), shutdown.child_token());
    let stream_options = stream.unwrap_or_else(|| StreamOptions::from_config(&config.tracker));
    let stream_cancel = shutdown.child_token();
    // A newer copy taking over, on the tracker or the agent's lock in PostgreSQL, stops this one.
    let superseded = CancellationToken::new();
    let gate = claimed.as_ref().map(|claimed| claimed.gate());
    let presence = claimed.map(|claimed| claimed.spawn(status.clone(), stream_cancel.clone(), superseded.clone()));
    let stand_down =
        StandDown { gate, status: status.clone(), stream: stream_cancel.clone(), superseded: superseded.clone() };
    let state_lock = taken_lock.keep(std::time::Duration::from_millis(config.presence.heartbeat_ms), stand_down);
    // The stream puts its items straight into the router's one input channel; a replica's only
    // while it holds the stream's lease.
    let stream = match shared {
        false => picogent_tracker::stream::spawn_into(
            stream_options,
            &client,
            state.clone(),
            inputs_tx.clone(),
            stream_cancel,
        ),
        true => {
            status.set_replica(queue.id(), config.limits.max_concurrent_runs as usize);
            let keeper = replicas::StreamKeeper {
                replicas: queue.clone(),
                timing: replicas::LeaseTiming::from_config(&config.replicas),
                options: stream_options,
                client: client.clone(),
                state: state.clone(),
                inputs: inputs_tx.clone(),
                status: status.clone(),
                metrics: metrics.clone(),
                outage: Default::default(),
            };
            replicas::spawn_stream_keeper(keeper, stream_cancel)
        }
    };

    let (http_addr, http) = match door {
        Some(door) => {
            let listen: SocketAddr = config.http.listen.parse().context("http.listen is not an address")?;
            let routes = http_routes(&config, &services, mcp_token, inputs_tx.clone());
            let routes = match picogent_inspector::Access::for_listener(listen, ui_token, &config.http.ui_token_env) {
                Some(access) => routes.merge(inspector_routes(&services, &schedules, access)),
                None => routes,
            };
            door.open_fully(routes);
            tracing::info!(addr = %door.addr, "agent http listening: / (run inspector) /healthz /readyz /metrics");
            (Some(door.addr), Some(door.handle))
        }
        None => (None, None),
    };

    let retention = retention::spawn(&services);
    let setup = crate::router::QueueSetup {
        run_lease: std::time::Duration::from_millis(config.replicas.run_lease_ms),
        poll: shared.then(|| std::time::Duration::from_millis(config.replicas.poll_ms)),
        host: host_name(),
        http: http_addr.map(|addr| addr.to_string()),
        started_at_ms: time::OffsetDateTime::now_utc().unix_timestamp() * 1000,
        outage: Default::default(),
    };
    // A sub-task that went quiet is said on its parent (`watchdog`), here and on each replica.
    let stall = std::time::Duration::from_millis(config.delegation.stall_ms);
    watchdog::spawn(services.client.clone(), config.slug.clone(), stall, shutdown.clone());
    let router = Router::new(services, inputs_tx.clone(), shutdown.clone(), queue, setup);
    let router = tokio::spawn(router.run(inputs_rx));
    let scheduler = tokio::spawn(scheduler.run());
    close_on_failure.disarm();
    Ok(AgentHandle {
        metrics,
        status,
        state,
        http_addr,
        inputs: inputs_tx,
        shutdown,
        router,
        stream,
        http,
        retention,
        host,
        presence,
        superseded,
        _state_lock: state_lock,
        schedules,
        scheduler,
    })
}

/// Every project the schedules name exists on the tracker: a mistyped slug stops the start,
/// naming the job and the projects there are, rather than failing each firing later.
pub async fn check_schedule_projects(jobs: &[picogent_schedule::Job], client: &TrackerClient) -> anyhow::Result<()> {
    // Collected before the await: an iterator of closures held across it makes the future's
    // `Send` too narrow for a spawn (rust-lang/rust#96865).
    let named: Vec<(&str, &str)> =
        jobs.iter().filter_map(|job| Some((job.name.as_str(), job.kind.project()?))).collect();
    if named.is_empty() {
        return Ok(());
    }
    let projects = client.list_projects().await.context("cannot read the tracker's projects for the schedules")?;
    for (job, slug) in named {
        if !projects.iter().any(|project| project.slug == slug) {
            let known: Vec<&str> = projects.iter().map(|project| project.slug.as_str()).collect();
            anyhow::bail!(
                "schedules: field `schedules.{job}.project`: there is no project {slug:?} on the tracker; its projects are: {}",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            );
        }
    }
    Ok(())
}

/// This machine's name, as the operating system gives it (`localhost` if it gives none).
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// This process's id in the run queue: its host and a random part, so restarts and two replicas
/// on one host never share one.
fn replica_id() -> String {
    let host: String = host_name().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(32).collect();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &random[..8])
}

/// `/healthz`, `/readyz`, `/metrics`, and `/mcp` with the running agent when an MCP token is set.
fn http_routes(
    config: &Config,
    services: &RunServices,
    mcp_token: Option<Secret>,
    inputs: mpsc::Sender<Input>,
) -> axum::Router {
    let live = http::Live { client: services.client.clone(), host: services.host.clone() };
    let routes = http::routes(services.metrics.clone(), services.status.clone(), live);
    let Some(token) = mcp_token else {
        // Said only to whoever asked for MCP (an `mcp` section other than the defaults): to
        // everyone else, /mcp being off is what they expect.
        if config.mcp != picogent_config::McpConfig::default() {
            tracing::info!("MCP at /mcp is off: set {} to serve it", config.mcp.token_env);
        }
        return routes;
    };
    let control = Arc::new(control::RuntimeControl {
        state: services.state.clone(),
        status: services.status.clone(),
        inputs,
        client: services.client.clone(),
        tools: services.tools.clone(),
        max_tokens_per_day: config.limits.max_tokens_per_day,
        slug: config.slug.clone(),
        allow_unassigned_runs: config.mcp.allow_unassigned_runs,
        coding: services.coding.clone(),
    });
    let server = picogent_mcp::server::McpServer::new(
        services.tools.clone(),
        services.client.clone(),
        services.prompts.clone(),
        config.slug.clone(),
    )
    .with_agent(control)
    .with_shutdown(services.shutdown.child_token());
    let security = picogent_mcp::server::HttpSecurity::new(
        token,
        config.mcp.allowed_origins.clone(),
        config.mcp.allowed_hosts.clone(),
    );
    routes.nest("/mcp", picogent_mcp::server::http_router(server, &security, services.shutdown.child_token()))
}

/// The run inspector at `/`, reading what the runs store and the live counters.
fn inspector_routes(
    services: &RunServices,
    schedules: &scheduler::Schedules,
    access: picogent_inspector::Access,
) -> axum::Router {
    let tools = services.tools.tools().into_iter().map(|tool| tool.name.to_string()).collect();
    let mut inspector = picogent_inspector::Inspector::new(
        services.state.clone(),
        services.status.clone(),
        services.metrics.clone(),
        inspector_settings(&services.config),
        tools,
        access,
        services.shutdown.child_token(),
    );
    if let Some(coding) = &services.coding {
        inspector = inspector.with_coding(coding.runs());
    }
    let trees = tree_view::TreeView { client: services.client.clone(), state: services.state.clone() };
    picogent_inspector::routes(inspector.with_schedules(Arc::new(schedules.clone())).with_trees(Arc::new(trees)))
}

/// What the run inspector reads of `config`: its pages and `picogent runs` read no more.
pub fn inspector_settings(config: &Config) -> picogent_inspector::Settings {
    picogent_inspector::Settings {
        slug: config.slug.clone(),
        tracker_url: config.tracker.url.clone(),
        task_pages: config.http.task_pages(&config.tracker.url),
        message_pages: config.http.message_pages(&config.tracker.url),
        limits: config.limits.clone(),
        model: config.llm.model.clone(),
        model_url: config.llm.base_url.clone(),
        priced: config.llm.price.is_some(),
        listen: config.http.listen.clone(),
        allowed_hosts: config.http.allowed_hosts.clone(),
        max_live_streams: config.http.max_live_streams,
        sessions: config.http.sessions(),
    }
}

/// Measures the workspaces' disk use for `/readyz` at start and every minute, off the runtime's
/// threads (a walk of the folders), and every ten minutes removes those of tasks done for longer
/// than `workspaces.retention_ms`; until `shutdown`.
fn tend_workspaces(
    coding: Arc<picogent_workspace::CodingTools>,
    status: Arc<StatusBoard>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        for minute in 0u64.. {
            if minute % 10 == 0 {
                coding.prune().await;
            }
            let measured = coding.workspaces().clone();
            if let Ok(view) = tokio::task::spawn_blocking(move || measured.view()).await {
                status.set_workspaces(view);
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
            }
        }
    });
}

/// The coding tools over `workspaces.root`, when a repository is configured. Commits are made as
/// the agent (`name <slug@picogent.invalid>`); coding agents are told picogent's own model unless
/// their entry names another.
fn coding_tools(
    config: &Config,
    client: &TrackerClient,
    secrets: Vec<(String, Secret)>,
) -> anyhow::Result<Option<Arc<picogent_workspace::CodingTools>>> {
    if !config.workspaces.enabled() {
        return Ok(None);
    }
    picogent_support::private_files::create_private_dir_all(&config.workspaces.root)
        .with_context(|| format!("cannot make workspaces.root {}", config.workspaces.root.display()))?;
    let email = format!("{}@picogent.invalid", config.slug);
    let workspaces = picogent_workspace::Workspaces::new(Arc::new(config.workspaces.clone()), &config.name, &email)
        .with_secrets(secrets);
    let model = picogent_workspace::tools::ModelDefaults {
        base_url: config.llm.base_url.clone(),
        model: config.llm.model.clone(),
    };
    Ok(Some(Arc::new(picogent_workspace::CodingTools::new(Arc::new(workspaces), client.clone(), model))))
}

fn build_tools(config: &Config, client: &TrackerClient) -> anyhow::Result<picogent_tools::Registry> {
    picogent_tools::Registry::new(client.clone(), config.limits.max_tool_result_bytes)
        .context("cannot build the tool registry")
}
