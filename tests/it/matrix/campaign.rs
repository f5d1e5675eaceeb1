//! The mixed campaign: every front end and mode at once on the same three
//! masters, for `MATRIX_CAMPAIGN_SECS` (10 by default): a thread per
//! blocking mode (each shape, plain and fenced), a thread per executor
//! and fencing running a task per async mode (one lock, kept, scoped),
//! and an embedded loop, all taking names from one small pool, so that
//! every mode meets every other on the same keys, waiters' queues and
//! hand-overs included. Then: no two holdings of a name overlapped, fences
//! grew in the order holdings began, every worker got the lock now and
//! then, every error was one the docs give for a healthy deployment, and
//! nothing is left on any master.
//!
//! `MATRIX_SEED=<u64>` replays a campaign's choices (names, calls, hold
//! times; not the machine's timing); the seed is printed at the start and
//! in every failure.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::{eventually, integer, left_on, pttl, short};
use crate::support::cluster::Cluster;
use crate::support::holdings::{Holding, assert_safe};
use crate::support::join::{Task, join_all};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use redlock_mio::{Error, KeepOptions, Redlock, Standing};

use super::front::{Call, Client, block, builder};
use super::{Front, KEEP_PERIOD, PATIENCE, SHAPES, Shape, TTL, Tuning};

const DEFAULT_SECS: u64 = 10;
/// The names every worker takes its locks from.
const POOL: usize = 4;
/// How long a call that waits waits at most.
const WAIT: Duration = Duration::from_secs(2);

fn tuning() -> Tuning {
    Tuning {
        request_timeout: Duration::from_secs(1),
        retry_count: 3,
        retry_delay: Duration::from_millis(100),
        retry_jitter: Duration::from_millis(50),
        guard: false,
        wait: WAIT,
    }
}

/// Name `r` of the pool: binary, every one a key of its own.
fn name(r: usize) -> Vec<u8> {
    let bytes = (0..=255u8).step_by(3).map(|b| b.wrapping_add(r as u8));
    format!("campaign:{r}:").bytes().chain(bytes).collect()
}

/// What one worker (a thread, or a task) did.
#[derive(Debug, Default)]
struct Work {
    label: String,
    fenced: bool,
    holdings: Vec<Holding>,
    /// Acquires that failed, by kind.
    failed: BTreeMap<String, u64>,
    /// Errors the docs do not give for a healthy deployment.
    unexpected: Vec<String>,
}

impl Work {
    fn new(label: String, fenced: bool) -> Work {
        Work {
            label,
            fenced,
            ..Work::default()
        }
    }

    /// An acquire's error: contention, or a round that ran out of time on
    /// a loaded machine, and nothing else.
    fn acquire_failed(&mut self, error: &Error) {
        match error {
            Error::Contended(_) | Error::Unavailable(_) | Error::TooSlow(_) => {
                *self
                    .failed
                    .entry(super::front::kind(Some(error)))
                    .or_default() += 1;
            }
            other => self.unexpected.push(format!("acquire: {other}")),
        }
    }

    /// A release's outcome: a release of a lock that was held (and never
    /// near its 30 s expiry) fails only by running out of time.
    fn released(&mut self, result: Result<(), Error>) {
        match result {
            Ok(()) | Err(Error::Unavailable(_) | Error::TooSlow(_)) => {}
            Err(other) => self.unexpected.push(format!("release: {other}")),
        }
    }

    /// Holdings of the names `chosen` (by their place in it) as holdings
    /// of pool names.
    fn held(&mut self, holdings: Vec<Holding>, chosen: &[usize]) {
        self.holdings.extend(holdings.into_iter().map(|h| Holding {
            resource: chosen[h.resource],
            ..h
        }));
    }
}

