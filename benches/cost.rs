//! The cost of a task, measured, for `bench/run.sh`: what one task run sends the model and what
//! that costs at list prices, on both model APIs picogent speaks (`llm.api` `openai` and
//! `anthropic`), with the prompt cache counted and without it. Two tasks, each on both APIs:
//!
//! - the demo's task run (`picogent demo`: the seeded reference board, the offline planner, the
//!   agent), as `Demo::play` plays it;
//! - a longer scripted task: 30 tasks with long descriptions on the board, and a script of 12
//!   turns (11 tool calls with large results, then the answer) the offline model replays, so the
//!   conversation grows as a real one does and each turn resends all of it.
//!
//! Every figure is read from the run's own record (`RunRecord`: turns, prompt tokens, of them
//! cached and cache-written, completion tokens), as counted by the offline model endpoint, whose
//! prompt-cache simulation stands in for the real servers' caches. Prices are the list prices
//! written below, not read from anywhere. Each figure is shown beside the same figure in the last
//! commit's `bench/cost.json` (`git show HEAD:bench/cost.json`).
//!
//! Writes one JSON document to `BENCH_COST_OUT` (default `target/bench-results/cost.json`) for
//! `bench/report.py`; with `BENCH_COST_SAVE=1` also to `bench/cost.json`, the baseline to commit.
//! Exits 1, after printing, when the demo task's cached share of prompt tokens on the anthropic
//! API is not above [`CACHED_SHARE_TARGET`]. In process, loopback only; no timed assertions.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use picogent::agent::RunRecord;
use picogent::config::{Api, Config, Price};
use picogent::llm::{Message, Usage, count_tools_json_tokens, estimate_prompt_tokens, message_tokens};
use picogent::notices::thousands;
use picogent::offline_model::OfflineModelOptions;
use picogent::offline_model::script::Script;
use picogent::runtime::record::StoredRun;
use picogent::runtime::{AgentHandle, AgentOptions};
use picogent::secret::Secret;
use picogent::tools::{Catalog, TASK_RUN_TOOLS};
use picogent::tracker::model::{CreateTask, SendMessage, TaskOut};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The target: more than this share of the demo task's prompt tokens read from the cache,
/// on the anthropic API.
const CACHED_SHARE_TARGET: f64 = 0.60;

/// When the prices below were the providers' list prices.
const PRICES_AS_OF: &str = "list prices as of 2025, written into this bench (not read from any price list)";

/// How long one task may take before the bench gives up on it (not a figure: a hang guard).
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The APIs measured, in the order they are shown.
const APIS: [Api; 2] = [Api::Openai, Api::Anthropic];

/// The model a run on `api` is priced as, and its list price per million tokens.
fn list_price(api: Api) -> (&'static str, Price) {
    match api {
        // gpt-4.1: input $2.00, cached input $0.50, output $8.00; OpenAI charges nothing to write.
        Api::Openai => (
            "OpenAI gpt-4.1",
            Price {
                input_per_million: 2.00,
                output_per_million: 8.00,
                cache_read_per_million: Some(0.50),
                cache_write_per_million: None,
            },
        ),
        // Claude Sonnet 4.5: input $3.00, cache read $0.30, cache write (5 minutes) $3.75, output $15.00.
        Api::Anthropic => (
            "Anthropic Claude Sonnet 4.5",
            Price {
                input_per_million: 3.00,
                output_per_million: 15.00,
                cache_read_per_million: Some(0.30),
                cache_write_per_million: Some(3.75),
            },
        ),
    }
}

/// The two tasks measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    Demo,
    Long,
}

impl Task {
    fn id(self) -> &'static str {
        match self {
            Task::Demo => "demo",
            Task::Long => "long",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Task::Demo => "demo task",
            Task::Long => "long task (12 turns)",
        }
    }
}

