//! A waiter leaves the wait queues where it may be queued, as the front
//! ends' machine of the acquire that waits decides, which the simulator's
//! client drives.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly"
)]

mod rig;

use std::time::Duration;

use redlock_mio::scripts::LEAVE_SCRIPT;
use redlock_mio_sim::client::{Names, Settings};

use rig::{EPOCH_US, Rig};

/// A waiter refused once (queued everywhere) is handed the lock, and its
/// next attempt wins on two masters of three before the third answers:
/// the third may still queue it (it runs the attempt later and, the key
/// held, queues it again), so the wait leaves its queue there too.
#[test]
fn a_wait_that_met_contention_leaves_the_queues_of_the_masters_still_to_answer() {
    let settings = Settings {
        wake: true,
        ..rig::settings()
    };
    let mut rig = Rig::with(settings, vec![0; 3]);
    let names = Names::one(b"res").unwrap();
    let ttl = Duration::from_secs(1);
    let now = rig.instant();
    let id = rig
        .client
        .begin_acquire(&names, &[1; 20], ttl, None, None, now)
        .unwrap();
    rig.exchange_all();
    let now = rig.instant();
    let held = rig.client.end_acquire(id, &names, &[1; 20], now);
    let mut held = held.expect("free");

    let mut pursue = rig
        .client
        .begin_pursuit(&names, ttl, Some(now + 60 * ttl), EPOCH_US)
        .unwrap();
    assert!(pursue.waits(), "a slot");
    let now = rig.instant();
    let id = rig
        .client
        .begin_acquire(&names, &[2; 20], ttl, Some(&mut pursue), None, now)
        .unwrap();
    rig.exchange_all();
    let now = rig.instant();
    let refused = rig.client.end_attempt(id, &mut pursue, || 0.5, now);
    assert!(refused.is_err(), "held");

    let id = rig.client.begin_release(&held, rig.instant()).unwrap();
    rig.exchange_all();
    rig.client
        .end_release(id, &mut held, rig.instant())
        .unwrap();

    let now = rig.instant();
    assert!(rig.client.resume(&mut pursue, true, now), "told: attempts");
    let id = rig
        .client
        .begin_acquire(&names, &[3; 20], ttl, Some(&mut pursue), None, now)
        .unwrap();
    rig.exchange(0);
    rig.exchange(1);
    let now = rig.instant();
    let won = rig.client.end_attempt(id, &mut pursue, || 0.5, now);
    won.expect("handed over, won on two of three");
    rig.client.end_pursuit(&mut pursue, rig.instant());
    let to_third = rig.take(2);
    let leaves = to_third
        .windows(LEAVE_SCRIPT.len())
        .any(|w| w == LEAVE_SCRIPT.as_bytes());
    assert!(leaves, "no leave for the master still to answer");
}
