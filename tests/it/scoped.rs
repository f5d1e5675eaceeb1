//! Keeping a lock on a shared client, and the scoped forms, against real
//! `redis-server`s: `keep` on an `Arc<Redlock>` that other threads go on
//! using; `with_lock` returns the closure's value and releases (also when
//! the closure panics), hands the closure the loss signal, and fails with
//! `Error::Lost` when the lock was lost meanwhile; `with_lock_async` does
//! the same for a future under tokio and under a bare executor, and a
//! dropped one still releases.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread;
use std::time::Duration;

use crate::support::check::{assert_gone, eventually};
use crate::support::cluster::Cluster;
use crate::support::executor::{BlockOn, bare_block_on, block_on_for, unpark_waker};
use crate::support::standings::Changes;
use redlock_mio::{Error, KeepOptions, Redlock, Standing};

const TTL: Duration = Duration::from_secs(3);

/// How long a test waits for something that must happen: a bound on a
/// hang, never a measure.
const PATIENCE: Duration = Duration::from_secs(30);

fn client(cluster: &Cluster) -> Redlock {
    Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_millis(250))
        .build()
        .expect("build")
}

/// Deletes `key` on masters `nodes` (a majority: the lock is gone).
fn delete_on(cluster: &Cluster, nodes: &[usize], key: &[u8]) {
    for &i in nodes {
        cluster.command(i, &[b"DEL", key]);
    }
}

/// A lock kept on a client shared through an `Arc` (and a clone of it):
/// the client is not given up, other threads go on locking through it
/// while the keeper extends, and it serves on after the release.
#[test]
fn keeping_on_a_shared_client_leaves_it_to_other_threads() {
    const CYCLES: u64 = 20;
    const EXTENSIONS: u64 = 4;
    let cluster = Cluster::start(3);
    let shared = Arc::new(client(&cluster));
    let clone = Redlock::clone(&shared);
    let ttl = Duration::from_secs(1);
    let stop = AtomicBool::new(false);
    let cycles = [AtomicU64::new(0), AtomicU64::new(0)];
    let changes = Changes::new();
    thread::scope(|s| {
        for (worker, count) in cycles.iter().enumerate() {
            let (shared, clone, stop) = (&shared, &clone, &stop);
            s.spawn(move || {
                let resource = format!("work:{worker}");
                while !stop.load(Ordering::Relaxed) {
                    // One worker through the Arc, one through the clone.
                    let client: &Redlock = if worker == 0 { shared } else { clone };
                    let mut lock = client.lock(&resource, ttl).expect("free");
                    client.unlock(&mut lock).expect("released");
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let lock = shared.try_lock("kept", ttl).expect("free");
        let keeper = shared
            .keep(
                lock,
                KeepOptions::new(ttl).on_change(changes.recorder(&shared)),
            )
            .expect("keep");
        let busy = eventually(PATIENCE, || {
            assert!(shared.try_lock("kept", ttl).is_err(), "the lock is kept");
            shared.stats().extended >= EXTENSIONS
                && cycles.iter().all(|c| c.load(Ordering::Relaxed) >= CYCLES)
        });
        stop.store(true, Ordering::Relaxed);
        assert!(busy, "{:?} {cycles:?}", shared.stats());
        keeper.release().expect("released");
    });
    let stats = shared.stats();
    assert_eq!(stats.extends, stats.extended, "every extension held");
    // One set of counters for every handle: the workers' rounds are there.
    let worked: u64 = cycles.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    assert!(stats.released > worked, "{stats:?}");
    assert_eq!(changes.standings(), [Standing::Released]);
    let mut again = clone.try_lock("kept", ttl).expect("free after the release");
    shared.unlock(&mut again).expect("the client serves on");
}

/// `with_lock` runs the closure while the lock is held, returns its value,
/// and has released the lock by then; on a held resource it runs nothing.
#[test]
fn with_lock_returns_the_closure_value_and_releases() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let other = client(&cluster);
    let changes = Changes::new();
    let options = KeepOptions::new(TTL).on_change(changes.recorder(&redlock));
    let value = redlock
        .with_lock("scoped", options, |keeper| {
            assert!(!keeper.is_lost() && !keeper.validity().is_zero());
            assert!(matches!(
                other.try_lock("scoped", TTL),
                Err(Error::Contended(_))
            ));
            42
        })
        .expect("locked");
    assert_eq!(value, 42);
    let stats = redlock.stats();
    assert_eq!((stats.releases, stats.released), (1, 1), "released by then");
    assert_eq!(changes.standings(), [Standing::Released]);
    assert_gone(&cluster, &[0, 1, 2], b"scoped", PATIENCE);

    let mut held = other.try_lock("scoped", TTL).expect("free");
    let ran = AtomicBool::new(false);
    let refused = redlock.with_lock("scoped", KeepOptions::new(TTL), |_| {
        ran.store(true, Ordering::Relaxed);
    });
    assert!(matches!(refused, Err(Error::Contended(_))), "{refused:?}");
    assert!(
        !ran.load(Ordering::Relaxed),
        "the closure ran without the lock"
    );
    other.unlock(&mut held).expect("released");
}

/// A panic in the closure goes on to the caller, and the lock is released
/// (the release waited for) on the way.
#[test]
fn a_panic_in_the_closure_still_releases() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let changes = Changes::new();
    let options = KeepOptions::new(TTL).on_change(changes.recorder(&redlock));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        redlock.with_lock("panicking", options, |_| -> () {
            panic!("the protected work fails");
        })
    }));
    assert!(outcome.is_err(), "the panic goes on");
    let stats = redlock.stats();
    assert_eq!((stats.releases, stats.released), (1, 1), "{stats:?}");
    assert_eq!(changes.standings(), [Standing::Released]);
    assert_gone(&cluster, &[0, 1, 2], b"panicking", PATIENCE);
    let _lock = client(&cluster)
        .try_lock("panicking", TTL)
        .expect("free after the panic");
}

