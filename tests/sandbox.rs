//! A coding agent in the sandbox, for real: Debian's bubblewrap (`bwrap`, installed on first use
//! by `tests/coding-agents/install_bwrap.sh`), picogent's own `sandbox-relay` inside it, and the
//! offline model endpoint (a stand-in for a model) as the model. The agent is a shell script that
//! tries what a coding agent could: reach the model, reach another address, write outside its
//! workspace, write in it. Only the model and the workspace answer.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};

#[path = "support/git.rs"]
mod git_support;
#[path = "support/setup.rs"]
mod setup;

use git_support::remote;
use picogent_workspace::config::{CodingAgentConfig, Repository, WorkspacesConfig};
use picogent_workspace::{AgentEnd, Invocation, TaskKey, Workspaces, coding, sandbox};
use tokio_util::sync::CancellationToken;

/// What the sandboxed agent tries, each on a line of its output: `name ok` or `name refused`.
const PROBE: &str = r#"
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name ok"; else echo "$name refused"; fi; }
try model curl -sf --max-time 5 "$MODEL_URL/models"
curl -sf --max-time 5 "$MODEL_URL/models" | head -c 200; echo
try other curl -sf --max-time 3 "http://127.0.0.1:$OTHER_PORT/"
try outside sh -c "echo x > '$OUTSIDE/escaped'"
try workspace sh -c 'echo x > made-in-sandbox.txt'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_coding_agent_reaches_the_model_and_its_workspace_and_nothing_else() {
    setup::ensure_bwrap();
    assert!(
        Command::new("bwrap").arg("--version").output().is_ok_and(|out| out.status.success()),
        "bwrap is not installed: run `bash tests/coding-agents/install_bwrap.sh` (Debian's bubblewrap)"
    );
    // picogent's executable under /tmp, as from a checkout there: the sandbox's own /tmp must
    // not hide it (it is shown read-only at its own path).
    let dir = tempfile::tempdir().unwrap();
    let relay = dir.path().join("picogent");
    std::fs::copy(env!("CARGO_BIN_EXE_picogent"), &relay).unwrap();
    assert!(relay.starts_with("/tmp") || std::env::temp_dir() != std::path::Path::new("/tmp"), "{}", relay.display());
    sandbox::set_relay_program(relay);
    let model = picogent::offline_model::start(picogent::offline_model::OfflineModelOptions::planner()).await.unwrap();
    // Another address on this machine, answering anyone who reaches it.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in other.incoming().flatten() {
            use std::io::Write;
            let _ = (&stream).write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi");
        }
    });

    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let config = WorkspacesConfig {
        root: dir.path().join("w"),
        repositories: BTreeMap::from([(
            "app".to_string(),
            Repository {
                url: remote(dir.path()).to_string_lossy().into_owned(),
                base: "main".into(),
                push: None,
                projects: vec!["team".into()],
                labels: vec![],
            },
        )]),
        ..WorkspacesConfig::default()
    };
    let workspaces = Workspaces::new(Arc::new(config), "picogent", "p@x");
    let (workspace, _) = workspaces.open("app", &TaskKey::new("TE-1").unwrap(), None).await.unwrap();
    let entry = CodingAgentConfig {
        command: Some(vec!["sh".into(), "-c".into(), PROBE.into()]),
        env: Some(BTreeMap::from([
            ("MODEL_URL".to_string(), "{base_url}".to_string()),
            ("OTHER_PORT".to_string(), other_port.to_string()),
            ("OUTSIDE".to_string(), outside.to_string_lossy().into_owned()),
        ])),
        sandbox: Some(true),
        ..CodingAgentConfig::default()
    };
    let agent = entry.resolve("probe").unwrap();
    let base_url = model.url();
    let invocation =
        Invocation { agent: &agent, workspace: &workspace, instructions: "probe", model: "m", base_url: &base_url };
    let lines = Mutex::new(Vec::new());
    let report =
        coding::run(&invocation, &|line| lines.lock().unwrap().push(line.to_string()), &CancellationToken::new()).await;
    let lines = lines.into_inner().unwrap();
    assert_eq!(report.end, AgentEnd::Finished, "{report:?}\n{lines:#?}");
    for expected in ["model ok", "other refused", "outside refused", "workspace ok"] {
        assert!(lines.iter().any(|line| line == expected), "{expected:?} in {lines:#?}");
    }
    assert!(lines.iter().any(|line| line.contains("offline-planner")), "the model's answer came through: {lines:#?}");
    assert!(workspace.path.join("made-in-sandbox.txt").exists());
    assert!(!outside.join("escaped").exists());
    model.shutdown().await;
}
