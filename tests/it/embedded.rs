//! The client driven by the caller's own `mio` loop: many locks from one
//! loop beside the caller's own sources, typed errors, the cap, the
//! deadline of a round whose masters do not answer, and `lock_until`
//! (told by the release that hands it the lock, or waiting out a crashed
//! holder's key, never polling; leaving the masters' queues when it
//! gives up), and the extend that gives the lock back with its outcome.

use std::time::{Duration, Instant};

use crate::support::check::{command_stats, eventually, queued_on};
use crate::support::cluster::Cluster;
use mio::{Events, Interest, Poll, Token};
use redlock_mio::NodeState;
use redlock_mio::{Completion, ConfigError, EmbeddedRedlock, Error, Lock, MAX_TIMEOUT, Redlock};

const TTL: Duration = Duration::from_secs(10);

/// Polls until `n` completions were collected (or 10 s passed), each poll
/// no longer than `next_timeout` says.
fn drive(poll: &mut Poll, redlock: &mut EmbeddedRedlock, n: usize) -> Vec<Completion> {
    let mut events = Events::with_capacity(64);
    let mut done = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(10);
    while done.len() < n && Instant::now() < give_up {
        // Without a time of the client's, it gives up rather than hangs.
        let timeout = redlock
            .next_timeout()
            .unwrap_or(give_up)
            .min(give_up)
            .saturating_duration_since(Instant::now());
        poll.poll(&mut events, Some(timeout)).expect("poll");
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
        Err(Error::TooManyInFlight { limit: 2 })
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

const RESOURCE: &[u8] = b"waited-for";
/// Far longer than any test: an attempt that comes after a retry delay
/// means the waiter was not told.
const NEVER: Duration = MAX_TIMEOUT;
/// Generous bounds for a busy machine; never reached when things work.
const PATIENCE: Duration = Duration::from_secs(60);
/// A deadline far past `PATIENCE`: the last attempt it allows comes after
/// any test has given up.
const AN_HOUR: Duration = Duration::from_secs(3600);

/// A blocking client that holds the resource, or an embedded one that
/// waits for it: it only tries again when told, or when the key that
/// refused it expires (its retry delay outlasts every test).
fn builder(cluster: &Cluster) -> redlock_mio::Builder {
    Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_secs(1))
        .retry_delay(NEVER)
        .retry_jitter(Duration::ZERO)
}

/// A blocking client that holds the resource for `ttl` (and the lock),
/// and an embedded client in a loop of its own, about to wait for it.
fn contended(cluster: &Cluster, ttl: Duration) -> (Redlock, Lock, Poll, EmbeddedRedlock) {
    let holder = builder(cluster).build().expect("holder");
    let held = holder.try_lock(RESOURCE, ttl).expect("held");
    let poll = Poll::new().expect("poll");
    let redlock = builder(cluster)
        .build_embedded(poll.registry(), Token(0))
        .expect("build");
    (holder, held, poll, redlock)
}

/// Runs the loop, each poll at most 10 ms, until `done` holds for the
/// completions collected so far (or `PATIENCE` passed); returns them.
fn run_until(
    poll: &mut Poll,
    redlock: &mut EmbeddedRedlock,
    mut done: impl FnMut(&[Completion]) -> bool,
) -> Vec<Completion> {
    let mut events = Events::with_capacity(64);
    let mut collected = Vec::new();
    let give_up = Instant::now() + PATIENCE;
    while !done(&collected) && Instant::now() < give_up {
        let turn = Duration::from_millis(10);
        let timeout = redlock.next_timeout().map_or(turn, |at| {
            at.saturating_duration_since(Instant::now()).min(turn)
        });
        poll.poll(&mut events, Some(timeout)).expect("poll");
        redlock.handle_events(&events);
        redlock.handle_timeout(Instant::now());
        collected.extend(std::iter::from_fn(|| redlock.poll_completion()));
    }
    collected
}

/// `EVALSHA` calls on each master: each attempt of an acquire that waits
/// is one, and so is a blocking client's release; nothing else the tests
/// send is (the embedded client's releases after a failed attempt and its
/// leaving the queues go as `EVAL`, the holder's acquire as `SET`).
fn evalsha(cluster: &Cluster) -> Vec<u64> {
    (0..cluster.len())
        .map(|i| command_stats(cluster, i, "evalsha").0)
        .collect()
}

/// The lock from the only completion among `done`.
fn acquired(done: Vec<Completion>) -> Result<Lock, Error> {
    match <[Completion; 1]>::try_from(done) {
        Ok([Completion::Acquired { result, .. }]) => result,
        other => panic!("expected one acquire, got {other:?}"),
    }
}

#[test]
fn lock_until_is_handed_the_lock_by_the_release() {
    let cluster = Cluster::start(3);
    let (holder, mut held, mut poll, mut redlock) = contended(&cluster, AN_HOUR);
    let ticket = redlock
        .lock_until(RESOURCE, Duration::from_secs(30), Instant::now() + AN_HOUR)
        .expect("start");
    let early = run_until(&mut poll, &mut redlock, |_| {
        queued_on(&cluster, RESOURCE, 1) == 3
    });
    assert!(early.is_empty(), "{early:?}");
    assert_eq!(
        queued_on(&cluster, RESOURCE, 1),
        3,
        "queued on every master"
    );
    assert_eq!(redlock.in_flight(), 1);

    holder.unlock(&mut held).expect("released");
    let done = run_until(&mut poll, &mut redlock, |done| !done.is_empty());
    assert!(
        matches!(done.first(), Some(Completion::Acquired { ticket: t, .. }) if *t == ticket),
        "{done:?}"
    );
    let lock = acquired(done).expect("handed the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    assert_eq!(redlock.in_flight(), 0);
    // On each master: the refused attempt, the holder's release, and the
    // attempt it was told to make; the holder's key had an hour left and
    // the retry delay is longer still.
    let attempts = evalsha(&cluster);
    assert!(attempts.iter().all(|&n| n <= 3), "{attempts:?}");
    assert!(eventually(PATIENCE, || evalsha(&cluster) == [3, 3, 3]));
    assert!(
        eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0),
        "no queue entry is left"
    );
}

#[test]
fn lock_until_past_its_deadline_leaves_no_queue_entry() {
    let cluster = Cluster::start(3);
    let (_holder, _held, mut poll, mut redlock) = contended(&cluster, AN_HOUR);
    // The last attempt starts when its request timeout (1 s) still fits.
    let deadline = Instant::now() + Duration::from_secs(3);
    redlock
        .lock_until(RESOURCE, Duration::from_secs(30), deadline)
        .expect("start");
    let result = acquired(drive(&mut poll, &mut redlock, 1));
    assert!(matches!(result, Err(Error::Contended(_))), "{result:?}");
    assert_eq!(redlock.in_flight(), 0);
    // The first attempt, and the last one, at the latest start.
    assert!(eventually(PATIENCE, || evalsha(&cluster) == [2, 2, 2]));
    assert!(
        eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0),
        "its entries are gone"
    );
    assert!(matches!(
        redlock.lock_until(RESOURCE, TTL, Instant::now()),
        Err(Error::DeadlinePassed)
    ));
}

