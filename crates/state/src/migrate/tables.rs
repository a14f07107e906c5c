//! The tables `picogent state migrate` copies ([`super::Table`]): each one's rows as SQLite holds
//! them, and the one INSERT that puts a batch of them into PostgreSQL under the agent.

use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;

use super::Table;

#[derive(sqlx::FromRow)]
pub(super) struct ProcessedEvent {
    id: String,
    seq: i64,
    name: String,
    processed_at_ms: i64,
}

impl Table for ProcessedEvent {
    const NAME: &'static str = "processed_events";
    const SELECT: &'static str = "SELECT id, seq, name, processed_at_ms FROM processed_events ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut id, mut seq, mut name, mut processed_at_ms) = (vec![], vec![], vec![], vec![]);
        for row in rows {
            id.push(row.id);
            seq.push(row.seq);
            name.push(row.name);
            processed_at_ms.push(row.processed_at_ms);
        }
        sqlx::query(
            "INSERT INTO processed_events (agent, id, seq, name, processed_at_ms) \
             SELECT $1, id, seq, name, processed_at_ms \
             FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::bigint[]) AS row (id, seq, name, processed_at_ms)",
        )
        .bind(agent)
        .bind(id)
        .bind(seq)
        .bind(name)
        .bind(processed_at_ms)
    }
}

/// The resume point. SQLite keeps exactly one row; PostgreSQL one per agent.
#[derive(sqlx::FromRow)]
pub(super) struct StreamPosition {
    last_seq: i64,
}

impl Table for StreamPosition {
    const NAME: &'static str = "stream_position";
    const SELECT: &'static str = "SELECT last_seq FROM stream_position WHERE singleton = 1";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let last_seq: Vec<i64> = rows.into_iter().map(|row| row.last_seq).collect();
        sqlx::query(
            "INSERT INTO stream_position (agent, last_seq) SELECT $1, last_seq FROM UNNEST($2::bigint[]) AS row (last_seq)",
        )
        .bind(agent)
        .bind(last_seq)
    }
}

/// Among them `stream_head` (the position counts as recorded) and `presence.copy_id`.
#[derive(sqlx::FromRow)]
pub(super) struct NamedValue {
    name: String,
    value: String,
    updated_at_ms: i64,
}

impl Table for NamedValue {
    const NAME: &'static str = "named_values";
    const SELECT: &'static str = "SELECT name, value, updated_at_ms FROM named_values ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut name, mut value, mut updated_at_ms) = (vec![], vec![], vec![]);
        for row in rows {
            name.push(row.name);
            value.push(row.value);
            updated_at_ms.push(row.updated_at_ms);
        }
        sqlx::query(
            "INSERT INTO named_values (agent, name, value, updated_at_ms) SELECT $1, name, value, updated_at_ms \
             FROM UNNEST($2::text[], $3::text[], $4::bigint[]) AS row (name, value, updated_at_ms)",
        )
        .bind(agent)
        .bind(name)
        .bind(value)
        .bind(updated_at_ms)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct Claim {
    kind: String,
    key: String,
    claimed_at_ms: i64,
}

impl Table for Claim {
    const NAME: &'static str = "claims";
    const SELECT: &'static str = "SELECT kind, key, claimed_at_ms FROM claims ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut kind, mut key, mut claimed_at_ms) = (vec![], vec![], vec![]);
        for row in rows {
            kind.push(row.kind);
            key.push(row.key);
            claimed_at_ms.push(row.claimed_at_ms);
        }
        sqlx::query(
            "INSERT INTO claims (agent, kind, key, claimed_at_ms) SELECT $1, kind, key, claimed_at_ms \
             FROM UNNEST($2::text[], $3::text[], $4::bigint[]) AS row (kind, key, claimed_at_ms)",
        )
        .bind(agent)
        .bind(kind)
        .bind(key)
        .bind(claimed_at_ms)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct SessionRow {
    key: String,
    messages: String,
    updated_at_ms: i64,
}

impl Table for SessionRow {
    const NAME: &'static str = "sessions";
    const SELECT: &'static str = "SELECT key, messages, updated_at_ms FROM sessions ORDER BY rowid";
    // A session's messages can be large.
    const BATCH: usize = 50;
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut key, mut messages, mut updated_at_ms) = (vec![], vec![], vec![]);
        for row in rows {
            key.push(row.key);
            messages.push(row.messages);
            updated_at_ms.push(row.updated_at_ms);
        }
        sqlx::query(
            "INSERT INTO sessions (agent, key, messages, updated_at_ms) SELECT $1, key, messages, updated_at_ms \
             FROM UNNEST($2::text[], $3::text[], $4::bigint[]) AS row (key, messages, updated_at_ms)",
        )
        .bind(agent)
        .bind(key)
        .bind(messages)
        .bind(updated_at_ms)
    }
}