pub(super) fn run() {
    let secs = std::env::var("MATRIX_CAMPAIGN_SECS")
        .ok()
        .map(|s| s.parse::<u64>().expect("MATRIX_CAMPAIGN_SECS: seconds"))
        .unwrap_or(DEFAULT_SECS);
    let seed = std::env::var("MATRIX_SEED")
        .ok()
        .map(|s| s.parse::<u64>().expect("MATRIX_SEED: a u64"))
        .unwrap_or_else(rand::random);
    eprintln!("mixed campaign: MATRIX_SEED={seed} MATRIX_CAMPAIGN_SECS={secs}");
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let stop = Arc::new(AtomicBool::new(false));
    let origin = Instant::now();
    // Each job gets its seeded choices and its number (tens: a thread's
    // tasks take the units).
    type Job = Box<dyn FnOnce(StdRng, usize) -> Vec<Work> + Send>;
    let mut jobs: Vec<(String, Job)> = Vec::new();
    for fenced in [false, true] {
        for shape in SHAPES {
            let (urls, stop) = (urls.clone(), Arc::clone(&stop));
            let label = format!("blocking {} {shape:?}", plain(fenced));
            jobs.push((
                label.clone(),
                Box::new(move |rng, who| {
                    vec![caller(
                        label,
                        Front::Blocking,
                        shape,
                        fenced,
                        &urls,
                        &stop,
                        rng,
                        who,
                    )]
                }),
            ));
        }
        for front in [Front::Tokio, Front::Smol, Front::Bare] {
            let (urls, stop) = (urls.clone(), Arc::clone(&stop));
            let label = format!("{front:?} {}", plain(fenced));
            jobs.push((
                label.clone(),
                Box::new(move |rng, who| tasks(&label, front, fenced, &urls, &stop, rng, who)),
            ));
        }
    }
    let (urls, stop_embedded) = (urls.clone(), Arc::clone(&stop));
    let label = "embedded plain Single".to_owned();
    jobs.push((
        label.clone(),
        Box::new(move |rng, who| {
            let front = Front::Embedded;
            vec![caller(
                label,
                front,
                Shape::Single,
                false,
                &urls,
                &stop_embedded,
                rng,
                who,
            )]
        }),
    ));
    let workers = jobs.len();
    let (send, done) = mpsc::channel::<Vec<Work>>();
    for (n, (label, job)) in jobs.into_iter().enumerate() {
        let rng = StdRng::seed_from_u64(seed ^ (n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let send = send.clone();
        thread::Builder::new()
            .name(label)
            .spawn(move || {
                let _ = send.send(job(rng, n * 10));
            })
            .expect("spawn a worker");
    }
    drop(send);
    // The campaign's length, not a synchronisation: the workers run
    // meanwhile.
    thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::SeqCst);
    let mut works = Vec::new();
    for _ in 0..workers {
        match done.recv_timeout(PATIENCE) {
            Ok(w) => works.extend(w),
            Err(e) => panic!(
                "MATRIX_SEED={seed}: a worker did not end within {PATIENCE:?} of the stop \
                 (or panicked): {e}"
            ),
        }
    }
    check(&cluster, &works, origin, seed);
}

fn plain(fenced: bool) -> &'static str {
    if fenced { "fenced" } else { "plain" }
}

/// `count` distinct names of the pool.
fn choose(rng: &mut StdRng, count: usize) -> Vec<usize> {
    sample(rng, POOL, count).into_vec()
}

/// A worker of one blocking mode or the embedded loop: until `stop`, takes
/// a lock (or several) by a call the shape has, holds it a moment
/// (extending it now and then), releases it.
#[allow(clippy::too_many_arguments, reason = "a worker's whole identity")]
fn caller(
    label: String,
    front: Front,
    shape: Shape,
    fenced: bool,
    urls: &[String],
    stop: &AtomicBool,
    mut rng: StdRng,
    who: usize,
) -> Work {
    let mut client = Client::new(front, shape, fenced, &tuning(), urls, who)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    client.all_or_nothing = false;
    let mut work = Work::new(label, fenced);
    let count = match shape {
        Shape::Multi => 2,
        Shape::Batch => 3,
        _ => 1,
    };
    while !stop.load(Ordering::SeqCst) {
        let call = match (client.has(Call::Try), client.has(Call::Wait)) {
            (true, true) if rng.random_bool(0.5) => Call::Wait,
            (true, _) => Call::Try,
            (false, _) => Call::Wait,
        };
        let chosen = choose(&mut rng, count);
        let names: Vec<Vec<u8>> = chosen.iter().map(|&r| name(r)).collect();
        let mut held = match client.acquire(call, &names, Instant::now() + WAIT) {
            Ok(held) => held,
            Err(e) => {
                work.acquire_failed(&e);
                continue;
            }
        };
        thread::sleep(Duration::from_millis(rng.random_range(0..5)));
        if rng.random_bool(0.3) {
            if let Some(Err(e)) = client.extend(&mut held) {
                work.unexpected.push(format!("extend: {e}"));
            }
        }
        let (holdings, result) = client.release(held, &names);
        work.held(holdings, &chosen);
        work.released(result);
    }
    work
}

