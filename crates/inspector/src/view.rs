//! What the inspector and `picogent runs` show, built from the state database and the running
//! agent's counters: the same view models feed the HTML templates and the terminal.

use serde::Serialize;
use time::OffsetDateTime;

use crate::RecentEvent;
use crate::record::StoredRun;
use crate::settings::Settings;
use picogent_llm::Message;
use picogent_state::{RunRow, RunStatus};
use picogent_tracker::session::SessionKey;

/// One line of the runs list.
#[derive(Debug, Clone, Serialize)]
pub struct RunLine {
    pub id: String,
    pub short_id: String,
    pub trigger: String,
    /// The trigger's first word (`task.assigned`, `message.new`, `manual`, …), for the filter.
    pub trigger_kind: String,
    /// A chat run's message, its first words: what a person knows the run by (a message's id
    /// means nothing to them). `None` for other runs, and for runs stored before it was kept.
    pub words: Option<String>,
    /// Where it was asked, on the tracker (the reference board's page), if anywhere.
    pub link: Option<String>,
    pub status: &'static str,
    pub turns: u32,
    pub tool_calls: u32,
    pub tokens: u64,
    pub cost: Option<String>,
    pub started_at: String,
    pub duration: String,
    /// What it achieved or why it stopped, on one line.
    pub outcome: String,
}

/// The first word of a trigger.
pub fn trigger_kind(trigger: &str) -> &str {
    trigger.split_whitespace().next().unwrap_or("")
}

pub fn summary(run: &RunRow, settings: &Settings) -> RunLine {
    let now = OffsetDateTime::now_utc();
    let duration = match run.duration() {
        Some(duration) => seconds(duration.as_secs_f64()),
        None => format!("{} so far", seconds((now - run.started_at).as_seconds_f64().max(0.0))),
    };
    let link = match &run.session_key {
        SessionKey::Task(id) => Some(settings.task_link(id)),
        SessionKey::Thread(id) => Some(settings.message_link(id)),
        SessionKey::Prompt(_) | SessionKey::Schedule(_) => None,
    };
    let words = match run.session_key {
        SessionKey::Thread(_) => message_words(run),
        _ => None,
    };
    RunLine {
        id: run.id.clone(),
        short_id: run.id.chars().take(8).collect(),
        trigger: run.trigger.clone(),
        trigger_kind: trigger_kind(&run.trigger).to_string(),
        words,
        link,
        status: run.shown_status(),
        turns: run.turns,
        tool_calls: run.tool_calls,
        tokens: run.prompt_tokens + run.completion_tokens,
        cost: run.cost.map(|cost| format!("{cost:.4}")),
        started_at: rfc3339(run.started_at),
        duration,
        outcome: crate::record::one_line(
            &match &run.waiting {
                Some(waiting) => waiting_line(waiting),
                None => run
                    .outcome
                    .as_deref()
                    .or(run.error.as_deref())
                    .unwrap_or(if run.status == RunStatus::Running { "running" } else { "" })
                    .to_string(),
            },
            160,
        ),
    }
}

/// What a run waits for, in a line: "waits for @alice (question): which colour?"; with the
/// replies it read and passed over, if any: "waits for @alice (approval; passed over 1 reply,
/// the last by @bob): may I …".
pub fn waiting_line(waiting: &picogent_state::Waiting) -> String {
    let who = waiting.person.as_ref().map_or_else(|| "a person".to_string(), |person| format!("@{person}"));
    let passed = waiting.passed_over.as_ref().map_or_else(String::new, |passed| {
        let replies = if passed.count == 1 { "reply" } else { "replies" };
        format!("; passed over {} {replies}, the last by @{}", passed.count, passed.last_by)
    });
    format!("waits for {who} ({}{passed}): {}", waiting.kind.as_str(), waiting.what)
}

/// The words of the message a chat run answers, as its start recorded them (the record is
/// already parsed with the row: only this one field is looked at, not the whole transcript).
fn message_words(run: &RunRow) -> Option<String> {
    let words = run.record.as_ref()?.get("message_words")?.as_str()?;
    Some(crate::record::one_line(words, WORDS_SHOWN)).filter(|words| !words.is_empty())
}

/// How many characters of a chat run's message name it.
const WORDS_SHOWN: usize = 60;

