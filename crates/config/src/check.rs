//! What [`Config::validate`] checks that types alone cannot: values in range, URLs that parse,
//! names that are sane. Each problem names its field.

use std::path::Path;

use picogent_support::setting::{Problem, problem};

use crate::{Config, ConfigError, PRESENCE_HEARTBEAT_MS};

impl Config {
    /// Checks what types alone cannot: values in range, URLs that parse, names that are sane.
    /// The sections of the crates below check themselves (`limits`, `mcp`, `mcp_servers`,
    /// `delegation`, `workspaces`, `schedules`); this checks the agent's own and how the sections fit together.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        self.check_identity()
            .and_then(|()| self.mcp.check())
            .and_then(|()| self.check_llm())
            .and_then(|()| self.limits.check())
            .and_then(|()| self.check_cost())
            .and_then(|()| self.check_numbers())
            .and_then(|()| picogent_mcp::config::check_servers(&self.mcp_servers))
            .and_then(|()| self.check_permissions())
            .and_then(|()| self.delegation.check())
            .and_then(|()| self.check_retention())
            .and_then(|()| self.check_presence())
            .and_then(|()| self.check_replicas())
            .and_then(|()| self.workspaces.check())
            .and_then(|()| picogent_schedule::check(&self.schedules, path.parent().unwrap_or(Path::new("."))))
            .map_err(|Problem { field, message }| ConfigError::Field { path: path.to_path_buf(), field, message })
    }

    fn check_identity(&self) -> Result<(), Problem> {
        if !picogent_tracker::model::slug_ok(&self.slug) {
            return problem("slug", "expected a member slug: letters, digits, '-' or '_'");
        }
        if self.name.trim().is_empty() {
            return problem("name", "expected a non-empty display name");
        }
        for (name, url) in [("tracker.url", &self.tracker.url), ("llm.base_url", &self.llm.base_url)] {
            check_url(name, url)?;
        }
        let api_key_env = self.llm.api_key_env.as_deref().unwrap_or("OPENAI_API_KEY");
        no_credential(
            "llm.base_url",
            &self.llm.base_url,
            &format!(
                "give the key in an environment variable and name it in llm.api_key_env (e.g. \"api_key_env\": \"{api_key_env}\"); it is sent as a bearer token"
            ),
        )?;
        no_credential(
            "tracker.url",
            &self.tracker.url,
            &format!(
                "give the member's token in the environment variable tracker.token_env names (now {})",
                self.tracker.token_env
            ),
        )?;
        if !self.tracker.api_prefix.is_empty() && !self.tracker.api_prefix.starts_with('/') {
            return problem("tracker.api_prefix", "expected a path starting with '/', or empty");
        }
        for (name, variable) in
            [("tracker.token_env", &self.tracker.token_env), ("http.ui_token_env", &self.http.ui_token_env)]
        {
            if variable.trim().is_empty() {
                return problem(name, "expected the name of an environment variable");
            }
        }
        if self.http.listen.parse::<std::net::SocketAddr>().is_err() {
            return problem("http.listen", "expected an address like 127.0.0.1:9464");
        }
        if let Some(bad) = self.http.allowed_hosts.iter().find(|host| !picogent_web::hosts::is_host_name(host)) {
            return problem(
                "http.allowed_hosts",
                &format!(
                    "{bad:?} is not a host name: expected a name or address, with a port or not, like agent.example.com or agent.example.com:8443 (no scheme, no path)"
                ),
            );
        }
        self.check_http_limits()?;
        for (name, link) in [("http.task_link", &self.http.task_link), ("http.message_link", &self.http.message_link)] {
            if let Some(link) = link {
                check_url(name, link)?;
                if !link.contains("{id}") {
                    return problem(name, "expected a URL with {id} where the task's or message's id goes");
                }
            }
        }
        Ok(())
    }

    fn check_http_limits(&self) -> Result<(), Problem> {
        let http = &self.http;
        if !(100..=300_000).contains(&http.header_timeout_ms) {
            return problem(
                "http.header_timeout_ms",
                "expected milliseconds from 100 to 300000 for a client to send its request's headers",
            );
        }
        if !(1..=65_536).contains(&http.max_connections) {
            return problem("http.max_connections", "expected a number of connections from 1 to 65536");
        }
        if !(1..=http.max_connections).contains(&http.max_live_streams) {
            return problem(
                "http.max_live_streams",
                "expected a number of live streams from 1 to http.max_connections (each holds a connection)",
            );
        }
        if http.session_idle_ms < 1_000 {
            return problem("http.session_idle_ms", "expected milliseconds, at least 1000 (8 hours is 28800000)");
        }
        if http.session_lifetime_ms < 1_000 {
            return problem("http.session_lifetime_ms", "expected milliseconds, at least 1000 (24 hours is 86400000)");
        }
        Ok(())
    }

    fn check_llm(&self) -> Result<(), Problem> {
        if self.llm.model.trim().is_empty() {
            return problem("llm.model", "expected a model name");
        }
        if let Some(t) = self.llm.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return problem("llm.temperature", "expected a number from 0 to 2");
        }
        if self.llm.context_tokens < 1_024 {
            return problem("llm.context_tokens", "expected the model's context window, at least 1024 tokens");
        }
        if let Some(price) = self.llm.price
            && [price.input_per_million, price.output_per_million]
                .into_iter()
                .chain(price.cache_read_per_million)
                .chain(price.cache_write_per_million)
                .any(|p| p.is_nan() || p < 0.0)
        {
            return problem("llm.price", "expected prices of 0 or more per million tokens");
        }
        Ok(())
    }

    /// The day's money budget counts the cost at `llm.price`.
    fn check_cost(&self) -> Result<(), Problem> {
        if self.limits.max_cost_per_day.is_some() && self.llm.price.is_none() {
            return problem("limits.max_cost_per_day", "needs llm.price to count the cost");
        }
        Ok(())
    }

    fn check_numbers(&self) -> Result<(), Problem> {
        let positive = [
            ("tracker.timeout_ms", self.tracker.timeout_ms),
            ("llm.timeout_ms", self.llm.timeout_ms),
            ("llm.idle_timeout_ms", self.llm.idle_timeout_ms),
            ("llm.max_concurrent_requests", self.llm.max_concurrent_requests.map_or(1, u64::from)),
            ("llm.max_output_tokens", self.llm.max_output_tokens.map_or(1, u64::from)),
            ("elicitation.timeout_ms", self.elicitation.timeout_ms),
            ("tracker.retry.max_attempts", self.tracker.retry.max_attempts as u64),
            ("llm.retry.max_attempts", self.llm.retry.max_attempts as u64),
            ("permissions.ask_timeout_ms", self.permissions.ask_timeout_ms),
        ];
        match positive.iter().find(|(_, value)| *value == 0) {
            Some((name, _)) => problem(name, "expected a number greater than 0"),
            None => Ok(()),
        }
    }

    fn check_permissions(&self) -> Result<(), Problem> {
        for (name, patterns) in [
            ("permissions.allowed_tools", &self.permissions.allowed_tools),
            ("permissions.disallowed_tools", &self.permissions.disallowed_tools),
            ("permissions.ask_tools", &self.permissions.ask_tools),
            ("permissions.cross_scope_tools", &self.permissions.cross_scope_tools),
        ] {
            for pattern in patterns {
                picogent_tools::policy::check_pattern(pattern)
                    .map_err(|message| Problem { field: name.to_string(), message: message.to_string() })?;
            }
        }
        Ok(())
    }
}

