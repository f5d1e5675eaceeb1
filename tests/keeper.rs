//! A lock kept alive in the background, with a loss signal (issue 10,
//! part 4), against real `redis-server`s: a healthy two-minute hold with a
//! 10 s TTL, a key deleted on a majority (lost within one period), a paused
//! majority (at risk at once, lost by the end of the validity), and a
//! release while an extension is in flight (nothing left behind).

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::{KeepOptions, Redlock, Standing};
use support::cluster::Cluster;

const REQUEST_TIMEOUT: Duration = Duration::from_millis(100);

fn client(cluster: &Cluster) -> Redlock {
    Redlock::builder(cluster.urls())
        .request_timeout(REQUEST_TIMEOUT)
        .retry_count(0)
        .build()
        .expect("build")
}

/// Polls `future` on this thread until it completes or `timeout` passes.
fn block_on_for<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return Some(out);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        thread::park_timeout(left);
    }
}

#[test]
fn a_healthy_hold_of_two_minutes_with_a_ten_second_ttl() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(10);
    let holder = client(&cluster);
    let other = client(&cluster);
    let lock = holder.try_lock("kept", ttl).expect("free");
    let changes = Arc::new(Mutex::new(Vec::new()));
    let seen = changes.clone();
    let keeper = holder
        .keep(
            lock,
            KeepOptions::new(ttl).on_change(move |s| seen.lock().expect("no panic").push(s)),
        )
        .expect("keep");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        thread::sleep(Duration::from_secs(5));
        assert_eq!(
            keeper.standing(),
            Standing::Held,
            "at {:?}",
            start.elapsed()
        );
        assert!(keeper.validity() > Duration::from_secs(5), "{keeper:?}");
        assert!(
            other.try_lock("kept", ttl).is_err(),
            "another client won a kept lock at {:?}",
            start.elapsed()
        );
    }
    let (holder, released) = keeper.release();
    released.expect("released");
    let stats = holder.stats();
    // 120 s / (10 s / 3): 36 extensions; a late wake-up (a loaded
    // machine) can cost one or two.
    assert!((34..=37).contains(&stats.extended), "{stats:?}");
    assert_eq!(stats.extends, stats.extended, "every extension held");
    assert!(
        changes
            .lock()
            .expect("no panic")
            .ends_with(&[Standing::Lost])
    );
    for i in 0..3 {
        assert!(!cluster.exists(i, "kept"), "master {i} still has the key");
    }
    other.try_lock("kept", ttl).expect("free after the release");
}

#[test]
fn a_key_deleted_on_a_majority_is_lost_within_one_period() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(3);
    let holder = client(&cluster);
    let lock = holder.try_lock("deleted", ttl).expect("free");
    let keeper = holder.keep(lock, KeepOptions::new(ttl)).expect("keep");
    let lost = keeper.lost();
    thread::sleep(Duration::from_millis(300));
    for i in 0..2 {
        cluster.command(i, &[b"DEL", b"deleted"]);
    }
    let deleted = Instant::now();
    let period = ttl / 3;
    assert!(
        block_on_for(lost, period + REQUEST_TIMEOUT + Duration::from_millis(400)).is_some(),
        "not lost within one period: {keeper:?}"
    );
    let took = deleted.elapsed();
    assert!(keeper.is_lost() && keeper.validity().is_zero());
    println!("lost {took:?} after the deletion (period {period:?})");
    // The extend script never recreates a key: the remaining one expires.
    assert!(!cluster.exists(0, "deleted") && !cluster.exists(1, "deleted"));
    let (_, released) = keeper.release();
    assert!(released.is_err(), "nothing left to release on a quorum");
    assert!(
        !cluster.exists(2, "deleted"),
        "the minority's key is released too"
    );
}