/// What the runs list names a run by: a chat run's words, quoted, after its trigger's first
/// word (`message.new "what is on the board…"`); otherwise its trigger.
pub fn run_name(run: &RunLine) -> String {
    match &run.words {
        Some(words) => format!("{} \"{words}\"", run.trigger_kind),
        None => run.trigger.clone(),
    }
}

fn seconds(value: f64) -> String {
    format!("{value:.1} s")
}

pub fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// [`rfc3339`] of a time in Unix milliseconds, as the state keeps times; `None` out of range.
pub fn rfc3339_ms(ms: i64) -> Option<String> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok().map(rfc3339)
}

/// The filters of the runs list (`?status=…&trigger=…`); empty means any.
#[derive(Debug, Clone, Default, serde::Deserialize, Serialize)]
pub struct RunFilter {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub trigger: String,
}

impl RunFilter {
    pub fn keeps(&self, run: &RunRow) -> bool {
        (self.status.is_empty() || run.shown_status() == self.status)
            && (self.trigger.is_empty() || trigger_kind(&run.trigger) == self.trigger)
    }
}

/// One run in full.
#[derive(Debug, Clone, Serialize)]
pub struct RunDetail {
    pub summary: RunLine,
    pub session_key: SessionKey,
    pub system_prompt: Option<String>,
    pub prompt: Option<String>,
    /// Messages of the session's conversation before this run's prompt.
    pub earlier_messages: usize,
    pub transcript: Vec<Entry>,
    /// The model's final text on a completed run; why it stopped otherwise.
    pub final_message: Option<String>,
    pub detail: Option<String>,
    pub error: Option<String>,
    /// The notice a failed or stopped run left where it was asked.
    pub notice: Option<String>,
    pub budgets: Vec<Budget>,
    /// How much of its prompt the model server read from its cache, when it read any.
    pub prompt_cache: Option<String>,
    pub context_trims: Vec<String>,
    /// Its coding agent's output and work (`workspaces`), if it delegated any.
    pub coding: Option<CodingView>,
    /// What it waits for from a person, while it waits.
    pub waiting: Option<WaitingView>,
    /// A sub-task's run: the key of its tree's parent, for a link to `/tree/{key}`.
    pub tree: Option<String>,
    /// A run asked to break its task down: its task's key, for a link to the tree it makes.
    pub breaks_down: Option<String>,
}

/// What a waiting run waits for, for its page.
#[derive(Debug, Clone, Serialize)]
pub struct WaitingView {
    pub line: String,
    pub kind: &'static str,
    pub since: String,
    pub until: String,
}

impl WaitingView {
    fn new(waiting: &picogent_state::Waiting) -> Option<WaitingView> {
        let at = rfc3339_ms;
        Some(WaitingView {
            line: waiting_line(waiting),
            kind: waiting.kind.as_str(),
            since: at(waiting.since_ms)?,
            until: at(waiting.until_ms)?,
        })
    }
}

/// A run's coding agent: what it printed (live while it runs), the hooks around it, and the
/// branch, commit and diff it left.
#[derive(Debug, Clone, Serialize)]
pub struct CodingView {
    /// The output comes from the running process, not the stored record.
    pub live: bool,
    pub log: String,
    pub hooks: Vec<String>,
    pub repository: Option<String>,
    pub branch: Option<String>,
    pub commit: Option<String>,
    pub pushed: bool,
    pub diff: Option<String>,
    pub files: Vec<String>,
    /// A link to the commit or branch, only when it is an `http(s)` URL.
    pub link: Option<String>,
}

impl CodingView {
    pub fn new((record, live): (picogent_workspace::CodingRecord, bool)) -> CodingView {
        let hooks = record.hooks.iter().map(|hook| format!("{} ({} ms)", hook.describe(), hook.duration_ms)).collect();
        let work = record.work;
        let link = work
            .as_ref()
            .and_then(|work| work.link.clone())
            .filter(|link| link.starts_with("https://") || link.starts_with("http://"));
        CodingView {
            live,
            log: record.log,
            hooks,
            repository: work.as_ref().map(|work| work.repository.clone()),
            branch: work.as_ref().map(|work| work.branch.clone()),
            commit: work.as_ref().and_then(|work| work.commit.clone()),
            pushed: work.as_ref().is_some_and(|work| work.pushed),
            diff: work.as_ref().filter(|work| work.commit.is_some()).map(|work| work.diff.describe()),
            files: work.map(|work| work.diff.files).unwrap_or_default(),
            link,
        }
    }
}

