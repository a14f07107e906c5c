//! One running copy per agent in a PostgreSQL database (or, shared, its replicas): an advisory
//! lock on a connection of its own.

use std::str::FromStr;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use super::{CONNECT_TIMEOUT, shown, timed_out};
use crate::StateError;

/// One running copy per agent in a PostgreSQL database, as `<state.path>.lock` is for a SQLite
/// file: a session advisory lock keyed by the schema and the agent's slug, on a connection of its
/// own, held while this value lives. PostgreSQL lets it go when that connection ends: at once when
/// the process exits or is killed (its socket closes), within about 25 s when the host vanishes
/// (the server probes the connection every few seconds), so a lock never outlives its copy long.
#[derive(Debug)]
pub struct PostgresLock {
    connection: PgConnection,
    /// What it was taken with, to take it again when its connection ends.
    spec: LockSpec,
}

/// Which lock [`PostgresLock::take`] took: the database, the agent, and whether shared.
#[derive(Debug, Clone)]
pub struct LockSpec {
    url: String,
    agent: String,
    shared: bool,
}

impl LockSpec {
    /// Takes the lock again on a new connection (after its connection went): `PostgresLocked`
    /// while another copy holds it.
    pub async fn take(&self) -> Result<PostgresLock, StateError> {
        PostgresLock::take(&self.url, &self.agent, self.shared).await
    }
}

impl PostgresLock {
    /// Takes the lock of `agent` in the database at `url`, or says that another copy holds it.
    /// `shared`: the replicas' share of it (`replicas.enabled`), which any number of replicas
    /// hold at once and which keeps out a copy that wants the agent to itself, and the other way
    /// round.
    pub async fn take(url: &str, agent: &str, shared: bool) -> Result<PostgresLock, StateError> {
        let options = PgConnectOptions::from_str(url).map_err(|cause| StateError::PostgresUrl { cause })?.options([
            ("tcp_keepalives_idle", "10"),
            ("tcp_keepalives_interval", "5"),
            ("tcp_keepalives_count", "3"),
        ]);
        let shown_url = shown(&options);
        let connect_error = |cause: sqlx::Error| StateError::PostgresConnect { url: shown_url.clone(), cause };
        let mut connection = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
            .await
            .map_err(|_| connect_error(timed_out()))?
            .map_err(connect_error)?;
        let query = match shared {
            false => {
                "SELECT pg_try_advisory_lock(hashtextextended('picogent agent ' || COALESCE(current_schema(), '') || '/' || $1, 0))"
            }
            true => {
                "SELECT pg_try_advisory_lock_shared(hashtextextended('picogent agent ' || COALESCE(current_schema(), '') || '/' || $1, 0))"
            }
        };
        let taken: bool = sqlx::query_scalar(query).bind(agent).fetch_one(&mut connection).await?;
        if !taken {
            let _ = connection.close().await;
            return Err(StateError::PostgresLocked { url: shown_url, agent: agent.to_string(), replicas: shared });
        }
        Ok(PostgresLock { connection, spec: LockSpec { url: url.to_string(), agent: agent.to_string(), shared } })
    }

    /// Whether the lock's connection still answers: the server lets the lock go with it (a
    /// restart of PostgreSQL, a network cut, a terminated backend).
    pub async fn answers(&mut self) -> bool {
        sqlx::query("SELECT 1").execute(&mut self.connection).await.is_ok()
    }

    /// What to take again when [`answers`](Self::answers) says the lock went.
    pub fn spec(&self) -> LockSpec {
        self.spec.clone()
    }

    /// Lets the lock go now (dropping it lets it go too, as the connection closes).
    pub async fn release(self) {
        let _ = self.connection.close().await;
    }
}