/// The closure sees a loss through the keeper it is handed, and the call
/// fails with it: the key deleted on a majority of masters (two of
/// three), the first extension after that reports it (the loss watch off:
/// `loss_watch.rs` shows it reported sooner with the watch), the
/// closure's value is dropped, and `with_lock` returns `Error::Lost`.
#[test]
fn a_loss_during_the_closure_fails_the_call() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let changes = Changes::new();
    let options = KeepOptions::new(TTL)
        .watch(false)
        .on_change(changes.recorder(&redlock));
    let seen = AtomicBool::new(false);
    let dropped = Arc::new(AtomicBool::new(false));
    let outcome = redlock.with_lock("lose", options, |keeper| {
        delete_on(&cluster, &[0, 1], b"lose");
        seen.store(
            keeper.wait_lost(PATIENCE) && keeper.is_lost(),
            Ordering::Relaxed,
        );
        DropFlag(Arc::clone(&dropped))
    });
    assert!(seen.load(Ordering::Relaxed), "the closure saw no loss");
    assert!(
        matches!(outcome, Err(Error::Lost)),
        "the call hid the loss: {:?}",
        outcome.as_ref().map(|_| ())
    );
    assert!(dropped.load(Ordering::Relaxed), "the value was not dropped");
    let all = changes.all();
    let [(Standing::Lost, _, at_loss)] = &all[..] else {
        panic!("the loss, and no release reported after it: {all:?}");
    };
    assert_eq!(
        at_loss.extends - at_loss.extended,
        1,
        "the first extension after the deletion reported it: {at_loss:?}"
    );
}

/// A loss that the closure does not wait for (it returns right after the
/// key went from a majority) fails the call too: the release's round (or
/// an extension before it) says the token no longer owned the resource.
#[test]
fn a_loss_found_by_the_release_fails_the_call() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let changes = Changes::new();
    let options = KeepOptions::new(TTL).on_change(changes.recorder(&redlock));
    let outcome = redlock.with_lock("lose-late", options, |keeper| {
        delete_on(&cluster, &[1, 2], b"lose-late");
        keeper.is_lost()
    });
    let Err(lost @ Error::Lost) = outcome else {
        panic!("the call hid the loss: {outcome:?}");
    };
    let text = lost.to_string();
    assert!(text.contains("lost while the work ran"), "{text}");
    assert!(!lost.is_retryable(), "{text}");
    assert_eq!(changes.standings(), [Standing::Lost]);
    let stats = redlock.stats();
    assert_eq!(stats.releases, 1, "{stats:?}");
}

/// A value whose drop is seen: what the scoped calls do with the work's
/// value when the lock was lost.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Tokio's runtimes and a bare executor with no timers of its own.
fn executors() -> [(&'static str, BlockOn); 3] {
    [
        ("tokio current-thread", |f| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime")
                .block_on(f);
        }),
        ("tokio multi-thread", |f| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .expect("runtime")
                .block_on(f);
        }),
        ("bare", |f| bare_block_on(f)),
    ]
}

