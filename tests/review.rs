//! Review handed to another agent, end to end over loopback: two agents on the reference board,
//! each with its own slug, state and scripted offline model, and the same repositories (a local
//! bare git repository): the worker `picogent` (the stand-in coding agent) pushes its branch and
//! hands the task to the reviewer `reviewer` (`capabilities: ["review"]`), which reads the diff
//! and sends it back or approves. What a person sees is checked: each step one comment, nothing
//! posted twice, the task's end state, and the round limit that stops two agents bouncing a task.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/git.rs"]
mod git_support;
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::*;
use git_support::{git, remote};
use picogent::board::{BoardHandle, BoardOptions};
use picogent::offline_model::script::Script;
use picogent::offline_model::{OfflineModelHandle, OfflineModelOptions};
use picogent::tracker::model::*;
use serde_json::{Value, json};
use support::fault_harness::AgentProcess;

const STAND_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/coding-agent/stand-in.sh");
const FIX: &str = "In src/date.py replace \"2020-01-01\" with \"2024-06-01\".";
const FOLLOW_UP: &str = "In src/date.py replace \"2024-06-01\" with \"2024-06-02\".";

/// The seed's board with more agent members, `reviewer` and `reviewer2`.
async fn start_team_board(dir: &Path) -> BoardHandle {
    let mut seed: Value = serde_json::from_str(&std::fs::read_to_string(SEED).unwrap()).unwrap();
    for slug in ["reviewer", "reviewer2"] {
        let member = json!({"slug": slug, "name": slug, "kind": "agent", "token": format!("tok-{slug}")});
        seed["members"].as_array_mut().unwrap().push(member);
    }
    let path = dir.join("team-seed.json");
    std::fs::write(&path, seed.to_string()).unwrap();
    let options = BoardOptions::new("127.0.0.1:0".parse().unwrap(), dir.join("board.db"), Some(path));
    picogent::board::start(options).await.unwrap()
}

async fn scripted(turns: Value) -> OfflineModelHandle {
    let script = Script::from_json(&json!({"turns": turns}).to_string()).unwrap();
    picogent::offline_model::start(OfflineModelOptions::script(script)).await.unwrap()
}

/// An agent's `workspaces` (a root of its own, the shared remote) and `review` sections.
fn sections(root: PathBuf, remote: &Path, capabilities: &[&str], review: Value) -> Value {
    json!({
        "capabilities": capabilities,
        "workspaces": {
            "root": root,
            "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
            "agents": {"stand-in": {"command": ["sh", STAND_IN, "{instructions}"], "output": "jsonl"}},
            "agent": "stand-in",
        },
        "review": review,
    })
}

fn coding_turn(instructions: &str, expect: Value) -> Value {
    json!({"expect": expect, "reply": {"tool_calls": [{"name": "run_coding_agent", "arguments": {"instructions": instructions}}]}})
}

fn verdict_turns(verdict: &str, findings: Value, diff_contains: &str) -> Vec<Value> {
    vec![
        json!({"expect": {"tools_include": ["review_diff", "review_verdict"], "tools_exclude": ["run_coding_agent"]},
               "reply": {"tool_calls": [{"name": "review_diff", "arguments": {}}]}}),
        json!({"expect": {"last_tool_result_contains": diff_contains, "last_tool_result_is_error": false},
               "reply": {"tool_calls": [{"name": "review_verdict", "arguments": {"verdict": verdict, "findings": findings}}]}}),
        json!({"expect": {"last_tool_result_is_error": false}, "reply": {"content": "Reviewed."}}),
    ]
}

struct Team {
    dir: tempfile::TempDir,
    remote: PathBuf,
    board: BoardHandle,
    worker_model: OfflineModelHandle,
    reviewer_model: OfflineModelHandle,
    worker: picogent::runtime::AgentHandle,
    reviewer: picogent::runtime::AgentHandle,
}

