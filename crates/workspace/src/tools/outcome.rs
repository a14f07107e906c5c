//! What one delegation did, as the model reads it, and the work it left (branch, commit, push)
//! as the run's answer names it.

use serde::Serialize;

use crate::coding::AgentReport;
use crate::hooks::HookReport;
use crate::workspace::Finished;

/// One run's coding work as the run's answer names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct WorkDone {
    pub repository: String,
    pub branch: String,
    pub commit: Option<String>,
    pub pushed: bool,
    pub diff: crate::DiffStat,
    /// From `workspaces.links.commit` (or `.branch` when there is no commit), filled in.
    pub link: Option<String>,
    /// Why the coding agent ran without the sandbox, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsandboxed: Option<String>,
}

impl WorkDone {
    /// "Work: branch `picogent/TE-1`, commit 1a2b3c4 (1 file(s) changed, +1 −1) <link>".
    pub fn describe(&self) -> String {
        let mut line = format!("Work: branch `{}`", self.branch);
        match &self.commit {
            Some(commit) => line.push_str(&format!(", commit {} ({})", short_sha(commit), self.diff.describe())),
            None => line.push_str(", no commit (nothing changed)"),
        }
        if let Some(link) = &self.link {
            line.push_str(&format!(" {link}"));
        }
        if let Some(why) = &self.unsandboxed {
            line.push_str(&format!(". The coding agent ran without the sandbox: {why}"));
        }
        line
    }
}

fn short_sha(commit: &str) -> &str {
    commit.get(..10).unwrap_or(commit)
}

/// What one delegation did: the hooks, the coding agent's report, and the end of the work.
#[derive(Debug, Clone, Serialize)]
pub struct CodingOutcome {
    pub hooks: Vec<HookReport>,
    pub report: AgentReport,
    /// The task's steps ticked from the coding agent's progress.
    pub ticked: Vec<String>,
    /// `None` when the coding agent did not finish (nothing is committed or pushed then).
    pub finished: Option<Finished>,
    pub work: Option<WorkDone>,
}

impl CodingOutcome {
    /// The tool's answer, for the model.
    pub fn text(&self) -> String {
        let report = &self.report;
        let mut text = match report.failure() {
            None => format!(
                "The coding agent {} finished ({}) in {} s.",
                report.agent,
                report.exit.as_deref().unwrap_or("?"),
                report.duration_ms / 1000
            ),
            Some(failure) => format!("{failure}. Nothing was committed or pushed."),
        };
        if !report.final_message.is_empty() {
            text.push_str(&format!("\nIts final message: {}", report.final_message));
        }
        if !report.progress.is_empty() {
            text.push_str(&format!("\nSteps it took: {}", report.progress.join("; ")));
        }
        if !self.ticked.is_empty() {
            text.push_str(&format!(
                "\nSteps ticked on the task (its to-do list said done): {}",
                self.ticked.join("; ")
            ));
        }
        for hook in self.hooks.iter().filter(|hook| !hook.succeeded()) {
            text.push_str(&format!("\n{}", hook.describe()));
        }
        if let Some(work) = &self.work {
            let files = work.diff.files.join(", ");
            text.push_str(&format!("\n{} [{files}]", work.describe()));
            text.push_str(if work.pushed { "; pushed." } else { "; the remote had it already." });
        }
        if report.failure().is_some() {
            text.push_str(&format!("\nIts last output:\n{}", crate::git::last_lines(&report.output, 12)));
        }
        text
    }
}
