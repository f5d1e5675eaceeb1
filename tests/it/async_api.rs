//! The async API under three executors (tokio, current-thread and
//! multi-thread, smol and `futures::executor`), many tasks sharing one
//! client, a lone task polling for itself, cancellation (a dropped future
//! leaves no lock and no stale reply), and the async guard.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::{assert_gone, eventually};
use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use crate::support::holdings::{Holding, overlaps};
use crate::support::proxy::{Dir, Proxies};
use redlock_mio::NodeState;
use redlock_mio::{AsyncLockGuard, Error, Redlock, Require};

const TTL: Duration = Duration::from_secs(10);
/// How long a check that must come true may take.
const PATIENCE: Duration = Duration::from_secs(5);

/// A client whose request timeout is far above what healthy masters take,
/// so that a busy machine does not time its rounds out.
fn client(urls: Vec<String>) -> Arc<Redlock> {
    Arc::new(
        Redlock::builder(urls)
            .request_timeout(Duration::from_secs(1))
            .retry_count(50)
            .retry_delay(Duration::from_millis(2))
            .retry_jitter(Duration::from_millis(2))
            .build()
            .expect("build"),
    )
}

/// Acquire, extend, release, and a contended acquire, as one task.
async fn cycle(redlock: &Redlock, resource: &str) {
    let mut lock = redlock
        .try_lock_async(resource, TTL)
        .await
        .expect("acquire");
    let before = lock.valid_until();
    thread::sleep(Duration::from_millis(2));
    redlock.extend_async(&mut lock, TTL).await.expect("extend");
    assert!(lock.valid_until() > before, "the extend renewed the lock");
    match redlock.try_lock_async(resource, TTL).await {
        Err(Error::Contended(_)) => {}
        other => panic!("a held lock was acquired again: {other:?}"),
    }
    redlock.unlock_async(&mut lock).await.expect("release");
    assert!(lock.is_expired());
    let mut again = redlock.lock_async(resource, TTL).await.expect("free again");
    redlock
        .unlock_async(&mut again)
        .await
        .expect("release again");
}

#[test]
fn runs_under_tokio_smol_and_futures_executor() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("current-thread runtime");
    current.block_on(cycle(&redlock, "async:current"));
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("multi-thread runtime");
    let shared = Arc::clone(&redlock);
    multi
        .block_on(multi.spawn(async move { cycle(&shared, "async:multi").await }))
        .expect("the task");
    futures_executor::block_on(cycle(&redlock, "async:futures"));
    smol::block_on(cycle(&redlock, "async:smol"));
    // Tasks of smol's executor, on two threads.
    let executor = smol::Executor::new();
    let (stop, stopped) = smol::channel::unbounded::<()>();
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| smol::block_on(executor.run(stopped.recv())));
        }
        let tasks: Vec<_> = (0..2)
            .map(|i| {
                let redlock = Arc::clone(&redlock);
                executor.spawn(async move { cycle(&redlock, &format!("async:smol:{i}")).await })
            })
            .collect();
        smol::block_on(async {
            for task in tasks {
                task.await;
            }
        });
        drop(stop);
    });
    let stats = redlock.stats();
    assert_eq!(stats.acquired, 12, "{stats:?}");
    assert_eq!(stats.released, 12, "{stats:?}");
}

/// Runs `future` to completion on a thread of its own, failing the test if
/// it takes more than `limit` (a future that nobody wakes never ends).
fn run_within<T: Send + 'static>(
    limit: Duration,
    future: impl Future<Output = T> + Send + 'static,
) -> (T, Duration) {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let t0 = Instant::now();
        let value = futures_executor::block_on(future);
        let _ = tx.send((value, t0.elapsed()));
    });
    rx.recv_timeout(limit)
        .expect("the future completed (nothing left it unwoken)")
}

