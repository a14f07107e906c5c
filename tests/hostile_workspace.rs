//! Hostile coding agents (docs/coding-agents.md, "Threat model"): a coding agent turned against
//! picogent by a task's text, played by `fixtures/coding-agent/hostile.sh` (the task's title
//! names the attack), in direct mode on the reference board, with a local bare repository as the
//! remote. Each attack is checked as a person sees it (one answer or one notice on the task, what
//! the remote's branch holds) and for what must never happen: nothing written or run outside the
//! workspace (`$MARK`, a folder outside it, stays empty), no secret in the branch.
//!
//! The suite runs twice: in the sandbox (bubblewrap, `tests/coding-agents/install_bwrap.sh`), and
//! without it (`sandbox: false`) for the rules that hold either way: pinned git, the push scan,
//! safe writes, bounded reads, no token readable from picogent's process.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/git.rs"]
mod git_support;
#[path = "support/setup.rs"]
mod setup;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_support::*;
use git_support::{git, remote};
use picogent::state::{RunRow, RunStatus};
use picogent::tracker::TrackerClient;
use picogent::tracker::model::*;
use picogent::workspace::config::{CodingAgentConfig, Repository, WorkspacesConfig};
use picogent::workspace::{Invocation, TaskKey, Workspaces, coding, sandbox};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const HOSTILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/coding-agent/hostile.sh");
const STAND_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/coding-agent/stand-in.sh");

/// The variable the hostile entry passes as its key: a push that carries its value is refused.
const KEY_VARIABLE: &str = "PICOGENT_HOSTILE_TEST_KEY";
const KEY_VALUE: &str = "hostile-test-key-7f3a9c2e";

fn bwrap_installed() -> bool {
    setup::ensure_bwrap();
    let found = std::process::Command::new("bwrap").arg("--version").output().is_ok_and(|out| out.status.success());
    assert!(found, "bwrap is not installed: run `bash tests/coding-agents/install_bwrap.sh` (Debian's bubblewrap)");
    found
}

/// Set once, before any agent of this binary starts.
fn set_key_variable() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: set first thing in each test, before it starts any thread of its own that reads
    // the environment; `Once` makes the others wait until it is set.
    ONCE.call_once(|| unsafe { std::env::set_var(KEY_VARIABLE, KEY_VALUE) });
}

struct World {
    dir: tempfile::TempDir,
    remote: PathBuf,
    mark: PathBuf,
    board: picogent::board::BoardHandle,
    model: picogent::offline_model::OfflineModelHandle,
    agent: picogent::runtime::AgentHandle,
    alice: TrackerClient,
}

/// The board, the offline model (for the sandbox's relay; direct mode asks it nothing), and an
/// agent in direct mode whose coding agent is the hostile script.
async fn world(sandboxed: bool) -> World {
    set_key_variable();
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let mark = dir.path().join("mark");
    std::fs::create_dir_all(&mark).unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let root = dir.path().join("workspaces");
    let extra = json!({"workspaces": {
        "root": root,
        "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
        "agents": {"hostile": {
            "command": ["sh", HOSTILE, "{instructions}"],
            "output": "jsonl",
            "sandbox": sandboxed,
            "env": {
                "MARK": mark,
                "WORKSPACES": root,
                "CHECKOUT": env!("CARGO_MANIFEST_DIR"),
                "OPENAI_API_KEY": format!("${{{KEY_VARIABLE}}}"),
            },
        }},
        "agent": "hostile",
        "direct": true,
        // A hook that calls git, after every run: it must obey no configuration the agent wrote.
        "hooks": {"after_run": "git status --porcelain > /dev/null; git log -1 --format=%s > /dev/null"},
        "max_file_bytes": 1024 * 1024,
    }});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    World { dir, remote, mark, board, model, agent, alice }
}

