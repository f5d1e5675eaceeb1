//! What the callers do: the mix of calls, the Zipf choice of resources, and
//! what each call's outcome adds to the figures.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::Rng;
use rand::rngs::SmallRng;
use redlock_mio::{Error, Lock, Redlock};

/// The TTL of every lock.
pub(crate) const TTL: Duration = Duration::from_secs(5);
/// How long a `lock` with a wait waits at most.
pub(crate) const WAIT: Duration = Duration::from_millis(200);
/// Of the calls: several resources at once.
pub(crate) const MULTI: f64 = 0.05;
/// Of the calls: `lock` with a wait (the rest are `try_lock`).
pub(crate) const WAITING: f64 = 0.35;
/// Of the locks acquired: extended once before the release.
pub(crate) const EXTENDED: f64 = 0.2;
/// The most resources of a several-resource lock.
pub(crate) const MULTI_MAX: usize = 4;
/// After a call that failed (not refused), a caller waits a random time up
/// to this before its next call, as a service's error path would, rather
/// than calling again at once into a client that just failed.
pub(crate) const BACKOFF: Duration = Duration::from_millis(5);

/// The phases of a cell's run, as the callers see them.
pub(crate) const WARM: u8 = 0;
pub(crate) const MEASURE: u8 = 1;
pub(crate) const STOP: u8 = 2;

/// A Zipf distribution over `0..n`: rank `k` (from 0) drawn with weight
/// `1 / (k + 1)^s`, by a binary search of the cumulative weights.
pub(crate) struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub(crate) fn new(n: usize, s: f64) -> Zipf {
        let mut total = 0.0;
        let mut cdf: Vec<f64> = (0..n)
            .map(|k| {
                total += 1.0 / ((k + 1) as f64).powf(s);
                total
            })
            .collect();
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    pub(crate) fn sample(&self, rng: &mut SmallRng) -> usize {
        let u: f64 = rng.random();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }

    /// The share of draws that fall on the most drawn resource.
    pub(crate) fn top(&self) -> f64 {
        self.cdf.first().copied().unwrap_or(0.0)
    }
}

/// The kind of one call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Op {
    Try,
    Wait,
    Multi,
}

/// One call, decided before it is made.
pub(crate) struct Plan {
    pub(crate) op: Op,
    /// The resources (indices), distinct and ascending for `Multi`.
    pub(crate) resources: [usize; MULTI_MAX],
    pub(crate) count: usize,
    pub(crate) extend: bool,
}

impl Plan {
    pub(crate) fn draw(rng: &mut SmallRng, zipf: &Zipf) -> Plan {
        let u: f64 = rng.random();
        let op = if u < MULTI {
            Op::Multi
        } else if u < MULTI + WAITING {
            Op::Wait
        } else {
            Op::Try
        };
        let mut resources = [0; MULTI_MAX];
        let mut count = 1;
        resources[0] = zipf.sample(rng);
        if op == Op::Multi {
            let want = rng.random_range(2..=MULTI_MAX);
            // Distinct resources, drawn again on a repeat (a few times at
            // most: the hottest draws are the likeliest repeats).
            for _ in 0..want * 8 {
                if count == want {
                    break;
                }
                let r = zipf.sample(rng);
                if !resources[..count].contains(&r) {
                    resources[count] = r;
                    count += 1;
                }
            }
            resources[..count].sort_unstable();
        }
        Plan {
            op,
            resources,
            count,
            extend: rng.random_bool(EXTENDED),
        }
    }
}

/// What a call came to.
pub(crate) enum Outcome {
    /// Acquired (after `acquire`), extended if planned, released.
    Done {
        acquire: Duration,
        extend: Option<Duration>,
        release: Duration,
    },
    /// A `try_lock` refused (contended), or a wait that ran out.
    Refused,
    /// Any other error (the kind, the first one's text kept).
    Failed(Error),
}

/// Latencies recorded by one thread, merged at the end of the cell.
pub(crate) struct Hists {
    pub(crate) acquire: [Histogram<u64>; 3],
    pub(crate) extend: Histogram<u64>,
    pub(crate) release: Histogram<u64>,
}