/// A task alone on the client polls for its replies itself; when they
/// take longer than its spin (a majority paused), it leaves the polling to
/// the background thread, and still ends within one request timeout. With
/// the spin off, the background thread polls from the start.
#[test]
fn a_lone_task_polls_for_itself_then_hands_over() {
    let cluster = Cluster::start(5);
    let timeout = Duration::from_millis(300);
    for spin in [Duration::from_millis(1), Duration::ZERO] {
        let redlock = Arc::new(
            one_try(cluster.urls(), timeout)
                .spin(spin)
                .build()
                .expect("build"),
        );
        let shared = Arc::clone(&redlock);
        let (released, _) = run_within(Duration::from_secs(5), async move {
            let mut lock = shared.try_lock_async("async:spin", TTL).await?;
            shared.unlock_async(&mut lock).await
        });
        released.expect("a healthy cycle");
        for node in 0..3 {
            cluster.node(node).pause();
        }
        let shared = Arc::clone(&redlock);
        let (result, took) = run_within(Duration::from_secs(5), async move {
            shared.try_lock_async("async:spin:paused", TTL).await
        });
        for node in 0..3 {
            cluster.node(node).resume();
        }
        let Err(Error::Unavailable(report)) = result else {
            panic!("spin {spin:?}: {result:?}");
        };
        // Ended by its own deadline, where only the client's timer can wake
        // the task (not by a stall, 1 s by default): the paused masters
        // timed out, and not before the request timeout. A task left
        // unwoken fails `run_within`.
        assert_eq!(
            report.nodes()[..3],
            [
                NodeState::TimedOut,
                NodeState::TimedOut,
                NodeState::TimedOut
            ],
            "spin {spin:?}: {report}"
        );
        assert!(
            took >= timeout,
            "spin {spin:?}: ended after {took:?}, before its request timeout {timeout:?}"
        );
    }
}

/// A task woken at its round's decision that is never polled again holds
/// nobody up: the commands other tasks queue meanwhile (which wait, a
/// moment, for the tasks woken in the same tick) still go out at once.
#[test]
fn a_woken_task_that_never_comes_back_holds_nobody_up() {
    let cluster = Cluster::start(3);
    let redlock = Arc::new(
        one_try(cluster.urls(), Duration::from_secs(1))
            .spin(Duration::ZERO)
            .build()
            .expect("build"),
    );
    let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waker = Waker::from(Arc::new(Flag(Arc::clone(&woken))));
    // The first poll writes the commands and reads what is there: on a
    // loaded machine, a thread preempted between the two finds the replies
    // already in, and the round decided in that poll. Such a try says
    // nothing here: release, and try again with another resource.
    let mut stuck = None;
    for attempt in 0..20 {
        let mut first = Box::pin(redlock.try_lock_async(format!("async:stuck:{attempt}"), TTL));
        match first.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Pending => {
                stuck = Some(first);
                break;
            }
            Poll::Ready(result) => {
                let mut lock = result.expect("decided in its first poll");
                futures_executor::block_on(redlock.unlock_async(&mut lock)).expect("release");
            }
        }
    }
    let stuck = stuck.expect("no first poll left its round pending in 20 tries");
    assert!(
        eventually(PATIENCE, || woken.load(std::sync::atomic::Ordering::SeqCst)),
        "the first task is woken at its round's decision"
    );
    // Commands held back until the first task comes back would go out at
    // the poll's next deadline at the earliest: the other task's rounds
    // would time out (1 s) instead of being decided by the masters.
    let shared = Arc::clone(&redlock);
    let (result, _) = run_within(Duration::from_secs(5), async move {
        let mut lock = shared.try_lock_async("async:other", TTL).await?;
        shared.unlock_async(&mut lock).await
    });
    result.expect("the other task's cycle");
    let stats = redlock.stats();
    assert!(
        stats.masters.iter().all(|m| m.timeouts == 0),
        "the other task waited for one that never came back: {stats:?}"
    );
    let mut lock = futures_executor::block_on(stuck).expect("the first task's lock");
    futures_executor::block_on(redlock.unlock_async(&mut lock)).expect("release");
}

/// A waker that raises a flag.
struct Flag(Arc<std::sync::atomic::AtomicBool>);

