//! `Builder::yield_to_local_masters`: when a blocking caller yields its CPU
//! to masters on this machine, and when it never does, counted by
//! `Stats::yields` against real masters. (Masters on other machines turn
//! it off too: that predicate, `Endpoint::is_local`, has a unit test; a
//! test here may not send traffic off loopback.)

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use redlock_mio::Redlock;
use support::check::assert_gone;
use support::cluster::Cluster;

const TTL: Duration = Duration::from_secs(10);
const CYCLES: u64 = 20;
const SETTLE: Duration = Duration::from_secs(5);

fn client(urls: Vec<String>, on: bool) -> Redlock {
    Redlock::builder(urls)
        .retry_count(0)
        .yield_to_local_masters(on)
        .build()
        .expect("build a client")
}

/// `CYCLES` blocking try_lock + unlock cycles on `resource`.
fn cycles(redlock: &Redlock, resource: &str) {
    for _ in 0..CYCLES {
        let mut lock = redlock.try_lock(resource, TTL).expect("healthy acquire");
        redlock.unlock(&mut lock).expect("healthy release");
    }
}

#[test]
fn a_lone_blocking_caller_yields_at_least_once_per_round_only_when_on() {
    let cluster = Cluster::start(3);
    let on = client(cluster.urls(), true);
    cycles(&on, "lone");
    let yields = on.stats().yields;
    assert!(
        yields >= 2 * CYCLES,
        "{yields} yields in {CYCLES} cycles of two rounds each"
    );

    let off = client(cluster.urls(), false);
    cycles(&off, "lone");
    assert_eq!(off.stats().yields, 0, "turned off");
    assert_gone(&cluster, &[0, 1, 2], b"lone", SETTLE);
}

#[test]
fn async_calls_never_yield() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), true);
    futures_executor::block_on(async {
        for _ in 0..CYCLES {
            let mut lock = redlock
                .try_lock_async("async", TTL)
                .await
                .expect("healthy acquire");
            redlock
                .unlock_async(&mut lock)
                .await
                .expect("healthy release");
        }
    });
    assert_eq!(redlock.stats().yields, 0);
    assert_gone(&cluster, &[0, 1, 2], b"async", SETTLE);
}

/// A task's round stays in flight while its future is not polled again:
/// the blocking caller that meanwhile makes its cycles is never alone, so
/// never yields. The dropped future's lock is released by the client.
#[test]
fn a_caller_never_yields_while_another_round_is_in_flight() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), true);
    let mut context = Context::from_waker(Waker::noop());
    let mut tries = 0;
    loop {
        // A lone task polls for its replies in its first poll already,
        // and may find them there: then its round is over; try again.
        tries += 1;
        assert!(tries <= 100, "no first poll left its round in flight");
        let mut other = pin!(redlock.try_lock_async("other", TTL));
        match other.as_mut().poll(&mut context) {
            Poll::Ready(result) => {
                let mut lock = result.expect("healthy acquire");
                redlock.unlock(&mut lock).expect("healthy release");
            }
            Poll::Pending => {
                let before = redlock.stats().yields;
                cycles(&redlock, "busy");
                assert_eq!(redlock.stats().yields, before, "never alone");
                break;
            }
        }
    }
    assert_gone(&cluster, &[0, 1, 2], b"other", SETTLE);
    assert_gone(&cluster, &[0, 1, 2], b"busy", SETTLE);

    // The same client, alone again, yields.
    let before = redlock.stats().yields;
    cycles(&redlock, "busy");
    assert!(redlock.stats().yields >= before + 2 * CYCLES);
}