pub(crate) fn histogram() -> Histogram<u64> {
    // 1 µs to 60 s, 2 significant digits: small enough for one per thread.
    Histogram::new_with_bounds(1_000, 60_000_000_000, 2).unwrap_or_else(|e| panic!("{e}"))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1_000)
}

impl Hists {
    pub(crate) fn new() -> Hists {
        Hists {
            acquire: [histogram(), histogram(), histogram()],
            extend: histogram(),
            release: histogram(),
        }
    }

    pub(crate) fn add(&mut self, other: &Hists) {
        for (a, b) in self.acquire.iter_mut().zip(&other.acquire) {
            let _ = a.add(b);
        }
        let _ = self.extend.add(&other.extend);
        let _ = self.release.add(&other.release);
    }
}

type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// This thread's histograms for the cell of the given number.
    static LOCAL: RefCell<Option<(u64, Shared<Hists>)>> = const { RefCell::new(None) };
}

/// Everything the callers of one cell share.
pub(crate) struct Ctx {
    pub(crate) client: Redlock,
    pub(crate) names: Vec<String>,
    pub(crate) zipf: Zipf,
    pub(crate) phase: AtomicU8,
    /// The cell's number, so that a thread's histograms of an earlier cell
    /// are never written to.
    pub(crate) id: u64,
    /// Cycles done, every phase (the sampler's per-second rate).
    pub(crate) cycles: AtomicU64,
    /// Cycles done per caller, while measuring.
    pub(crate) per_caller: Vec<AtomicU64>,
    pub(crate) refused: [AtomicU64; 3],
    pub(crate) failed: AtomicU64,
    pub(crate) first_error: Mutex<Option<String>>,
    pub(crate) registry: Mutex<Vec<Shared<Hists>>>,
}