impl std::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// 64 tasks on a two-thread runtime contend for 8 resources through one
/// client: no two holdings of a resource overlap, and every lock is
/// released.
#[test]
fn many_tasks_share_one_client() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let holdings = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let (redlock, holdings) = (Arc::clone(&redlock), Arc::clone(&holdings));
            runtime.spawn(async move {
                let mut failed = 0;
                for i in 0..10 {
                    let r = (t + i) % 8;
                    match redlock.lock_async(format!("async:many:{r}"), TTL).await {
                        Ok(mut lock) => {
                            let start = Instant::now();
                            // Work, without an await: the executor thread
                            // is held as real work would hold it.
                            thread::sleep(Duration::from_micros(200));
                            holdings
                                .lock()
                                .expect("not poisoned")
                                .push(Holding::of(r, t, &lock, start));
                            redlock.unlock_async(&mut lock).await.expect("release");
                        }
                        Err(Error::Contended(_)) => failed += 1,
                        Err(other) => panic!("unexpected: {other}"),
                    }
                }
                failed
            })
        })
        .collect();
    let failed: u32 = runtime.block_on(async {
        let mut failed = 0;
        for task in tasks {
            failed += task.await.expect("a task panicked");
        }
        failed
    });
    let holdings = holdings.lock().expect("not poisoned").clone();
    assert_eq!(holdings.len() as u32 + failed, 640);
    assert!(holdings.len() >= 320, "{} of 640 taken", holdings.len());
    assert!(overlaps(&holdings).is_empty(), "{:?}", overlaps(&holdings));
    // An unlock returns at a quorum, and a wait that gave up leaves the
    // queues without waiting for the masters: the last releases, and the
    // reservations a release made for a wait that was leaving, end soon
    // after (a reservation at its window's end, at the latest).
    let all: Vec<usize> = (0..cluster.len()).collect();
    for r in 0..8 {
        assert_gone(
            &cluster,
            &all,
            format!("async:many:{r}").as_bytes(),
            Duration::from_secs(30),
        );
    }
}

/// A client to `cluster` through proxies, with a request timeout long
/// enough for the latency the tests add.
fn behind_proxies(cluster: &Cluster) -> (Proxies, Redlock) {
    let proxies = Proxies::front(cluster);
    let redlock = one_try(proxies.urls(), Duration::from_secs(1))
        .build()
        .expect("build");
    (proxies, redlock)
}