/// One step of a transcript: a model turn, or an input that joined while the run went on.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// `turn` or `input`.
    pub kind: &'static str,
    pub number: usize,
    /// The model's words (a turn), or the input's text.
    pub text: Option<String>,
    pub refusal: Option<String>,
    pub calls: Vec<Call>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
    pub result: Option<String>,
    pub is_error: bool,
    /// What the loop recorded for it (`ok`, `error`, `refused`, …).
    pub outcome: Option<&'static str>,
}

/// One budget of a run: what it used of its limit.
#[derive(Debug, Clone, Serialize)]
pub struct Budget {
    pub name: &'static str,
    pub used: u64,
    pub limit: u64,
    pub percent: u64,
}

/// The run's detail; `live` is the coding work of the runs going on in this process, if any.
pub fn detail(run: &RunRow, settings: &Settings, live: Option<&picogent_workspace::CodingRuns>) -> RunDetail {
    let stored = StoredRun::of(run);
    let record = stored.as_ref().and_then(|stored| stored.record.clone());
    let transcript = stored.as_ref().map(transcript).unwrap_or_default();
    let limits = &settings.limits;
    let wall_ms = run.duration().map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    // A running run's counts are in its last checkpoint; the row has them once it ends.
    let (turns, tool_calls, tokens) = match (&record, run.status) {
        (Some(record), RunStatus::Running) => (record.turns, record.tool_calls, record.total_tokens()),
        _ => (run.turns, run.tool_calls, run.prompt_tokens + run.completion_tokens),
    };
    let budgets = vec![
        budget("turns", u64::from(turns), u64::from(limits.max_turns)),
        budget("tool calls", u64::from(tool_calls), u64::from(limits.max_tool_calls)),
        budget("tokens", tokens, limits.max_tokens_per_run),
        budget("wall clock (ms)", record.as_ref().map_or(wall_ms, |r| r.wall_time_ms), limits.run_timeout_ms),
    ];
    let failed = matches!(run.status, RunStatus::Failed | RunStatus::Stopped);
    RunDetail {
        summary: summary(run, settings),
        session_key: run.session_key.clone(),
        system_prompt: stored.as_ref().and_then(|stored| stored.start.system_prompt.clone()),
        prompt: stored.as_ref().map(|stored| stored.start.prompt.clone()).or_else(|| start_prompt(run)),
        earlier_messages: stored.as_ref().map_or(0, |stored| stored.start.history_len),
        transcript,
        final_message: record.as_ref().map(|r| r.final_message.clone()).filter(|text| !text.is_empty()),
        detail: record.as_ref().and_then(|r| r.detail.clone()),
        error: run.error.clone(),
        notice: if failed { run.outcome.clone() } else { None },
        budgets,
        prompt_cache: record.as_ref().and_then(prompt_cache_line),
        context_trims: record.map(|r| r.context_trims).unwrap_or_default(),
        coding: crate::record::coding_of(live, run).map(CodingView::new),
        waiting: run.waiting.as_ref().and_then(WaitingView::new),
        // A start alone reads as a stored run too (its other fields default).
        tree: stored.as_ref().and_then(|stored| stored.start.parent.clone()),
        breaks_down: stored.as_ref().and_then(|stored| stored.start.breaks_down.clone()),
    }
}

/// `9,000 of 10,749 prompt tokens read from the cache (83%), 1,200 written to it`.
fn prompt_cache_line(record: &picogent_agent::RunRecord) -> Option<String> {
    if record.cached_tokens == 0 && record.cache_write_tokens == 0 {
        return None;
    }
    let share = record.cached_tokens.saturating_mul(100).checked_div(record.prompt_tokens).unwrap_or(0);
    let mut line = format!(
        "{} of {} prompt tokens read from the cache ({share}%)",
        picogent_notices::thousands(record.cached_tokens),
        picogent_notices::thousands(record.prompt_tokens)
    );
    if record.cache_write_tokens > 0 {
        line.push_str(&format!(", {} written to it", picogent_notices::thousands(record.cache_write_tokens)));
    }
    Some(line)
}