/// A thread of one executor and fencing: one client, a task per async
/// mode (one lock, kept, scoped), run side by side on the thread until
/// `stop`.
fn tasks(
    label: &str,
    front: Front,
    fenced: bool,
    urls: &[String],
    stop: &AtomicBool,
    rng: StdRng,
    who: usize,
) -> Vec<Work> {
    let redlock = builder(urls, fenced, &tuning())
        .build()
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let run = front.executor().expect("an async front end");
    let mut rngs: Vec<StdRng> = (0..3)
        .map(|i| StdRng::seed_from_u64(rng.clone().random::<u64>() ^ i))
        .collect();
    let (mut r2, mut r1, r0) = (
        rngs.pop().expect("rng"),
        rngs.pop().expect("rng"),
        rngs.pop().expect("rng"),
    );
    let redlock = &redlock;
    let tasks: Vec<Task<'_, Work>> = vec![
        Box::pin(async move {
            let mut r = r0;
            let mut work = Work::new(format!("{label} Single"), fenced);
            while !stop.load(Ordering::SeqCst) {
                one_lock(redlock, &mut r, &mut work, who).await;
            }
            work
        }),
        Box::pin(async move {
            let mut work = Work::new(format!("{label} Kept"), fenced);
            while !stop.load(Ordering::SeqCst) {
                kept(redlock, &mut r1, &mut work, who + 1).await;
            }
            work
        }),
        Box::pin(async move {
            let mut work = Work::new(format!("{label} Scoped"), fenced);
            while !stop.load(Ordering::SeqCst) {
                scoped(redlock, &mut r2, &mut work, who + 2).await;
            }
            work
        }),
    ];
    block(run, join_all(tasks))
}

/// `try_lock_async` or `lock_until_async`, a moment held (an
/// `extend_async` now and then), `unlock_async`.
async fn one_lock(redlock: &Redlock, rng: &mut StdRng, work: &mut Work, who: usize) {
    let r = choose(rng, 1)[0];
    let acquired = if rng.random_bool(0.5) {
        redlock.try_lock_async(name(r), TTL).await
    } else {
        let deadline = Instant::now() + WAIT;
        redlock.lock_until_async(name(r), TTL, deadline).await
    };
    let mut lock = match acquired {
        Ok(lock) => lock,
        Err(e) => return work.acquire_failed(&e),
    };
    let start = Instant::now();
    yields(rng.random_range(0..4)).await;
    if rng.random_bool(0.3) {
        if let Err(e) = redlock.extend_async(&mut lock, TTL).await {
            work.unexpected.push(format!("extend: {e}"));
        }
    }
    work.holdings.push(Holding::of(r, who, &lock, start));
    let released = redlock.unlock_async(&mut lock).await;
    work.released(released);
}

/// `try_lock_async` or `lock_async`, then `keep`; a moment held; the
/// keeper dropped, and its loss signal awaited until the release is over.
async fn kept(redlock: &Redlock, rng: &mut StdRng, work: &mut Work, who: usize) {
    let r = choose(rng, 1)[0];
    let acquired = if rng.random_bool(0.5) {
        redlock.try_lock_async(name(r), TTL).await
    } else {
        redlock.lock_async(name(r), TTL).await
    };
    let lock = match acquired {
        Ok(lock) => lock,
        Err(e) => return work.acquire_failed(&e),
    };
    let start = Instant::now();
    let keeper = match redlock.keep(lock, KeepOptions::new(TTL).period(KEEP_PERIOD)) {
        Ok(keeper) => keeper,
        Err(e) => return work.unexpected.push(format!("keep: {e}")),
    };
    yields(rng.random_range(0..4)).await;
    work.holdings
        .push(super::front::kept(&keeper, r, who, start));
    let lost = keeper.lost();
    drop(keeper);
    if lost.await != Standing::Released {
        work.unexpected
            .push("a dropped keeper did not end released".to_owned());
    }
}

/// `with_lock_async`, its closure a moment long.
async fn scoped(redlock: &Redlock, rng: &mut StdRng, work: &mut Work, who: usize) {
    let r = choose(rng, 1)[0];
    let turns = rng.random_range(0..4);
    let options = KeepOptions::new(TTL).period(KEEP_PERIOD);
    let outcome = redlock
        .with_lock_async(name(r), options, async |keeper| {
            let start = Instant::now();
            yields(turns).await;
            super::front::kept(keeper, r, who, start)
        })
        .await;
    match outcome {
        Ok(holding) => work.holdings.push(holding),
        Err(e) => work.acquire_failed(&e),
    }
}