#[test]
fn lock_until_replaces_a_crashed_holder_once_its_key_expires() {
    let cluster = Cluster::start(3);
    let (holder, held, mut poll, mut redlock) = contended(&cluster, Duration::from_secs(2));
    // The holder crashes: its key stays until its TTL runs out.
    drop(holder);
    redlock
        .lock_until(RESOURCE, Duration::from_secs(30), Instant::now() + AN_HOUR)
        .expect("start");
    // Each poll as long as `next_timeout` says: the wait's end is in it.
    let lock = acquired(drive(&mut poll, &mut redlock, 1)).expect("served once the key expired");
    assert!(
        Instant::now() >= held.valid_until(),
        "not before the holder's validity ended"
    );
    assert!(lock.validity() > Duration::from_secs(20));
    // The refused attempt learned when the key expires; no polling.
    let attempts = evalsha(&cluster);
    assert!(attempts.iter().all(|&n| n <= 3), "{attempts:?}");
    assert!(eventually(PATIENCE, || evalsha(&cluster)
        .iter()
        .all(|&n| n >= 2)));
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0));
}

/// The one completion among `done`, an extend's: the lock it gives back
/// and the outcome.
fn extended(done: Vec<Completion>) -> (Lock, Result<(), Error>) {
    match <[Completion; 1]>::try_from(done) {
        Ok([Completion::Extended { lock, result, .. }]) => (lock, result),
        Ok([other]) => panic!("not an extend's completion: {other:?}"),
        Err(done) => panic!("{} completions", done.len()),
    }
}

