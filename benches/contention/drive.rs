//! The workers' loop (acquire, hold, release, think), the in-process
//! witness of exclusion, and the runs of a cell: threads with a client
//! each, or tasks sharing one.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::cpu::{self, Cpu};
use super::variants::{Counter, SharedClient, TTL, Worker, attempts};

/// How long an acquire may wait: far beyond any fair wait, so that a
/// worker that gives up tells of starvation, not of a short deadline.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// The holding time, spent spinning: see [`Shared::hold`].
pub(crate) const HOLD: Duration = Duration::from_micros(200);

/// The think time between a release and the next acquire.
pub(crate) const THINK: Duration = Duration::from_millis(2);

/// The one timeline of the run: every moment is taken in nanoseconds since
/// this instant, by any worker of any variant.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Now, in nanoseconds on the run's timeline.
pub(crate) fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// An acquire that returned no lock.
pub(crate) struct Failure {
    /// It gave up at its deadline (the lock stayed taken by others).
    pub(crate) gave_up: bool,
    pub(crate) message: String,
}

/// One acquisition's moments on the run's timeline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Acquisition {
    pub(crate) worker: usize,
    /// The acquire call started.
    pub(crate) called: u64,
    /// The acquire call returned the lock.
    pub(crate) acquired: u64,
    /// The release call started.
    pub(crate) releasing: u64,
    /// The release call returned.
    pub(crate) released: u64,
}

/// An acquisition up to its release call.
struct Held {
    worker: usize,
    called: u64,
    acquired: u64,
    releasing: u64,
}

/// What one worker did in a cell.
#[derive(Default)]
pub(crate) struct Outcome {
    pub(crate) acquisitions: Vec<Acquisition>,
    /// Acquires that gave up at their deadline.
    pub(crate) gave_up: u64,
    /// Releases that failed.
    pub(crate) unlock_errors: u64,
    /// The error that stopped the worker, if one did.
    pub(crate) stopped: Option<String>,
    /// The first error of any kind, for the report.
    pub(crate) first_error: Option<String>,
}

impl Outcome {
    /// Counts a failed acquire; whether the worker must stop (an error
    /// other than giving up at the deadline).
    fn failed(&mut self, failure: Failure) -> bool {
        self.first_error
            .get_or_insert_with(|| failure.message.clone());
        if failure.gave_up {
            self.gave_up += 1;
            false
        } else {
            self.stopped = Some(failure.message);
            true
        }
    }

    /// Records the acquisition `held` whose release call has just returned
    /// `result`.
    fn record(&mut self, held: Held, result: Result<(), String>) {
        self.acquisitions.push(Acquisition {
            worker: held.worker,
            called: held.called,
            acquired: held.acquired,
            releasing: held.releasing,
            released: now_ns(),
        });
        if let Err(e) = result {
            self.unlock_errors += 1;
            self.first_error.get_or_insert(e);
        }
    }
}

/// The state the workers of a cell share.
pub(crate) struct Shared {
    stop: AtomicBool,
    /// How many workers hold the lock: the in-process witness.
    inside: AtomicUsize,
    violated: AtomicBool,
    think: Duration,
}

