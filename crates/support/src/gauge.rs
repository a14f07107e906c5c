//! [`Gauge`]: how many of something are under way now (writes held, calls waiting), counted by a
//! guard that takes itself off when dropped, so an early return or a cancelled future never
//! leaves a count behind. What `/metrics` shows as a gauge.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A count of things under way.
#[derive(Debug, Default)]
pub struct Gauge(AtomicUsize);

impl Gauge {
    /// How many are under way now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Counts one until the guard is dropped.
    pub fn enter(&self) -> Entered<'_> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Entered(&self.0)
    }
}

/// One counted in a [`Gauge`], until dropped.
#[derive(Debug)]
pub struct Entered<'a>(&'a AtomicUsize);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::Gauge;

    #[test]
    fn a_guard_counts_until_dropped() {
        let gauge = Gauge::default();
        let one = gauge.enter();
        let two = gauge.enter();
        assert_eq!(gauge.get(), 2);
        drop(one);
        assert_eq!(gauge.get(), 1);
        drop(two);
        assert_eq!(gauge.get(), 0);
    }
}
