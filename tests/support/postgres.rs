// The state's unit tests and tests/postgres.rs each use a different part; `pub` is for them.
#![allow(dead_code, unreachable_pub)]
//! The test PostgreSQL: the machine's own server on 127.0.0.1:5432, trust authentication,
//! database `test` (`POSTGRES_TEST_URL` names another). Each test gets its own schema, so tests
//! running side by side never see each other's tables, and drops it at the end, pass or fail.
//! A server that does not answer fails the test with what to do; nothing is skipped.
//!
//! Used by `crates/state/src/tests.rs` (through `#[path]`) and `tests/postgres.rs`.

use std::future::Future;
use std::time::{SystemTime, UNIX_EPOCH};

// Schema names go into the SQL text (they cannot be bound): they are made here of
// `picogent_test_`, digits and hex, or read back from the server under that prefix.
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Connection};

/// The server and database the tests use unless `POSTGRES_TEST_URL` says otherwise.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Schemas of tests that died without dropping theirs (a killed test binary) are dropped by the
/// next test once they are this old.
const STALE_AFTER_SECS: u64 = 3_600;

pub fn server_url() -> String {
    std::env::var("POSTGRES_TEST_URL").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

/// A schema of its own in the test database.
#[derive(Debug, Clone)]
pub struct TestSchema {
    pub name: String,
    server: String,
}

async fn connect(server: &str) -> PgConnection {
    match PgConnection::connect(server).await {
        Ok(connection) => connection,
        Err(error) => panic!(
            "the PostgreSQL tests need PostgreSQL at {server} (trust authentication, database `test`), and it \
             did not answer: {error}. Start it with `service postgresql start` (or `pg_ctlcluster <version> main \
             start`), or set POSTGRES_TEST_URL to a server that runs; docs/testing.md says what they need"
        ),
    }
}

impl TestSchema {
    /// Creates a fresh, empty schema, dropping stale ones left by dead test runs on the way.
    pub async fn create() -> TestSchema {
        let server = server_url();
        let mut connection = connect(&server).await;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let stale: Vec<String> =
            sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'picogent\\_test\\_%'")
                .fetch_all(&mut connection)
                .await
                .unwrap();
        for name in stale {
            let created = name.split('_').nth(2).and_then(|secs| secs.parse::<u64>().ok()).unwrap_or(0);
            if created + STALE_AFTER_SECS < now {
                let drop = format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE");
                let _ = sqlx::query(AssertSqlSafe(drop)).execute(&mut connection).await;
            }
        }
        let name = format!("picogent_test_{now}_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA \"{name}\""))).execute(&mut connection).await.unwrap();
        let _ = connection.close().await;
        TestSchema { name, server }
    }

    /// The URL that puts a connection in this schema (`search_path`).
    pub fn url(&self) -> String {
        let separator = if self.server.contains('?') { '&' } else { '?' };
        format!("{}{separator}options=-c%20search_path%3D{}", self.server, self.name)
    }

    /// Drops the schema with everything in it.
    pub async fn drop_schema(&self) {
        let mut connection = connect(&self.server).await;
        let drop = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name);
        sqlx::query(AssertSqlSafe(drop)).execute(&mut connection).await.unwrap();
        let _ = connection.close().await;
    }

    /// A connection to this schema, to look at the tables as they are.
    pub async fn connection(&self) -> PgConnection {
        connect(&self.url()).await
    }
}

/// Runs `test` with a fresh schema, then drops the schema whether the test passed or panicked
/// (and then panics with the test's own message).
pub async fn with_schema<F, Fut>(test: F)
where
    F: FnOnce(TestSchema) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let schema = TestSchema::create().await;
    let outcome = tokio::spawn(test(schema.clone())).await;
    schema.drop_schema().await;
    if let Err(error) = outcome {
        match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => panic!("the test did not finish: {error}"),
        }
    }
}
