//! Counters and latency summaries of the running agent, rendered in the Prometheus text format
//! at `/metrics`. Nothing here can hold a secret, and every label comes from a bounded set, so
//! nothing a peer sends can add series without end:
//! - an event's name is an [`EventName`]: one of the tracker's events the agent knows, `run` for
//!   the router's own, else `unknown`; its fate and a run's outcome are words of the code
//!   (`&'static str`, the `as_str` of the router's outcome types);
//! - a tool's name is one the run offered: a call of any other name (a model making names up)
//!   counts under `unknown`, and so does a call never run, whose name nothing checked; and past
//!   [`MAX_TOOL_LABELS`] names (a server listing thousands of tools) new names do too;
//! - the replica's id is this process's own;
//! - a schedule's name is one of `schedules` in agent.json (at most 64, checked at start), and a
//!   firing's outcome a word of the state's `FiringOutcome`;
//! - an MCP server's name is one of `mcp_servers` in agent.json.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use picogent_agent::ToolCallOutcome;
use picogent_state::RunStatus;
use picogent_tracker::model::{self, Event};

/// Every metric of the agent. One instance, shared behind an `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    /// The newest events with their fate, for the run inspector's events page.
    recent: Mutex<std::collections::VecDeque<RecentEvent>>,
}

/// One event as the router judged it, and how many [`Metrics::recent_events`] keeps: as many
/// as the run inspector's events page shows.
pub use picogent_inspector::{RECENT_EVENTS, RecentEvent};

/// How many tool names get series of their own; calls of names past it count under `unknown`.
pub const MAX_TOOL_LABELS: usize = 256;

/// The label of what cannot be counted under its own name.
const UNKNOWN: &str = "unknown";

/// What an event count is of: the label `event` of `picogent_events_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventName {
    TaskAssigned,
    TaskUnassigned,
    TaskUpdated,
    MessageNew,
    /// The router's own: a run it would start (refused by the daily spend guard).
    Run,
    /// An event of a name the agent does not know.
    Unknown,
}

impl EventName {
    /// The name of a typed tracker event.
    pub fn of(event: &Event) -> EventName {
        match event {
            Event::TaskAssigned(_) => EventName::TaskAssigned,
            Event::TaskUnassigned(_) => EventName::TaskUnassigned,
            Event::TaskUpdated(_) => EventName::TaskUpdated,
            Event::MessageNew(_) => EventName::MessageNew,
            Event::Unknown(_) => EventName::Unknown,
        }
    }