/// One (task, API) row: the run's figures and their cost, as `bench/cost.json` keeps them.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    task: String,
    task_label: String,
    api: String,
    turns: u32,
    prompt_tokens: u64,
    cached_tokens: u64,
    cache_write_tokens: u64,
    completion_tokens: u64,
    /// `cached_tokens / prompt_tokens`.
    cached_share: f64,
    /// The model whose list price it is priced at.
    priced_as: String,
    /// Every prompt token at the input rate, as if nothing were cached (nor written).
    cost_without_cache: f64,
    /// The cached and written tokens at their own rates.
    cost_with_cache: f64,
}

impl Row {
    fn of(task: Task, api: Api, record: &RunRecord) -> Row {
        let (model, price) = list_price(api);
        let usage = record.usage();
        let uncached = Usage { cached_tokens: 0, cache_write_tokens: 0, ..usage };
        Row {
            task: task.id().to_string(),
            task_label: task.label().to_string(),
            api: api.as_str().to_string(),
            turns: record.turns,
            prompt_tokens: record.prompt_tokens,
            cached_tokens: record.cached_tokens,
            cache_write_tokens: record.cache_write_tokens,
            completion_tokens: record.completion_tokens,
            cached_share: share(record.cached_tokens, record.prompt_tokens),
            priced_as: model.to_string(),
            cost_without_cache: price.cost(&uncached),
            cost_with_cache: price.cost(&usage),
        }
    }
}

/// What one measured run leaves: its row, and its stored run for the per-turn breakdown.
struct Measured {
    row: Row,
    stored: StoredRun,
    record: RunRecord,
}

