//! Fenced acquires through the async API, against real `redis-server`s:
//! their rounds (counter read, sync, acquire, raise) and retry delays run
//! on the client's engine, so a contended first call completes under any
//! executor, a timerless one included; a call against paused masters
//! returns by its own deadline; the executor's thread runs other tasks
//! while a fenced acquire waits; a future dropped during the raise leaves
//! no lock behind.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::eventually;
use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use crate::support::holdings::{Holding, fence_order, overlaps};
use crate::support::proxy::Proxies;
use redlock_mio::{Error, Redlock, Require};

const LONGEST: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(5);

/// A fresh fenced client that retries often, connected to every master
/// (its counters not read yet).
fn fenced(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .request_timeout(Duration::from_millis(200))
        .retry_count(10_000)
        .retry_delay(Duration::from_millis(2))
        .retry_jitter(Duration::from_millis(2))
        .require_handshakes(Require::All)
        .fencing(LONGEST)
        .build()
        .expect("build")
}

/// A fresh fenced client's first call meets a resource that another
/// client holds, and which that client releases once the first has been
/// refused: the call retries (its delays are the engine's timers, which
/// wake it) and gets the lock with a larger fence, under every executor,
/// without an outer timeout.
#[test]
fn a_contended_first_call_completes_under_every_executor() {
    let cluster = Cluster::start(3);
    let holder = fenced(cluster.urls());
    for (name, block_on) in crate::executors::all() {
        let resource = format!("fenced-async:first:{name}");
        let mut held = holder.try_lock(&resource, TTL).expect("free");
        let held_fence = held.fence().expect("fenced");
        let redlock = fenced(cluster.urls());
        thread::scope(|s| {
            s.spawn(|| {
                let refused = eventually(Duration::from_secs(30), || redlock.stats().contended > 0);
                holder.unlock(&mut held).expect("the holder releases");
                assert!(refused, "{name}: the first call was never refused");
            });
            block_on(Box::pin(async {
                let mut lock = redlock
                    .lock_async(&resource, TTL)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                let fence = lock.fence().expect("fenced");
                assert!(fence > held_fence, "{name}: {fence} after {held_fence}");
                redlock.unlock_async(&mut lock).await.expect("release");
            }));
        });
        let stats = redlock.stats();
        assert!(
            stats.contended >= 1 && stats.acquired == 1,
            "{name}: {stats:?}"
        );
    }
}

/// With two masters of three paused after it connected, a fresh fenced
/// client's `lock_until_async` returns by its deadline, and
/// `try_lock_async` after one attempt, under every executor. (Each call is
/// only awaited: it must end by itself.)
#[test]
fn returns_with_two_of_three_masters_paused() {
    let cluster = Cluster::start(3);
    for (name, block_on) in crate::executors::all() {
        let redlock = fenced(cluster.urls());
        cluster.pause(1);
        cluster.pause(2);
        block_on(Box::pin(async {
            let deadline = Instant::now() + Duration::from_millis(1500);
            let until = redlock
                .lock_until_async("fenced-async:paused", TTL, deadline)
                .await;
            assert!(
                matches!(until, Err(Error::Unavailable(_) | Error::Unfenced(_))),
                "{name}: {until:?}"
            );
            let once = redlock.try_lock_async("fenced-async:paused", TTL).await;
            assert!(
                matches!(once, Err(Error::Unavailable(_) | Error::Unfenced(_))),
                "{name}: {once:?}"
            );
        }));
        cluster.resume(1);
        cluster.resume(2);
    }
}

