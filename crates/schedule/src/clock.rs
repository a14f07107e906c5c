//! The time the scheduler reads and sleeps on, passed in so tests can move it: [`SystemClock`]
//! in the product, `ShiftedClock` (feature `test-support`) in tests.
//!
//! Invariant: a sleep may end early (at most a minute for [`SystemClock`], at once when a test
//! moves a `ShiftedClock`); the caller re-reads [`Clock::now_ms`] and sleeps again, so a wall
//! clock that jumps is noticed within a minute.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest one [`SystemClock::sleep_until`] sleeps: a timer runs on the monotonic clock, so
/// a wall clock set forward (or back) is seen at the next wake, at most this late.
pub(crate) const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Wall-clock time in milliseconds since the Unix epoch, and sleeping until such a time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Waits until `at_ms` or less: it may return early, and the caller checks the time again.
    /// Returns at once when `at_ms` has passed.
    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// The machine's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
    }

    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let wait = wait_for(at_ms, self.now_ms()).min(MAX_SLEEP);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        })
    }
}

/// How long from `now_ms` until `at_ms`; zero when it has passed.
fn wait_for(at_ms: i64, now_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0))
}

#[cfg(any(test, feature = "test-support"))]
pub use shifted::ShiftedClock;

#[cfg(any(test, feature = "test-support"))]
mod shifted {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio::time::Instant;

    use super::{Clock, SystemClock, wait_for};

    /// A clock a test moves: the real time plus an offset the test sets. Between moves it flows
    /// with tokio's clock, so `tokio::time::pause()` stops it and `tokio::time::advance` moves
    /// it too. A move wakes every sleeper at once, which then reads the new time.
    #[derive(Debug)]
    pub struct ShiftedClock {
        /// The wall-clock time when the clock was made, and tokio's instant then: now is the
        /// first plus the time tokio says has passed since the second, plus the offset.
        started_ms: i64,
        started: Instant,
        offset_ms: AtomicI64,
        /// Bumped at each move; sleepers wait for a change.
        moves: watch::Sender<u64>,
    }

    impl Default for ShiftedClock {
        fn default() -> Self {
            ShiftedClock::new()
        }
    }

    impl ShiftedClock {
        /// A clock at the real time.
        pub fn new() -> ShiftedClock {
            ShiftedClock {
                started_ms: SystemClock.now_ms(),
                started: Instant::now(),
                offset_ms: AtomicI64::new(0),
                moves: watch::Sender::new(0),
            }
        }

        /// A clock at `now_ms`, going on from there.
        pub fn starting_at(now_ms: i64) -> ShiftedClock {
            let clock = ShiftedClock::new();
            clock.set_now(now_ms);
            clock
        }

        /// Sets the time to `now_ms` (forward or back) and wakes the sleepers.
        pub fn set_now(&self, now_ms: i64) {
            let unshifted = self.now_ms() - self.offset_ms.load(Ordering::SeqCst);
            self.offset_ms.store(now_ms - unshifted, Ordering::SeqCst);
            self.moved();
        }

        /// Moves the time forward by `by` and wakes the sleepers.
        pub fn advance(&self, by: Duration) {
            let by_ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
            self.offset_ms.fetch_add(by_ms, Ordering::SeqCst);
            self.moved();
        }

        fn moved(&self) {
            // `send_modify` updates the value even with no receiver yet.
            self.moves.send_modify(|moves| *moves += 1);
        }
    }

    impl Clock for ShiftedClock {
        fn now_ms(&self) -> i64 {
            let flowed = i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX);
            self.started_ms + flowed + self.offset_ms.load(Ordering::SeqCst)
        }

        fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            // Subscribed before the time is read: a move between the two still wakes it.
            let mut moves = self.moves.subscribe();
            Box::pin(async move {
                let wait = wait_for(at_ms, self.now_ms());
                if wait.is_zero() {
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = moves.changed() => {}
                }
            })
        }
    }
}
