//! Cancel safety of the async API, against real masters: every async entry
//! point is dropped after each of its polls (polled `k` times, for `k` = 1,
//! 2, ... until a run completes within `k` polls), on a fresh client, on a
//! warm one, and on one whose connections the masters just closed (its
//! round waits behind a new connect and handshake), with every master
//! paused around the first poll. After each run the client is driven to
//! quiescence, proven by its counters: every release made for a dropped
//! future has been answered by every master, and everything written
//! before a last release (a barrier) has been applied. Then no key of the
//! run is left on any master, and `stats()` accounts for every round and
//! every release made on a dropped future's behalf.
//!
//! A new entry point is covered by adding a [`Case`] to [`CASES`].
//!
//! The bound when a release cannot reach a master (its connection went
//! down after the acquire was written there): the key stays on that master
//! until its TTL runs out, and no longer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use crate::support::check::{assert_gone, eventually, kill_clients, pttl};
use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use crate::support::proxy::{Dir, Proxies};
use redlock_mio::{AsyncLockGuard, Error, Lock, Redlock, Stats};

const TTL: Duration = Duration::from_secs(30);
/// Long enough that no round times out and no connection looks stalled
/// on a busy machine: the masters are paused around one poll only.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a future may go without being woken before the test calls it
/// stuck (it never is: a missed wake-up would hang the task for good).
const STUCK: Duration = Duration::from_secs(60);
/// Polls after which a run that has not completed fails the test.
const MAX_POLLS: usize = 10_000;

/// What the run's set-up holds for the future: the lock or guard an
/// extend or a release acts on.
enum Held {
    Nothing,
    Lock(Lock),
    Guard(AsyncLockGuard),
}

/// What a future that completed gave its caller.
enum Got {
    Lock(Result<Lock, Error>),
    Guard(Result<AsyncLockGuard, Error>),
    /// An extend's or a release's result.
    Done(Result<(), Error>),
}

/// Which counters a case's rounds move.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Acquire rounds, one per attempt; with `retries`, a pending future
    /// may be between attempts (no round in flight).
    Acquire {
        retries: bool,
    },
    /// A fenced acquire: counter read and sync when due, acquire, raise;
    /// one of them in flight at a drop.
    FencedAcquire,
    Extend,
    Release,
}

type Run<'a> = Pin<Box<dyn Future<Output = Got> + 'a>>;

/// One async entry point.
struct Case {
    name: &'static str,
    kind: Kind,
    /// Builds the client with fencing (for a fenced acquire).
    fenced: bool,
    /// What the future acts on, made before the masters are paused.
    setup: fn(&Arc<Redlock>, &str) -> Held,
    /// The future.
    start: for<'a> fn(&'a Arc<Redlock>, &'a str, &'a mut Held) -> Run<'a>,
}

/// The async entry points.
const CASES: &[Case] = &[
    Case {
        name: "try_lock_async (fenced)",
        kind: Kind::FencedAcquire,
        fenced: true,
        setup: nothing,
        start: |r, key, _| Box::pin(async move { Got::Lock(r.try_lock_async(key, TTL).await) }),
    },
    Case {
        name: "try_lock_async",
        kind: Kind::Acquire { retries: false },
        fenced: false,
        setup: nothing,
        start: |r, key, _| Box::pin(async move { Got::Lock(r.try_lock_async(key, TTL).await) }),
    },
    Case {
        name: "lock_async",
        kind: Kind::Acquire { retries: true },
        fenced: false,
        setup: nothing,
        start: |r, key, _| Box::pin(async move { Got::Lock(r.lock_async(key, TTL).await) }),
    },
    Case {
        name: "lock_until_async",
        kind: Kind::Acquire { retries: true },
        fenced: false,
        setup: nothing,
        start: |r, key, _| {
            Box::pin(async move {
                let deadline = Instant::now() + TIMEOUT;
                Got::Lock(r.lock_until_async(key, TTL, deadline).await)
            })
        },
    },
    Case {
        name: "lock_guard_async",
        kind: Kind::Acquire { retries: true },
        fenced: false,
        setup: nothing,
        start: |r, key, _| Box::pin(async move { Got::Guard(r.lock_guard_async(key, TTL).await) }),
    },
    Case {
        name: "extend_async",
        kind: Kind::Extend,
        fenced: false,
        setup: locked,
        start: |r, _, held| {
            Box::pin(async move {
                let Held::Lock(lock) = held else {
                    unreachable!("set up with a lock")
                };
                Got::Done(r.extend_async(lock, TTL).await)
            })
        },
    },
    Case {
        name: "unlock_async",
        kind: Kind::Release,
        fenced: false,
        setup: locked,
        start: |r, _, held| {
            // The future owns the lock: a dropped unlock expires it.
            let Held::Lock(mut lock) = std::mem::replace(held, Held::Nothing) else {
                unreachable!("set up with a lock")
            };
            Box::pin(async move { Got::Done(r.unlock_async(&mut lock).await) })
        },
    },
    Case {
        name: "AsyncLockGuard::extend",
        kind: Kind::Extend,
        fenced: false,
        setup: guarded,
        start: |_, _, held| {
            Box::pin(async move {
                let Held::Guard(guard) = held else {
                    unreachable!("set up with a guard")
                };
                Got::Done(guard.extend(TTL).await)
            })
        },
    },
    Case {
        name: "AsyncLockGuard::release",
        kind: Kind::Release,
        fenced: false,
        setup: guarded,
        start: |_, _, held| {
            let Held::Guard(guard) = std::mem::replace(held, Held::Nothing) else {
                unreachable!("set up with a guard")
            };
            Box::pin(async move { Got::Done(guard.release().await) })
        },
    },
];