    /// The tracker's name of the event (`task.assigned`, …), `run` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventName::TaskAssigned => model::EVENT_TASK_ASSIGNED,
            EventName::TaskUnassigned => model::EVENT_TASK_UNASSIGNED,
            EventName::TaskUpdated => model::EVENT_TASK_UPDATED,
            EventName::MessageNew => model::EVENT_MESSAGE_NEW,
            EventName::Run => "run",
            EventName::Unknown => UNKNOWN,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// (event name, fate) → count.
    events: BTreeMap<(String, String), u64>,
    /// outcome → count.
    runs: BTreeMap<String, u64>,
    /// (tool, outcome) → count.
    tool_calls: BTreeMap<(String, String), u64>,
    /// kind (prompt | completion) → count.
    tokens: BTreeMap<String, u64>,
    /// What the model cost, when it has a price (`llm.price`).
    cost: f64,
    reconnects: u64,
    /// Stretches of events the tracker's log no longer had, gone on without.
    gaps: u64,
    /// Times this replica took the event stream's lease.
    stream_takeovers: u64,
    run_seconds: Summary,
    turn_seconds: Summary,
    /// table → rows the retention schedule removed.
    pruned: BTreeMap<&'static str, u64>,
    /// Pruning passes that finished.
    prune_passes: u64,
    /// Runs whose artifacts the retention schedule removed.
    pruned_artifact_runs: u64,
    /// (what was asked, how the wait ended) → count of waits for a person.
    waits: BTreeMap<(&'static str, &'static str), u64>,
    /// (schedule, outcome) → firings that ended so.
    firings: BTreeMap<(String, &'static str), u64>,
}

/// Count and sum, enough for rates and means in Prometheus.
#[derive(Debug, Default, Clone, Copy)]
struct Summary {
    count: u64,
    sum_seconds: f64,
}

impl Summary {
    fn observe(&mut self, duration: Duration) {
        self.count += 1;
        self.sum_seconds += duration.as_secs_f64();
    }
}

/// Keeps label values to a safe alphabet so a hostile event name cannot break the format.
fn label(value: &str) -> String {
    value.chars().take(64).map(|c| if c.is_ascii_alphanumeric() || "._-:".contains(c) { c } else { '_' }).collect()
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // A poisoned lock only means another thread panicked mid-update; the counters are still
        // usable, and metrics must never take the agent down.
        let mut guard = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard)
    }

    /// A run's wait for a person ended `end`.
    pub fn wait_ended(&self, kind: picogent_state::WaitKind, end: picogent_tools::person::WaitEnd) {
        self.with(|m| *m.waits.entry((kind.as_str(), end.as_str())).or_default() += 1);
    }

    /// A firing of the schedule `job` ended `outcome` (idle, skipped, posted, failed, stopped).
    pub fn firing(&self, job: &str, outcome: picogent_state::FiringOutcome) {
        self.with(|m| *m.firings.entry((label(job), outcome.as_str())).or_default() += 1);
    }

    /// Counts an event by its name and its fate, a word of the code.
    pub fn event(&self, name: EventName, fate: &'static str) {
        let name = name.as_str();
        self.with(|m| *m.events.entry((name.to_string(), label(fate))).or_default() += 1);
        let mut recent = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if recent.len() >= RECENT_EVENTS {
            recent.pop_front();
        }
        let at = time::OffsetDateTime::now_utc();
        recent.push_back(RecentEvent { at, name: name.to_string(), fate: label(fate) });
    }

    /// The newest events and their fate, newest first.
    pub fn recent_events(&self) -> Vec<RecentEvent> {
        let recent = self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        recent.iter().rev().cloned().collect()
    }

    pub fn run_finished(&self, status: RunStatus, duration: Duration) {
        self.with(|m| {
            *m.runs.entry(label(status.as_str())).or_default() += 1;
            m.run_seconds.observe(duration);
        });
    }

    /// Counts a tool call by its tool and outcome. Only a call that reached an offered tool is
    /// counted under the tool's name (see the module's docs).
    pub fn tool_call(&self, tool: &str, outcome: ToolCallOutcome) {
        let offered = match outcome {
            ToolCallOutcome::Ok
            | ToolCallOutcome::Error
            | ToolCallOutcome::InvalidArguments
            | ToolCallOutcome::Refused => true,
            ToolCallOutcome::UnknownTool | ToolCallOutcome::NotRun => false,
        };
        self.with(|m| {
            let mut tool = if offered { label(tool) } else { UNKNOWN.to_string() };
            let named = m.tool_calls.keys().any(|(known, _)| *known == tool);
            if !named {
                let names: std::collections::BTreeSet<&String> =
                    m.tool_calls.keys().map(|(known, _)| known).filter(|known| *known != UNKNOWN).collect();
                if names.len() >= MAX_TOOL_LABELS {
                    tool = UNKNOWN.to_string();
                }
            }
            *m.tool_calls.entry((tool, outcome.as_str().to_string())).or_default() += 1;
        });
    }

    /// A run's tokens, by kind: `prompt` (all input), `completion`, and of the input `cached`
    /// (read from the server's prompt cache) and `cache_write`.
    pub fn tokens(&self, usage: &picogent_llm::Usage) {
        self.with(|m| {
            *m.tokens.entry("prompt".into()).or_default() += usage.prompt_tokens;
            *m.tokens.entry("completion".into()).or_default() += usage.completion_tokens;
            *m.tokens.entry("cached".into()).or_default() += usage.cached_tokens;
            *m.tokens.entry("cache_write".into()).or_default() += usage.cache_write_tokens;
        });
    }

    pub fn gap(&self) {
        self.with(|m| m.gaps += 1);
    }

    pub fn stream_takeover(&self) {
        self.with(|m| m.stream_takeovers += 1);
    }

    pub fn cost(&self, cost: f64) {
        self.with(|m| m.cost += cost);
    }

    pub fn turn(&self, duration: Duration) {
        self.with(|m| m.turn_seconds.observe(duration));
    }

    pub fn reconnect(&self) {
        self.with(|m| m.reconnects += 1);
    }

    /// Counts one finished pruning pass and what it removed.
    pub fn pruned(&self, pruned: &picogent_state::Pruned) {
        self.with(|m| {
            m.prune_passes += 1;
            for (table, n) in pruned.by_table() {
                *m.pruned.entry(table).or_default() += n;
            }
        });
    }

    /// Counts the runs whose artifacts a pruning pass removed.
    pub fn pruned_artifacts(&self, runs: u64) {
        self.with(|m| m.pruned_artifact_runs += runs);
    }

    #[cfg(any(test, feature = "test-support"))]
    /// The count of events with this name and fate (for tests and status).
    pub fn event_count(&self, name: &str, fate: &str) -> u64 {
        self.with(|m| m.events.get(&(name.to_string(), label(fate))).copied().unwrap_or(0))
    }

    /// The Prometheus text exposition.
    pub fn render(&self, active_runs: usize, connected: bool, caught_up: bool) -> String {
        self.with(|m| {
            let mut out = String::new();
            let _ = writeln!(out, "# HELP picogent_events_total Events received, by name and what was done with them.");
            let _ = writeln!(out, "# TYPE picogent_events_total counter");
            for ((name, fate), n) in &m.events {
                let _ = writeln!(out, "picogent_events_total{{event=\"{name}\",fate=\"{fate}\"}} {n}");
            }
            let _ = writeln!(out, "# HELP picogent_runs_total Runs finished, by outcome.");
            let _ = writeln!(out, "# TYPE picogent_runs_total counter");
            for (outcome, n) in &m.runs {
                let _ = writeln!(out, "picogent_runs_total{{outcome=\"{outcome}\"}} {n}");
            }
            let _ = writeln!(out, "# HELP picogent_tool_calls_total Tool calls, by tool and outcome.");
            let _ = writeln!(out, "# TYPE picogent_tool_calls_total counter");
            for ((tool, outcome), n) in &m.tool_calls {
                let _ = writeln!(out, "picogent_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}} {n}");
            }
            let _ = writeln!(out, "# HELP picogent_model_tokens_total Model tokens, by kind (cached and cache_write are parts of prompt).");
            let _ = writeln!(out, "# TYPE picogent_model_tokens_total counter");
            for (kind, n) in &m.tokens {
                let _ = writeln!(out, "picogent_model_tokens_total{{kind=\"{kind}\"}} {n}");
            }
            let _ =
                writeln!(out, "# HELP picogent_model_cost_total What the model cost, at llm.price (0 without one).");
            let _ = writeln!(out, "# TYPE picogent_model_cost_total counter");
            let _ = writeln!(
                out,
                "# HELP picogent_event_gaps_total Events missing from the tracker's log, gone on without."
            );
            let _ = writeln!(out, "# TYPE picogent_event_gaps_total counter");
            let _ = writeln!(out, "picogent_event_gaps_total {}", m.gaps);
            let _ = writeln!(out, "# HELP picogent_stream_takeovers_total Times this process took the event stream's lease (replicas).");
            let _ = writeln!(out, "# TYPE picogent_stream_takeovers_total counter");
            let _ = writeln!(out, "picogent_stream_takeovers_total {}", m.stream_takeovers);
            let _ = writeln!(out, "picogent_model_cost_total {}", m.cost);
            for (name, help, summary) in [
                ("picogent_run_duration_seconds", "Run latency.", m.run_seconds),
                ("picogent_turn_duration_seconds", "Model turn latency.", m.turn_seconds),
            ] {
                let _ = writeln!(out, "# HELP {name} {help}");
                let _ = writeln!(out, "# TYPE {name} summary");
                let _ = writeln!(out, "{name}_sum {}", summary.sum_seconds);
                let _ = writeln!(out, "{name}_count {}", summary.count);
            }
            let _ = writeln!(out, "# HELP picogent_reconnects_total Event stream reconnections.");
            let _ = writeln!(out, "# TYPE picogent_reconnects_total counter");
            let _ = writeln!(out, "picogent_reconnects_total {}", m.reconnects);
            let _ = writeln!(out, "# HELP picogent_pruned_rows_total Rows the retention schedule removed from the state database, by table.");
            let _ = writeln!(out, "# TYPE picogent_pruned_rows_total counter");
            for (table, _) in picogent_state::Pruned::default().by_table() {
                let n = m.pruned.get(table).copied().unwrap_or(0);
                let _ = writeln!(out, "picogent_pruned_rows_total{{table=\"{table}\"}} {n}");
            }
            let _ = writeln!(out, "# HELP picogent_pruned_artifact_runs_total Runs whose artifacts the retention schedule removed.");
            let _ = writeln!(out, "# TYPE picogent_pruned_artifact_runs_total counter");
            let _ = writeln!(out, "picogent_pruned_artifact_runs_total {}", m.pruned_artifact_runs);
            let _ = writeln!(out, "# HELP picogent_prune_passes_total Pruning passes of the state database that finished.");
            let _ = writeln!(out, "# TYPE picogent_prune_passes_total counter");
            let _ = writeln!(out, "picogent_prune_passes_total {}", m.prune_passes);
            let _ = writeln!(out, "# HELP picogent_waits_total Waits of runs for a person, by what was asked and how they ended.");
            let _ = writeln!(out, "# TYPE picogent_waits_total counter");
            for kind in picogent_state::WaitKind::ALL {
                for end in picogent_tools::person::WaitEnd::ALL {
                    let n = m.waits.get(&(kind.as_str(), end.as_str())).copied().unwrap_or(0);
                    let _ = writeln!(out, "picogent_waits_total{{kind=\"{}\",end=\"{}\"}} {n}", kind.as_str(), end.as_str());
                }
            }
            let _ = writeln!(out, "# HELP picogent_schedule_firings_total Firings of the schedules, by schedule and how they ended.");
            let _ = writeln!(out, "# TYPE picogent_schedule_firings_total counter");
            for ((job, outcome), n) in &m.firings {
                let _ = writeln!(out, "picogent_schedule_firings_total{{schedule=\"{job}\",outcome=\"{outcome}\"}} {n}");
            }
            let _ = writeln!(out, "# HELP picogent_active_runs Runs in flight.");
            let _ = writeln!(out, "# TYPE picogent_active_runs gauge");
            let _ = writeln!(out, "picogent_active_runs {active_runs}");
            let _ = writeln!(out, "# HELP picogent_connected Whether the event stream is connected (1) and caught up.");
            let _ = writeln!(out, "# TYPE picogent_connected gauge");
            let _ = writeln!(out, "picogent_connected {}", u8::from(connected));
            let _ = writeln!(out, "picogent_caught_up {}", u8::from(caught_up));
            out
        })
    }
}