async fn start_team(worker_turns: Vec<Value>, reviewer_turns: Vec<Value>, max_rounds: u32) -> Team {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let board = start_team_board(dir.path()).await;
    let worker_model = scripted(Value::Array(worker_turns)).await;
    let reviewer_model = scripted(Value::Array(reviewer_turns)).await;
    let review = json!({"reviewers": ["reviewer"]});
    let mut extra = sections(dir.path().join("worker-workspaces"), &remote, &["coding"], review.clone());
    extra["delegation"] = json!({"max_review_rounds": max_rounds});
    let worker = start_agent(agent_config(dir.path(), &board.url(), &worker_model.url(), "picogent", extra)).await;
    let mut extra = sections(dir.path().join("reviewer-workspaces"), &remote, &["review"], review);
    extra["delegation"] = json!({"max_review_rounds": max_rounds});
    let reviewer = start_agent(agent_config(dir.path(), &board.url(), &reviewer_model.url(), "reviewer", extra)).await;
    wait_ready(&worker).await;
    wait_ready(&reviewer).await;
    Team { dir, remote, board, worker_model, reviewer_model, worker, reviewer }
}

impl Team {
    /// Waits until `count` comments are on the task, then until both agents have handled every
    /// event the board logged for them and their runs ended: nothing more is coming.
    async fn settle_at(&self, alice: &TrackerClient, task_id: &str, count: usize) -> Vec<MessageOut> {
        eventually(Duration::from_secs(60), &format!("{count} comments on the task"), || async {
            (comments(alice, task_id).await.len() >= count).then_some(())
        })
        .await;
        let db = self.dir.path().join("board.db");
        caught_up_with_board(&self.worker, &db, "picogent").await;
        caught_up_with_board(&self.reviewer, &db, "reviewer").await;
        caught_up_with_board(&self.worker, &db, "picogent").await;
        comments(alice, task_id).await
    }

    async fn shutdown(self) {
        assert!(self.worker_model.mismatches().is_empty(), "{:?}", self.worker_model.mismatches());
        assert!(self.reviewer_model.mismatches().is_empty(), "{:?}", self.reviewer_model.mismatches());
        self.worker.shutdown().await.unwrap();
        self.reviewer.shutdown().await.unwrap();
        self.worker_model.shutdown().await;
        self.reviewer_model.shutdown().await;
        self.board.shutdown().await.unwrap();
    }
}

use picogent::tracker::TrackerClient;