/// Polls `future` once, then drops it.
fn poll_once_and_drop<F: Future>(future: F) -> Poll<F::Output> {
    let mut future = pin!(future);
    future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

/// An acquire future dropped after its command went out (every reply held
/// back 300 ms): the release queued behind the acquire removes the key
/// everywhere, and the acquire's late replies count for no other round.
#[test]
fn a_dropped_acquire_leaves_no_lock() {
    let cluster = Cluster::start(3);
    let (proxies, redlock) = behind_proxies(&cluster);
    for proxy in proxies.iter() {
        proxy.latency(Dir::ToClient, Duration::from_millis(300));
    }
    let sent = || -> Vec<u64> { proxies.iter().map(|p| p.stats().to_server).collect() };
    let before = sent();
    let polled = poll_once_and_drop(redlock.try_lock_async("async:dropped", TTL));
    assert!(polled.is_pending(), "the round waits for its replies");
    // The SET (about 80 bytes) and the EVAL of the release script (more
    // than 200) went to every master; the key they set and removed is
    // gone too soon to be seen.
    assert!(
        eventually(PATIENCE, || sent()
            .iter()
            .zip(&before)
            .all(|(now, then)| now - then > 250)),
        "the acquire and its release reached every master: {before:?} -> {:?}",
        sent()
    );
    assert!(
        eventually(PATIENCE, || (0..3)
            .all(|i| !cluster.exists(i, "async:dropped"))),
        "the release queued at the drop removed the key everywhere"
    );
    for proxy in proxies.iter() {
        proxy.latency(Dir::ToClient, Duration::ZERO);
    }
    let mut lock = futures_executor::block_on(redlock.try_lock_async("async:dropped", TTL))
        .expect("the resource is free");
    futures_executor::block_on(redlock.unlock_async(&mut lock)).expect("release");
}

/// An extend future dropped in flight leaves the lock capped at what the
/// extend could have granted; an unlock future dropped in flight leaves it
/// expired.
#[test]
fn dropped_extend_and_unlock_leave_the_lock_honest() {
    let cluster = Cluster::start(3);
    let (proxies, redlock) = behind_proxies(&cluster);
    let mut lock =
        futures_executor::block_on(redlock.try_lock_async("async:honest", TTL)).expect("acquire");
    for proxy in proxies.iter() {
        proxy.latency(Dir::ToClient, Duration::from_millis(300));
    }
    let asked = Instant::now();
    let short = Duration::from_secs(2);
    let polled = poll_once_and_drop(redlock.extend_async(&mut lock, short));
    assert!(polled.is_pending());
    assert!(
        lock.valid_until() <= asked + short,
        "a dropped extend to {short:?} caps the lock: {:?} left",
        lock.validity()
    );
    assert!(!lock.is_expired());
    let polled = poll_once_and_drop(redlock.unlock_async(&mut lock));
    assert!(polled.is_pending());
    assert!(lock.is_expired(), "a dropped unlock expires the lock");
    assert!(
        eventually(PATIENCE, || (0..3)
            .all(|i| !cluster.exists(i, "async:honest"))),
        "the release went out all the same"
    );
}

/// Dropping an async guard inside a task returns at once and releases the
/// lock on every master.
#[test]
fn dropping_an_async_guard_releases() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let guard = runtime
        .block_on(redlock.lock_guard_async("async:guard", TTL))
        .expect("acquire");
    // The guard derefs to its lock, as `LockGuard` does.
    let lock: &redlock_mio::Lock = &guard;
    assert!(lock.validity() > Duration::ZERO);
    assert_eq!(guard.resource(), b"async:guard");
    let token = guard.token().to_vec();
    assert!((0..3).all(|i| cluster.get(i, "async:guard") == Some(token.clone())));
    runtime.block_on(async move { drop(guard) });
    assert!(
        eventually(PATIENCE, || (0..3)
            .all(|i| !cluster.exists(i, "async:guard"))),
        "the guard's drop released the lock"
    );
    let guard = runtime
        .block_on(redlock.lock_guard_async("async:guard", TTL))
        .expect("free again");
    runtime.block_on(guard.release()).expect("released");
    assert!((0..3).all(|i| !cluster.exists(i, "async:guard")));
}

/// `lock_guard_until_async` waits until its deadline and guards what it
/// won (held by another past the deadline: `Contended`);
/// `AsyncLockGuard::new` guards a lock taken otherwise, and `into_lock`
/// hands it back unreleased.
#[test]
fn async_guards_with_a_deadline_and_from_a_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls());
    let holder = client(cluster.urls());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut held = holder.try_lock("async:until", TTL).expect("free");
    let deadline = Instant::now() + Duration::from_millis(300);
    let err = runtime
        .block_on(redlock.lock_guard_until_async("async:until", TTL, deadline))
        .expect_err("held past the deadline");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    holder.unlock(&mut held).expect("released");
    let guard = runtime
        .block_on(redlock.lock_guard_until_async("async:until", TTL, Instant::now() + PATIENCE))
        .expect("free now");
    let token = guard.token().to_vec();
    assert!((0..3).all(|i| cluster.get(i, "async:until") == Some(token.clone())));
    runtime.block_on(async move { drop(guard) });
    assert!(
        eventually(PATIENCE, || (0..3)
            .all(|i| !cluster.exists(i, "async:until"))),
        "the guard's drop released the lock"
    );

    let lock = runtime
        .block_on(redlock.try_lock_async("async:made", TTL))
        .expect("free");
    let guard = AsyncLockGuard::new(Arc::clone(&redlock), lock);
    runtime.block_on(async move { drop(guard) });
    assert!(
        eventually(PATIENCE, || (0..3)
            .all(|i| !cluster.exists(i, "async:made"))),
        "a guard made from a lock releases it"
    );

    let guard = runtime
        .block_on(redlock.lock_guard_async("async:handed", TTL))
        .expect("free");
    let before = redlock.stats();
    let mut lock = guard.into_lock();
    let after = redlock.stats();
    assert_eq!(
        (after.releases, after.drop_releases),
        (before.releases, before.drop_releases),
        "the guard sent no release"
    );
    assert!((0..3).all(|i| cluster.exists(i, "async:handed")));
    runtime
        .block_on(redlock.unlock_async(&mut lock))
        .expect("still held: the guard released nothing");
}