impl World {
    /// Assigns a task whose title names `attack`, and waits for its run's end: the run, and what
    /// picogent left on the task.
    async fn attack(&self, attack: &str) -> (TaskOut, RunRow, Vec<MessageOut>) {
        // Anyone on the board can write a token they saw into a task: the agent reads it there.
        let description = "Edit src/date.py. Use the token tok-picogent.";
        let task = create_assigned(&self.alice, &format!("Please do the {attack} thing"), description).await;
        let (run, said) = self.ended(&task).await;
        (task, run, said)
    }

    async fn ended(&self, task: &TaskOut) -> (RunRow, Vec<MessageOut>) {
        let session = format!("task:{}", task.id);
        let run = eventually(Duration::from_secs(120), "the run's end", || async {
            let ended = [RunStatus::Completed, RunStatus::Failed, RunStatus::Stopped, RunStatus::DidNothing];
            runs_for(&self.agent, &session).await.into_iter().find(|run| ended.contains(&run.status))
        })
        .await;
        let said = eventually(Duration::from_secs(30), "picogent's answer or notice", || async {
            let said: Vec<MessageOut> = comments(&self.alice, &task.id)
                .await
                .into_iter()
                .filter(|m| m.author_slug == "picogent" && !m.content.starts_with("On it"))
                .collect();
            (!said.is_empty()).then_some(said)
        })
        .await;
        (run, said)
    }

    fn branch(&self, task: &TaskOut) -> Option<String> {
        let found =
            git(&self.remote, &["for-each-ref", "--format=%(refname)", &format!("refs/heads/picogent/{}", task.key)]);
        (!found.is_empty()).then_some(found)
    }

    fn pushed_file(&self, task: &TaskOut, file: &str) -> String {
        git(&self.remote, &["show", &format!("picogent/{}:{file}", task.key)])
    }

    /// Nothing was written or run outside the workspace.
    fn nothing_outside(&self) {
        let left: Vec<String> = std::fs::read_dir(&self.mark)
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.is_empty(), "the agent reached outside its workspace: {left:?}");
    }

    async fn shutdown(self) {
        self.agent.shutdown().await.unwrap();
        self.model.shutdown().await;
        self.board.shutdown().await.unwrap();
        drop(self.dir);
    }
}

/// picogent's first post on `task` past its acknowledgement: its answer or its notice.
async fn first_word(alice: &TrackerClient, task: &TaskOut, within: Duration, what: &str) -> MessageOut {
    eventually(within, what, || async {
        comments(alice, &task.id)
            .await
            .into_iter()
            .find(|m| m.author_slug == "picogent" && !m.content.starts_with("On it"))
    })
    .await
}

fn one(said: &[MessageOut]) -> &str {
    assert_eq!(said.len(), 1, "one answer or notice: {said:#?}");
    &said[0].content
}

/// The `fsmonitor` and `gitfile` attacks: a `.git` that is not picogent's.
async fn tampered_git(world: &World, attack: &str, sandboxed: bool) {
    let (task, run, said) = world.attack(attack).await;
    world.nothing_outside();
    if sandboxed {
        assert_eq!(run.status, RunStatus::Completed, "{said:#?}");
        assert!(world.branch(&task).is_some());
    } else {
        assert_eq!(run.status, RunStatus::Failed);
        let notice = one(&said);
        assert!(notice.contains("was tampered with") && notice.contains(".git"), "{notice}");
        assert!(world.branch(&task).is_none(), "nothing pushed from a tampered workspace");
        // Removed, not reused: the next run makes it anew from its branch.
        let workspace = world.dir.path().join("workspaces/app").join(&task.key);
        assert!(!workspace.exists(), "the tampered workspace was removed");
    }
}

