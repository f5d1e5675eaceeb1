//! The time bounds the docs promise, each against real masters:
//!
//! - `try_lock` returns within one request timeout: a failed attempt
//!   queues its release and does not wait for a master that is not ready
//!   (a paused minority costs nothing, for failed attempts too);
//! - `lock_until` returns by its deadline, also when its round could take
//!   longer, starts a retry only if its whole request timeout fits before
//!   the deadline, and refuses a deadline that has passed without asking.
//!
//! Each bound is proven by what the library reports (which masters were
//! still pending or timed out when a round ended, how many attempts it
//! made) and, where a wall clock is read at all, against a request timeout
//! so much larger than the bound that only waiting for it could break the
//! assertion, whatever the load of the machine.

use std::time::{Duration, Instant};

use crate::support::check::{assert_gone, command_stats, reset_stats};
use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use crate::support::proxy::Proxies;
use redlock_mio::NodeState;
use redlock_mio::{Error, Redlock};

const TTL: Duration = Duration::from_secs(30);
/// So long that waiting for it cannot pass for scheduling noise: a call
/// that returns in half of it did not wait for it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(5);

fn client(urls: Vec<String>) -> Redlock {
    one_try(urls, REQUEST_TIMEOUT)
        .stall_timeout(REQUEST_TIMEOUT * 2)
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("build a client")
}

/// The states of the masters in the report of `err`'s last round.
fn states(err: &Error) -> Vec<NodeState> {
    err.report().expect("a report").nodes().to_vec()
}

/// Two of three masters refuse at once, the third is paused and its
/// connection is in the middle of a handshake (it was reset and made
/// again): the attempt is decided at once, and must return then, not
/// after waiting for its release to reach the paused master.
#[test]
fn failed_attempt_does_not_wait_for_a_paused_master() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls());
    let holder = client(cluster.urls());
    let mut held = holder.try_lock("busy", TTL).expect("the holder acquires");

    cluster.pause(2);
    let proxy = proxies.iter().nth(2).expect("proxy 2");
    assert_eq!(
        proxy.reset_connections(),
        1,
        "the client's connection reset"
    );

    for attempt in 0..3 {
        let start = Instant::now();
        let err = redlock
            .try_lock("busy", TTL)
            .expect_err("held by another client");
        let elapsed = start.elapsed();
        assert!(matches!(err, Error::Contended(_)), "{err}");
        // Decided by what came at once (a refusal, and the other refusal or
        // the reset connection), with no master left to its deadline.
        let states = states(&err);
        assert!(states[..2].contains(&NodeState::Refused), "{err}");
        assert!(!states.contains(&NodeState::TimedOut), "{err}");
        assert!(
            elapsed < REQUEST_TIMEOUT / 2,
            "attempt {attempt}: a failed attempt took {elapsed:?}: it waited for the paused master"
        );
    }
    let stats = redlock.stats();
    assert_eq!(stats.masters[2].timeouts, 0, "{stats:?}");

    cluster.resume(2);
    holder.unlock(&mut held).expect("release");
    // The queued releases reached every master: nothing of ours is left.
    assert_gone(&cluster, &[0, 1, 2], b"busy", SETTLE);
}

/// The same with a master that is simply paused (its connection ready):
/// the attempt fails on the two refusals and returns at once.
#[test]
fn failed_attempt_with_a_paused_ready_master() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    let holder = client(cluster.urls());
    let mut held = holder.try_lock("busy", TTL).expect("the holder acquires");
    cluster.pause(0);
    let start = Instant::now();
    let err = redlock.try_lock("busy", TTL).expect_err("held");
    let elapsed = start.elapsed();
    assert!(matches!(err, Error::Contended(_)), "{err}");
    assert_eq!(
        states(&err),
        [NodeState::Pending, NodeState::Refused, NodeState::Refused],
        "decided without the paused master"
    );
    assert!(elapsed < REQUEST_TIMEOUT / 2, "took {elapsed:?}");
    cluster.resume(0);
    holder.unlock(&mut held).expect("release");
}