fn nothing(_: &Arc<Redlock>, _: &str) -> Held {
    Held::Nothing
}

fn locked(redlock: &Arc<Redlock>, key: &str) -> Held {
    Held::Lock(redlock.try_lock(key, TTL).expect("set-up acquire"))
}

fn guarded(redlock: &Arc<Redlock>, key: &str) -> Held {
    let guard = futures_executor::block_on(redlock.lock_guard_async(key, TTL));
    Held::Guard(guard.expect("set-up acquire"))
}

fn client(cluster: &Cluster, fenced: bool) -> Arc<Redlock> {
    let mut builder = Redlock::builder(cluster.urls())
        .request_timeout(TIMEOUT)
        .stall_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT);
    if fenced {
        builder = builder.fencing(TTL);
    }
    Arc::new(builder.build().expect("build a client"))
}

/// Wakes the test's thread.
struct Flag {
    woken: AtomicBool,
    thread: Thread,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

impl Flag {
    /// Waits until the future asked to be polled again.
    fn wait(&self) {
        let since = Instant::now();
        while !self.woken.swap(false, Ordering::AcqRel) {
            assert!(since.elapsed() < STUCK, "a pending future was never woken");
            thread::park_timeout(Duration::from_millis(100));
        }
    }
}

/// Polls `future` up to `k` times, each time once it asked for it, the
/// masters paused around the first poll; its output if it completed.
fn poll_up_to(cluster: &Cluster, mut future: Run<'_>, k: usize) -> Option<Got> {
    let flag = Arc::new(Flag {
        woken: AtomicBool::new(false),
        thread: thread::current(),
    });
    let waker = Waker::from(Arc::clone(&flag));
    let mut context = Context::from_waker(&waker);
    for poll in 0..k {
        if poll == 0 {
            (0..cluster.len()).for_each(|i| cluster.pause(i));
        } else {
            flag.wait();
        }
        let polled = future.as_mut().poll(&mut context);
        if poll == 0 {
            (0..cluster.len()).for_each(|i| cluster.resume(i));
        }
        if let Poll::Ready(got) = polled {
            return Some(got);
        }
    }
    // Dropped here, pending.
    None
}

/// What a run did.
struct Outcome {
    completed: bool,
    /// Extends or releases that completed with an error.
    failed: u64,
}

/// Runs `case` once on `redlock` with `key`, dropping its future after
/// `k` polls unless it completed; `then` runs between the set-up and the
/// first poll. Then gives back what the run holds (a lock by `unlock`, a
/// guard by dropping it). Returns what happened and the counters before
/// the first poll and once the future completed or was dropped. A
/// `strict` run expects every round to succeed.
fn run(
    cluster: &Cluster,
    redlock: &Arc<Redlock>,
    case: &Case,
    key: &str,
    k: usize,
    strict: bool,
    then: impl FnOnce(),
) -> (Outcome, Stats, Stats) {
    let mut held = (case.setup)(redlock, key);
    then();
    let before = redlock.stats();
    let got = poll_up_to(cluster, (case.start)(redlock, key, &mut held), k);
    let after = redlock.stats();
    let mut outcome = Outcome {
        completed: got.is_some(),
        failed: 0,
    };
    let healthy = |failed: bool| {
        assert!(!(strict && failed), "{}: a round failed", case.name);
    };
    match got {
        None => {}
        Some(Got::Lock(Ok(mut lock))) => healthy(redlock.unlock(&mut lock).is_err()),
        // Dropped: its release is queued on every master.
        Some(Got::Guard(Ok(guard))) => drop(guard),
        Some(Got::Lock(Err(_)) | Got::Guard(Err(_))) => healthy(true),
        Some(Got::Done(result)) => {
            healthy(result.is_err());
            outcome.failed = u64::from(result.is_err());
        }
    }
    match held {
        Held::Nothing => {}
        Held::Lock(mut lock) => {
            let _ = redlock.unlock(&mut lock);
        }
        Held::Guard(guard) => drop(guard),
    }
    (outcome, before, after)
}

/// Drives `redlock` to quiescence, proven by its counters: a barrier (an
/// acquire dropped in flight, its release followed by the client) follows
/// everything the runs wrote on every connection; once every release made for a dropped future has ended,
/// the barrier's included, and the barrier's release was answered by
/// every master (no master failed or timed out meanwhile), every master
/// has applied everything written before it (a connection is first in,
/// first out).
fn quiesce(cluster: &Cluster, redlock: &Redlock) {
    let missed =
        |stats: &Stats| -> u64 { stats.masters.iter().map(|m| m.errors + m.timeouts).sum() };
    let before = redlock.stats();
    // Paused masters cannot answer the barrier's first poll: it is
    // dropped in flight.
    let mut barrier = Box::pin(redlock.try_lock_async("cancel:barrier", TTL));
    (0..cluster.len()).for_each(|i| cluster.pause(i));
    let polled = barrier
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()));
    (0..cluster.len()).for_each(|i| cluster.resume(i));
    assert!(polled.is_pending(), "the barrier is in flight");
    drop(barrier);
    let answered = eventually(STUCK, || {
        let stats = redlock.stats();
        stats.drop_releases_ended == stats.drop_releases
    });
    let after = redlock.stats();
    assert!(
        answered,
        "releases for dropped futures unanswered: {after:?}"
    );
    assert_eq!(
        missed(&after),
        missed(&before),
        "a master failed or timed out: the barrier proves nothing ({after:?})"
    );
    assert!(
        (0..cluster.len()).all(|i| !cluster.exists(i, "cancel:barrier")),
        "the barrier's own key is left"
    );
}