/// A run with the columns of `crates/state/migrations/state/`, named here rather than taken from the store's
/// `run_columns!`, so columns added to PostgreSQL's runs later (with defaults) take their default.
#[derive(sqlx::FromRow)]
pub(super) struct Run {
    id: String,
    session_key: String,
    trigger: String,
    status: String,
    turns: i64,
    tool_calls: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
    model_duration_ms: i64,
    tool_duration_ms: i64,
    outcome: Option<String>,
    error: Option<String>,
    started_at_ms: i64,
    finished_at_ms: Option<i64>,
    record: Option<String>,
    cost: Option<f64>,
    /// What a queued or unfinished run needs to be claimed and resumed in the database; the
    /// holder and the lease stay behind (the copy that starts there lets every lease go).
    request: Option<String>,
    attempts: i64,
}

/// Runs' columns, in the order of the arrays bound after the agent.
macro_rules! copied_run_columns {
    () => {
        "id, session_key, trigger, status, turns, tool_calls, prompt_tokens, completion_tokens, \
         model_duration_ms, tool_duration_ms, outcome, error, started_at_ms, finished_at_ms, record, cost, \
         request, attempts"
    };
}

impl Table for Run {
    const NAME: &'static str = "runs";
    const SELECT: &'static str = concat!("SELECT ", copied_run_columns!(), " FROM runs ORDER BY rowid");
    // A run's record holds its whole transcript.
    const BATCH: usize = 50;
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let mut columns = RunArrays::default();
        for row in rows {
            columns.push(row);
        }
        let RunArrays {
            id,
            session_key,
            trigger,
            status,
            turns,
            tool_calls,
            prompt_tokens,
            completion_tokens,
            model_duration_ms,
            tool_duration_ms,
            outcome,
            error,
            started_at_ms,
            finished_at_ms,
            record,
            cost,
            request,
            attempts,
        } = columns;
        // `row_order` (an identity) is given in the order rows come out: SQLite's rowid order.
        sqlx::query(concat!(
            "INSERT INTO runs (agent, ",
            copied_run_columns!(),
            ") SELECT $1, ",
            copied_run_columns!(),
            " FROM UNNEST($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], \
               $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::text[], $14::bigint[], \
               $15::bigint[], $16::text[], $17::float8[], $18::text[], $19::bigint[]) WITH ORDINALITY AS row (",
            copied_run_columns!(),
            ", position) ORDER BY position"
        ))
        .bind(agent)
        .bind(id)
        .bind(session_key)
        .bind(trigger)
        .bind(status)
        .bind(turns)
        .bind(tool_calls)
        .bind(prompt_tokens)
        .bind(completion_tokens)
        .bind(model_duration_ms)
        .bind(tool_duration_ms)
        .bind(outcome)
        .bind(error)
        .bind(started_at_ms)
        .bind(finished_at_ms)
        .bind(record)
        .bind(cost)
        .bind(request)
        .bind(attempts)
    }
}

/// A batch of runs, a column at a time.
#[derive(Default)]
pub(super) struct RunArrays {
    id: Vec<String>,
    session_key: Vec<String>,
    trigger: Vec<String>,
    status: Vec<String>,
    turns: Vec<i64>,
    tool_calls: Vec<i64>,
    prompt_tokens: Vec<i64>,
    completion_tokens: Vec<i64>,
    model_duration_ms: Vec<i64>,
    tool_duration_ms: Vec<i64>,
    outcome: Vec<Option<String>>,
    error: Vec<Option<String>>,
    started_at_ms: Vec<i64>,
    finished_at_ms: Vec<Option<i64>>,
    record: Vec<Option<String>>,
    cost: Vec<Option<f64>>,
    request: Vec<Option<String>>,
    attempts: Vec<i64>,
}

impl RunArrays {
    fn push(&mut self, run: Run) {
        self.id.push(run.id);
        self.session_key.push(run.session_key);
        self.trigger.push(run.trigger);
        self.status.push(run.status);
        self.turns.push(run.turns);
        self.tool_calls.push(run.tool_calls);
        self.prompt_tokens.push(run.prompt_tokens);
        self.completion_tokens.push(run.completion_tokens);
        self.model_duration_ms.push(run.model_duration_ms);
        self.tool_duration_ms.push(run.tool_duration_ms);
        self.outcome.push(run.outcome);
        self.error.push(run.error);
        self.started_at_ms.push(run.started_at_ms);
        self.finished_at_ms.push(run.finished_at_ms);
        self.record.push(run.record);
        self.cost.push(run.cost);
        self.request.push(run.request);
        self.attempts.push(run.attempts);
    }
}

