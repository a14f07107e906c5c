//! The crate's tests, one file per module: the section's mistakes and their messages, the
//! timing across daylight-saving changes, the catch-up plan, the clocks.

mod clock;
mod jobs;
mod plan;
mod timing;

use chrono::{DateTime, Utc};

/// An RFC 3339 instant in milliseconds since the epoch.
fn at(text: &str) -> i64 {
    DateTime::parse_from_rfc3339(text).expect("an RFC 3339 instant").timestamp_millis()
}

/// An instant in milliseconds as RFC 3339 in UTC, for readable failures.
fn shown(ms: Option<i64>) -> String {
    ms.map_or_else(
        || "none".to_string(),
        |ms| DateTime::<Utc>::from_timestamp_millis(ms).expect("a representable instant").to_rfc3339(),
    )
}
