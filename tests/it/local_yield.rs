//! `Builder::yield_to_local_masters`: when a caller (a thread, or a task
//! polling for itself) yields its CPU to masters on this machine, and when
//! it never does, counted by `Stats::yields` against real masters. (Masters on other machines turn
//! it off too: that predicate, `Endpoint::is_local`, has a unit test; a
//! test here may not send traffic off loopback.)

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::support::check::{assert_gone, eventually};
use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use redlock_mio::Redlock;

const TTL: Duration = Duration::from_secs(10);
const CYCLES: u64 = 20;
const SETTLE: Duration = Duration::from_secs(5);

/// Long enough that no round times out on a busy machine (whether a
/// caller yields does not depend on it).
const TIMEOUT: Duration = Duration::from_secs(2);

fn client(urls: Vec<String>, on: bool) -> Redlock {
    one_try(urls, TIMEOUT)
        .stall_timeout(TIMEOUT)
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
fn a_lone_blocking_caller_yields_twice_a_round_only_when_on() {
    let cluster = Cluster::start(3);
    let on = client(cluster.urls(), true);
    cycles(&on, "lone");
    let yields = on.stats().yields;
    assert!(
        yields >= 4 * CYCLES,
        "{yields} yields in {CYCLES} cycles of two rounds each: at least one \
         before the first wait for replies and one at the decision"
    );

    let off = client(cluster.urls(), false);
    cycles(&off, "lone");
    assert_eq!(off.stats().yields, 0, "turned off");
    assert_gone(&cluster, &[0, 1, 2], b"lone", SETTLE);
}

/// A lone task that polls for itself yields once per round at most, after
/// writing it (and never with the setting off).
#[test]
fn a_lone_async_task_yields_at_most_once_per_round() {
    let cluster = Cluster::start(3);
    for on in [true, false] {
        let redlock = client(cluster.urls(), on);
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
        let yields = redlock.stats().yields;
        if on {
            // Once a round at most; a round that outlasts the spin (on a
            // loaded machine) leaves the next one to the background thread.
            assert!(
                yields > 0 && yields <= 2 * CYCLES,
                "{yields} yields in {CYCLES} cycles of two rounds each"
            );
        } else {
            assert_eq!(yields, 0, "turned off");
        }
    }
    assert_gone(&cluster, &[0, 1, 2], b"async", SETTLE);
}

/// A task's round stays in flight while its future is not polled again:
/// another task that starts a round meanwhile, and a blocking caller that
/// makes its cycles, are never alone, so never yield. The dropped futures'
/// locks are released by the client.
#[test]
fn a_caller_never_yields_while_another_round_is_in_flight() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), true);
    let mut context = Context::from_waker(Waker::noop());
    {
        // Paused masters cannot answer the task's first poll.
        for node in 0..3 {
            cluster.pause(node);
        }
        let mut other = pin!(redlock.try_lock_async("other", TTL));
        let first = other.as_mut().poll(&mut context);
        for node in 0..3 {
            cluster.resume(node);
        }
        assert!(first.is_pending(), "the task's round is in flight");
        let before = redlock.stats().yields;
        // A second task, then a thread, while that round is in flight.
        let mut second = pin!(redlock.try_lock_async("second", TTL));
        // Its round may be decided before its first poll looks (the
        // background thread wrote it and read the replies): then the lock
        // is the caller's, to release.
        let won = match second.as_mut().poll(&mut context) {
            Poll::Ready(result) => Some(result.expect("healthy acquire")),
            Poll::Pending => None,
        };
        assert_eq!(redlock.stats().yields, before, "the task was not alone");
        cycles(&redlock, "busy");
        if let Some(mut lock) = won {
            redlock.unlock(&mut lock).expect("healthy release");
        }
        assert_eq!(redlock.stats().yields, before, "the thread was never alone");
        // Both futures are dropped here.
    }
    // The releases made for the dropped futures are followed until every
    // master has answered them.
    let answered = eventually(SETTLE, || {
        let stats = redlock.stats();
        stats.drop_releases_ended == stats.drop_releases
    });
    let stats = redlock.stats();
    assert!(
        answered,
        "releases for dropped futures unanswered: {stats:?}"
    );
    assert!(
        (1..=2).contains(&stats.abandoned) && stats.drop_releases == stats.abandoned,
        "one or both futures dropped in flight, each released: {stats:?}"
    );
    for key in [&b"other"[..], b"second", b"busy"] {
        assert_gone(&cluster, &[0, 1, 2], key, SETTLE);
    }

    // The same client, alone again, yields.
    let before = redlock.stats().yields;
    cycles(&redlock, "busy");
    assert!(redlock.stats().yields >= before + 4 * CYCLES);
}
