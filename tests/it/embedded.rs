//! The client driven by the caller's own `mio` loop: many locks from one
//! loop beside the caller's own sources, typed errors, the cap, and the
//! deadline of a round whose masters do not answer.

use std::time::{Duration, Instant};

use crate::support::cluster::Cluster;
use mio::{Events, Interest, Poll, Token};
use redlock_mio::rules::NodeState;
use redlock_mio::{Completion, ConfigError, EmbeddedRedlock, Error, Lock, Redlock};

const TTL: Duration = Duration::from_secs(10);

/// Polls until `n` completions were collected (or 10 s passed).
fn drive(poll: &mut Poll, redlock: &mut EmbeddedRedlock, n: usize) -> Vec<Completion> {
    let mut events = Events::with_capacity(64);
    let mut done = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(10);
    while done.len() < n && Instant::now() < give_up {
        let timeout = redlock
            .next_timeout()
            .map(|at| at.saturating_duration_since(Instant::now()));
        poll.poll(&mut events, timeout).expect("poll");
        redlock.handle_events(&events);
        redlock.handle_timeout(Instant::now());
        done.extend(std::iter::from_fn(|| redlock.poll_completion()));
    }
    done
}

#[test]
fn one_loop_holds_many_locks_beside_its_own_sources() {
    let cluster = Cluster::start(3);
    let mut poll = Poll::new().expect("poll");
    // The caller's own source, on token 0: a listener nobody connects to.
    let mut listener =
        mio::net::TcpListener::bind("127.0.0.1:0".parse().expect("address")).expect("bind");
    poll.registry()
        .register(&mut listener, Token(0), Interest::READABLE)
        .expect("register the caller's source");
    let mut redlock = Redlock::builder(cluster.urls())
        .build_embedded(poll.registry(), Token(10))
        .expect("build");
    assert_eq!(redlock.tokens(), 10..13);

    let tickets: Vec<_> = (0..100)
        .map(|i| {
            redlock
                .try_lock(format!("embedded:{i}"), TTL)
                .expect("start")
        })
        .collect();
    assert_eq!(redlock.in_flight(), 100);
    let mut locks: Vec<Lock> = Vec::new();
    for completion in drive(&mut poll, &mut redlock, 100) {
        match completion {
            Completion::Acquired { ticket, result } => {
                assert!(tickets.contains(&ticket));
                locks.push(result.expect("acquired"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(locks.len(), 100);
    assert_eq!(redlock.in_flight(), 0);
    for i in [0, 99] {
        // A quorum at least (the third master's reply was not waited for).
        let holding = (0..3)
            .filter(|&m| cluster.exists(m, format!("embedded:{i}")))
            .count();
        assert!(holding >= 2, "embedded:{i} on {holding} masters");
    }
    let other = Redlock::builder(cluster.urls())
        .retry_count(0)
        .build()
        .expect("build");
    assert!(matches!(
        other.try_lock("embedded:7", TTL),
        Err(Error::Contended(_))
    ));

    for lock in &mut locks {
        redlock.unlock(lock).expect("start the release");
        assert!(lock.is_expired(), "a lock being released claims nothing");
    }
    let released = drive(&mut poll, &mut redlock, 100);
    assert_eq!(released.len(), 100);
    for completion in released {
        assert!(
            matches!(completion, Completion::Released { result: Ok(()), .. }),
            "{completion:?}"
        );
    }
    // The last master's releases may still be on their way.
    let gone = || (0..100).all(|i| (0..3).all(|m| !cluster.exists(m, format!("embedded:{i}"))));
    let until = Instant::now() + Duration::from_secs(2);
    while !gone() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone(), "a key was left behind");
}

#[test]
fn typed_errors_and_the_cap() {
    let cluster = Cluster::start(3);
    let poll = Poll::new().expect("poll");
    assert!(matches!(
        Redlock::builder(cluster.urls())
            .fencing(TTL)
            .build_embedded(poll.registry(), Token(0)),
        Err(ConfigError::NotEmbeddable(_))
    ));
    let mut redlock = Redlock::builder(cluster.urls())
        .max_in_flight(2)
        .build_embedded(poll.registry(), Token(0))
        .expect("build");
    assert!(matches!(
        redlock.try_lock("", TTL),
        Err(Error::InvalidResource { len: 0 })
    ));
    assert!(matches!(
        redlock.try_lock("x", Duration::ZERO),
        Err(Error::InvalidTtl { .. })
    ));
    redlock.try_lock("cap:0", TTL).expect("first");
    redlock.try_lock("cap:1", TTL).expect("second");
    assert!(matches!(
        redlock.try_lock("cap:2", TTL),
        Err(Error::Busy { limit: 2 })
    ));
    assert_eq!(redlock.in_flight(), 2);
}

/// Every master paused: the acquire completes by its request timeout,
/// with every master timed out, if the caller polls no longer than
/// `next_timeout` says.
#[test]
fn a_round_without_answers_ends_at_its_deadline() {
    let cluster = Cluster::start(3);
    let mut poll = Poll::new().expect("poll");
    let timeout = Duration::from_millis(200);
    let stall = Duration::from_secs(20);
    let mut redlock = Redlock::builder(cluster.urls())
        .request_timeout(timeout)
        .stall_timeout(stall)
        .build_embedded(poll.registry(), Token(0))
        .expect("build");
    // Connected first, so that the round's requests are written.
    redlock.try_lock("warm-up", TTL).expect("start");
    let warm = drive(&mut poll, &mut redlock, 1);
    assert!(matches!(
        warm.first(),
        Some(Completion::Acquired { result: Ok(_), .. })
    ));
    for m in 0..3 {
        cluster.pause(m);
    }
    let started = Instant::now();
    redlock.try_lock("silent", TTL).expect("start");
    let done = drive(&mut poll, &mut redlock, 1);
    let took = started.elapsed();
    for m in 0..3 {
        cluster.resume(m);
    }
    match done.first() {
        Some(Completion::Acquired {
            result: Err(Error::Unavailable(report)),
            ..
        }) => assert_eq!(
            report.nodes(),
            [
                NodeState::TimedOut,
                NodeState::TimedOut,
                NodeState::TimedOut
            ],
            "ended by its deadline: {report}"
        ),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(took >= timeout, "decided before its deadline: {took:?}");
    // Far below the stall timeout, which would end it otherwise.
    assert!(took < stall / 2, "not decided by its deadline: {took:?}");
}