/// The gauge of the runs waiting for a person now (they hold no slot), from the status board.
pub fn render_awaiting_input(waiting: usize) -> String {
    format!(
        "# HELP picogent_runs_awaiting_input Runs waiting for a person now (holding no slot).\n\
         # TYPE picogent_runs_awaiting_input gauge\npicogent_runs_awaiting_input {waiting}\n"
    )
}

/// The gauges of what is held now: the writes to the tracker held at this copy's presence gate
/// (it cannot confirm that it is the one active copy of the agent), and on each external MCP
/// server (named in `mcp_servers`) the tool calls waiting for the call in flight to end.
pub fn render_held(writes_held: usize, mcp_servers: &[(&str, usize)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP picogent_tracker_writes_held Writes to the tracker held now at this copy's presence gate, until it confirms that it is the one active copy."
    );
    let _ = writeln!(out, "# TYPE picogent_tracker_writes_held gauge");
    let _ = writeln!(out, "picogent_tracker_writes_held {writes_held}");
    let _ = writeln!(
        out,
        "# HELP picogent_mcp_calls_waiting Tool calls waiting now for their turn on an MCP server that takes one call at a time (2025-11-25)."
    );
    let _ = writeln!(out, "# TYPE picogent_mcp_calls_waiting gauge");
    for (server, waiting) in mcp_servers {
        let _ = writeln!(out, "picogent_mcp_calls_waiting{{server=\"{}\"}} {waiting}", label(server));
    }
    out
}