/// The counters a run moved.
fn delta(after: &Stats, before: &Stats) -> [u64; 9] {
    [
        after.attempts - before.attempts,
        after.acquired - before.acquired,
        after.contended + after.unavailable + after.too_slow
            - (before.contended + before.unavailable + before.too_slow),
        after.extends - before.extends,
        after.extended - before.extended,
        after.releases - before.releases,
        after.released - before.released,
        after.abandoned - before.abandoned,
        after.drop_releases - before.drop_releases,
    ]
}

/// Checks what `stats()` says of a run of `case`, between `before` (the
/// run's start) and `after` (its future completed or dropped, before
/// anything was given back).
fn check_counts(case: &Case, outcome: &Outcome, before: &Stats, after: &Stats) {
    let [
        attempts,
        acquired,
        refused,
        extends,
        extended,
        releases,
        released,
        abandoned,
        drops,
    ] = delta(after, before);
    let run = format!("{} ({before:?} -> {after:?})", case.name);
    match case.kind {
        Kind::Acquire { retries } => {
            assert_eq!(
                attempts,
                acquired + refused + abandoned,
                "every attempt counted once: {run}"
            );
            assert_eq!(
                drops, abandoned,
                "a release for each dropped attempt: {run}"
            );
            if outcome.completed {
                assert_eq!(abandoned, 0, "{run}");
            } else if retries {
                assert!(abandoned <= 1, "{run}");
            } else {
                assert_eq!(abandoned, 1, "its round was in flight: {run}");
            }
        }
        Kind::FencedAcquire => {
            // The round in flight at the drop may be a read, a sync, the
            // acquire or the raise: only the acquire counts as an attempt,
            // and only an acquire or a raise leaves a release to follow.
            assert!(
                acquired + refused <= attempts && attempts <= acquired + refused + abandoned,
                "every attempt counted once: {run}"
            );
            assert!(drops <= abandoned, "{run}");
            assert_eq!(abandoned, u64::from(!outcome.completed), "{run}");
        }
        Kind::Extend => {
            assert_eq!(
                extends,
                extended + outcome.failed + abandoned,
                "every extend counted once: {run}"
            );
            assert_eq!(drops, 0, "an extend leaves nothing to release: {run}");
            assert_eq!(abandoned, u64::from(!outcome.completed), "{run}");
        }
        Kind::Release => {
            assert_eq!(
                releases,
                released + outcome.failed + abandoned,
                "every release counted once: {run}"
            );
            assert_eq!(drops, abandoned, "a dropped unlock is followed: {run}");
            assert_eq!(abandoned, u64::from(!outcome.completed), "{run}");
        }
    }
}