/// On a current-thread executor, another task runs while a fenced acquire
/// (its first: a read of the counters, then the acquire) waits for
/// paused masters: the acquire does not hold the thread.
#[test]
fn the_executor_thread_runs_other_tasks_meanwhile() {
    let cluster = Cluster::start(3);
    let redlock = Arc::new(fenced(cluster.urls()));
    cluster.pause(1);
    cluster.pause(2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let ticks = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (during, result) = runtime.block_on(async {
        let ticker = {
            let (ticks, done) = (Arc::clone(&ticks), Arc::clone(&done));
            tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        };
        let before = ticks.load(Ordering::SeqCst);
        let result = redlock.try_lock_async("fenced-async:busy", TTL).await;
        let during = ticks.load(Ordering::SeqCst) - before;
        done.store(true, Ordering::SeqCst);
        ticker.await.expect("the ticker");
        (during, result)
    });
    cluster.resume(1);
    cluster.resume(2);
    assert!(
        matches!(result, Err(Error::Unavailable(_) | Error::Unfenced(_))),
        "{result:?}"
    );
    assert!(during > 0, "no other task ran while the acquire waited");
}

/// A waker that raises a flag.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A fenced acquire future dropped while its raise is in flight (the
/// replies dropped by the proxies, so that it stays there) leaves no key
/// on any master: the lock its acquire won is released.
#[test]
fn a_fenced_acquire_dropped_during_its_raise_leaves_no_lock() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    // The first poll writes the acquire; the task is woken at its
    // decision. If that poll found the acquire decided already (a thread
    // preempted between its write and its look), it went on to the raise,
    // and the second poll completes: try again, with a new client (the
    // replies dropped meanwhile leave the old one's links behind).
    let mut dropped = None;
    for attempt in 0..20 {
        proxies.heal_all();
        let redlock = one_try(proxies.urls(), Duration::from_secs(1))
            .spin(Duration::ZERO)
            .fencing(LONGEST)
            .build()
            .expect("build");
        // Counters read and in sync: the next acquire's first round is its
        // acquire.
        let mut warm = redlock.try_lock("fenced-async:warm", TTL).expect("free");
        redlock.unlock(&mut warm).expect("release");
        let resource = format!("fenced-async:raise:{attempt}");
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);
        let mut future = Box::pin(redlock.try_lock_async(resource.clone(), LONGEST));
        assert!(
            future.as_mut().poll(&mut cx).is_pending(),
            "a round to wait for"
        );
        assert!(
            eventually(Duration::from_secs(5), || flag.0.load(Ordering::SeqCst)),
            "woken at the round's decision"
        );
        for proxy in proxies.iter() {
            proxy.drop_replies();
        }
        if future.as_mut().poll(&mut cx).is_pending() {
            assert!(
                eventually(Duration::from_secs(5), || (0..3)
                    .all(|i| cluster.exists(i, &resource))),
                "the acquire set the key everywhere"
            );
            drop(future);
            dropped = Some(resource);
            break;
        }
    }
    let resource = dropped.expect("no raise left pending in 20 tries");
    // (Well before the key's TTL would remove it.)
    assert!(
        eventually(Duration::from_secs(3), || (0..3)
            .all(|i| !cluster.exists(i, &resource))),
        "the key of a dropped raise was released everywhere"
    );
    proxies.heal_all();
}

/// 32 tasks on a two-thread runtime and 4 threads share one fresh fenced
/// client (their first calls all read the counters) and contend for 4
/// resources: no two holdings of a resource overlap, and each resource's
/// fences grow in the order its holdings began. A client's fenced
/// acquires take no turns.
#[test]
fn tasks_and_threads_share_one_fenced_client() {
    let cluster = Cluster::start(3);
    let redlock = Arc::new(fenced(cluster.urls()));
    let holdings = Arc::new(std::sync::Mutex::new(Vec::new()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let (redlock, holdings) = (Arc::clone(&redlock), Arc::clone(&holdings));
            runtime.spawn(async move {
                for i in 0..5 {
                    let r = (t + i) % 4;
                    let mut lock = redlock
                        .lock_async(format!("fenced-async:shared:{r}"), TTL)
                        .await
                        .expect("acquired");
                    let start = Instant::now();
                    holdings
                        .lock()
                        .expect("not poisoned")
                        .push(Holding::of(r, t, &lock, start));
                    redlock.unlock_async(&mut lock).await.expect("release");
                }
            })
        })
        .collect();
    thread::scope(|s| {
        for t in 32..36 {
            let (redlock, holdings) = (&redlock, &holdings);
            s.spawn(move || {
                for i in 0..10 {
                    let r = (t + i) % 4;
                    let resource = format!("fenced-async:shared:{r}");
                    let mut lock = redlock.lock(&resource, TTL).expect("acquired");
                    let start = Instant::now();
                    holdings
                        .lock()
                        .expect("not poisoned")
                        .push(Holding::of(r, t, &lock, start));
                    redlock.unlock(&mut lock).expect("release");
                }
            });
        }
        runtime.block_on(async {
            for task in tasks {
                task.await.expect("a task panicked");
            }
        });
    });
    let holdings = holdings.lock().expect("not poisoned").clone();
    assert_eq!(holdings.len(), 32 * 5 + 4 * 10);
    assert!(overlaps(&holdings).is_empty(), "{:?}", overlaps(&holdings));
    assert!(
        fence_order(&holdings).is_empty(),
        "{:?}",
        fence_order(&holdings)
    );
}
