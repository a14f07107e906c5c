//! Leases for replicas of one agent sharing a PostgreSQL database (`replicas.enabled`): which
//! replica holds the event stream, and which one runs each run. The run queue and the inputs sent
//! to runs are in `queue.rs`; the loops that use both are `runtime/replicas.rs` (the stream) and
//! `router/replicas.rs` (the runs).
//!
//! Invariants:
//! - **One clock.** Every lease is timed by the database's clock (`clock_timestamp()`), never by a
//!   replica's, so replicas whose clocks disagree still agree on when a lease ran out.
//! - **One holder.** A lease is taken only when it is free or ran out, in one statement (an upsert
//!   whose `WHERE` tests the expiry), so of replicas asking at once exactly one gets it, and each
//!   new holder gets a higher `fencing` number. Renewing succeeds only for the holder: a replica
//!   that was paused past its lease learns that it lost it at its next renewal.
//! - **A holder stops before its lease runs out.** The stream's holder renews every third of the
//!   lease, and stops the stream itself once two thirds went by since the last renewal it *sent*
//!   that succeeded (`runtime/replicas.rs`): a replica cut off from the database gives the stream
//!   up before the database lets another replica take it.
//! - **One replica per run.** A queued run is claimed by one replica (`FOR UPDATE SKIP LOCKED`),
//!   which sets itself as the holder and the lease in the statement that picks the row. A run's
//!   lease lapses only when its replica stops renewing it (died, cut off, or let it go at
//!   shutdown); another replica then takes it with `attempts + 1` and resumes it from its stored
//!   start under the same run id, so its writes carry the same idempotency keys and land once.
//!   A replica never takes back a run it holds itself.
//! - **The run's own writes name the holder.** The run's start record and its end are written
//!   only while this replica holds the run (`State::as_replica`), so a replica that lost a run
//!   cannot finish it over the replica that took it.
//! - **Safety never rests on a lease alone.** Each event is recorded once by id, each message and
//!   assignment is claimed, each run is queued in one transaction with its claim, and each write
//!   to the tracker carries an idempotency key: two replicas that both believe, for a moment, that
//!   they hold the stream still handle each thing once. The stream's lease keeps one stream open
//!   and bounds how long none is; the runs' leases bound how long a dead replica's run waits.

use std::time::Duration;

use sqlx::postgres::PgPool;

use crate::StateError;

/// The database's clock in Unix milliseconds, as SQL.
macro_rules! now_ms_sql {
    () => {
        "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
    };
}
pub(super) use now_ms_sql;

/// The name of the event stream's lease.
const STREAM: &str = "stream";

/// How long a replica's heartbeat row is kept after its last beat, for `/readyz`'s list.
const FORGET_REPLICA_AFTER_MS: i64 = 24 * 60 * 60 * 1000;

/// One replica's handle on the shared database: the agent's rows, as replica `id`.
#[derive(Clone, Debug)]
pub struct Replicas {
    pub(super) pool: PgPool,
    pub(super) agent: String,
    pub(super) id: String,
}

/// A run this replica just claimed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedRun {
    pub id: String,
    pub session_key: String,
    pub trigger: String,
    /// The request it was queued with (JSON); `None` for a run a single copy started.
    pub request: Option<String>,
    /// How many times a replica took it, this time included.
    pub attempts: i64,
}

/// What a replica says of itself at each beat.
#[derive(Debug, Clone)]
pub struct Beat<'a> {
    pub host: &'a str,
    /// Its `http.listen`, for a person looking for it.
    pub http: Option<&'a str>,
    pub started_at_ms: i64,
    pub holds_stream: bool,
    pub runs: i64,
    pub slots: i64,
}

