//! One warning per outage of the state database, not one per poll. A replica asks the database
//! something every `replicas.poll_ms` (leases, inputs, claims, heartbeats); while the database
//! is down each ask fails, and a warning per ask would be several lines a second. [`Outage`]
//! logs the first failure at warn (with what could not be done and the error), later ones at
//! debug, a reminder at warn every [`REMIND_EVERY`], and the recovery at info with how long the
//! outage lasted and how many asks failed.

use std::time::{Duration, Instant};

use crate::StateError;

/// How often a continuing outage is logged at warn again.
pub(crate) const REMIND_EVERY: Duration = Duration::from_secs(60);

/// The state database's answers as one poller saw them.
#[derive(Debug)]
pub struct Outage {
    /// When the first failed ask of this outage was, and when it was last logged at warn.
    since: Option<(Instant, Instant)>,
    failures: u64,
    remind_every: Duration,
}

impl Default for Outage {
    fn default() -> Outage {
        Outage { since: None, failures: 0, remind_every: REMIND_EVERY }
    }
}

impl Outage {
    /// An ask failed: `what` could not be done, for `error`.
    pub fn failed(&mut self, what: &str, error: &StateError) {
        self.failures += 1;
        let now = Instant::now();
        match &mut self.since {
            None => {
                tracing::warn!(%error, "{what}; asking again every poll (later failures at debug until it answers)");
                self.since = Some((now, now));
            }
            Some((since, warned)) if warned.elapsed() >= self.remind_every => {
                let seconds = since.elapsed().as_secs();
                tracing::warn!(%error, seconds, failures = self.failures, "{what}: the state database has not answered for {seconds} s");
                *warned = now;
            }
            Some(_) => tracing::debug!(%error, "{what}"),
        }
    }

    /// An ask was answered: ends an outage, if there was one.
    pub fn answered(&mut self) {
        if let Some((since, _)) = self.since.take() {
            let seconds = since.elapsed().as_secs_f64();
            tracing::info!(seconds, failures = self.failures, "the state database answers again");
            self.failures = 0;
        }
    }

    /// Whether the last ask failed.
    #[cfg(test)]
    fn ongoing(&self) -> bool {
        self.since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The lines `act` logs at info and above, as an operator reads them.
    fn logged(act: impl FnOnce()) -> Vec<String> {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, act);
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    fn down() -> StateError {
        StateError::Corrupt { field: "test", message: "connection refused".to_string() }
    }

    #[test]
    fn an_outage_is_one_warning_and_one_line_when_it_ends() {
        let mut outage = Outage::default();
        let lines = logged(|| {
            for _ in 0..30 {
                outage.failed("cannot claim queued runs", &down());
            }
            assert!(outage.ongoing());
            outage.answered();
            outage.answered();
        });
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].contains("WARN") && lines[0].contains("cannot claim queued runs"), "{}", lines[0]);
        assert!(lines[0].contains("connection refused"), "the error is in it: {}", lines[0]);
        assert!(lines[1].contains("INFO") && lines[1].contains("answers again"), "{}", lines[1]);
        assert!(lines[1].contains("failures=30"), "{}", lines[1]);
        assert!(!outage.ongoing());
        // The next outage is news again.
        let lines = logged(|| outage.failed("cannot renew the stream's lease", &down()));
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("WARN") && lines[0].contains("cannot renew the stream's lease"));
    }

    #[test]
    fn a_long_outage_is_recalled_now_and_then() {
        let mut outage = Outage { remind_every: Duration::ZERO, ..Outage::default() };
        let lines = logged(|| {
            outage.failed("cannot claim queued runs", &down());
            outage.failed("cannot claim queued runs", &down());
        });
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[1].contains("WARN") && lines[1].contains("has not answered for"), "{}", lines[1]);
    }
}