/// An extend holds the lock until its completion gives it back, renewed
/// on success (on every master, and in the lock's validity and count);
/// expired when a quorum no longer holds the key; and given back at once,
/// unchanged, when nothing could be sent.
#[test]
fn extend_gives_the_lock_back_with_its_outcome() {
    const SHORT: Duration = Duration::from_secs(2);
    const LONG: Duration = Duration::from_secs(120);
    let cluster = Cluster::start(3);
    let mut poll = Poll::new().expect("poll");
    let mut redlock = Redlock::builder(cluster.urls())
        .max_in_flight(1)
        .build_embedded(poll.registry(), Token(0))
        .expect("build");
    redlock.try_lock("embedded:extend", SHORT).expect("start");
    let lock = acquired(drive(&mut poll, &mut redlock, 1)).expect("acquired");
    let token = *lock.token();

    redlock.extend(lock, LONG).expect("start the extend");
    assert_eq!(redlock.in_flight(), 1);
    let (lock, result) = extended(drive(&mut poll, &mut redlock, 1));
    result.expect("extended");
    assert_eq!(lock.token(), &token, "the same lock came back");
    assert_eq!(lock.extensions(), 1);
    assert!(lock.validity() > SHORT, "renewed: {:?}", lock.validity());
    let pttl = |m: usize| {
        let reply = cluster.command(m, &[b"PTTL", b"embedded:extend"]);
        let text = String::from_utf8_lossy(&reply).into_owned();
        text.trim()
            .trim_start_matches(':')
            .parse::<i64>()
            .expect("PTTL")
    };
    // A quorum at least (the third master's reply was not waited for).
    let renewed = (0..3)
        .filter(|&m| pttl(m) > SHORT.as_millis() as i64)
        .count();
    assert!(renewed >= 2, "renewed on {renewed} masters");

    // Refused before anything is sent: the lock comes back as it was.
    let (lock, error) = redlock.extend(lock, Duration::ZERO).expect_err("no TTL");
    assert!(matches!(error, Error::InvalidTtl { .. }), "{error}");
    assert_eq!((lock.token(), lock.extensions()), (&token, 1));
    redlock.try_lock("embedded:cap", TTL).expect("fill the cap");
    let (lock, error) = redlock.extend(lock, LONG).expect_err("at the cap");
    assert!(
        matches!(error, Error::TooManyInFlight { limit: 1 }),
        "{error}"
    );
    assert!(!lock.is_expired(), "unchanged");
    assert_eq!(drive(&mut poll, &mut redlock, 1).len(), 1);

    // The key gone from a quorum: the lock comes back expired.
    for m in 0..2 {
        cluster.command(m, &[b"DEL", b"embedded:extend"]);
    }
    redlock.extend(lock, LONG).expect("start the extend");
    let (lock, result) = extended(drive(&mut poll, &mut redlock, 1));
    assert!(matches!(result, Err(Error::NotHeld(_))), "{result:?}");
    assert!(lock.is_expired(), "a lock a quorum no longer holds");
    let (_, error) = redlock.extend(lock, LONG).expect_err("expired");
    assert!(matches!(error, Error::Expired), "{error}");
}

/// A watched lock whose key a quorum loses is reported by its watch's
/// ticket, from the loop's own events: once after it was acquired, and
/// again after an extend (which reads the keys anew); its release ends
/// the watch.
#[test]
fn a_watch_reports_a_loss_through_the_loop() {
    let cluster = Cluster::start(3);
    let mut poll = Poll::new().expect("poll");
    let mut redlock = Redlock::builder(cluster.urls())
        .build_embedded(poll.registry(), Token(0))
        .expect("build");
    // The acquire returns at a quorum, and a master's `SET` may come
    // after a `DEL` there: a `DEL` on every master leaves the key on one
    // at most.
    // Then the watch's ticket completes, and the lock says it is lost.
    let lose = |redlock: &mut EmbeddedRedlock, poll: &mut Poll, lock: &Lock, ticket| {
        for m in 0..3 {
            cluster.command(m, &[b"DEL", lock.resource()]);
        }
        let done = drive(poll, redlock, 1);
        assert!(
            matches!(done[..], [Completion::Lost { ticket: t }] if t == ticket),
            "{done:?}"
        );
        assert!(lock.is_lost());
    };

    redlock.try_lock("embedded:watched", TTL).expect("start");
    let mut lock = acquired(drive(&mut poll, &mut redlock, 1)).expect("acquired");
    let ticket = redlock.watch(&mut lock).expect("watched");
    assert_eq!(redlock.watch(&mut lock), None, "watched once");
    lose(&mut redlock, &mut poll, &lock, ticket);
    redlock.unlock(&mut lock).expect("start the release");
    assert_eq!(drive(&mut poll, &mut redlock, 1).len(), 1);

    redlock.try_lock("embedded:extended", TTL).expect("start");
    let mut lock = acquired(drive(&mut poll, &mut redlock, 1)).expect("acquired");
    let ticket = redlock.watch(&mut lock).expect("watched");
    redlock.extend(lock, TTL).expect("start the extend");
    let (mut lock, result) = extended(drive(&mut poll, &mut redlock, 1));
    result.expect("extended");
    assert!(!lock.is_lost());
    lose(&mut redlock, &mut poll, &lock, ticket);
    redlock.unlock(&mut lock).expect("start the release");
    assert_eq!(drive(&mut poll, &mut redlock, 1).len(), 1);
    assert_eq!(
        redlock.watch(&mut lock),
        None,
        "a released lock is not watched"
    );
}