/// What was sent to a run (steering, a stop), so a run still queued or running after the move
/// takes in what it was sent before it.
#[derive(sqlx::FromRow)]
pub(super) struct RunInputRow {
    run_id: String,
    n: i64,
    kind: String,
    text: String,
    message_id: Option<String>,
    at_ms: i64,
}

impl Table for RunInputRow {
    const NAME: &'static str = "run_inputs";
    const SELECT: &'static str = "SELECT run_id, n, kind, text, message_id, at_ms FROM run_inputs ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut run_id, mut n, mut kind, mut text, mut message_id, mut at_ms) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for row in rows {
            run_id.push(row.run_id);
            n.push(row.n);
            kind.push(row.kind);
            text.push(row.text);
            message_id.push(row.message_id);
            at_ms.push(row.at_ms);
        }
        sqlx::query(
            "INSERT INTO run_inputs (agent, run_id, n, kind, text, message_id, at_ms) \
             SELECT $1, run_id, n, kind, text, message_id, at_ms \
             FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::bigint[]) \
             AS row (run_id, n, kind, text, message_id, at_ms)",
        )
        .bind(agent)
        .bind(run_id)
        .bind(n)
        .bind(kind)
        .bind(text)
        .bind(message_id)
        .bind(at_ms)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct DailySpend {
    day: String,
    tokens: i64,
    cost: f64,
}

impl Table for DailySpend {
    const NAME: &'static str = "daily_spend";
    const SELECT: &'static str = "SELECT day, tokens, cost FROM daily_spend ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut day, mut tokens, mut cost) = (vec![], vec![], vec![]);
        for row in rows {
            day.push(row.day);
            tokens.push(row.tokens);
            cost.push(row.cost);
        }
        sqlx::query(
            "INSERT INTO daily_spend (agent, day, tokens, cost) SELECT $1, day, tokens, cost \
             FROM UNNEST($2::text[], $3::bigint[], $4::float8[]) AS row (day, tokens, cost)",
        )
        .bind(agent)
        .bind(day)
        .bind(tokens)
        .bind(cost)
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct Reply {
    thread_key: String,
    at_ms: i64,
}

impl Table for Reply {
    const NAME: &'static str = "replies";
    const SELECT: &'static str = "SELECT thread_key, at_ms FROM replies ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut thread_key, mut at_ms) = (vec![], vec![]);
        for row in rows {
            thread_key.push(row.thread_key);
            at_ms.push(row.at_ms);
        }
        sqlx::query(
            "INSERT INTO replies (agent, thread_key, at_ms) SELECT $1, thread_key, at_ms \
             FROM UNNEST($2::text[], $3::bigint[]) AS row (thread_key, at_ms)",
        )
        .bind(agent)
        .bind(thread_key)
        .bind(at_ms)
    }
}

/// What became of each firing of a scheduled job; its claims and its job's watermark come across
/// with `claims` and `named_values`.
#[derive(sqlx::FromRow)]
pub(super) struct ScheduleFiring {
    job: String,
    fire_at_ms: i64,
    outcome: String,
    run_id: Option<String>,
    detail: String,
    updated_at_ms: i64,
}

impl Table for ScheduleFiring {
    const NAME: &'static str = "schedule_firings";
    const SELECT: &'static str =
        "SELECT job, fire_at_ms, outcome, run_id, detail, updated_at_ms FROM schedule_firings ORDER BY rowid";
    fn insert(agent: &str, rows: Vec<Self>) -> Query<'static, Postgres, PgArguments> {
        let (mut job, mut fire_at_ms, mut outcome, mut run_id, mut detail, mut updated_at_ms) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for row in rows {
            job.push(row.job);
            fire_at_ms.push(row.fire_at_ms);
            outcome.push(row.outcome);
            run_id.push(row.run_id);
            detail.push(row.detail);
            updated_at_ms.push(row.updated_at_ms);
        }
        sqlx::query(
            "INSERT INTO schedule_firings (agent, job, fire_at_ms, outcome, run_id, detail, updated_at_ms) \
             SELECT $1, job, fire_at_ms, outcome, run_id, detail, updated_at_ms \
             FROM UNNEST($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::bigint[]) \
             AS row (job, fire_at_ms, outcome, run_id, detail, updated_at_ms)",
        )
        .bind(agent)
        .bind(job)
        .bind(fire_at_ms)
        .bind(outcome)
        .bind(run_id)
        .bind(detail)
        .bind(updated_at_ms)
    }
}
