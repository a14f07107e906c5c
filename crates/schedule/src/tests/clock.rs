use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{Clock, MAX_SLEEP, ShiftedClock, SystemClock};

#[tokio::test(start_paused = true)]
async fn the_system_clock_sleeps_a_minute_at_most() {
    let started = Instant::now();
    let clock = SystemClock;
    clock.sleep_until(clock.now_ms() + 3_600_000).await;
    assert!(started.elapsed() >= MAX_SLEEP && started.elapsed() < MAX_SLEEP + Duration::from_secs(1));
    let started = Instant::now();
    clock.sleep_until(clock.now_ms() - 1).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_shifted_clock_wakes_its_sleeper_when_advanced() {
    let clock = Arc::new(ShiftedClock::starting_at(1_000_000));
    let wake_at = clock.now_ms() + 3_600_000;
    let sleeper = tokio::spawn({
        let clock = Arc::clone(&clock);
        async move {
            clock.sleep_until(wake_at).await;
            clock.now_ms()
        }
    });
    // Let the sleeper start its sleep; paused time does not move while a task can run.
    tokio::task::yield_now().await;
    let started = Instant::now();
    clock.advance(Duration::from_secs(3600));
    let woke_at = sleeper.await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO, "woken by the move, not by its timer");
    assert!(woke_at >= wake_at, "{woke_at} < {wake_at}");
}

#[tokio::test(start_paused = true)]
async fn a_shifted_clock_is_set_and_flows_with_tokio_time() {
    let clock = ShiftedClock::starting_at(5_000);
    assert_eq!(clock.now_ms(), 5_000);
    tokio::time::advance(Duration::from_millis(250)).await;
    assert_eq!(clock.now_ms(), 5_250);
    clock.set_now(1_000);
    assert_eq!(clock.now_ms(), 1_000);
    // A sleep the clock is not moved during ends at its time, by tokio's timer.
    let started = Instant::now();
    clock.sleep_until(3_000).await;
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(clock.now_ms(), 3_000);
}

#[tokio::test(start_paused = true)]
async fn a_shifted_clock_set_back_wakes_its_sleeper_too() {
    let clock = Arc::new(ShiftedClock::starting_at(10_000));
    let sleeper = tokio::spawn({
        let clock = Arc::clone(&clock);
        async move { clock.sleep_until(20_000).await }
    });
    tokio::task::yield_now().await;
    clock.set_now(0);
    sleeper.await.unwrap();
    assert_eq!(clock.now_ms(), 0, "no time flowed: the sleeper returned at the move");
}