fn by(comments: &[MessageOut], author: &str, starts: &str) -> usize {
    comments.iter().filter(|m| m.author_slug == author && m.content.starts_with(starts)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_sent_back_is_resolved_on_the_same_branch_and_approved_in_round_two() {
    let worker_turns = vec![
        coding_turn(FIX, json!({"tools_include": ["run_coding_agent"], "tools_exclude": ["review_verdict"]})),
        json!({"reply": {"content": "Set the date to 2024-06-01."}}),
        // The task comes back: its prompt shows the finding, and the work goes on the same branch.
        coding_turn(FOLLOW_UP, json!({"messages_contain": "src/date.py:2 — Use 2024-06-02"})),
        json!({"reply": {"content": "Done as the review asked: src/date.py:2 now says 2024-06-02."}}),
    ];
    let mut reviewer_turns = verdict_turns(
        "changes_requested",
        json!([{"file": "src/date.py", "line": 2, "text": "Use 2024-06-02, the release date."}]),
        "2024-06-01",
    );
    reviewer_turns.extend(verdict_turns("approve", json!([]), "2024-06-02"));
    let team = start_team(worker_turns, reviewer_turns, 2).await;
    let alice = client(&team.board, "tok-alice");

    let task = create_assigned(&alice, "Fix the date parser", FIX).await;
    let all = team.settle_at(&alice, &task.id, 6).await;
    let shown: Vec<(&str, &str)> = all.iter().map(|m| (m.author_slug.as_str(), m.content.as_str())).collect();
    assert_eq!(all.len(), 6, "each step one comment: {shown:#?}");
    let branch = format!("picogent/{}", task.key);
    let request =
        format!("Review request (round 1 of 2) for @reviewer: branch `{branch}` against `main` — Fix the date parser");
    assert_eq!(all[1].content, request, "{shown:#?}");
    assert_eq!(all[1].author_slug, "picogent");
    assert_eq!(all[1].mentions, vec!["reviewer".to_string()]);
    assert!(all[2].content.starts_with("Changes requested (round 1 of 2)"), "{shown:#?}");
    assert!(all[2].content.contains("- src/date.py:2 — Use 2024-06-02, the release date."), "{shown:#?}");
    assert_eq!(all[2].author_slug, "reviewer");
    assert!(all[3].content.starts_with("Done as the review asked"), "{shown:#?}");
    assert!(all[4].content.starts_with("Review request (round 2 of 2) for @reviewer"), "{shown:#?}");
    assert!(all[5].content.starts_with("Approved (round 2 of 2)"), "{shown:#?}");
    assert_eq!(by(&all, "picogent", "Review request"), 2);
    assert_eq!(by(&all, "reviewer", "Changes requested"), 1);
    assert_eq!(by(&all, "reviewer", "Approved"), 1);

    // Both commits on the one branch; the base untouched.
    assert_eq!(git(&team.remote, &["rev-list", "--count", &format!("main..{branch}")]), "2");
    let file = git(&team.remote, &["show", &format!("{branch}:src/date.py")]);
    assert!(file.contains("2024-06-02"), "{file}");

    let task = alice.get_task(&task.id).await.unwrap();
    assert_eq!(task.status, TaskStatus::InReview);
    assert_eq!(task.labels, vec!["review-round:2".to_string()]);
    assert_eq!(task.assignee_slug.as_deref(), Some("reviewer"), "approved and left for a person");
    team.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_round_limit_the_task_stops_bouncing_and_a_person_is_asked_once() {
    let worker_turns = vec![
        coding_turn(FIX, json!({"tools_include": ["run_coding_agent"]})),
        json!({"reply": {"content": "Set the date to 2024-06-01."}}),
        coding_turn(FOLLOW_UP, json!({"messages_contain": "Changes requested"})),
        json!({"reply": {"content": "Changed it again."}}),
    ];
    // A reviewer that always sends the work back; it is asked once only. Its first verdicts name
    // a file outside the diff and a line 0: each is refused, and nothing is posted for them.
    let mut reviewer_turns = verdict_turns(
        "changes_requested",
        json!([{"file": "src/other.py", "line": 2, "text": "Not here."}]),
        "2024-06-01",
    );
    reviewer_turns.truncate(2);
    reviewer_turns.extend([
        json!({"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "a file of the diff: src/date.py"},
               "reply": {"tool_calls": [{"name": "review_verdict", "arguments": {"verdict": "changes_requested",
                 "findings": [{"file": "src/date.py", "line": 0, "text": "Not yet."}]}}]}}),
        json!({"expect": {"last_tool_result_is_error": true, "last_tool_result_contains": "a line number"},
               "reply": {"tool_calls": [{"name": "review_verdict", "arguments": {"verdict": "changes_requested",
                 "findings": [{"file": "src/date.py", "line": 2, "text": "Not yet."}]}}]}}),
        json!({"expect": {"last_tool_result_is_error": false}, "reply": {"content": "Reviewed."}}),
    ]);
    let team = start_team(worker_turns, reviewer_turns, 1).await;
    let alice = client(&team.board, "tok-alice");

    let task = create_assigned(&alice, "Fix the date parser", FIX).await;
    let all = team.settle_at(&alice, &task.id, 5).await;
    let shown: Vec<(&str, &str)> = all.iter().map(|m| (m.author_slug.as_str(), m.content.as_str())).collect();
    assert_eq!(all.len(), 5, "{shown:#?}");
    assert_eq!(by(&all, "picogent", "Review request (round 1 of 1)"), 1, "{shown:#?}");
    assert_eq!(by(&all, "picogent", "Review request"), 1, "handed once: {shown:#?}");
    assert_eq!(by(&all, "reviewer", "Changes requested"), 1, "{shown:#?}");
    assert!(all.iter().all(|m| !m.content.contains("Not here.")), "a refused verdict posts nothing: {shown:#?}");
    let asked: Vec<&MessageOut> = all.iter().filter(|m| m.content.contains("delegation.max_review_rounds")).collect();
    assert_eq!(asked.len(), 1, "a person asked once: {shown:#?}");
    assert!(asked[0].content.starts_with("@alice "), "{}", asked[0].content);
    assert_eq!(asked[0].mentions, vec!["alice".to_string()]);

    let task = alice.get_task(&task.id).await.unwrap();
    assert_eq!(task.status, TaskStatus::InReview);
    assert_eq!(task.assignee_slug.as_deref(), Some("picogent"), "not handed to the reviewer again");
    assert_eq!(task.labels, vec!["review-round:1".to_string()]);
    team.shutdown().await;
}

/// `picogent demo --team` as a person sees it on the board: the plan asked once and made once,
/// the blocked part started only after its blocker was done, one part sent back once and
/// resolved on its branch, every part approved, and the parent rolled up once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_team_demo_breaks_down_reviews_and_rolls_up_once() {
    picogent::workspace::sandbox::set_relay_program(PathBuf::from(env!("CARGO_BIN_EXE_picogent")));
    let demo = picogent::demo::team::start().await.unwrap();
    let outcome = demo.play(Duration::from_secs(120)).await.unwrap();
    let db = demo.dir.path().join("board.db");
    caught_up_with_board(&demo.worker, &db, "picogent").await;
    caught_up_with_board(&demo.reviewer, &db, "reviewer").await;
    caught_up_with_board(&demo.worker, &db, "picogent").await;
    let alice = &demo.alice;
    // The worker names no reviewer: it found `reviewer` by what its marker says on the board.
    assert!(demo.worker_config.review.reviewers.is_empty());
    the_tree_as_a_person_sees_it(alice, &outcome.parent.id, &demo.repository).await;
    demo.shutdown().await.unwrap();
}

/// The team demo's parent (`picogent::demo::team::PARENT_DESCRIPTION`) as a person sees it on
/// the board once it is rolled up: the plan asked once, three sub-tasks made once and done, the
/// blocked one worked after its blocker's approval, the frontend part sent back once and reworked
/// on its branch, nothing posted twice, one roll-up naming each branch and its rounds; the
/// reviewer found by the `review` its marker says.
async fn the_tree_as_a_person_sees_it(alice: &TrackerClient, parent_id: &str, repository: &Path) {
    let reviewer = alice.get_member("reviewer").await.unwrap();
    assert!(reviewer.status.contains(" can review]"), "{}", reviewer.status);
    let parent = alice.get_task(parent_id).await.unwrap();
    assert_eq!(parent.status, TaskStatus::InReview);
    let on_parent = comments(alice, &parent.id).await;
    let shown: Vec<(&str, &str)> = on_parent.iter().map(|m| (m.author_slug.as_str(), m.content.as_str())).collect();
    assert_eq!(by(&on_parent, "picogent", "@alice Plan for"), 1, "the plan asked once: {shown:#?}");
    let rolled: Vec<&MessageOut> = on_parent.iter().filter(|m| m.content.starts_with("All 3 sub-tasks of")).collect();
    assert_eq!(rolled.len(), 1, "rolled up once: {shown:#?}");
    for key in ["TE-2", "TE-4"] {
        let line = format!("{key}: ");
        assert!(rolled[0].content.contains(&line) && rolled[0].content.contains("reviewed in 1 round)"), "{shown:#?}");
    }
    assert!(rolled[0].content.contains("branch `picogent/TE-3`, reviewed in 2 rounds"), "{shown:#?}");
    let steps = alice.list_steps(&parent.id).await.unwrap();
    assert_eq!(steps.len(), 3, "a step per sub-task: {steps:#?}");
    assert!(steps.iter().all(|step| step.done), "{steps:#?}");

    let subtasks = picogent::tracker::tree::subtasks(alice, "team", &parent.key).await.unwrap();
    assert_eq!(subtasks.len(), 3, "made once: {subtasks:#?}");
    let mut all = std::collections::HashMap::new();
    for task in &subtasks {
        assert_eq!(task.status, TaskStatus::Done, "{task:#?}");
        let said = comments(alice, &task.id).await;
        let mut seen = std::collections::HashSet::new();
        for comment in &said {
            assert!(seen.insert((&comment.author_slug, &comment.content)), "posted twice on {}: {said:#?}", task.key);
        }
        all.insert(task.title.clone(), (task.clone(), said));
    }
    // The frontend part left a to-do: sent back once, reworked on its branch, approved in round 2.
    let (frontend, said) = &all["Frontend"];
    assert_eq!(by(said, "picogent", "Review request"), 2);
    assert_eq!(by(said, "reviewer", "Changes requested (round 1 of 2)"), 1);
    assert_eq!(by(said, "reviewer", "Approved (round 2 of 2)"), 1);
    assert_eq!(by(said, "picogent", "Reworked as the review asked."), 1);
    let branch = format!("picogent/{}", frontend.key);
    assert_eq!(git(repository, &["rev-list", "--count", &format!("main..{branch}")]), "2");
    let file = git(repository, &["show", &format!("{branch}:web/reports.js")]);
    assert!(file.contains("const buttons = ['csv']; // label it Export CSV") && !file.contains("TODO"), "{file}");
    // The docs part waited for the backend part: its work began after the backend was approved.
    let (backend, backend_said) = &all["Backend"];
    let (docs, docs_said) = &all["Docs"];
    assert!(docs.labels.contains(&format!("blocked_by:{}", backend.key)), "{docs:#?}");
    let approved = backend_said.iter().find(|m| m.content.starts_with("Approved")).expect("backend approved");
    let waited = docs_said.iter().filter(|m| m.content.starts_with("Waiting for")).count();
    assert_eq!(waited, 1, "{docs_said:#?}");
    let worked =
        docs_said.iter().find(|m| m.content.contains("Summary from the offline planner")).expect("docs worked");
    assert!(worked.created_at > approved.created_at, "started before its blocker was done: {docs_said:#?}");
}

/// Each of `team` (`(slug, capability)`) as a `picogent run` process on the board and model of
/// `urls`, its sections as [`sections`] makes them and `adjust` changes them; the processes and
/// each one's state file.
fn start_processes(
    dir: &Path,
    (board, model): &(String, String),
    remote: &Path,
    team: &[(&'static str, &str)],
    adjust: impl Fn(&mut Value),
) -> (Vec<AgentProcess>, Vec<(&'static str, PathBuf)>) {
    let mut agents = Vec::new();
    let mut states = Vec::new();
    for &(slug, capability) in team {
        let mut extra = sections(dir.join(format!("{slug}-workspaces")), remote, &[capability], json!({}));
        adjust(&mut extra);
        let config = agent_config(dir, board, model, slug, extra);
        let path = dir.join(format!("{slug}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        agents.push(AgentProcess::start(&path, &format!("tok-{slug}"), &dir.join(format!("{slug}.log"))));
        states.push((slug, config.state.path.clone()));
    }
    (agents, states)
}

/// Waits until each agent process has handled every event the board logged for it and its runs
/// ended (read from its state file).
async fn settle_processes(board_db: &Path, states: &[(&str, PathBuf)]) {
    for (slug, path) in states {
        let head = board_head(board_db, slug).await;
        eventually(Duration::from_secs(60), &format!("{slug} settled"), || async {
            let state = picogent::state::State::open(path).await.ok()?;
            let handled = state.last_seq().await.ok()? >= head;
            let runs = state.list_runs(50).await.ok()?;
            state.close().await;
            (handled && runs.iter().all(|run| run.finished_at.is_some())).then_some(())
        })
        .await;
    }
}

/// `picogent demo --team` as a person runs it: it exits 0 and says what happened.
#[test]
fn picogent_demo_team_runs() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_picogent"))
        .args(["demo", "--team"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("reviewed in 2 rounds"), "{stdout}");
    assert!(stdout.contains("parent    TE-1 \"Add CSV export to the reports page\" is in review"), "{stdout}");
}

/// A review handed to an agent that never answers (the member `reviewer` runs nowhere) is said
/// on the parent by the stall rule: the sub-task, who holds it and what would move it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_nobody_answers_is_said_on_the_parent_as_stalled() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let board = start_team_board(dir.path()).await;
    let model = picogent::offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let review = json!({"reviewers": ["reviewer"]});
    let mut extra = sections(dir.path().join("worker-workspaces"), &remote, &["coding"], review);
    extra["delegation"] = json!({"stall_ms": 1000});
    let worker = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&worker).await;
    let alice = client(&board, "tok-alice");
    let create = CreateTask {
        project_slug: "team".into(),
        title: "Fix the dates".into(),
        description: Some(format!("- Parser: {FIX}")),
        assignee_slug: Some("picogent".into()),
        labels: Some(vec!["epic".into()]),
        ..CreateTask::default()
    };
    let parent = alice.create_task(&create, None).await.unwrap();
    eventually(Duration::from_secs(60), "the plan asked", || async {
        comments(&alice, &parent.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    comment(&alice, &parent.id, "yes").await;
    let stalled = eventually(Duration::from_secs(60), "the silent review said on the parent", || async {
        let said = comments(&alice, &parent.id).await;
        said.into_iter().find(|m| m.content.starts_with("Sub-task TE-2 (Parser), assigned to reviewer,"))
    })
    .await;
    assert!(stalled.content.ends_with("Ask reviewer how it stands, or reassign it."), "{}", stalled.content);
    let sub_task = alice.get_task("TE-2").await.unwrap();
    assert_eq!(sub_task.status, TaskStatus::InReview, "{sub_task:#?}");
    assert_eq!(sub_task.assignee_slug.as_deref(), Some("reviewer"));
    assert!(sub_task.labels.contains(&"review-round:1".to_string()), "{sub_task:#?}");
    let said = comments(&alice, &sub_task.id).await;
    assert_eq!(by(&said, "picogent", "Review request (round 1 of 2) for @reviewer"), 1, "{said:#?}");
    assert_eq!(alice.get_task(&parent.id).await.unwrap().status, TaskStatus::InProgress, "not rolled up");
    worker.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// Three `picogent run` processes on one board: a worker and two reviewers (both with
/// `capabilities: ["review"]`, both named in the worker's `review.reviewers`). The task goes to
/// one reviewer, the other stays out of it, and a review that sends the work back at the round
/// limit ends with a person asked once, the task not bouncing between the agents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reviewers_as_processes_are_held_to_one_reviewer_and_the_round_limit() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let board = start_team_board(dir.path()).await;
    let model = picogent::offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let review = json!({"reviewers": ["reviewer", "reviewer2"]});
    let team = [("picogent", "coding"), ("reviewer", "review"), ("reviewer2", "review")];
    let urls = (board.url(), model.url());
    let (mut agents, states) = start_processes(dir.path(), &urls, &remote, &team, |extra| {
        extra["review"] = review.clone();
        extra["delegation"] = json!({"max_review_rounds": 1});
    });
    let alice = client(&board, "tok-alice");
    // The change leaves a to-do: the planner's reviewer sends it back.
    let todo = "In src/date.py replace \"def parse():\" with \"def parse():  # TODO: check the zone\".";
    let task = create_assigned(&alice, "Parse dates in their zone", todo).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let asked = loop {
        let all = comments(&alice, &task.id).await;
        if all.iter().any(|m| m.content.contains("delegation.max_review_rounds")) {
            break all;
        }
        if std::time::Instant::now() > deadline {
            let shown: Vec<(&str, &str)> = all.iter().map(|m| (m.author_slug.as_str(), m.content.as_str())).collect();
            let logs: Vec<String> = ["picogent", "reviewer", "reviewer2"]
                .iter()
                .map(|slug| std::fs::read_to_string(dir.path().join(format!("{slug}.log"))).unwrap_or_default())
                .collect();
            panic!("no person asked at the round limit: {shown:#?}\nlogs: {logs:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    settle_processes(&dir.path().join("board.db"), &states).await;
    let all = comments(&alice, &task.id).await;
    let shown: Vec<(&str, &str)> = all.iter().map(|m| (m.author_slug.as_str(), m.content.as_str())).collect();
    assert_eq!(all.len(), asked.len(), "nothing after the person was asked: {shown:#?}");
    assert_eq!(by(&all, "picogent", "Review request (round 1 of 1) for @reviewer:"), 1, "{shown:#?}");
    assert_eq!(by(&all, "picogent", "Review request"), 1, "handed once: {shown:#?}");
    assert_eq!(by(&all, "reviewer", "Changes requested (round 1 of 1)"), 1, "{shown:#?}");
    assert!(all.iter().all(|m| m.author_slug != "reviewer2"), "the other reviewer stays out: {shown:#?}");
    let asked: Vec<&MessageOut> = all.iter().filter(|m| m.content.contains("delegation.max_review_rounds")).collect();
    assert_eq!(asked.len(), 1, "{shown:#?}");
    assert!(asked[0].content.starts_with("@alice "), "{}", asked[0].content);
    let task = alice.get_task(&task.id).await.unwrap();
    assert_eq!(task.status, TaskStatus::InReview);
    assert_eq!(task.assignee_slug.as_deref(), Some("picogent"), "not handed to a reviewer again");
    let file = git(&remote, &["show", &format!("picogent/{}:src/date.py", task.key)]);
    assert!(file.contains("def parse():  # check the zone"), "the finding reworked on the branch: {file}");
    for agent in &mut agents {
        assert!(agent.is_running(), "an agent process ended");
        agent.terminate();
    }
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// The team demo's tree with each agent its own `picogent run` process: the worker (no reviewer
/// named) and the reviewer, both on the offline planner. A person sees the same as in the demo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tree_as_two_processes_is_planned_worked_reviewed_and_rolled_up_once() {
    let dir = tempfile::tempdir().unwrap();
    let remote = picogent::demo::team::repository(dir.path()).await.unwrap();
    let board = start_team_board(dir.path()).await;
    let model = picogent::offline_model::start(OfflineModelOptions::planner()).await.unwrap();
    let urls = (board.url(), model.url());
    let (mut agents, states) =
        start_processes(dir.path(), &urls, &remote, &[("picogent", "coding"), ("reviewer", "review")], |extra| {
            extra["review"] = json!({"approve_to": "done"});
        });
    let alice = client(&board, "tok-alice");
    // Each agent's marker is on the board before the work is handed out: the worker finds its
    // reviewer there.
    for slug in ["picogent", "reviewer"] {
        eventually(Duration::from_secs(60), &format!("{slug}'s marker"), || async {
            alice.get_member(slug).await.ok()?.status.contains("[picogent copy").then_some(())
        })
        .await;
    }
    let create = CreateTask {
        project_slug: "team".into(),
        title: picogent::demo::team::PARENT_TITLE.into(),
        description: Some(picogent::demo::team::PARENT_DESCRIPTION.into()),
        assignee_slug: Some("picogent".into()),
        labels: Some(vec!["epic".into()]),
        ..CreateTask::default()
    };
    let parent = alice.create_task(&create, None).await.unwrap();
    eventually(Duration::from_secs(60), "the plan asked", || async {
        comments(&alice, &parent.id).await.iter().any(|m| m.author_slug == "picogent").then_some(())
    })
    .await;
    comment(&alice, &parent.id, "yes").await;
    eventually(Duration::from_secs(120), "the parent rolled up", || async {
        (alice.get_task(&parent.id).await.ok()?.status == TaskStatus::InReview).then_some(())
    })
    .await;
    // Twice: a hand-off the second agent settled on may have given the first one more to do.
    for _ in 0..2 {
        settle_processes(&dir.path().join("board.db"), &states).await;
    }
    the_tree_as_a_person_sees_it(&alice, &parent.id, &remote).await;
    for agent in &mut agents {
        assert!(agent.is_running(), "an agent process ended");
        agent.terminate();
    }
    model.shutdown().await;
    board.shutdown().await.unwrap();
}
