//! The crashed holder: a client takes the lock for a short TTL and never
//! releases it (it forgets the `Lock`, as a process that died would); then
//! [`WAITERS`] clients try to take it. How long after the holder's key
//! expires does the first waiter get it, and how many attempts were made
//! meanwhile?

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use super::drive::{PATIENCE, Shared, now_ns};
use super::variants::{Counter, Probe, TTL, Variant, Worker, attempts};

/// The waiters of the crashed holder's lock, each with a client of its own.
pub(crate) const WAITERS: usize = 8;

/// One trial.
pub(crate) struct Trial {
    /// From the holder's key expiry (its acquire call's start plus its
    /// TTL: no master can have let it go sooner) to the first waiter's
    /// acquire returned, ns; negative only if a master's millisecond
    /// clock let the key go a little early.
    pub(crate) delay: i64,
    /// Attempts the waiters had made when the first one got the lock (the
    /// winning one included; rounds still in flight then are not).
    pub(crate) attempts: u64,
    /// The first error a waiter met, if any.
    pub(crate) error: Option<String>,
    pub(crate) violated: bool,
}

/// Runs one trial of `variant` with a holder TTL of `ttl`.
pub(crate) fn trial(variant: Variant, urls: &[String], probe: &Arc<Probe>, ttl: Duration) -> Trial {
    let mut holder = variant.worker(urls, probe, WAITERS);
    let mut waiters: Vec<Box<dyn Worker>> = (0..WAITERS)
        .map(|n| variant.worker(urls, probe, n))
        .collect();
    for worker in waiters.iter_mut().chain(std::iter::once(&mut holder)) {
        worker.warm().expect("warm-up acquire + release");
    }
    let counters: Vec<Counter> = waiters.iter().map(|w| w.counter()).collect();
    let shared = Shared::new(Duration::ZERO);
    let claimed = AtomicBool::new(false);
    let first: OnceLock<(u64, u64)> = OnceLock::new();
    let barrier = Barrier::new(WAITERS + 1);

    let t0 = now_ns();
    if let Err(failure) = holder.acquire(ttl, Instant::now() + PATIENCE) {
        panic!(
            "{}: the holder could not take the lock: {}",
            variant.name(),
            failure.message
        );
    }
    holder.forget();
    let expiry = t0 + u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
    let before = attempts(&counters);
    let errors: Vec<Option<String>> = thread::scope(|s| {
        let handles: Vec<_> = waiters
            .iter_mut()
            .enumerate()
            .map(|(id, waiter)| {
                let (shared, barrier, counters) = (&shared, &barrier, &counters);
                let (claimed, first) = (&claimed, &first);
                s.spawn(move || {
                    barrier.wait();
                    waiter
                        .acquire(TTL, Instant::now() + ttl + PATIENCE)
                        .map_err(|f| f.message)?;
                    let acquired = now_ns();
                    if !claimed.swap(true, Ordering::SeqCst) {
                        let _ = first.set((acquired, attempts(counters).saturating_sub(before)));
                    }
                    shared.hold(id);
                    waiter.release()
                })
            })
            .collect();
        barrier.wait();
        handles
            .into_iter()
            .map(|h| h.join().expect("a waiter thread").err())
            .collect()
    });
    let (acquired, attempts) = first.get().copied().unwrap_or((u64::MAX, 0));
    Trial {
        delay: i64::try_from(i128::from(acquired) - i128::from(expiry)).unwrap_or(i64::MAX),
        attempts,
        error: errors.into_iter().flatten().next(),
        violated: shared.violated(),
    }
}