fn main() {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let measured: Vec<Measured> = runtime.block_on(async {
        let mut measured = Vec::new();
        for api in APIS {
            measured.push(demo_task(api).await);
            eprintln!("[cost] demo task on {}: done", api.as_str());
        }
        for api in APIS {
            measured.push(long_task(api).await);
            eprintln!("[cost] long task on {}: done", api.as_str());
        }
        measured
    });
    let rows: Vec<Row> = measured.iter().map(|m| m.row.clone()).collect();
    let last_commit = last_commit_rows();

    println!("picogent cost per task: the offline model endpoint's token counts, priced at list prices");
    println!("prices: {PRICES_AS_OF}, per million tokens:");
    for api in APIS {
        let (model, price) = list_price(api);
        println!("  llm.api {:<9} priced as {model}: {}", api.as_str(), describe_price(&price));
    }
    println!(
        "cost without caching: every prompt token at the input rate; with caching: cached and written tokens at theirs"
    );
    println!();
    print_table(&rows, last_commit.as_deref());
    println!();
    print_prompt_parts(&measured);

    let anthropic_demo = rows.iter().find(|r| r.task == Task::Demo.id() && r.api == Api::Anthropic.as_str()).unwrap();
    let met = anthropic_demo.cached_share > CACHED_SHARE_TARGET;
    println!();
    println!(
        "target: cached share of the demo task's prompt tokens on the anthropic API {:.1}% ({} of {}), \
         target above {:.0}%: {}",
        anthropic_demo.cached_share * 100.0,
        thousands(anthropic_demo.cached_tokens),
        thousands(anthropic_demo.prompt_tokens),
        CACHED_SHARE_TARGET * 100.0,
        if met { "met" } else { "MISSED" }
    );
    if anthropic_demo.cached_tokens == 0 {
        println!("  (no token was read from the cache: the offline model endpoint reported none)");
    }

    let document = json!({
        "prices_as_of": PRICES_AS_OF,
        "prices": APIS.iter().map(|api| {
            let (model, price) = list_price(*api);
            (api.as_str().to_string(), json!({"model": model, "per_million": price}))
        }).collect::<serde_json::Map<String, Value>>(),
        "rows": rows,
        "long_task_turns": measured.iter().filter(|m| m.row.task == Task::Long.id()).map(|m| {
            (m.row.api.clone(), json!(turn_prompts(&m.stored, &m.record).per_turn))
        }).collect::<serde_json::Map<String, Value>>(),
        "tool_definitions": tool_definitions(),
        "run_to_run": RUN_TO_RUN,
        "target": {
            "what": "cached share of the demo task's prompt tokens, anthropic API",
            "cached_share": anthropic_demo.cached_share,
            "above": CACHED_SHARE_TARGET,
            "met": met,
        },
    });
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::var("BENCH_COST_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| manifest.join("target/bench-results/cost.json"));
    // The results file also carries the last commit's rows, for bench/report.py; the baseline
    // saved for committing does not, so it changes only when the figures do.
    let mut results = document.clone();
    results["last_commit"] = json!(last_commit);
    write_json(&out, &results);
    if std::env::var("BENCH_COST_SAVE").is_ok_and(|value| value == "1") {
        write_json(&manifest.join("bench/cost.json"), &document);
    }
    eprintln!("[cost] done in {:.1} s", started.elapsed().as_secs_f64());
    if !met {
        std::process::exit(1);
    }
}

// ---- the demo's task run ----

/// Plays the demo with the agent on `api` and reads the task run's record.
async fn demo_task(api: Api) -> Measured {
    let demo = picogent::demo::start_for(None, false, api).await.unwrap();
    let outcome = demo.play(RUN_TIMEOUT).await.unwrap();
    let measured = task_run(&demo.agent, &outcome.task, Task::Demo, api).await;
    demo.shutdown().await.unwrap();
    measured
}

/// The one run of `task`'s session, ended, as a row.
async fn task_run(agent: &AgentHandle, task: &TaskOut, which: Task, api: Api) -> Measured {
    let session = format!("task:{}", task.id);
    let runs: Vec<_> = agent
        .state
        .list_runs(100)
        .await
        .unwrap()
        .into_iter()
        .filter(|run| run.session_key.to_string() == session)
        .collect();
    assert_eq!(
        runs.len(),
        1,
        "{} on {}: expected one run of {session}, found {}",
        which.label(),
        api.as_str(),
        runs.len()
    );
    let stored = StoredRun::of(&runs[0]).expect("the task run stored its record");
    let record = stored.record.clone().expect("the task run has a record");
    Measured { row: Row::of(which, api, &record), stored, record }
}

// ---- the longer scripted task ----

/// How many tasks the long task's project holds.
const BOARD_TASKS: usize = 30;

/// The steps the script lays out on its task.
const SCRIPT_STEPS: [&str; 3] =
    ["Read the related tasks and their notes", "Draft the migration plan by area", "Write up the risks and the order"];

/// The long task on `api`: the board filled, the script replayed, the run's record read.
async fn long_task(api: Api) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let board = picogent::board::start_seeded(dir.path()).await.unwrap();
    let alice = common::client(&board.url(), "tok-alice");
    let mut tasks = Vec::new();
    for n in 0..BOARD_TASKS {
        let create = CreateTask {
            project_slug: "team".into(),
            title: task_title(n),
            description: Some(description(n)),
            labels: Some(vec![AREAS[n % AREAS.len()].to_string()]),
            ..CreateTask::default()
        };
        tasks.push(alice.create_task(&create, None).await.unwrap());
    }
    let target = tasks[0].clone();
    for n in 0..3 {
        let comment = SendMessage { content: comment(n), task_id: Some(target.id.clone()), ..SendMessage::default() };
        alice.send_message(&comment, None).await.unwrap();
    }
    let script = Script::from_json(&long_script(&tasks).to_string()).unwrap();
    let model = picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap();
    let agent = picogent::runtime::start(AgentOptions {
        config: long_task_config(dir.path(), &board.url(), &model.url(), api),
        tracker_token: Secret::new("tok-picogent"),
        llm_api_key: None,
        mcp_token: None,
        ui_token: None,
        stream: None,
        serve_http: false,
        clock: None,
    })
    .await
    .unwrap();
    common::wait_until(RUN_TIMEOUT, "the agent caught up with the board", || agent.status.caught_up()).await;
    alice.assign_task(&target.id, "picogent", None).await.unwrap();
    let session = format!("task:{}", target.id);
    let deadline = Instant::now() + RUN_TIMEOUT;
    loop {
        let runs = agent.state.list_runs(100).await.unwrap();
        if runs.iter().any(|run| run.session_key.to_string() == session && run.finished_at.is_some()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the long task on {} did not end in {RUN_TIMEOUT:?}; the model's mismatches: {:?}",
            api.as_str(),
            model.mismatches()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let measured = task_run(&agent, &target, Task::Long, api).await;
    let mismatches = model.mismatches();
    assert!(mismatches.is_empty(), "the long task on {}: the script did not match: {mismatches:#?}", api.as_str());
    assert_eq!(
        measured.record.turns,
        12,
        "the long task on {}: expected 12 turns, the run ended {} after {} ({:?})",
        api.as_str(),
        measured.record.outcome.as_str(),
        measured.record.turns,
        measured.record.detail
    );
    assert_eq!(measured.record.outcome.as_str(), "completed", "the long task on {}", api.as_str());
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
    measured
}

/// The demo's config shape (`src/demo.rs`), on `api`, with limits a 12-turn run fits in.
fn long_task_config(dir: &Path, board: &str, model: &str, api: Api) -> Config {
    serde_json::from_value(json!({
        "slug": "picogent",
        "name": "Picogent",
        "capabilities": ["planning tasks into steps", "answering questions about the board"],
        "tracker": {"url": board, "timeout_ms": 5000},
        "llm": {
            "api": api.as_str(),
            "base_url": model,
            "model": "offline-planner",
            "max_output_tokens": 1024,
            "timeout_ms": 30000,
        },
        "limits": {"max_turns": 20, "max_tool_calls": 40, "max_tokens_per_run": 2_000_000},
        "state": {"path": dir.join("picogent.db")},
        "http": {"listen": "127.0.0.1:0"},
        "prompts_dir": common::prompts_dir(),
        "presence": {"heartbeat_ms": 500},
    }))
    .unwrap()
}

/// 11 tool-call turns on the target task `tasks[0]` and its neighbours, then the answer; each
/// turn checks the result of the one before.
fn long_script(tasks: &[TaskOut]) -> Value {
    let target = &tasks[0].key;
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let after = |contains: &str| json!({"last_tool_result_contains": contains, "last_tool_result_is_error": false});
    let turns = vec![
        json!({"expect": {"tools_include": ["get_task", "list_tasks", "list_steps", "add_step", "list_messages"],
                          "messages_contain": format!("Task: {target}")},
               "reply": call("get_task", json!({"task_id": target}))}),
        json!({"expect": after(target), "reply": call("list_steps", json!({"task_id": target}))}),
        json!({"expect": after("no steps"), "reply": call("list_tasks", json!({"project_id": "team", "limit": 50}))}),
        json!({"expect": after(&format!("{BOARD_TASKS} tasks")),
               "reply": call("get_task", json!({"task_id": tasks[7].key}))}),
        json!({"expect": after(&tasks[7].key), "reply": call("get_task", json!({"task_id": tasks[12].id}))}),
        json!({"expect": after(&tasks[12].key), "reply": call("list_messages", json!({"task_id": target}))}),
        json!({"expect": after("3 messages"),
               "reply": call("add_step", json!({"task_id": target, "title": SCRIPT_STEPS[0]}))}),
        json!({"expect": after(SCRIPT_STEPS[0]), "reply": call("get_task", json!({"task_id": tasks[21].key}))}),
        json!({"expect": after(&tasks[21].key),
               "reply": call("add_step", json!({"task_id": target, "title": SCRIPT_STEPS[1]}))}),
        json!({"expect": after(SCRIPT_STEPS[1]),
               "reply": call("list_tasks", json!({"project_id": "team", "status": ["todo"], "limit": 50}))}),
        json!({"expect": after(&format!("{} tasks", BOARD_TASKS - 1)),
               "reply": call("add_step", json!({"task_id": target, "title": SCRIPT_STEPS[2]}))}),
        json!({"expect": after(SCRIPT_STEPS[2]),
               "reply": {"content": format!(
                   "Read {target} with its comments and the related {}, {} and {}; laid out three steps: {}.",
                   tasks[7].key, tasks[12].key, tasks[21].key, SCRIPT_STEPS.join("; "))}}),
    ];
    json!({"description": "benches/cost.rs: a 12-turn task run with large tool results", "turns": turns})
}

// ---- deterministic text for the board ----

const AREAS: [&str; 6] = ["billing", "search", "onboarding", "reporting", "auth", "storage"];
const THINGS: [&str; 10] = [
    "export job",
    "settings page",
    "nightly import",
    "audit log",
    "rate limiter",
    "email digest",
    "schema migration",
    "retry queue",
    "admin dashboard",
    "webhook sender",
];
const VERBS: [&str; 8] = ["Audit", "Migrate", "Speed up", "Document", "Harden", "Split", "Test", "Simplify"];
const SUBJECTS: [&str; 12] = [
    "The current implementation",
    "The service",
    "Our customers",
    "The on-call engineer",
    "The nightly job",
    "The old endpoint",
    "Support",
    "The new schema",
    "The first release",
    "Every caller",
    "The staging copy",
    "The team",
];
const PREDICATES: [&str; 12] = [
    "reads the whole table before it filters anything",
    "times out when the queue is longer than a few thousand items",
    "needs a clear owner and a written runbook",
    "has to keep working while the data is copied over",
    "reports errors that nobody can act on",
    "depends on a configuration flag that is set differently in each region",
    "should be measured before and after the change, with the same data",
    "retries without a limit when the upstream service is slow",
    "is the part people ask about most in the support channel",
    "can be rolled back only by restoring last night's backup",
    "was written before the storage layer had transactions",
    "must not lose a single event during the switch",
];
const CLAUSES: [&str; 8] = [
    "so the plan should say what happens to the data in flight",
    "which is why the rollout goes region by region",
    "and the numbers from last quarter show how often it happens",
    "although the fix itself is small",
    "as the incident review in March pointed out",
    "so each step needs a check that a person can run by hand",
    "and the dashboards should show the difference within a day",
    "before anything else in this project moves",
];

/// A small deterministic generator (xorshift), so every run writes the same board.
struct Words(u64);

impl Words {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn task_title(n: usize) -> String {
    format!("{} the {} {}", VERBS[n % VERBS.len()], AREAS[n % AREAS.len()], THINGS[(n * 7 + 3) % THINGS.len()])
}

/// About 330 words of plain, varied prose about task `n`: a few paragraphs and a checklist.
fn description(n: usize) -> String {
    let mut words = Words(0x9E37_79B9_7F4A_7C15 ^ (n as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut text = format!("Context for {} ({}).\n\n", task_title(n).to_lowercase(), AREAS[n % AREAS.len()]);
    for _ in 0..4 {
        for _ in 0..5 {
            text.push_str(&format!(
                "{} {}, {}. ",
                SUBJECTS[words.next(SUBJECTS.len())],
                PREDICATES[words.next(PREDICATES.len())],
                CLAUSES[words.next(CLAUSES.len())]
            ));
        }
        text.push_str("\n\n");
    }
    text.push_str("Checklist:\n");
    for _ in 0..4 {
        text.push_str(&format!(
            "- {} the {} {}\n",
            VERBS[words.next(VERBS.len())].to_lowercase(),
            AREAS[words.next(AREAS.len())],
            THINGS[words.next(THINGS.len())]
        ));
    }
    text
}

/// A longish comment by alice on the long task's task.
fn comment(n: usize) -> String {
    let mut words = Words(0xD1B5_4A32_D192_ED03 ^ (n as u64 + 7));
    let mut text = String::from("A note before you start: ");
    for _ in 0..4 {
        text.push_str(&format!(
            "{} {}, {}. ",
            SUBJECTS[words.next(SUBJECTS.len())],
            PREDICATES[words.next(PREDICATES.len())],
            CLAUSES[words.next(CLAUSES.len())]
        ));
    }
    text
}

// ---- what the prompt is made of ----

/// Each turn's prompt tokens, rebuilt from the stored conversation by the offline model's own
/// counting rule (`estimate_prompt_tokens`): the messages sent before the turn's answer, plus the
/// tool definitions, which every turn sends alike. Their share is what the record's total leaves
/// over the messages, divided by the turns; `exact` says it divided evenly.
struct TurnPrompts {
    per_turn: Vec<u64>,
    tools_per_turn: u64,
    exact: bool,
}

fn turn_prompts(stored: &StoredRun, record: &RunRecord) -> TurnPrompts {
    let mut sent = vec![Message::System { content: stored.start.system_prompt.clone().unwrap_or_default() }];
    let mut messages_per_turn = Vec::new();
    for message in &stored.conversation {
        if matches!(message, Message::Assistant { .. }) {
            messages_per_turn.push(estimate_prompt_tokens(&sent, &[]));
        }
        sent.push(message.clone());
    }
    let turns = messages_per_turn.len().max(1) as u64;
    let rest = record.prompt_tokens.saturating_sub(messages_per_turn.iter().sum());
    let tools_per_turn = rest / turns;
    TurnPrompts {
        per_turn: messages_per_turn.iter().map(|tokens| tokens + tools_per_turn).collect(),
        tools_per_turn,
        exact: rest.is_multiple_of(turns) && messages_per_turn.len() as u32 == record.turns,
    }
}

/// The tool definitions of a task run, as `picogent tools list --tokens` counts them (the
/// OpenAI tools JSON, o200k).
fn tool_definitions() -> Value {
    let catalog = Catalog::new().unwrap();
    let task_run = catalog.subset(TASK_RUN_TOOLS).unwrap().definitions();
    json!({"task_run_tools": task_run.len(), "task_run_tokens": count_tools_json_tokens(&picogent::tools::definition::specs(&task_run))})
}

/// Per-turn prompt tokens of each run, and where the long task's prompt tokens come from.
fn print_prompt_parts(measured: &[Measured]) {
    let definitions = tool_definitions();
    for m in measured {
        let turns = turn_prompts(&m.stored, &m.record);
        let approx = if turns.exact { "" } else { "≈" };
        println!(
            "{}, llm.api {}: prompt tokens per turn{approx}: {}",
            m.row.task_label,
            m.row.api,
            turns.per_turn.iter().map(|t| thousands(*t)).collect::<Vec<_>>().join(", ")
        );
    }
    let Some(m) = measured.iter().find(|m| m.row.task == Task::Long.id()) else { return };
    let turns = turn_prompts(&m.stored, &m.record);
    let system = count(&m.stored.start.system_prompt.clone().unwrap_or_default());
    let prompt = m.stored.conversation.get(m.stored.start.history_len).map(message_tokens).unwrap_or(0);
    println!(
        "what one turn of the long task ({}) resends: tool definitions and request overhead {} (the {} task-run tools \
         alone: {} by `picogent tools list --tokens`), system prompt {}, task prompt {}, and every earlier turn:",
        m.row.api,
        thousands(turns.tools_per_turn),
        definitions["task_run_tools"],
        thousands(definitions["task_run_tokens"].as_u64().unwrap_or(0)),
        thousands(system),
        thousands(prompt)
    );
    let mut by_tool: Vec<(String, u64, u64, usize)> = Vec::new();
    for message in &m.stored.conversation {
        if let Message::Tool { name, .. } = message {
            let tokens = message_tokens(message);
            match by_tool.iter_mut().find(|(n, ..)| n == name) {
                Some(entry) => {
                    entry.1 += tokens;
                    entry.2 = entry.2.max(tokens);
                    entry.3 += 1;
                }
                None => by_tool.push((name.clone(), tokens, tokens, 1)),
            }
        }
    }
    by_tool.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    for (name, total, largest, calls) in by_tool {
        let results = if calls == 1 { "result" } else { "results" };
        println!(
            "  {name:<14} {calls} {results}, {} tokens in all, the largest {}",
            thousands(total),
            thousands(largest)
        );
    }
}

fn count(text: &str) -> u64 {
    picogent::llm::count_text_tokens(text)
}

// ---- the table, and the last commit's figures ----

/// The rows of `bench/cost.json` in the last commit; `None` when it has none.
fn last_commit_rows() -> Option<Vec<Row>> {
    let output = std::process::Command::new("git")
        .args(["show", "HEAD:bench/cost.json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let document: Value = serde_json::from_slice(&output.stdout).ok()?;
    serde_json::from_value(document.get("rows")?.clone()).ok()
}

fn print_table(rows: &[Row], last_commit: Option<&[Row]>) {
    match last_commit {
        Some(_) => println!("each figure beside the same figure in the last commit's bench/cost.json:"),
        None => println!("(no figures in the last commit: bench/cost.json is not in HEAD)"),
    }
    let header = [
        "task",
        "llm.api",
        "turns",
        "prompt tokens",
        "cached (% of prompt)",
        "cache-written",
        "completion",
        "cost without caching",
        "cost with caching",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for row in rows {
        let last = last_commit.and_then(|last| last.iter().find(|l| l.task == row.task && l.api == row.api));
        let beside = |now: String, then: Option<String>| match (last_commit, then) {
            (None, _) => now,
            (Some(_), Some(then)) => format!("{now} (last commit {then})"),
            (Some(_), None) => format!("{now} (not in the last commit)"),
        };
        let cached = |r: &Row| format!("{} ({:.1}%)", thousands(r.cached_tokens), r.cached_share * 100.0);
        lines.push(vec![
            row.task_label.clone(),
            row.api.clone(),
            beside(row.turns.to_string(), last.map(|l| l.turns.to_string())),
            beside(thousands(row.prompt_tokens), last.map(|l| thousands(l.prompt_tokens))),
            beside(
                cached(row),
                last.map(|l| format!("{}, {:.1}%", thousands(l.cached_tokens), l.cached_share * 100.0)),
            ),
            beside(thousands(row.cache_write_tokens), last.map(|l| thousands(l.cache_write_tokens))),
            beside(thousands(row.completion_tokens), last.map(|l| thousands(l.completion_tokens))),
            beside(dollars(row.cost_without_cache), last.map(|l| dollars(l.cost_without_cache))),
            beside(dollars(row.cost_with_cache), last.map(|l| dollars(l.cost_with_cache))),
        ]);
    }
    let widths: Vec<usize> =
        (0..header.len()).map(|c| lines.iter().map(|l| l[c].chars().count()).max().unwrap_or(0)).collect();
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        println!("| {} |", cells.join(" | "));
        if i == 0 {
            println!("|{}|", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("|"));
        }
    }
    for api in APIS {
        let (model, _) = list_price(api);
        println!("  rows on llm.api {} are priced as {model}", api.as_str());
    }
    println!("  {RUN_TO_RUN}");
}

/// Why two runs of this bench differ a little, for whoever compares them.
const RUN_TO_RUN: &str = "ids, times and each run's fence token are random and tokenize to different lengths: \
                          prompt tokens move by about 2% from run to run, a smaller change is noise";

fn describe_price(price: &Price) -> String {
    let read = price.cache_read_per_million.map(|rate| format!(", cached input ${rate:.2}")).unwrap_or_default();
    let write = match price.cache_write_per_million {
        Some(rate) => format!(", cache write (5 min) ${rate:.2}"),
        None => String::from(", cache writes not charged apart"),
    };
    format!("input ${:.2}{read}{write}, output ${:.2}", price.input_per_million, price.output_per_million)
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

fn dollars(amount: f64) -> String {
    format!("${amount:.4}")
}

fn write_json(path: &Path, value: &Value) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap() + "\n").unwrap();
    eprintln!("[cost] wrote {}", path.display());
}