impl Shared {
    pub(crate) fn new(think: Duration) -> Arc<Shared> {
        Arc::new(Shared {
            stop: AtomicBool::new(false),
            inside: AtomicUsize::new(0),
            violated: AtomicBool::new(false),
            think,
        })
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn violated(&self) -> bool {
        self.violated.load(Ordering::SeqCst)
    }

    /// The acquire `worker` called at `called` has just returned the lock:
    /// holds it (see [`hold`](Self::hold)); the moments up to the release
    /// call.
    fn held(&self, worker: usize, called: u64) -> Held {
        let acquired = now_ns();
        self.hold(worker);
        Held {
            worker,
            called,
            acquired,
            releasing: now_ns(),
        }
    }

    /// Holds the lock for [`HOLD`], the witness counting the holders; two
    /// at once abort the cell, loudly.
    ///
    /// The holding spins rather than sleeps: a sleep overshoots by the
    /// timer slack and the scheduler (and tokio's timer rounds up to a
    /// millisecond), so the holding would differ between threads and tasks
    /// and from one moment to the next; a spinning holder is work done
    /// under the lock, the same for every variant. Exclusion keeps it to one
    /// CPU at a time.
    pub(crate) fn hold(&self, worker: usize) {
        let others = self.inside.fetch_add(1, Ordering::SeqCst);
        if others != 0 {
            eprintln!(
                "EXCLUSION VIOLATED: worker {worker} acquired while {others} other holder(s) held the lock"
            );
            self.violated.store(true, Ordering::SeqCst);
            self.stop.store(true, Ordering::SeqCst);
        }
        let until = Instant::now() + HOLD;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A worker with a client of its own: acquire, hold, release, think,
/// until the cell stops (an acquire under way when it stops completes).
fn thread_loop(worker: &mut dyn Worker, id: usize, shared: &Shared) -> Outcome {
    let mut out = Outcome::default();
    while !shared.stopping() {
        let called = now_ns();
        if let Err(failure) = worker.acquire(TTL, Instant::now() + PATIENCE) {
            if out.failed(failure) {
                break;
            }
            continue;
        }
        let held = shared.held(id, called);
        let result = worker.release();
        out.record(held, result);
        if !shared.think.is_zero() && !shared.stopping() {
            thread::sleep(shared.think);
        }
    }
    out
}

/// [`thread_loop`] for a task sharing a client: the same steps, awaited.
pub(crate) async fn task_loop<L, A, AF, R, RF>(
    id: usize,
    shared: Arc<Shared>,
    acquire: A,
    release: R,
) -> Outcome
where
    A: Fn(Instant) -> AF,
    AF: Future<Output = Result<L, Failure>>,
    R: Fn(L) -> RF,
    RF: Future<Output = Result<(), String>>,
{
    let mut out = Outcome::default();
    while !shared.stopping() {
        let called = now_ns();
        let lock = match acquire(Instant::now() + PATIENCE).await {
            Ok(lock) => lock,
            Err(failure) => {
                if out.failed(failure) {
                    break;
                }
                continue;
            }
        };
        let held = shared.held(id, called);
        let result = release(lock).await;
        out.record(held, result);
        if !shared.stopping() {
            // tokio's timer rounds up to the millisecond: 2 to 3 ms.
            tokio::time::sleep(shared.think).await;
        }
    }
    out
}

/// What a cell's run gave: every worker's outcome, the measured window on
/// the run's timeline, and the attempts counted meanwhile (the drain
/// included).
pub(crate) struct Run {
    pub(crate) outcomes: Vec<Outcome>,
    pub(crate) window: (u64, u64),
    pub(crate) attempts: u64,
    pub(crate) violated: bool,
    /// The CPU the run took, the drain included.
    pub(crate) cpu: Cpu,
}

/// Sleeps for `run`, or until a violation stops the cell; the window.
fn measure_window(shared: &Shared, run: Duration) -> (u64, u64) {
    let start = now_ns();
    let end = Instant::now() + run;
    while Instant::now() < end && !shared.stopping() {
        thread::sleep(Duration::from_millis(5).min(end.saturating_duration_since(Instant::now())));
    }
    shared.stop.store(true, Ordering::SeqCst);
    (start, now_ns())
}

/// `workers`, each a thread with its own client, for `run`; the workers
/// are warmed up, then start together.
pub(crate) fn clients(mut workers: Vec<Box<dyn Worker>>, run: Duration, think: Duration) -> Run {
    for worker in &mut workers {
        worker.warm().expect("warm-up acquire + release");
    }
    let counters: Vec<Counter> = workers.iter().map(|w| w.counter()).collect();
    let shared = Shared::new(think);
    let barrier = Barrier::new(workers.len() + 1);
    let before = attempts(&counters);
    let cpu_before = cpu::now();
    let (outcomes, window) = thread::scope(|s| {
        let handles: Vec<_> = workers
            .iter_mut()
            .enumerate()
            .map(|(id, worker)| {
                let (shared, barrier) = (&shared, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    thread_loop(worker.as_mut(), id, shared)
                })
            })
            .collect();
        barrier.wait();
        let window = measure_window(&shared, run);
        let outcomes: Vec<Outcome> = handles
            .into_iter()
            .map(|h| h.join().expect("a worker thread"))
            .collect();
        (outcomes, window)
    });
    Run {
        outcomes,
        window,
        attempts: attempts(&counters).saturating_sub(before),
        violated: shared.violated(),
        cpu: cpu::now().since(cpu_before),
    }
}

/// `callers` tasks on `rt` sharing `client`, for `run`.
pub(crate) fn tasks(
    rt: &tokio::runtime::Runtime,
    client: &SharedClient,
    callers: usize,
    run: Duration,
) -> Run {
    client.warm(rt).expect("warm-up acquire + release");
    let counters = [client.counter()];
    let shared = Shared::new(THINK);
    let before = attempts(&counters);
    let cpu_before = cpu::now();
    let handles = client.spawn(rt, callers, &shared);
    let window = measure_window(&shared, run);
    let outcomes = rt
        .block_on(join_all(handles))
        .into_iter()
        .map(|h| h.expect("a worker task"))
        .collect();
    Run {
        outcomes,
        window,
        attempts: attempts(&counters).saturating_sub(before),
        violated: shared.violated(),
        cpu: cpu::now().since(cpu_before),
    }
}