/// The attacks whose rule holds with or without the sandbox.
async fn attacks_every_mode(world: &World, sandboxed: bool) {
    // A `.git` of the agent's own (a repository in its place, or a file naming one elsewhere),
    // with an fsmonitor and a hook: picogent's git obeys neither. In the sandbox `.git` cannot be
    // replaced, and the work is pushed; without it, the workspace is refused, one notice names
    // it, nothing is pushed.
    for attack in ["fsmonitor", "gitfile"] {
        tampered_git(world, attack, sandboxed).await;
    }

    // A filter, an fsmonitor, a URL rewrite, attributes and a hook written into the mirror
    // through the worktree's record: none runs, and the work is pushed.
    let (task, run, said) = world.attack("filter").await;
    world.nothing_outside();
    assert_eq!(run.status, RunStatus::Completed, "{said:#?}");
    let answer = one(&said);
    assert!(answer.contains(&format!("Work: branch `picogent/{}`", task.key)), "{answer}");
    // The answer says when the coding agent ran without the sandbox, and why.
    assert_eq!(
        answer.contains("The coding agent ran without the sandbox: its entry says sandbox: false"),
        !sandboxed,
        "{answer}"
    );
    assert!(world.pushed_file(&task, "src/date.py").contains("touched by the hostile stand-in"));
    let mirror_config = std::fs::read_to_string(world.dir.path().join("workspaces/.mirrors/app.git/config")).unwrap();
    assert!(!mirror_config.contains("evil") && !mirror_config.contains("fsmonitor"), "{mirror_config}");

    // Links out of the worktree (a host file, /dev/zero, a climb out): not committed, one notice
    // naming each, nothing pushed.
    let (task, run, said) = world.attack("links").await;
    world.nothing_outside();
    assert_eq!(run.status, RunStatus::Failed);
    let notice = one(&said);
    for file in ["host-passwd", "zero", "up"] {
        assert!(notice.contains(&format!("{file} is a link out of the worktree")), "{notice}");
    }
    assert!(world.branch(&task).is_none());

    // A 2 GiB sparse file: refused by its size, unread, one notice.
    let (task, run, said) = world.attack("sparse").await;
    world.nothing_outside();
    assert_eq!(run.status, RunStatus::Failed);
    let notice = one(&said);
    assert!(notice.contains("big.bin is 2147483648 bytes, over workspaces.max_file_bytes"), "{notice}");
    assert!(world.branch(&task).is_none());

    // Secrets the agent holds (its key, from `${VAR}`; the tracker's token, told to it; a
    // private key): the commit stays local, the push is refused naming file and rule, never the
    // secret itself.
    let (task, run, said) = world.attack("secrets").await;
    world.nothing_outside();
    assert_eq!(run.status, RunStatus::Failed);
    let notice = one(&said);
    assert!(notice.contains(&format!("config.txt holds the value of {KEY_VARIABLE}")), "{notice}");
    assert!(notice.contains("token.txt holds the tracker's token (TEAMBOARD_TOKEN)"), "{notice}");
    assert!(notice.contains("id_ed25519 holds what looks like a private key"), "{notice}");
    assert!(notice.contains("the commit stays in the workspace"), "{notice}");
    assert!(!notice.contains(KEY_VALUE) && !notice.contains("tok-picogent"), "{notice}");
    assert!(world.branch(&task).is_none(), "nothing pushed");
    let workspace = world.dir.path().join("workspaces/app").join(&task.key);
    let local = git(&workspace, &["log", "-1", "--format=%s"]);
    assert!(local.starts_with(&task.key), "the commit is kept locally: {local}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_coding_agents_in_the_sandbox_reach_nothing_and_push_nothing_they_should_not() {
    bwrap_installed();
    let world = world(true).await;
    attacks_every_mode(&world, true).await;

    // What of the host the agent can read: only the system's programs, no account of the host's,
    // no /root or /home, no other workspace, no secret in any environment it can see.
    let (task, run, said) = world.attack("copy").await;
    world.nothing_outside();
    assert_eq!(run.status, RunStatus::Completed, "{said:#?}");
    let passwd = world.pushed_file(&task, "copied-passwd");
    let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    for account in host_passwd.lines().filter_map(|line| line.split(':').next()) {
        if account != "root" {
            assert!(!passwd.contains(&format!("{account}:")), "the host's account {account} is visible: {passwd}");
        }
    }
    let root = world.pushed_file(&task, "root-listing.txt");
    assert!(root.contains("No such file"), "/root is hidden: {root}");
    let home = world.pushed_file(&task, "home-listing.txt");
    assert!(home.contains("No such file"), "/home is hidden: {home}");
    let slash = world.pushed_file(&task, "slash-listing.txt");
    for hidden in ["root", "home", "srv"] {
        assert!(!slash.lines().any(|line| line == hidden), "/{hidden} is shown: {slash}");
    }
    let shadow = world.pushed_file(&task, "shadow-size.txt");
    assert!(shadow.trim() == "0" || shadow.contains("No such file"), "/etc/shadow is blank: {shadow}");
    // Of picogent's own checkout, only the folder of the script the entry runs and picogent's
    // executable (the relay, under `target` unless CARGO_TARGET_DIR puts it elsewhere) are there.
    let checkout = world.pushed_file(&task, "checkout-listing.txt");
    let shown: Vec<&str> = checkout.lines().filter(|name| !name.starts_with('.')).collect();
    assert!(
        shown.contains(&"fixtures") && shown.iter().all(|name| ["fixtures", "target"].contains(name)),
        "{checkout}"
    );
    let listing = world.pushed_file(&task, "workspaces-listing.txt");
    let others: Vec<&str> = listing.lines().filter(|name| !name.starts_with('.') && *name != task.key).collect();
    assert!(others.is_empty(), "other tasks' workspaces are hidden: {listing}");
    let environ = world.pushed_file(&task, "environ-dump.txt");
    assert!(!environ.contains("tok-") && !environ.contains(MCP_TOKEN), "{environ}");
    world.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_coding_agents_without_the_sandbox_still_run_nothing_as_picogent_and_push_nothing_they_should_not() {
    let world = world(false).await;
    attacks_every_mode(&world, false).await;
    world.shutdown().await;
}

/// `hostile.sh`'s `plant` attack, run twice in one workspace as `run_coding_agent` runs it: the
/// links it left where picogent writes its own files (the instructions, the entry's files, the
/// sandbox's files, the process group's note) are replaced, never written through.
async fn planted_links_are_not_written_through(sandboxed: bool) {
    sandbox::set_relay_program(PathBuf::from(env!("CARGO_BIN_EXE_picogent")));
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("mark");
    std::fs::create_dir_all(&mark).unwrap();
    let model = start_model(0).await;
    let workspaces = Workspaces::new(Arc::new(one_repository(dir.path())), "picogent", "p@x");
    let (workspace, _) = workspaces.open("app", &TaskKey::new("TE-1").unwrap(), None).await.unwrap();
    let entry = CodingAgentConfig {
        command: Some(vec!["sh".into(), HOSTILE.into(), "{instructions}".into()]),
        env: Some(BTreeMap::from([("MARK".to_string(), mark.to_string_lossy().into_owned())])),
        files: Some(BTreeMap::from([("settings.json".to_string(), "{}".to_string())])),
        sandbox: Some(sandboxed),
        ..CodingAgentConfig::default()
    };
    let agent = entry.resolve("hostile").unwrap();
    let base_url = model.url().replace("127.0.0.1", "localhost");
    for round in 0..2 {
        let invocation =
            Invocation { agent: &agent, workspace: &workspace, instructions: "plant", model: "m", base_url: &base_url };
        let report = coding::run(&invocation, &|_| {}, &CancellationToken::new()).await;
        assert!(report.finished(), "round {round}: {report:?}");
        let written: Vec<_> = std::fs::read_dir(&mark).unwrap().flatten().map(|entry| entry.file_name()).collect();
        assert!(written.is_empty(), "round {round}: picogent wrote through a planted link: {written:?}");
    }
    let instructions = std::fs::symlink_metadata(workspace.home.join("instructions.md")).unwrap();
    assert!(instructions.file_type().is_symlink(), "the agent's last link is there, and was never followed");
    model.shutdown().await;
}

fn one_repository(dir: &Path) -> WorkspacesConfig {
    WorkspacesConfig {
        root: dir.join("w"),
        repositories: BTreeMap::from([(
            "app".to_string(),
            Repository {
                url: remote(dir).to_string_lossy().into_owned(),
                base: "main".into(),
                push: None,
                projects: vec!["team".into()],
                labels: vec![],
            },
        )]),
        ..WorkspacesConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_where_picogent_writes_are_replaced_not_followed_in_and_out_of_the_sandbox() {
    bwrap_installed();
    planted_links_are_not_written_through(true).await;
    planted_links_are_not_written_through(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_of_a_workspace_holding_a_sparse_file_and_a_link_to_dev_zero_is_read_within_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let workspaces = Workspaces::new(Arc::new(one_repository(dir.path())), "picogent", "p@x");
    let (workspace, _) = workspaces.open("app", &TaskKey::new("TE-2").unwrap(), None).await.unwrap();
    std::fs::File::create(workspace.path.join("big.bin")).unwrap().set_len(2 << 30).unwrap();
    std::os::unix::fs::symlink("/dev/zero", workspace.path.join("zero")).unwrap();
    std::fs::write(workspace.path.join("notes.txt"), "one\ntwo\n").unwrap();
    let before = peak_memory_kib();
    let status = workspaces.status(&workspace).await.unwrap();
    let grew = peak_memory_kib().saturating_sub(before);
    assert_eq!(status.diff.insertions, 2, "the text file's lines; nothing read from the others: {status:?}");
    assert!(status.diff.files.iter().any(|file| file == "big.bin"), "{status:?}");
    assert!(grew < 256 * 1024, "reading the status took {grew} KiB more at its peak");
}

/// This process's peak resident memory, in KiB.
fn peak_memory_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A coding agent without the sandbox reads what it can of its parent, picogent, as a process
/// of its own: `/proc/$PPID/environ`, `cmdline`, and its memory through `maps` and `mem`.
const PROC_PROBE: &str = r#"
out="$HOME/proc-probe.txt"
{
  echo "environ:"; cat /proc/$PPID/environ 2>&1 | tr '\0' '\n'
  echo "cmdline:"; cat /proc/$PPID/cmdline 2>&1 | tr '\0' ' '; echo
  echo "maps:"; head -c 300 /proc/$PPID/maps 2>&1; echo
  echo "mem:"; python3 - "$PPID" <<'PY' 2>&1
import re, sys
pid = sys.argv[1]
found = []
try:
    maps = open(f"/proc/{pid}/maps").read().splitlines()
    with open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)
            if not m:
                continue
            start, end = int(m.group(1), 16), int(m.group(2), 16)
            if end - start > 64 << 20:
                continue
            try:
                mem.seek(start)
                if b"tok-picogent" in mem.read(end - start):
                    found.append(line)
            except OSError:
                pass
    print("read its memory; the token found in", len(found), "regions")
except OSError as error:
    print("refused:", error)
PY
} > "$out" 2>&1
printf '{"type":"result","subtype":"success","result":"probed"}\n'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coding_agent_without_the_sandbox_reads_no_token_from_picogents_process() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"workspaces": {
        "root": dir.path().join("workspaces"),
        "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
        "agents": {"probe": {"command": ["sh", "-c", PROC_PROBE], "output": "jsonl", "sandbox": false}},
        "agent": "probe",
        "direct": true,
    }});
    let config = agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra);
    let config_path = write_config(dir.path(), &config);
    // The real program, its token in its environment as an operator gives it.
    let mut picogent = spawn_agent_process(&config_path);
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Probe", "Look at src/date.py").await;
    let probe = dir.path().join("workspaces/.homes/app").join(&task.key).join("proc-probe.txt");
    first_word(&alice, &task, Duration::from_secs(60), "the probe's answer").await;
    let found = std::fs::read_to_string(&probe).unwrap();
    assert!(!found.contains("tok-picogent"), "a token of picogent's reached the coding agent:\n{found}");
    assert!(found.contains("mem:"), "{found}");
    assert!(found.contains("refused:") && !found.contains("read its memory"), "its memory is refused: {found}");
    picogent.kill().unwrap();
    picogent.wait().unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_tasks_of_one_repository_on_a_fresh_install_each_get_their_branch() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote(dir.path());
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"workspaces": {
        "root": dir.path().join("workspaces"),
        "repositories": {"app": {"url": remote, "base": "main", "projects": ["team"]}},
        "agents": {"stand-in": {"command": ["sh", STAND_IN, "{instructions}"], "output": "jsonl"}},
        "agent": "stand-in",
        "direct": true,
    }});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let mut tasks = Vec::new();
    for n in 0..4 {
        let fix = format!("In src/date.py replace \"2020-01-01\" with \"2024-06-0{}\".", n + 1);
        tasks.push(create_assigned(&alice, &format!("Fix the date, part {n}"), &fix).await);
    }
    for (n, task) in tasks.iter().enumerate() {
        let answer = first_word(&alice, task, Duration::from_secs(120), "the answer").await;
        let branch = format!("picogent/{}", task.key);
        assert!(answer.content.contains(&format!("Work: branch `{branch}`")), "{}", answer.content);
        let file = git(&remote, &["show", &format!("{branch}:src/date.py")]);
        assert!(file.contains(&format!("2024-06-0{}", n + 1)), "{file}");
    }
    wait_idle(&agent).await;
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

