//! The `state` section of `agent.json`: where the agent keeps its state (a SQLite file or a
//! PostgreSQL database). The state owns it and checks it; the configuration embeds it.

use std::path::PathBuf;
use std::str::FromStr as _;

use serde::{Deserialize, Serialize};

/// Where the agent keeps its state: `state.path` (a SQLite file) or `state.url` (a SQLite path,
/// `sqlite:<path>`, or `postgres://user@host:port/database`); one of the two, not both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StateSection", into = "StateSection")]
pub struct StateConfig {
    /// The agent's SQLite database (processed events, sessions, runs, spend) when the state is in
    /// SQLite; `<path>.lock` beside it keeps a second copy off it. Its folder also holds the
    /// artifacts of external tools' results, whichever store holds the state.
    pub path: PathBuf,
    /// The PostgreSQL database holding the state instead, with no password in it (that comes
    /// from `PGPASSWORD` or `~/.pgpass`); its rows are keyed by the agent's slug.
    pub postgres_url: Option<String>,
}

impl StateConfig {
    /// The folder of `path`: the state file, its lock and external tools' artifacts go there.
    pub fn folder(&self) -> &std::path::Path {
        match self.path.parent() {
            Some(folder) if !folder.as_os_str().is_empty() => folder,
            _ => std::path::Path::new("."),
        }
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig { path: PathBuf::from("./picogent.db"), postgres_url: None }
    }
}

/// The `state` section as agent.json spells it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// Why the `state` section cannot be read; serde's `try_from` shows it as the message of the
/// section's error.
#[derive(Debug, thiserror::Error)]
enum StateSectionError {
    #[error(
        "`state.path` and `state.url` are both set: keep one (`state.path` for a SQLite file, `state.url` for a \
         SQLite path or a postgres:// URL)"
    )]
    Both,
    #[error("`state.url` {0}")]
    Postgres(#[from] PostgresUrlError),
    #[error(
        "`state.url`: a {scheme}:// database is not one picogent keeps its state in; expected a SQLite file path, \
         sqlite:<path>, or postgres://user@host:port/database"
    )]
    OtherDatabase { scheme: String },
    #[error(
        "`state.url`: expected the path of a SQLite file after `sqlite:` (an in-memory database would forget \
         everything at exit)"
    )]
    NoFile,
}

impl TryFrom<StateSection> for StateConfig {
    type Error = StateSectionError;

    fn try_from(section: StateSection) -> Result<StateConfig, StateSectionError> {
        let url = match (section.path, section.url) {
            (Some(_), Some(_)) => return Err(StateSectionError::Both),
            (Some(path), None) => return Ok(StateConfig { path, ..StateConfig::default() }),
            (None, None) => return Ok(StateConfig::default()),
            (None, Some(url)) => url,
        };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            check_postgres_url(&url)?;
            return Ok(StateConfig { postgres_url: Some(url), ..StateConfig::default() });
        }
        let path = match url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
            Some(path) => path,
            None if url.contains("://") => {
                let scheme = url.split("://").next().unwrap_or_default().to_string();
                return Err(StateSectionError::OtherDatabase { scheme });
            }
            None => &url,
        };
        if path.is_empty() || path.starts_with(":memory:") {
            return Err(StateSectionError::NoFile);
        }
        Ok(StateConfig { path: PathBuf::from(path), ..StateConfig::default() })
    }
}

impl From<StateConfig> for StateSection {
    fn from(config: StateConfig) -> StateSection {
        match config.postgres_url {
            Some(url) => StateSection { path: None, url: Some(url) },
            None => StateSection { path: Some(config.path), url: None },
        }
    }
}

/// Why a URL is not one the state can be kept at. Each message follows the name of the setting
/// that gave the URL, which the caller puts first (`state.url`, `--to`), and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PostgresUrlError {
    /// The text is not a URL at all.
    #[error("is not a postgres:// URL ({0})")]
    NotUrl(#[source] <reqwest::Url as std::str::FromStr>::Err),
    /// The URL holds a password, which belongs in the environment instead.
    #[error(
        "holds a password, and secrets never go in agent.json: remove it from the URL and give it in the \
         environment variable PGPASSWORD (or in ~/.pgpass)"
    )]
    Password,
    /// A URL, but not one PostgreSQL's client takes (a bad port, an unknown option).
    #[error("is not a URL PostgreSQL's client takes: {0}")]
    NotPostgres(#[source] sqlx::Error),
}

/// Checks `state.url` as the configuration gives it: a URL PostgreSQL's client takes, with no
/// password in it (secrets are never in agent.json: the password comes from `PGPASSWORD` or
/// `~/.pgpass`). The error says what is wrong and what to do.
pub fn check_postgres_url(url: &str) -> Result<(), PostgresUrlError> {
    reqwest::Url::parse(url).map_err(PostgresUrlError::NotUrl)?;
    if picogent_support::secret::url_credential(url) == Some(picogent_support::secret::UrlCredential::Password) {
        return Err(PostgresUrlError::Password);
    }
    sqlx::postgres::PgConnectOptions::from_str(url).map_err(PostgresUrlError::NotPostgres)?;
    Ok(())
}
