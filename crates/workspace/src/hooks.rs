//! The workspace hooks (`workspaces.hooks`): the operator's shell commands, run with `sh -c` in
//! the workspace within `hooks.timeout_ms`, their output kept for the run's record. A hook sees
//! where it runs through `PICOGENT_WORKSPACE`, `PICOGENT_TASK_KEY`, `PICOGENT_BRANCH` and
//! `PICOGENT_REPOSITORY`, never through its command text: a task's text never reaches a shell.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::child::{self, Capped, Group};

/// How much of a hook's output is kept.
const HOOK_OUTPUT_BYTES: u64 = 64 * 1024;

/// Which point of a workspace's life a hook runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookPoint {
    AfterCreate,
    BeforeRun,
    AfterRun,
    BeforeRemove,
}

impl HookPoint {
    pub fn as_str(self) -> &'static str {
        match self {
            HookPoint::AfterCreate => "after_create",
            HookPoint::BeforeRun => "before_run",
            HookPoint::AfterRun => "after_run",
            HookPoint::BeforeRemove => "before_remove",
        }
    }
}

/// How a hook ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum HookEnd {
    Succeeded,
    Failed { status: String },
    TimedOut { after_ms: u64 },
    NotStarted { reason: String },
}

/// One hook that ran: what the run's record keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HookReport {
    pub point: HookPoint,
    pub end: HookEnd,
    pub output: String,
    pub duration_ms: u64,
}

impl HookReport {
    pub fn succeeded(&self) -> bool {
        self.end == HookEnd::Succeeded
    }

    /// In a sentence, for a notice: "the before_run hook failed (exit 3): npm ERR! …".
    pub fn describe(&self) -> String {
        let point = self.point.as_str();
        let tail = crate::git::last_lines(&self.output, 3);
        match &self.end {
            HookEnd::Succeeded => format!("the {point} hook succeeded"),
            HookEnd::Failed { status } => format!("the {point} hook failed ({status}): {tail}"),
            HookEnd::TimedOut { after_ms } => {
                format!("the {point} hook took longer than workspaces.hooks.timeout_ms ({after_ms} ms) and was stopped")
            }
            HookEnd::NotStarted { reason } => format!("the {point} hook could not start: {reason}"),
        }
    }
}

/// Runs `script` with `sh -c` in `dir`, with `vars` as its environment (besides `PATH`, `HOME`,
/// `LANG`), within `timeout`. Never fails: how it ended is in the report.
pub async fn run_hook(
    point: HookPoint,
    script: &str,
    dir: &Path,
    home: &Path,
    vars: &BTreeMap<String, String>,
    timeout: Duration,
) -> HookReport {
    let started = Instant::now();
    let report = |end: HookEnd, output: String| HookReport {
        point,
        end,
        output,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    let command = child::command("sh", &["-c".to_string(), script.to_string()], dir, home, vars);
    let mut group = match Group::spawn(command) {
        Ok(group) => group,
        Err(error) => return report(HookEnd::NotStarted { reason: error.to_string() }, String::new()),
    };
    let mut output = Capped::new(HOOK_OUTPUT_BYTES);
    let mut rx = group.lines();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            line = rx.recv() => match line {
                Some((_, line)) => output.push_line(&line),
                None => break,
            },
            () = &mut deadline => {
                group.stop().await;
                let after_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
                return report(HookEnd::TimedOut { after_ms }, output.shown());
            }
        }
    }
    let end = match tokio::time::timeout_at(deadline.deadline(), group.child.wait()).await {
        Ok(Ok(status)) if status.success() => HookEnd::Succeeded,
        Ok(Ok(status)) => HookEnd::Failed {
            status: status.code().map_or_else(|| "killed by a signal".to_string(), |code| format!("exit {code}")),
        },
        Ok(Err(error)) => HookEnd::NotStarted { reason: error.to_string() },
        Err(_) => {
            group.stop().await;
            HookEnd::TimedOut { after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX) }
        }
    };
    report(end, output.shown())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        BTreeMap::from([("PICOGENT_TASK_KEY".to_string(), "TE-1".to_string())])
    }

    #[tokio::test]
    async fn a_hook_runs_in_the_workspace_and_its_output_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let script = "echo \"key $PICOGENT_TASK_KEY in $(pwd)\"; echo oops >&2; touch made";
        let report =
            run_hook(HookPoint::AfterCreate, script, dir.path(), dir.path(), &vars(), Duration::from_secs(10)).await;
        assert!(report.succeeded(), "{report:?}");
        assert!(report.output.contains(&format!("key TE-1 in {}", dir.path().display())), "{report:?}");
        assert!(report.output.contains("oops"));
        assert!(dir.path().join("made").exists());
    }

    #[tokio::test]
    async fn a_failing_hook_says_how_and_a_hanging_one_is_stopped_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let failed = run_hook(
            HookPoint::BeforeRun,
            "echo broken; exit 3",
            dir.path(),
            dir.path(),
            &vars(),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(failed.end, HookEnd::Failed { status: "exit 3".into() });
        assert_eq!(failed.describe(), "the before_run hook failed (exit 3): broken");
        let hung = run_hook(
            HookPoint::AfterRun,
            "echo start; sleep 300",
            dir.path(),
            dir.path(),
            &vars(),
            Duration::from_millis(300),
        )
        .await;
        assert_eq!(hung.end, HookEnd::TimedOut { after_ms: 300 });
        assert!(hung.output.contains("start"));
        assert!(hung.describe().contains("workspaces.hooks.timeout_ms"));
    }
}
