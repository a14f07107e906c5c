//! The image `deploy/Containerfile` describes, built and run for real, offline. Debian's buildah
//! (a daemonless builder, its steps run with chroot isolation) builds the shipped file as it is
//! written, from a base made of Debian's own packages (`tests/container/install.sh`: no container
//! registry is reachable from these machines), with one difference: the build stage is handed in
//! instead of run. `--build-context build=<dir>` gives it this test's own build of picogent at the
//! path the stage leaves it, since a release build inside the image takes 12 minutes on 2 cores.
//! The image then runs `picogent run` as its own user against the reference board and the offline
//! model on loopback, and a person's mention gets its one answer in the thread.

#[path = "support/agent.rs"]
mod agent_support;
#[path = "support/setup.rs"]
mod setup;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agent_support::*;
use serde_json::json;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `buildah <args>` to its end; panics with what it said when it fails.
fn buildah(args: &[&str]) -> String {
    let output = Command::new("buildah").args(args).current_dir(root()).output().unwrap();
    assert!(output.status.success(), "buildah {}: {}", args.join(" "), said(&output));
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

fn said(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// The image built for this test and a container of it, both removed when dropped.
struct Image {
    tag: String,
    container: Option<String>,
}

impl Drop for Image {
    fn drop(&mut self) {
        if let Some(container) = &self.container {
            let _ = Command::new("buildah").args(["rm", container]).output();
        }
        let _ = Command::new("buildah").args(["rmi", "-f", &self.tag]).output();
    }
}

/// `deploy/Containerfile` built from the root of the clone, its build stage being `binary`.
fn build_image(binary: &Path, context: &Path) -> Image {
    let stage = context.join("src/target/release");
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::copy(binary, stage.join("picogent")).unwrap();
    let image = Image { tag: format!("localhost/picogent-test:{}", std::process::id()), container: None };
    let build_context = format!("build={}", context.display());
    buildah(&[
        "bud",
        "--pull=never",
        "--layers=false",
        "--isolation=chroot",
        "--build-context",
        &build_context,
        "-f",
        "deploy/Containerfile",
        "-t",
        &image.tag,
        ".",
    ]);
    image
}

/// The `major.minor` of `git version 2.47.3`.
fn git_version(line: &str) -> (u32, u32) {
    let version = line.trim().strip_prefix("git version ").unwrap_or_else(|| panic!("{line}"));
    let mut parts = version.split('.').map(|part| part.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_builds_and_answers_a_mention_as_its_own_user() {
    setup::ensure("tests/container/install.sh");
    let dir = tempfile::tempdir().unwrap();
    let mut image = build_image(Path::new(env!("CARGO_BIN_EXE_picogent")), &dir.path().join("context"));

    // What the image says it runs, and as whom.
    let config = buildah(&[
        "inspect",
        "--type",
        "image",
        "--format",
        "{{.OCIv1.Config.User}}|{{.OCIv1.Config.Entrypoint}}|{{.OCIv1.Config.Cmd}}",
        &image.tag,
    ]);
    assert_eq!(config, "picogent|[/usr/local/bin/picogent]|[run --config /etc/picogent/agent.json]");
    let container = buildah(&["from", "--pull=never", "-q", &image.tag]);
    image.container = Some(container.clone());
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--isolation=chroot", container.as_str(), "--"];
        all.extend_from_slice(args);
        buildah(&all)
    };
    assert_eq!(run(&["id", "-un"]), "picogent");
    assert_ne!(run(&["id", "-u"]), "0");
    assert_eq!(run(&["stat", "-c", "%U %a", "/var/lib/picogent"]), "picogent 700");
    let git = run(&["git", "--version"]);
    assert!(git_version(&git) >= (2, 40), "the workspaces need git 2.40 or later: {git}");
    assert!(run(&["bwrap", "--version"]).starts_with("bubblewrap "));
    assert!(run(&["ls", "/etc/picogent/prompts"]).lines().any(|name| name.ends_with(".md")));

    // `picogent run` in the image, its state in the image's state folder, its config mounted.
    let board = start_board(dir.path()).await;
    let model = start_model(0).await;
    let mut config =
        serde_json::to_value(agent_config(dir.path(), &board.url(), &model.url(), "picogent", json!({}))).unwrap();
    merge(
        &mut config,
        json!({"state": {"path": "/var/lib/picogent/picogent.db"}, "prompts_dir": "/etc/picogent/prompts"}),
    );
    let config_path = dir.path().join("agent.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let log_path = dir.path().join("agent.log");
    let mount = format!("{}:/etc/picogent/agent.json:ro", config_path.display());
    let mut agent = Agent(
        Command::new("buildah")
            .args(["run", "--isolation=chroot", "-v", &mount])
            .args(["-e", "TEAMBOARD_TOKEN=tok-picogent", "-e", "RUST_LOG=warn"])
            .args([container.as_str(), "--", "/usr/local/bin/picogent", "run", "--config", "/etc/picogent/agent.json"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
        log_path,
    );

    let alice = client(&board, "tok-alice");
    let question = say(&alice, &chat_id(&alice).await, "@picogent what is open on the board?").await;
    let mine = || async {
        thread(&alice, &question.id).await.into_iter().filter(|m| m.author_slug == "picogent").collect::<Vec<_>>()
    };
    let asked = std::time::Instant::now();
    let posts = loop {
        let posts = mine().await;
        if !posts.is_empty() {
            break posts;
        }
        assert!(!agent.exited(), "the agent in the image ended before it answered: {}", agent.log());
        assert!(asked.elapsed() < Duration::from_secs(120), "no answer in 120 s: {}", agent.log());
        tokio::time::sleep(Duration::from_millis(50)).await; // the poll's interval
    };
    assert!(!posts[0].content.trim().is_empty());

    // Stopped as a container is stopped: SIGTERM; it ends cleanly, having posted once.
    let status = agent.stop();
    assert!(status.success(), "{status:?}: {}", agent.log());
    assert_eq!(mine().await.len(), 1, "one answer, nothing twice");
    board.shutdown().await.unwrap();
}

/// `buildah run … picogent run`: buildah, with picogent among its descendants.
struct Agent(std::process::Child, PathBuf);

impl Agent {
    fn exited(&mut self) -> bool {
        self.0.try_wait().ok().flatten().is_some()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }

    /// SIGTERM to picogent itself, as `podman stop` sends it to the container's first process;
    /// buildah then ends with picogent's exit status. (A signal to buildah would make it kill
    /// what it runs.)
    fn stop(&mut self) -> std::process::ExitStatus {
        let pid = descendant_named(self.0.id(), "picogent").unwrap_or_else(|| panic!("no picogent: {}", self.log()));
        let sent = Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
        assert!(sent.success());
        tokio::task::block_in_place(|| self.0.wait().unwrap())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if !self.exited() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The first process named `name` (its `comm`) under `root`, read from `/proc`.
fn descendant_named(root: u32, name: &str) -> Option<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|pid| pid.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses, so split at the last ')'.
        let Some((head, tail)) = stat.rsplit_once(')') else { continue };
        let comm = head.split_once('(').map(|(_, comm)| comm.to_string()).unwrap_or_default();
        let ppid = tail.split_whitespace().nth(1).and_then(|ppid| ppid.parse::<u32>().ok()).unwrap_or(0);
        parents.push((pid, ppid, comm));
    }
    let mut under = vec![root];
    let mut seen = 0;
    while seen < under.len() {
        let parent = under[seen];
        seen += 1;
        for (pid, ppid, comm) in &parents {
            if *ppid == parent {
                if comm == name {
                    return Some(*pid);
                }
                under.push(*pid);
            }
        }
    }
    None
}