/// The per-replica gauges, labelled with the replica's id (which is made of hex digits and a
/// host name cleaned by [`label`]).
pub fn render_replica(view: &crate::status::ReplicaView) -> String {
    let id = label(&view.id);
    let mut out = String::new();
    let _ = writeln!(out, "# HELP picogent_replica_holds_stream Whether this replica holds the event stream.");
    let _ = writeln!(out, "# TYPE picogent_replica_holds_stream gauge");
    let _ = writeln!(out, "picogent_replica_holds_stream{{replica=\"{id}\"}} {}", u8::from(view.holds_stream));
    let _ = writeln!(out, "# HELP picogent_replica_runs Runs this replica holds, and its slots.");
    let _ = writeln!(out, "# TYPE picogent_replica_runs gauge");
    let _ = writeln!(out, "picogent_replica_runs{{replica=\"{id}\"}} {}", view.runs);
    let _ = writeln!(out, "picogent_replica_slots{{replica=\"{id}\"}} {}", view.slots);
    let _ = writeln!(out, "# HELP picogent_replicas_seen Other replicas whose heartbeat is recent.");
    let _ = writeln!(out, "# TYPE picogent_replicas_seen gauge");
    let _ = writeln!(out, "picogent_replicas_seen{{replica=\"{id}\"}} {}", view.others.len());
    out
}