/// A round that cannot decide early (one master refuses, one agrees, one
/// is paused) would wait a full request timeout; `lock_until` with a
/// deadline 200 ms away ends the round at the deadline instead: the paused
/// master times out then.
#[test]
fn lock_until_returns_by_its_deadline() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    cluster.set(0, "slow", "another-token");
    cluster.pause(1);

    let start = Instant::now();
    let deadline = start + Duration::from_millis(200);
    let err = redlock
        .lock_until("slow", TTL, deadline)
        .expect_err("no quorum");
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(err.is_retryable(), "{err}");
    // The paused master timed out: the round ended at the deadline. (The
    // others answer at once, unless the machine is slow.)
    let states = states(&err);
    assert_eq!(states[1], NodeState::TimedOut, "{err}");
    assert!(
        matches!(states[0], NodeState::Refused | NodeState::TimedOut)
            && matches!(states[2], NodeState::Ok | NodeState::TimedOut),
        "{err}"
    );
    assert_eq!(
        redlock.stats().attempts,
        1,
        "no retry fits before the deadline"
    );
    assert!(
        late < REQUEST_TIMEOUT / 2,
        "returned {late:?} after its deadline (request timeout {REQUEST_TIMEOUT:?})"
    );

    cluster.resume(1);
    // The attempt's release reaches every master; master 0 keeps the
    // other token.
    assert_gone(&cluster, &[1, 2], b"slow", SETTLE);
    assert_eq!(
        cluster.get(0, "slow").as_deref(),
        Some(&b"another-token"[..])
    );
}

/// `lock_until` on a resource held all along: with a request timeout that
/// fits several times before the deadline it retries; with one longer than
/// the time to the deadline, no retry fits, so it makes one attempt only.
#[test]
fn lock_until_retries_only_while_a_retry_fits() {
    let cluster = Cluster::start(3);
    let holder = client(cluster.urls());
    let mut held = holder.try_lock("held", TTL).expect("the holder acquires");
    // The deadline is 2 s away: a retry fits while 300 ms rounds are
    // tried, none once a round may take 3 s.
    let until = |request_timeout: Duration| {
        let redlock = Redlock::builder(cluster.urls())
            .request_timeout(request_timeout)
            .retry_delay(Duration::from_millis(30))
            .retry_jitter(Duration::from_millis(10))
            .build()
            .expect("build");
        let deadline = Instant::now() + Duration::from_secs(2);
        let err = redlock
            .lock_until("held", TTL, deadline)
            .expect_err("held all along");
        // Refused; or, on a slow machine, timed out.
        assert!(
            matches!(err, Error::Contended(_) | Error::Unavailable(_)),
            "{err}"
        );
        let late = Instant::now().saturating_duration_since(deadline);
        assert!(late < REQUEST_TIMEOUT / 2, "returned {late:?} late");
        redlock.stats().attempts
    };
    let attempts = until(Duration::from_millis(300));
    assert!(attempts >= 2, "it retried before its deadline: {attempts}");
    let attempts = until(Duration::from_secs(3));
    assert_eq!(attempts, 1, "a retry that does not fit is not started");
    holder.unlock(&mut held).expect("release");
}

/// A deadline that has passed is refused without asking the masters.
#[test]
fn lock_until_with_a_past_deadline_asks_nobody() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    reset_stats(&cluster);
    let err = redlock
        .lock_until("late", TTL, Instant::now())
        .expect_err("the deadline has passed");
    assert!(matches!(err, Error::DeadlinePassed), "{err}");
    assert_eq!(redlock.stats().attempts, 0);
    for i in 0..3 {
        assert_eq!(command_stats(&cluster, i, "set").0, 0, "node {i} got a SET");
    }
}

/// A lone caller whose masters are all local yields its CPU around each
/// wait for replies (`Builder::yield_to_local_masters`, on by default):
/// with it on and off, healthy cycles succeed and leave nothing, and with
/// a majority paused an attempt still ends at its request timeout, not
/// later (the time is read again after each yield).
#[test]
fn a_lone_caller_keeps_its_bounds_whether_it_yields_or_not() {
    let cluster = Cluster::start(3);
    for on in [true, false] {
        let redlock = one_try(cluster.urls(), Duration::from_millis(200))
            .yield_to_local_masters(on)
            .build()
            .expect("build a client");
        for _ in 0..200 {
            let mut lock = redlock.try_lock("lone", TTL).expect("healthy acquire");
            redlock.unlock(&mut lock).expect("healthy release");
        }
        assert_gone(&cluster, &[0, 1, 2], b"lone", SETTLE);

        cluster.pause(0);
        cluster.pause(1);
        let start = Instant::now();
        let error = redlock
            .try_lock("lone", TTL)
            .expect_err("no quorum with two of three paused");
        let took = start.elapsed();
        cluster.resume(0);
        cluster.resume(1);
        assert!(
            matches!(error, Error::Unavailable(_)),
            "yield {on}: {error}"
        );
        // Ended by its own deadline (not by a stall, 1 s by default): the
        // paused masters timed out, and not before the request timeout.
        let states = states(&error);
        assert_eq!(
            states[..2],
            [NodeState::TimedOut, NodeState::TimedOut],
            "yield {on}: {error}"
        );
        assert!(
            took >= Duration::from_millis(200) && took < REQUEST_TIMEOUT / 2,
            "yield {on}: the attempt took {took:?} against a 200 ms request timeout"
        );
        assert_gone(&cluster, &[0, 1, 2], b"lone", SETTLE);
    }
}
