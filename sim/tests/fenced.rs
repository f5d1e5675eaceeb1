//! Directed scenarios of the simulator's fenced acquires, driven by hand:
//! the front ends' own machine of rounds (`client/fence.rs`), run step by
//! step by the simulator's client against master models.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly"
)]

mod rig;

use std::time::Duration;

use redlock_mio_sim::client::{Fenced, Held, Names};

use rig::{EPOCH_US, Rig};

const TOKEN: [u8; 20] = [7; 20];

/// Three fenced masters, the second's clock 3 s ahead of the others'.
fn fenced_rig() -> Rig {
    let settings = redlock_mio_sim::client::Settings {
        fencing: Some(Duration::from_secs(2)),
        ..rig::settings()
    };
    Rig::with(settings, vec![0, 3_000_000, 1_000])
}

/// Runs `fenced`'s steps, every master answering, until it ends: the
/// lock, and how many steps it took.
fn run(rig: &mut Rig, mut fenced: Fenced) -> (Held, usize) {
    let mut steps = 0;
    while !fenced.rounds().is_empty() {
        rig.exchange_all();
        assert!(rig.client.is_fenced_decided(&fenced));
        rig.advance(Duration::from_millis(1));
        let now = rig.instant();
        rig.client.step_fenced(&mut fenced, now);
        steps += 1;
    }
    let held = rig.client.end_fenced(fenced);
    (held.expect("every master answered"), steps)
}

/// A new deployment: the first fenced acquire reads the counters twice
/// (the losses it saw first must be confirmed), starts every counter from
/// the largest clock, acquires and raises; every master ends with the
/// lock's fence. After a release, the next acquire goes straight to its
/// acquire and raise, and its fence is larger.
#[test]
fn a_fenced_acquire_starts_from_the_largest_clock_and_raises_everywhere() {
    let mut rig = fenced_rig();
    let names = Names::one(b"res").unwrap();
    let now = rig.instant();
    let ttl = Duration::from_secs(1);
    let fenced = rig
        .client
        .begin_fenced(&names, &TOKEN, ttl, None, None, now)
        .unwrap();
    let (mut held, steps) = run(&mut rig, fenced);
    assert_eq!(steps, 5, "read, read again, start, acquire, raise");
    let fence = held.fence().expect("fenced");
    assert!(fence > EPOCH_US + 3_000_000, "{fence}: from the fast clock");
    for i in 0..3 {
        assert_eq!(rig.counter(i), Some(fence), "master {i} raised");
    }
    assert_eq!(rig.holding(b"res", &TOKEN), 3);

    let now = rig.instant();
    let id = rig.client.begin_release(&held, now).unwrap();
    rig.exchange_all();
    rig.client
        .end_release(id, &mut held, rig.instant())
        .unwrap();
    let now = rig.instant();
    let fenced = rig
        .client
        .begin_fenced(&names, &[8; 20], ttl, None, None, now)
        .unwrap();
    let (next, steps) = run(&mut rig, fenced);
    assert_eq!(steps, 2, "acquire, raise");
    assert!(next.fence().expect("fenced") > fence);
}

/// A caller gone while its raise is in flight (a dropped future): the
/// lock it won is released on every master.
#[test]
fn a_fenced_acquire_dropped_during_its_raise_releases_what_it_won() {
    let mut rig = fenced_rig();
    let names = Names::one(b"res").unwrap();
    let now = rig.instant();
    let ttl = Duration::from_secs(1);
    let mut fenced = rig
        .client
        .begin_fenced(&names, &TOKEN, ttl, None, None, now)
        .unwrap();
    while fenced.acquire_round().is_none() {
        rig.exchange_all();
        let now = rig.instant();
        rig.client.step_fenced(&mut fenced, now);
    }
    assert_eq!(fenced.rounds().len(), 1, "the raise is in flight");
    assert_eq!(rig.holding(b"res", &TOKEN), 3);
    let now = rig.instant();
    rig.client.drop_fenced(fenced, now);
    rig.exchange_all();
    assert_eq!(rig.holding(b"res", &TOKEN), 0);
}