/// How a run's client comes.
#[derive(Clone, Copy, Debug)]
enum Client {
    /// Built for the run.
    Fresh,
    /// One client for every run, used before.
    Warm,
    /// The warm client, whose connections the masters close before the
    /// run: its round waits behind a new connect and handshake.
    Reconnecting,
}

/// Every case, dropped after each of its polls, on clients of `kind`.
fn every_case(cluster: &Cluster, kind: Client) {
    let mut warm: Option<Arc<Redlock>> = None;
    for case in CASES {
        if matches!(kind, Client::Warm | Client::Reconnecting) {
            let redlock = client(cluster, case.fenced);
            let mut lock = redlock.try_lock("cancel:warm", TTL).expect("warm up");
            redlock.unlock(&mut lock).expect("warm up");
            quiesce(cluster, &redlock);
            warm = Some(redlock);
        }
        for k in 1..=MAX_POLLS {
            let redlock = match &warm {
                Some(redlock) => Arc::clone(redlock),
                None => client(cluster, case.fenced),
            };
            let key = format!("cancel:{}:{kind:?}:{k}", case.name);
            let connects: Vec<u64> = redlock.stats().masters.iter().map(|m| m.connects).collect();
            let reconnecting = matches!(kind, Client::Reconnecting);
            // The masters close the client's connections once the set-up
            // is done. (The client may meet them closed in its first
            // poll, and reconnect then, or write to them first and fail
            // the round there: either way nothing may be left.)
            let close = || {
                if reconnecting {
                    for i in 0..cluster.len() {
                        kill_clients(cluster, i);
                    }
                }
            };
            let (outcome, before, after) =
                run(cluster, &redlock, case, &key, k, !reconnecting, close);
            check_counts(case, &outcome, &before, &after);
            quiesce(cluster, &redlock);
            // A key may be left only where the run's release met a
            // connection the master had closed (written before the client
            // saw it closed, it failed there): the documented bound, until
            // its TTL runs out.
            let stats = redlock.stats();
            let failed = |i: usize| {
                let (now, then) = (&stats.masters[i], &before.masters[i]);
                now.errors + now.timeouts > then.errors + then.timeouts
            };
            let ttl_ms = i64::try_from(TTL.as_millis()).expect("small");
            for i in 0..cluster.len() {
                let left = pttl(cluster, i, key.as_bytes());
                let within = reconnecting && failed(i) && 0 < left && left <= ttl_ms;
                let ended = if outcome.completed {
                    "completed within"
                } else {
                    "dropped after"
                };
                assert!(
                    left == -2 || within,
                    "{} {ended} {k} polls on a {kind:?} client: {key} left on \
                     master {i}, PTTL {left} ({before:?} -> {stats:?})",
                    case.name
                );
            }
            if let Client::Reconnecting = kind {
                let stats = redlock.stats();
                for (master, before) in stats.masters.iter().zip(connects) {
                    assert!(master.connects > before, "reconnected: {stats:?}");
                }
            }
            if outcome.completed {
                break;
            }
            assert!(k < MAX_POLLS, "{} never completed", case.name);
        }
    }
}

#[test]
fn every_async_call_dropped_after_any_poll_on_a_fresh_client_leaves_no_key() {
    every_case(&Cluster::start(3), Client::Fresh);
}

#[test]
fn every_async_call_dropped_after_any_poll_on_a_warm_client_leaves_no_key() {
    every_case(&Cluster::start(3), Client::Warm);
}