/// The prompt of a run that has recorded its start but not its end.
fn start_prompt(run: &RunRow) -> Option<String> {
    let start: crate::record::RunStart = serde_json::from_value(run.record.clone()?).ok()?;
    Some(start.prompt)
}

fn budget(name: &'static str, used: u64, limit: u64) -> Budget {
    let percent = used.saturating_mul(100).checked_div(limit).unwrap_or(0).min(100);
    Budget { name, used, limit, percent }
}

/// The run's own part of the conversation, after its prompt: turns with their calls and
/// results, and the inputs that joined as steering.
fn transcript(stored: &StoredRun) -> Vec<Entry> {
    let outcomes: std::collections::HashMap<&str, &'static str> = stored
        .record
        .iter()
        .flat_map(|record| record.calls.iter())
        .map(|call| (call.id.as_str(), call.outcome.as_str()))
        .collect();
    let mut entries: Vec<Entry> = Vec::new();
    let mut turns = 0;
    for message in stored.conversation.iter().skip(stored.start.history_len + 1) {
        match message {
            Message::Assistant { content, tool_calls, refusal } => {
                turns += 1;
                let calls = tool_calls
                    .iter()
                    .map(|call| Call {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: pretty_json(&call.arguments),
                        result: None,
                        is_error: false,
                        outcome: outcomes.get(call.id.as_str()).copied(),
                    })
                    .collect();
                entries.push(Entry {
                    kind: "turn",
                    number: turns,
                    text: content.clone(),
                    refusal: refusal.clone(),
                    calls,
                });
            }
            Message::Tool { tool_call_id, content, is_error, .. } => {
                let call = entries
                    .iter_mut()
                    .rev()
                    .flat_map(|entry| entry.calls.iter_mut())
                    .find(|call| &call.id == tool_call_id);
                if let Some(call) = call {
                    call.result = Some(content.clone());
                    call.is_error = *is_error;
                }
            }
            Message::User { content } => {
                entries.push(Entry {
                    kind: "input",
                    number: turns,
                    text: Some(content.clone()),
                    refusal: None,
                    calls: Vec::new(),
                });
            }
            Message::System { .. } => {}
        }
    }
    entries
}

fn pretty_json(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| text.to_string())
}

/// One recent event as the events page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EventLine {
    pub at: String,
    pub name: String,
    pub fate: String,
    /// `acted`, `ignored` or `failed`.
    pub verdict: &'static str,
    pub why: &'static str,
}

pub fn event_line(event: &RecentEvent) -> EventLine {
    let (verdict, why) = fate_meaning(&event.fate);
    EventLine { at: rfc3339(event.at), name: event.name.clone(), fate: event.fate.clone(), verdict, why }
}

/// What a fate word of the router means, in words.
pub fn fate_meaning(fate: &str) -> (&'static str, &'static str) {
    match fate {
        "run" | "answer" => ("acted", "started a run"),
        "steered" => ("acted", "joined the running run of its conversation as steering"),
        "reconciled" => ("acted", "found open by reconciliation and worked"),
        "stop" => ("acted", "stopped the conversation's run"),
        "duplicate" => ("ignored", "a duplicate: this event was handled before"),
        "own_message" => ("ignored", "its own message"),
        "other_bot" => ("ignored", "written by a bot that is not allowed (router.allowed_bots)"),
        "not_addressed" => ("ignored", "not mentioned, and not in a thread it answers in"),
        "chat_off" => ("ignored", "listening to chat is off (chat_listen)"),
        "reply_cap" => ("ignored", "the thread's reply cap for the hour was reached"),
        "already_worked" => ("ignored", "a run since the assignment already covers it"),
        "spend_guard" => ("ignored", "the day's token or cost budget is spent"),
        "ignored" => ("ignored", "nothing for the agent to do with it"),
        "state_error" => ("failed", "the state database refused to record it"),
        _ => ("ignored", "see the router for this fate"),
    }
}

/// One day of spend.
#[derive(Debug, Clone, Serialize)]
pub struct SpendDay {
    pub day: String,
    pub tokens: u64,
    pub cost: Option<String>,
    /// The bar's height and top in the chart's units (0..=100, 100 at the top).
    pub height: u64,
    pub top: u64,
    pub x: usize,
}