impl Config {
    fn check_retention(&self) -> Result<(), Problem> {
        let retention = &self.retention;
        for (name, value) in [
            ("retention.events_ms", retention.events_ms),
            ("retention.claims_ms", retention.claims_ms),
            ("retention.runs_ms", retention.runs_ms),
            ("retention.sessions_ms", retention.sessions_ms),
            ("retention.interval_ms", retention.interval_ms),
        ] {
            if value == 0 {
                return problem(name, "expected a duration in milliseconds greater than 0 (7 days is 604800000)");
            }
        }
        // A claim is what stops a message found again from being answered twice; if it went
        // before the processed event, a late duplicate of that event would find neither.
        if retention.claims_ms < retention.events_ms {
            return problem(
                "retention.claims_ms",
                "expected at least retention.events_ms: claims must outlive the processed events they back up",
            );
        }
        Ok(())
    }

    fn check_presence(&self) -> Result<(), Problem> {
        if !PRESENCE_HEARTBEAT_MS.contains(&self.presence.heartbeat_ms) {
            return problem(
                "presence.heartbeat_ms",
                &format!(
                    "expected milliseconds between presence heartbeats, from {} to {}",
                    PRESENCE_HEARTBEAT_MS.start(),
                    PRESENCE_HEARTBEAT_MS.end()
                ),
            );
        }
        Ok(())
    }
}

impl Config {
    fn check_replicas(&self) -> Result<(), Problem> {
        let replicas = &self.replicas;
        if !replicas.enabled {
            return Ok(());
        }
        if self.state.postgres_url.is_none() {
            return problem(
                "replicas.enabled",
                "replicas share their state in PostgreSQL: set state.url to a postgres:// URL (a SQLite file is one \
                 process's), or set replicas.enabled to false",
            );
        }
        if !(100..=60_000).contains(&replicas.poll_ms) {
            return problem("replicas.poll_ms", "expected milliseconds from 100 to 60000");
        }
        if !(1_000..=300_000).contains(&replicas.stream_lease_ms) || replicas.stream_lease_ms < 3 * replicas.poll_ms {
            return problem(
                "replicas.stream_lease_ms",
                "expected milliseconds from 1000 to 300000, and at least three times replicas.poll_ms",
            );
        }
        if !(1_000..=3_600_000).contains(&replicas.run_lease_ms) || replicas.run_lease_ms < 3 * replicas.poll_ms {
            return problem(
                "replicas.run_lease_ms",
                "expected milliseconds from 1000 to 3600000, and at least three times replicas.poll_ms",
            );
        }
        Ok(())
    }
}

fn check_url(field: &str, url: &str) -> Result<(), Problem> {
    match picogent_support::secret::not_an_http_url(url) {
        None => Ok(()),
        Some(message) => problem(field, &message),
    }
}

/// Refuses a URL with a credential in it (`picogent_support::secret::credential_in_setting`);
/// `instead` says where the secret goes.
fn no_credential(field: &str, url: &str, instead: &str) -> Result<(), Problem> {
    match picogent_support::secret::credential_in_setting(url, instead) {
        None => Ok(()),
        Some(message) => problem(field, &message),
    }
}