/// The run inspector's events page reads the events kept here.
impl picogent_inspector::EventLog for Metrics {
    fn recent_events(&self) -> Vec<RecentEvent> {
        Metrics::recent_events(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_safe_labels() {
        let metrics = Metrics::default();
        metrics.event(EventName::MessageNew, "answer");
        metrics.event(EventName::MessageNew, "answer");
        metrics.event(EventName::Unknown, "x");
        metrics.tool_call("get_task", ToolCallOutcome::Ok);
        metrics.run_finished(RunStatus::Completed, Duration::from_millis(1500));
        let text = metrics.render(1, true, false);
        assert!(text.contains("picogent_events_total{event=\"message.new\",fate=\"answer\"} 2"), "{text}");
        assert!(text.contains("picogent_events_total{event=\"unknown\",fate=\"x\"} 1"), "{text}");
        assert!(text.contains("picogent_run_duration_seconds_count 1"), "{text}");
        assert!(text.contains("picogent_active_runs 1"), "{text}");
        assert_eq!(metrics.event_count("message.new", "answer"), 2);
    }

    /// The series of one metric in the text.
    fn series(text: &str, name: &str) -> usize {
        text.lines().filter(|line| line.starts_with(&format!("{name}{{"))).count()
    }

    #[test]
    fn labels_come_from_bounded_sets_whatever_names_arrive() {
        let metrics = Metrics::default();
        metrics.tool_call("get_task", ToolCallOutcome::Ok);
        metrics.tool_call("get_task", ToolCallOutcome::Refused);
        for n in 0..300 {
            metrics.tool_call(&format!("invented_{n}"), ToolCallOutcome::UnknownTool);
            metrics.tool_call(&format!("never_run_{n}"), ToolCallOutcome::NotRun);
        }
        let text = metrics.render(0, true, true);
        assert_eq!(series(&text, "picogent_tool_calls_total"), 4, "{text}");
        assert!(text.contains("picogent_tool_calls_total{tool=\"unknown\",outcome=\"unknown_tool\"} 300"), "{text}");
        assert!(text.contains("picogent_tool_calls_total{tool=\"unknown\",outcome=\"not_run\"} 300"), "{text}");
        assert!(text.contains("picogent_tool_calls_total{tool=\"get_task\",outcome=\"refused\"} 1"), "{text}");

        // Offered tools past the cap (a server listing thousands) count under `unknown` too.
        for n in 0..MAX_TOOL_LABELS + 50 {
            metrics.tool_call(&format!("mcp__big__tool_{n}"), ToolCallOutcome::Ok);
        }
        let text = metrics.render(0, true, true);
        let named = text
            .lines()
            .filter(|line| line.starts_with("picogent_tool_calls_total{") && !line.contains("tool=\"unknown\""))
            .filter_map(|line| line.split('"').nth(1))
            .collect::<std::collections::BTreeSet<_>>();
        assert_eq!(named.len(), MAX_TOOL_LABELS, "{text}");
        assert!(named.contains("get_task"), "names counted before stay");
    }

    #[test]
    fn what_is_held_now_is_shown_for_the_gate_and_each_mcp_server() {
        let text = render_held(2, &[("elicit", 1), ("files", 0)]);
        assert!(text.contains("picogent_tracker_writes_held 2\n"), "{text}");
        assert!(text.contains("picogent_mcp_calls_waiting{server=\"elicit\"} 1\n"), "{text}");
        assert!(text.contains("picogent_mcp_calls_waiting{server=\"files\"} 0\n"), "{text}");
    }

    #[test]
    fn pruned_rows_add_up_by_table_and_every_table_is_shown() {
        let metrics = Metrics::default();
        let text = metrics.render(0, true, true);
        assert!(text.contains("picogent_pruned_rows_total{table=\"sessions\"} 0"), "{text}");
        assert!(text.contains("picogent_prune_passes_total 0"), "{text}");
        let pass = picogent_state::Pruned { events: 3, sessions: 1, ..Default::default() };
        metrics.pruned(&pass);
        metrics.pruned(&pass);
        let text = metrics.render(0, true, true);
        assert!(text.contains("picogent_pruned_rows_total{table=\"processed_events\"} 6"), "{text}");
        assert!(text.contains("picogent_pruned_rows_total{table=\"sessions\"} 2"), "{text}");
        assert!(text.contains("picogent_pruned_rows_total{table=\"runs\"} 0"), "{text}");
        assert!(text.contains("picogent_prune_passes_total 2"), "{text}");
    }
}