/// Yields to the executor `n` times: the other tasks run meanwhile.
fn yields(n: u32) -> impl Future<Output = ()> {
    Yields(n)
}

struct Yields(u32);

impl Future for Yields {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The campaign's checkers.
fn check(cluster: &Cluster, works: &[Work], origin: Instant, seed: u64) {
    let summary: Vec<String> = works
        .iter()
        .map(|w| {
            format!(
                "{}: {} held, failed {:?}",
                w.label,
                w.holdings.len(),
                w.failed
            )
        })
        .collect();
    eprintln!(
        "mixed campaign (MATRIX_SEED={seed}):\n  {}",
        summary.join("\n  ")
    );
    let unexpected: Vec<String> = works
        .iter()
        .flat_map(|w| {
            w.unexpected
                .iter()
                .map(move |u| format!("{}: {u}", w.label))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "MATRIX_SEED={seed}: errors the docs do not give for a healthy deployment: {unexpected:#?}"
    );
    let holdings: Vec<Holding> = works.iter().flat_map(|w| w.holdings.clone()).collect();
    assert_safe(&holdings, origin, &format!("MATRIX_SEED={seed}"));
    for w in works {
        let fenced = w.holdings.iter().filter(|h| h.fence.is_some()).count();
        let expected = if w.fenced { w.holdings.len() } else { 0 };
        assert_eq!(
            fenced, expected,
            "MATRIX_SEED={seed}: {}: holdings with a fence",
            w.label
        );
        assert!(
            !w.holdings.is_empty(),
            "MATRIX_SEED={seed}: {} never got a lock: {:?}",
            w.label,
            w.failed
        );
    }
    // Every lock was released: no key is left, long before any could
    // have expired on its own.
    let locks: Vec<Vec<u8>> = (0..POOL).map(name).collect();
    let released = eventually(PATIENCE, || left_on(cluster, &locks).is_empty());
    assert!(
        released,
        "MATRIX_SEED={seed}: locks left after {PATIENCE:?} (they live {TTL:?}): {:?}",
        left_on(cluster, &locks)
    );
    // A waiter's entry can outlive its call where a master was still to
    // answer when the attempt was decided (the client takes it to grant,
    // as it does when nobody else waits; it refused and queued it). The
    // docs bound what such an entry costs: its queue expires within the
    // keys that blocked it plus the margin, and the next release there
    // takes it off (its client gone, nobody is told).
    let queues: Vec<Vec<u8>> = locks
        .iter()
        .map(|k| [b"redlock-mio:queue:", &k[..]].concat())
        .collect();
    let tuning = tuning();
    let window = tuning.request_timeout * 4;
    let margin = window + tuning.retry_delay + tuning.retry_jitter + tuning.request_timeout;
    let bound = i64::try_from((TTL + margin).as_millis()).unwrap_or(i64::MAX);
    let mut stale = vec![0; cluster.len()];
    for queue in &queues {
        for (i, stale) in stale.iter_mut().enumerate() {
            let entries = integer(&cluster.command(i, &[b"ZCARD", queue]));
            if entries == 0 {
                continue;
            }
            *stale += entries;
            let expires = pttl(cluster, i, queue);
            assert!(
                (1..=bound).contains(&expires),
                "MATRIX_SEED={seed}: master {i}: {} expires in {expires} ms, past the \
                 blocking keys' TTL and the margin ({bound} ms)",
                short(queue)
            );
        }
    }
    eprintln!("mixed campaign: queue entries that outlived their calls, per master: {stale:?}");
    let sweeper = builder(&cluster.urls(), false, &tuning)
        .build()
        .expect("a client");
    let swept = eventually(PATIENCE, || {
        for lock in &locks {
            if let Ok(mut held) = sweeper.try_lock(lock, TTL) {
                let _ = sweeper.unlock(&mut held);
            }
        }
        left_on(cluster, &queues).is_empty() && left_on(cluster, &locks).is_empty()
    });
    assert!(
        swept,
        "MATRIX_SEED={seed}: after releases, left on the masters: {:?}",
        left_on(cluster, &[queues, locks].concat())
    );
}
