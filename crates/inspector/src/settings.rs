//! What the inspector reads of the agent's configuration, handed to it by whoever serves the
//! pages or prints the text (the runtime, the binary): the inspector never reads `agent.json`.

/// The settings the pages and the `runs` text read, each named by the setting it comes from.
/// Built from the configuration by `picogent_runtime::inspector_settings`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `slug`: the agent the pages are of.
    pub slug: String,
    /// `tracker.url`, for the health page (shown without user info or query).
    pub tracker_url: String,
    /// Where the board shows a task, with `{id}` where the task's id goes: `http.task_link`, or
    /// the reference board's `{tracker.url}/tasks/{id}`.
    pub task_pages: String,
    /// Where the board shows a thread (its first message), as `task_pages`: `http.message_link`,
    /// or `{tracker.url}/messages/{id}`.
    pub message_pages: String,
    /// `limits`: the run's budgets a run page measures against, the day's the spend page shows.
    pub limits: picogent_agent::Limits,
    /// `llm.model`, for the health page.
    pub model: String,
    /// `llm.base_url`, for the health page (shown without user info or query).
    pub model_url: String,
    /// Whether `llm.price` is set: the spend page shows money only then.
    pub priced: bool,
    /// `http.listen`: the listener, whose address is one of the names the pages answer to.
    pub listen: String,
    /// `http.allowed_hosts`: the other names they answer to.
    pub allowed_hosts: Vec<String>,
    /// `http.max_live_streams`.
    pub max_live_streams: usize,
    /// `http.session_idle_ms` and `http.session_lifetime_ms`: how long a session of the token
    /// form lasts.
    pub sessions: picogent_web::SessionLimits,
}

impl Settings {
    /// The board's page of the task `id`.
    pub fn task_link(&self, id: &str) -> String {
        self.task_pages.replace("{id}", id)
    }

    /// The board's page of the message `id` (a thread's first message).
    pub fn message_link(&self, id: &str) -> String {
        self.message_pages.replace("{id}", id)
    }
}