impl Ctx {
    pub(crate) fn new(
        client: Redlock,
        names: Vec<String>,
        zipf: Zipf,
        callers: usize,
        id: u64,
    ) -> Ctx {
        Ctx {
            client,
            names,
            zipf,
            phase: AtomicU8::new(WARM),
            id,
            cycles: AtomicU64::new(0),
            per_caller: (0..callers).map(|_| AtomicU64::new(0)).collect(),
            refused: Default::default(),
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
            registry: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn phase(&self) -> u8 {
        self.phase.load(Ordering::Relaxed)
    }

    /// Adds what a call came to: only while measuring, but for the count
    /// of cycles.
    pub(crate) fn record(&self, caller: usize, op: Op, measuring: bool, outcome: Outcome) {
        let kind = op as usize;
        if let Outcome::Done { .. } = outcome {
            self.cycles.fetch_add(1, Ordering::Relaxed);
        }
        if !measuring {
            // This thread's histograms exist before the window opens, so
            // that the heap measured in it holds no bench's growth.
            self.with_hists(|_| {});
            return;
        }
        match outcome {
            Outcome::Done {
                acquire,
                extend,
                release,
            } => {
                self.per_caller[caller].fetch_add(1, Ordering::Relaxed);
                self.with_hists(|h| {
                    h.acquire[kind].saturating_record(nanos(acquire));
                    if let Some(e) = extend {
                        h.extend.saturating_record(nanos(e));
                    }
                    h.release.saturating_record(nanos(release));
                });
            }
            Outcome::Refused => {
                self.refused[kind].fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Failed(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = lock(&self.first_error);
                if first.is_none() {
                    *first = Some(format!("{op:?}: {e}"));
                }
            }
        }
    }

    fn with_hists(&self, f: impl FnOnce(&mut Hists)) {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            let fresh = !matches!(&*local, Some((id, _)) if *id == self.id);
            if fresh {
                let h = Arc::new(Mutex::new(Hists::new()));
                lock(&self.registry).push(Arc::clone(&h));
                *local = Some((self.id, h));
            }
            if let Some((_, h)) = &*local {
                f(&mut lock(h));
            }
        });
    }

    /// Every thread's histograms, merged.
    pub(crate) fn hists(&self) -> Hists {
        let mut all = Hists::new();
        for h in lock(&self.registry).iter() {
            all.add(&lock(h));
        }
        all
    }
}

/// How long to wait before the next call after `outcome`: a random time up
/// to `BACKOFF` after a failure, none otherwise.
pub(crate) fn backoff(outcome: &Outcome, rng: &mut SmallRng) -> Option<Duration> {
    match outcome {
        Outcome::Failed(_) => Some(Duration::from_micros(
            rng.random_range(0..=BACKOFF.as_micros() as u64),
        )),
        _ => None,
    }
}

/// Whether `e` says the lock is held by someone else (a refusal, not a
/// failure).
fn refused(e: &Error) -> bool {
    matches!(e, Error::Contended(_) | Error::DeadlinePassed)
}

fn outcome_of(e: Error) -> Outcome {
    if refused(&e) {
        Outcome::Refused
    } else {
        Outcome::Failed(e)
    }
}

/// Extends (if planned) and releases `lock`, blocking.
fn finish(ctx: &Ctx, lock: &mut Lock, extend: bool, acquire: Duration) -> Outcome {
    let mut extended = None;
    if extend {
        let t = Instant::now();
        if let Err(e) = ctx.client.extend(lock, TTL) {
            let _ = ctx.client.unlock(lock);
            return Outcome::Failed(e);
        }
        extended = Some(t.elapsed());
    }
    let t = Instant::now();
    match ctx.client.unlock(lock) {
        Ok(()) => Outcome::Done {
            acquire,
            extend: extended,
            release: t.elapsed(),
        },
        Err(e) => Outcome::Failed(e),
    }
}

/// One call of a thread, blocking.
pub(crate) fn blocking_call(ctx: &Ctx, plan: &Plan) -> Outcome {
    let name = ctx.names[plan.resources[0]].as_str();
    let t0 = Instant::now();
    let acquired = match plan.op {
        Op::Try => ctx.client.try_lock(name, TTL),
        Op::Wait => ctx.client.lock_until(name, TTL, t0 + WAIT),
        Op::Multi => {
            let mut names = [""; MULTI_MAX];
            for (n, &r) in names.iter_mut().zip(&plan.resources[..plan.count]) {
                *n = ctx.names[r].as_str();
            }
            ctx.client.try_lock_all(&names[..plan.count], TTL)
        }
    };
    match acquired {
        Ok(mut lock) => finish(ctx, &mut lock, plan.extend, t0.elapsed()),
        Err(e) => outcome_of(e),
    }
}

/// One call of an async task. The async API has no call for several
/// resources at once: a task takes them one by one in ascending order with
/// `try_lock_async`, all or nothing, as a service would.
pub(crate) async fn async_call(ctx: &Ctx, plan: &Plan) -> Outcome {
    let t0 = Instant::now();
    let mut locks: [Option<Lock>; MULTI_MAX] = Default::default();
    let mut failed = None;
    for (slot, &r) in locks.iter_mut().zip(&plan.resources[..plan.count]) {
        let name = ctx.names[r].as_str();
        let acquired = match plan.op {
            Op::Wait => ctx.client.lock_until_async(name, TTL, t0 + WAIT).await,
            Op::Try | Op::Multi => ctx.client.try_lock_async(name, TTL).await,
        };
        match acquired {
            Ok(lock) => *slot = Some(lock),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let acquire = t0.elapsed();
    if let Some(e) = failed {
        for lock in locks.iter_mut().flatten() {
            let _ = ctx.client.unlock_async(lock).await;
        }
        return outcome_of(e);
    }
    let mut extended = None;
    if plan.extend {
        let t = Instant::now();
        for lock in locks.iter_mut().flatten() {
            if let Err(e) = ctx.client.extend_async(lock, TTL).await {
                for lock in locks.iter_mut().flatten() {
                    let _ = ctx.client.unlock_async(lock).await;
                }
                return Outcome::Failed(e);
            }
        }
        extended = Some(t.elapsed());
    }
    let t = Instant::now();
    let mut error = None;
    for lock in locks.iter_mut().flatten() {
        if let Err(e) = ctx.client.unlock_async(lock).await {
            error.get_or_insert(e);
        }
    }
    match error {
        None => Outcome::Done {
            acquire,
            extend: extended,
            release: t.elapsed(),
        },
        Some(e) => Outcome::Failed(e),
    }
}

/// Jain's fairness index of `counts`: 1 when all are equal, `1/n` when one
/// caller did everything.
pub(crate) fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (counts.len() as f64 * squares)
}