#[test]
fn every_async_call_dropped_behind_a_reconnect_leaves_no_key() {
    every_case(&Cluster::start(3), Client::Reconnecting);
}

/// An acquire dropped while a master's connection is down after a stall:
/// that master applied the acquire, but its connection was dropped as
/// stalled, and every reconnect is refused, so the release made for the
/// dropped future cannot reach it. The key stays there until its TTL runs
/// out (the documented bound) and goes everywhere else; the release's
/// round ends with that master failed or timed out, and is counted.
#[test]
fn a_release_that_cannot_reach_a_master_leaves_the_key_there_until_its_ttl() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let redlock = one_try(proxies.urls(), Duration::from_millis(200))
        .stall_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200))
        .build()
        .expect("build a client");
    let mut lock = redlock.try_lock("cancel:drive", TTL).expect("warm up");
    redlock.unlock(&mut lock).expect("warm up");
    let key = "cancel:bound";

    // Master 0 applies what it is sent; the client hears nothing of it.
    // The others' replies wait until the first poll is over.
    proxies[0].drop_replies();
    for i in 1..3 {
        proxies[i].stall(Dir::ToClient);
    }
    let mut future = Box::pin(redlock.try_lock_async(key, TTL));
    let first = future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()));
    for i in 1..3 {
        proxies[i].heal();
    }
    assert!(first.is_pending(), "the round waits for its replies");
    assert!(
        eventually(STUCK, || cluster.exists(0, key)),
        "master 0 applied the acquire"
    );
    // Its connection stalls and is dropped; every reconnect is refused.
    proxies[0].reset_next_connections(usize::MAX);
    let down = eventually(STUCK, || {
        if let Ok(mut lock) = redlock.try_lock("cancel:drive", TTL) {
            let _ = redlock.unlock(&mut lock);
        }
        let stats = proxies[0].stats();
        stats.live == 0 && stats.resets > 0
    });
    assert!(down, "master 0's connection was dropped and not re-made");

    let before = redlock.stats();
    drop(future);
    let answered = eventually(STUCK, || {
        let stats = redlock.stats();
        stats.drop_releases_ended == stats.drop_releases
    });
    let after = redlock.stats();
    assert!(answered, "the release's round never ended: {after:?}");
    assert_eq!(
        (after.abandoned, after.drop_releases),
        (before.abandoned + 1, before.drop_releases + 1),
        "the dropped acquire and its release are counted: {after:?}"
    );
    let missed = |stats: &Stats| stats.masters[0].errors + stats.masters[0].timeouts;
    assert!(
        missed(&after) > missed(&before),
        "master 0 failed the release: {after:?}"
    );
    // (Had the machine held up the release's round past its timeout, the
    // release would still be on its way to them.)
    assert_gone(&cluster, &[1, 2], key.as_bytes(), STUCK);
    let left = pttl(&cluster, 0, key.as_bytes());
    let ttl_ms = i64::try_from(TTL.as_millis()).expect("small");
    assert!(
        0 < left && left <= ttl_ms,
        "master 0 keeps the key until its TTL, no longer: PTTL {left}"
    );
}

/// A guard dropped while every master is paused: its release is a round of
/// its own, counted, and followed until every master has answered it once
/// they resume; then the key is gone from every one.
#[test]
fn a_dropped_guard_is_followed_until_every_master_answers() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster, false);
    let guard =
        futures_executor::block_on(redlock.lock_guard_async("cancel:guard", TTL)).expect("acquire");
    let before = redlock.stats();
    (0..cluster.len()).for_each(|i| cluster.pause(i));
    drop(guard);
    let queued = redlock.stats();
    (0..cluster.len()).for_each(|i| cluster.resume(i));
    assert_eq!(
        (queued.drop_releases, queued.drop_releases_ended),
        (before.drop_releases + 1, before.drop_releases_ended),
        "the release is a round in flight: {queued:?}"
    );
    let answered = eventually(STUCK, || {
        let stats = redlock.stats();
        stats.drop_releases_ended == stats.drop_releases
    });
    let after = redlock.stats();
    assert!(answered, "the release was never answered: {after:?}");
    assert_eq!(after.masters, before.masters, "every master answered it");
    assert!(
        (0..cluster.len()).all(|i| !cluster.exists(i, "cancel:guard")),
        "the key is gone everywhere"
    );
}