#[test]
fn a_paused_majority_is_at_risk_at_once_and_lost_by_the_validity_end() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(3);
    let holder = client(&cluster);
    let lock = holder.try_lock("paused", ttl).expect("free");
    let valid_until = lock.valid_until();
    let changes = Arc::new(Mutex::new(Vec::<(Standing, Instant)>::new()));
    let seen = changes.clone();
    let keeper = holder
        .keep(
            lock,
            KeepOptions::new(ttl)
                .on_change(move |s| seen.lock().expect("no panic").push((s, Instant::now()))),
        )
        .expect("keep");
    cluster.pause(0);
    cluster.pause(1);
    let paused = Instant::now();
    let period = ttl / 3;
    assert!(keeper.wait_lost(ttl + Duration::from_secs(1)), "{keeper:?}");
    let changes = changes.lock().expect("no panic").clone();
    let (first, at) = changes.first().copied().expect("a change");
    assert_eq!(first, Standing::AtRisk, "{changes:?}");
    // At the first extension after the pause: one period, one request
    // timeout, and scheduling slack.
    assert!(
        at.duration_since(paused) <= period + REQUEST_TIMEOUT + Duration::from_millis(400),
        "at risk after {:?}",
        at.duration_since(paused)
    );
    let (last, lost_at) = changes.last().copied().expect("a change");
    assert_eq!(last, Standing::Lost, "{changes:?}");
    // Lost by the end of the validity the masters granted (the failed
    // extensions to the same TTL cannot lengthen it), give or take the
    // keeper thread's wake-up on a loaded machine.
    assert!(
        lost_at <= valid_until + Duration::from_millis(300),
        "lost {:?} after the validity end",
        lost_at.saturating_duration_since(valid_until)
    );
    cluster.resume(0);
    cluster.resume(1);
    drop(keeper);
}

#[test]
fn a_release_during_an_extension_leaves_nothing() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(3);
    let period = Duration::from_millis(400);
    let holder = Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_millis(800))
        .retry_count(0)
        .build()
        .expect("build");
    let lock = holder.try_lock("racing", ttl).expect("free");
    let keeper = holder
        .keep(lock, KeepOptions::new(ttl).period(period))
        .expect("keep");
    let started = Instant::now();
    // Every master sleeps over the first extension (due at 400 ms): it is
    // in flight when the release is asked for.
    let sleepers: Vec<_> = (0..3)
        .map(|i| {
            let node = cluster.node(i).addr().clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(300));
                let mut conn = support::cluster::Connection::open(&node, Duration::from_secs(2))
                    .expect("connect");
                conn.request(&[b"DEBUG", b"SLEEP", b"0.4"]).expect("sleep");
            })
        })
        .collect();
    thread::sleep(period + Duration::from_millis(100) - started.elapsed().min(period));
    let (holder, released) = keeper.release();
    for sleeper in sleepers {
        sleeper.join().expect("no panic");
    }
    released.expect("released after the extension");
    let stats = holder.stats();
    assert_eq!(stats.extends, 1, "the extension was in flight: {stats:?}");
    assert_eq!(stats.releases, 1, "{stats:?}");
    thread::sleep(Duration::from_millis(200));
    for i in 0..3 {
        assert!(!cluster.exists(i, "racing"), "master {i} still has the key");
    }
}

/// A keeper is the lock's guard in async code too: `Send + Sync`, and its
/// drop never blocks (here: every master paused, a request timeout of 1 s,
/// the drop returns at once); the thread releases once the masters answer.
/// It carries the lock's fence.
#[test]
fn dropping_a_keeper_never_blocks_and_still_releases() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<redlock_mio::Keeper>();
    let cluster = Cluster::start(3);
    let holder = Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_secs(1))
        .retry_count(0)
        .fencing(Duration::from_secs(10))
        .build()
        .expect("build");
    let lock = holder
        .try_lock("dropped", Duration::from_secs(10))
        .expect("free");
    let fence = lock.fence();
    let keeper = holder
        .keep(lock, KeepOptions::new(Duration::from_secs(10)))
        .expect("keep");
    assert!(fence.is_some() && keeper.fence() == fence);
    for i in 0..3 {
        cluster.pause(i);
    }
    let t0 = Instant::now();
    drop(keeper);
    let took = t0.elapsed();
    for i in 0..3 {
        cluster.resume(i);
    }
    assert!(
        took < Duration::from_millis(300),
        "drop took {took:?} with a request timeout of 1 s"
    );
    assert!(
        support::check::eventually(Duration::from_secs(3), || {
            (0..3).all(|i| !cluster.exists(i, "dropped"))
        }),
        "released by the keeper's thread"
    );
}