/// Another replica as its last heartbeat showed it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct ReplicaSeen {
    pub id: String,
    pub host: String,
    pub http: Option<String>,
    pub holds_stream: bool,
    pub runs: i64,
    pub slots: i64,
    /// How long ago its last heartbeat was, by the database's clock.
    pub seen_ms_ago: i64,
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl Replicas {
    /// This replica's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    // ---- the event stream ----

    /// Takes the stream's lease for `lease` if it is free, ran out, or is this replica's already;
    /// returns its fencing number, or `None` when another replica holds it.
    pub async fn acquire_stream(&self, lease: Duration) -> Result<Option<i64>, StateError> {
        Ok(sqlx::query_scalar(concat!(
            "INSERT INTO leases (agent, name, holder, expires_at_ms, fencing) VALUES ($1, $2, $3, ",
            now_ms_sql!(),
            " + $4, 1) ON CONFLICT (agent, name) DO UPDATE SET holder = excluded.holder, \
             expires_at_ms = excluded.expires_at_ms, \
             fencing = leases.fencing + CASE WHEN leases.holder = excluded.holder THEN 0 ELSE 1 END \
             WHERE leases.holder = excluded.holder OR leases.expires_at_ms < ",
            now_ms_sql!(),
            " RETURNING fencing"
        ))
        .bind(&self.agent)
        .bind(STREAM)
        .bind(&self.id)
        .bind(ms(lease))
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Extends the stream's lease by `lease` from now; `false` when this replica no longer holds it.
    pub async fn renew_stream(&self, lease: Duration) -> Result<bool, StateError> {
        let renewed = sqlx::query(concat!(
            "UPDATE leases SET expires_at_ms = ",
            now_ms_sql!(),
            " + $4 WHERE agent = $1 AND name = $2 AND holder = $3"
        ))
        .bind(&self.agent)
        .bind(STREAM)
        .bind(&self.id)
        .bind(ms(lease))
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(renewed == 1)
    }

    /// Lets the stream's lease go now (a clean stop), so another replica takes it at once. The
    /// row stays, so the fencing number keeps growing.
    pub async fn release_stream(&self) -> Result<(), StateError> {
        sqlx::query("UPDATE leases SET expires_at_ms = 0 WHERE agent = $1 AND name = $2 AND holder = $3")
            .bind(&self.agent)
            .bind(STREAM)
            .bind(&self.id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The replica whose lease on the stream has not run out, if any, and its fencing number.
    pub async fn stream_holder(&self) -> Result<Option<(String, i64)>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT holder, fencing FROM leases WHERE agent = $1 AND name = $2 AND expires_at_ms >= ",
            now_ms_sql!()
        ))
        .bind(&self.agent)
        .bind(STREAM)
        .fetch_optional(&self.pool)
        .await?)
    }

    // ---- runs ----

    /// Claims up to `slots` runs for this replica, oldest first: queued ones, and running ones
    /// whose lease ran out on another replica. Each gets this replica as its holder, a lease of
    /// `lease`, and one more attempt.
    pub async fn claim_runs(&self, slots: usize, lease: Duration) -> Result<Vec<ClaimedRun>, StateError> {
        if slots == 0 {
            return Ok(Vec::new());
        }
        let slots = i64::try_from(slots).unwrap_or(i64::MAX);
        Ok(sqlx::query_as(concat!(
            "UPDATE runs SET status = 'running', holder = $2, lease_until_ms = ",
            now_ms_sql!(),
            " + $3, attempts = attempts + 1 \
             WHERE agent = $1 AND id IN ( \
                 SELECT id FROM runs WHERE agent = $1 AND (status = 'queued' OR (status = 'running' \
                     AND COALESCE(lease_until_ms, 0) < ",
            now_ms_sql!(),
            " AND holder IS DISTINCT FROM $2)) \
                 ORDER BY row_order LIMIT $4 FOR UPDATE SKIP LOCKED) \
             RETURNING id, session_key, trigger, request, attempts"
        ))
        .bind(&self.agent)
        .bind(&self.id)
        .bind(ms(lease))
        .bind(slots)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Extends the leases of this replica's running runs `ids` by `lease`; returns the ids this
    /// replica still holds, running or just finished (one missing from the answer was taken over
    /// by another replica).
    pub async fn renew_runs(&self, ids: &[String], lease: Duration) -> Result<Vec<String>, StateError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_scalar(concat!(
            "UPDATE runs SET lease_until_ms = CASE WHEN status = 'running' THEN ",
            now_ms_sql!(),
            " + $3 ELSE lease_until_ms END WHERE agent = $1 AND holder = $2 AND id = ANY($4) RETURNING id"
        ))
        .bind(&self.agent)
        .bind(&self.id)
        .bind(ms(lease))
        .bind(ids)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Hands a run this replica claimed back to the queue, for any replica (this one too) to
    /// claim again at its next tick.
    pub async fn hand_back(&self, run_id: &str) -> Result<(), StateError> {
        sqlx::query("UPDATE runs SET holder = NULL, lease_until_ms = 0 WHERE agent = $1 AND id = $2 AND holder = $3")
            .bind(&self.agent)
            .bind(run_id)
            .bind(&self.id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Lets the leases of this replica's running runs go now (a shutdown that could not wait for
    /// them), so another replica resumes them at once; returns how many.
    pub async fn release_runs(&self) -> Result<u64, StateError> {
        Ok(sqlx::query("UPDATE runs SET lease_until_ms = 0 WHERE agent = $1 AND holder = $2 AND status = 'running'")
            .bind(&self.agent)
            .bind(&self.id)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    // ---- heartbeats ----

    /// Records this replica's heartbeat (and forgets replicas silent for a day).
    pub async fn beat(&self, beat: &Beat<'_>) -> Result<(), StateError> {
        sqlx::query(concat!(
            "INSERT INTO replicas (agent, id, host, http, started_at_ms, seen_at_ms, holds_stream, runs, slots) \
             VALUES ($1, $2, $3, $4, $5, ",
            now_ms_sql!(),
            ", $6, $7, $8) ON CONFLICT (agent, id) DO UPDATE SET seen_at_ms = excluded.seen_at_ms, \
             holds_stream = excluded.holds_stream, runs = excluded.runs, slots = excluded.slots"
        ))
        .bind(&self.agent)
        .bind(&self.id)
        .bind(beat.host)
        .bind(beat.http)
        .bind(beat.started_at_ms)
        .bind(beat.holds_stream)
        .bind(beat.runs)
        .bind(beat.slots)
        .execute(&self.pool)
        .await?;
        sqlx::query(concat!("DELETE FROM replicas WHERE agent = $1 AND seen_at_ms < ", now_ms_sql!(), " - $2"))
            .bind(&self.agent)
            .bind(FORGET_REPLICA_AFTER_MS)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The other replicas that beat within `within`, by id.
    pub async fn others(&self, within: Duration) -> Result<Vec<ReplicaSeen>, StateError> {
        Ok(sqlx::query_as(concat!(
            "SELECT id, host, http, holds_stream, runs, slots, ",
            now_ms_sql!(),
            " - seen_at_ms AS seen_ms_ago FROM replicas WHERE agent = $1 AND id <> $2 AND seen_at_ms >= ",
            now_ms_sql!(),
            " - $3 ORDER BY id"
        ))
        .bind(&self.agent)
        .bind(&self.id)
        .bind(ms(within))
        .fetch_all(&self.pool)
        .await?)
    }

    /// Removes this replica's heartbeat (a clean stop).
    pub async fn leave(&self) -> Result<(), StateError> {
        sqlx::query("DELETE FROM replicas WHERE agent = $1 AND id = $2")
            .bind(&self.agent)
            .bind(&self.id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