/// `lock_until_async` on a resource another client holds completes by its
/// deadline, with the last attempt's error, its delays kept by the
/// client's timers; a deadline already past asks nobody.
#[test]
fn lock_until_async_completes_by_its_deadline() {
    let cluster = Cluster::start(3);
    // Rounds short enough that several retries fit before the deadline.
    let redlock = Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_millis(100))
        .retry_delay(Duration::from_millis(2))
        .retry_jitter(Duration::from_millis(2))
        .build()
        .expect("build");
    let holder = client(cluster.urls());
    let mut held = futures_executor::block_on(holder.try_lock_async("async:until", TTL))
        .expect("the holder acquires");
    let wait = Duration::from_secs(1);
    let deadline = Instant::now() + wait;
    let result = futures_executor::block_on(redlock.lock_until_async("async:until", TTL, deadline));
    let late = Instant::now().saturating_duration_since(deadline);
    // Refused; or, on a slow machine, timed out.
    assert!(
        matches!(result, Err(Error::Contended(_) | Error::Unavailable(_))),
        "{result:?}"
    );
    // A retry starts only if its whole request timeout fits before the
    // deadline, and an attempt ends by the deadline: a second is more than
    // any load adds to that.
    assert!(late < Duration::from_secs(1), "{late:?} past the deadline");
    assert!(
        redlock.stats().attempts > 1,
        "it retried until the deadline: {:?}",
        redlock.stats()
    );
    let past =
        futures_executor::block_on(redlock.lock_until_async("async:until", TTL, Instant::now()));
    assert!(matches!(past, Err(Error::DeadlinePassed)), "{past:?}");
    futures_executor::block_on(holder.unlock_async(&mut held)).expect("release");
}

/// A task whose first attempt finds the client at its cap of rounds in
/// flight (a thread's round holds the only slot, its replies held back)
/// fails it `TooManyInFlight` at once and tries again after its delay: the client's
/// timers wake it although it has started no round yet, under an executor
/// without timers of its own.
#[test]
fn a_task_that_started_no_round_yet_is_woken_for_its_retry() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let redlock = Redlock::builder(proxies.urls())
        .request_timeout(Duration::from_secs(1))
        .max_in_flight(1)
        .retry_count(100_000)
        .retry_delay(Duration::from_millis(2))
        .retry_jitter(Duration::from_millis(2))
        .require_handshakes(Require::All)
        .build()
        .expect("build");
    let sent = || -> u64 { proxies.iter().map(|p| p.stats().to_server).sum() };
    for proxy in proxies.iter() {
        proxy.stall(Dir::ToClient);
    }
    thread::scope(|s| {
        let before = sent();
        s.spawn(|| {
            // Its round holds the slot until its request timeout.
            let held = redlock.try_lock("async:slot", TTL);
            assert!(matches!(held, Err(Error::Unavailable(_))), "{held:?}");
            proxies.heal_all();
        });
        assert!(
            eventually(PATIENCE, || sent() > before),
            "the thread's round went out"
        );
        let mut lock = futures_executor::block_on(redlock.lock_async("async:other", TTL))
            .expect("acquired once the slot is free");
        futures_executor::block_on(redlock.unlock_async(&mut lock)).expect("release");
    });
}