/// The chart of `days` (oldest first) against `budget` tokens a day.
pub fn spend_chart(days: Vec<(time::Date, picogent_state::Spend)>, budget: u64, priced: bool) -> (Vec<SpendDay>, u64) {
    let scale = days.iter().map(|(_, spend)| spend.tokens).max().unwrap_or(0).max(budget).max(1);
    let bars = days
        .into_iter()
        .enumerate()
        .map(|(index, (day, spend))| {
            // A day with any spend shows, however small it is beside the budget.
            let height = (spend.tokens.saturating_mul(100) / scale).max(u64::from(spend.tokens > 0) * 2);
            SpendDay {
                day: day.to_string(),
                tokens: spend.tokens,
                cost: priced.then(|| format!("{:.4}", spend.cost)),
                height,
                top: 100 - height,
                x: index * 40 + 40,
            }
        })
        .collect();
    (bars, 100 - budget.saturating_mul(100) / scale)
}

/// How the agent started and what its first reconciliation did, as the health page says it.
#[derive(Debug, Clone, Serialize)]
pub struct StartupView {
    /// Where the event stream began, in words.
    pub began: String,
    /// `None` until the first reconciliation has run.
    pub reconciliation: Option<ReconcileView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReconcileView {
    pub tasks_open: u64,
    pub tasks_worked: u64,
    pub tasks_skipped: Vec<Skipped>,
    /// `startup.answer_mentions_since`.
    pub mentions_window: String,
    pub mentions_answered: u64,
    pub mentions_skipped: Vec<Skipped>,
    /// What could not be read, in words.
    pub errors: Vec<String>,
}

/// How many were left alone for one reason, and the reason in words.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub reason: String,
    pub why: String,
    pub count: u64,
}

pub fn startup_view(report: &crate::startup::StartupReport) -> StartupView {
    use picogent_tracker::stream::StartMode;
    let began = match report.mode {
        StartMode::Head => match report.skipped_events {
            0 => format!("a first start: at the tracker's head (seq {}), nothing before it", report.from_seq),
            skipped => format!(
                "a first start: at the tracker's head (seq {}), {skipped} past events not acted on",
                report.from_seq
            ),
        },
        StartMode::Resume => format!("where it stopped: after seq {}, what came since replayed", report.from_seq),
        StartMode::FromStart => "from the start of the tracker's log (--from-start): every event replayed".to_string(),
    };
    let skipped = |counts: &std::collections::BTreeMap<String, u64>| -> Vec<Skipped> {
        counts
            .iter()
            .map(|(reason, count)| Skipped { reason: reason.clone(), why: skip_meaning(reason), count: *count })
            .collect()
    };
    let reconciliation = report.reconciliation.as_ref().map(|found| ReconcileView {
        tasks_open: found.tasks.open,
        tasks_worked: found.tasks.worked,
        tasks_skipped: skipped(&found.tasks.skipped),
        mentions_window: found.mentions.window.clone(),
        mentions_answered: found.mentions.answered,
        mentions_skipped: skipped(&found.mentions.skipped),
        errors: found.errors.clone(),
    });
    StartupView { began, reconciliation }
}

/// Why reconciliation left a task or a mention alone, in words; a reason this list does not
/// know reads as its words (`picogent_web::readable::status_label`).
fn skip_meaning(reason: &str) -> String {
    let known = match reason {
        "summarised" => "the board shows the agent's summary after the task's last change",
        "finished_run" => "a finished run covers it",
        "unfinished_run" => "an unfinished run of it is resumed instead",
        "running" => "a run of it is going on",
        "board_error" => "the board could not be read for it",
        "state_error" => "the state database could not be read for it",
        "refused" => "refused: the day's budget is spent, or the agent is stopping",
        "not_listening" => "task_listen is none: assignments are not worked",
        "old" => "older than the window",
        "handled" => "answered on the board already",
        "seen" => "handled before, as the state database records",
        other => match fate_meaning(other) {
            (_, "see the router for this fate") => return picogent_web::readable::status_label(other),
            (_, why) => why,
        },
    };
    known.to_string()
}