/// `with_lock_async` runs the future while the lock is held, returns its
/// value once the release's round is over, under every executor; the
/// future it returns is `Send` (a spawned tokio task).
#[test]
fn with_lock_async_returns_the_value_and_releases_under_every_executor() {
    let cluster = Cluster::start(3);
    let redlock = Arc::new(client(&cluster));
    let other = client(&cluster);
    for (name, block_on) in executors() {
        let resource = format!("scoped-async:{name}");
        let changes = Changes::new();
        let options = KeepOptions::new(TTL).on_change(changes.recorder(&redlock));
        let before = redlock.stats();
        block_on(Box::pin(async {
            let value = redlock
                .with_lock_async(&resource, options, async |keeper| {
                    assert!(!keeper.is_lost(), "{name}");
                    assert!(other.try_lock(&resource, TTL).is_err(), "{name}: held");
                    7
                })
                .await
                .expect("locked");
            assert_eq!(value, 7, "{name}");
        }));
        let stats = redlock.stats();
        assert_eq!(
            (stats.released - before.released),
            1,
            "{name}: released by then"
        );
        assert_eq!(changes.standings(), [Standing::Released], "{name}");
        assert_gone(&cluster, &[0, 1, 2], resource.as_bytes(), PATIENCE);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let shared = Arc::clone(&redlock);
    let task = runtime.spawn(async move {
        shared
            .with_lock_async("scoped-async:spawned", KeepOptions::new(TTL), async |k| {
                k.fence()
            })
            .await
    });
    assert_eq!(runtime.block_on(task).expect("the task"), Ok(None));
    assert_gone(&cluster, &[0, 1, 2], b"scoped-async:spawned", PATIENCE);
}

/// The future sees a loss by awaiting `lost()`, which the keeper's thread
/// wakes, under a bare executor too; the key deleted on a majority, the
/// call fails with `Error::Lost` and drops the future's value.
#[test]
fn a_loss_during_the_future_of_with_lock_async_fails_the_call() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    for (name, block_on) in executors() {
        let resource = format!("scoped-async-lost:{name}");
        let changes = Changes::new();
        let options = KeepOptions::new(TTL).on_change(changes.recorder(&redlock));
        let dropped = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(None));
        block_on(Box::pin(async {
            let outcome = redlock
                .with_lock_async(&resource, options, async |keeper| {
                    delete_on(&cluster, &[0, 2], resource.as_bytes());
                    *seen.lock().expect("not poisoned") = Some(keeper.lost().await);
                    DropFlag(Arc::clone(&dropped))
                })
                .await;
            assert!(
                matches!(outcome, Err(Error::Lost)),
                "{name}: the call hid the loss"
            );
        }));
        assert_eq!(
            *seen.lock().expect("not poisoned"),
            Some(Standing::Lost),
            "{name}"
        );
        assert!(
            dropped.load(Ordering::Relaxed),
            "{name}: the value was kept"
        );
        assert_eq!(changes.standings(), [Standing::Lost], "{name}");
    }
}

/// Dropped while its future runs, `with_lock_async` leaves the release to
/// the keeper's thread: once its round is over, no master has the key.
#[test]
fn a_dropped_with_lock_async_releases_its_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let (changed, changes) = mpsc::channel();
    let options = KeepOptions::new(TTL).on_change(move |standing| {
        let _ = changed.send(standing);
    });
    let (started, running) = mpsc::channel();
    let future = redlock.with_lock_async("scoped-async:dropped", options, async |_| {
        let _ = started.send(());
        std::future::pending::<()>().await;
    });
    {
        let waker = unpark_waker();
        let mut cx = Context::from_waker(&waker);
        let mut future = pin!(future);
        // Polled until its own future runs (the lock is held then).
        loop {
            assert!(matches!(future.as_mut().poll(&mut cx), Poll::Pending));
            if running.try_recv().is_ok() {
                break;
            }
            thread::park();
        }
    }
    assert_eq!(
        changes.recv_timeout(PATIENCE),
        Ok(Standing::Released),
        "the keeper's thread released the lock"
    );
    let stats = redlock.stats();
    assert_eq!((stats.releases, stats.released), (1, 1), "{stats:?}");
    assert_gone(&cluster, &[0, 1, 2], b"scoped-async:dropped", PATIENCE);
}

/// A keeper's thread holds a handle of the client until its release is
/// over; its end (as a clone's drop) leaves the client open: the async
/// API, which needs the client's background thread (no spin here), still
/// works, under a bare executor.
#[test]
fn a_keepers_end_leaves_the_client_open() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_millis(250))
        .spin(Duration::ZERO)
        .build()
        .expect("build");
    redlock
        .with_lock("outlived", KeepOptions::new(TTL), |_| ())
        .expect("locked");
    drop(Redlock::clone(&redlock));
    let locked = block_on_for(redlock.try_lock_async("outlived", TTL), PATIENCE);
    let mut lock = locked
        .expect("the background thread answered")
        .expect("free");
    redlock.unlock(&mut lock).expect("released");
}