/// A failure of picogent's own step (the repository cannot be cloned) is named as such, never
/// blamed on the coding agent, which did not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_that_cannot_be_prepared_is_named_as_picogents_step() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let extra = json!({"workspaces": {
        "root": dir.path().join("workspaces"),
        "repositories": {"app": {"url": dir.path().join("no-such-repository.git"), "base": "main", "projects": ["team"]}},
        "agents": {"stand-in": {"command": ["sh", STAND_IN, "{instructions}"], "output": "jsonl"}},
        "agent": "stand-in",
        "direct": true,
    }});
    let agent = start_agent(agent_config(dir.path(), &board.url(), &model.url(), "picogent", extra)).await;
    wait_ready(&agent).await;
    let alice = client(&board, "tok-alice");
    let task = create_assigned(&alice, "Fix the date", "In src/date.py replace \"2020\" with \"2024\".").await;
    let notice = first_word(&alice, &task, Duration::from_secs(60), "the notice").await;
    assert!(notice.content.starts_with("I could not prepare the workspace: "), "{}", notice.content);
    assert!(notice.content.contains("git clone"), "{}", notice.content);
    assert!(!notice.content.contains("coding agent"), "no coding agent ran: {}", notice.content);
    wait_idle(&agent).await;
    agent.shutdown().await.unwrap();
    model.shutdown().await;
    board.shutdown().await.unwrap();
}

#[test]
fn task_text_starting_with_dashes_is_never_an_option_of_a_presets_cli() {
    for preset in ["qwen-code", "mini-swe-agent", "claude-code", "gemini-cli", "codex", "opencode"] {
        let entry: CodingAgentConfig = serde_json::from_value(json!({"preset": preset})).unwrap();
        let agent = entry.resolve(preset).unwrap();
        let words: Vec<&String> = agent.command.iter().filter(|word| word.contains("{instructions}")).collect();
        assert_eq!(words.len(), 1, "{preset}: {words:?}");
        let word = words[0];
        // Joined to its option, or the last argument, after the `--` that ends the options.
        let after_dashes = agent.command.ends_with(&["--".to_string(), "{instructions}".to_string()]);
        assert!(
            (word.starts_with("--") && word.contains("={instructions}")) || after_dashes,
            "{preset}: the task's text is joined to its option or comes after `--`, never an option: {:?}",
            agent.command
        );
    }
}
