//! From a cell's run to its figures: acquisitions/s, waits, hand-offs,
//! attempts per acquisition, fairness, errors.

use hdrhistogram::Histogram;

use super::cpu::Cpu;
use super::drive::{Acquisition, PATIENCE, Run};

/// What a cell measured.
pub(crate) struct Figures {
    pub(crate) rate: f64,
    /// Acquire call start to acquire returned, ns, every acquisition
    /// whose call started within the window.
    pub(crate) wait: Histogram<u64>,
    /// Previous holder's release returned to the next holder's acquire
    /// returned, ns, where someone was waiting for the lock: see
    /// [`handoffs`].
    pub(crate) handoff: Histogram<u64>,
    /// The share of those hand-offs that went to a caller who was waiting
    /// (the others went to a newcomer).
    pub(crate) to_waiter: f64,
    /// Attempts per acquisition over the whole cell, drain included.
    pub(crate) attempts_per: f64,
    /// Jain's index over the workers' acquisitions within the window.
    pub(crate) jain: f64,
    pub(crate) errors: String,
    /// An error of any kind (given up, failed release, stopped worker).
    pub(crate) erred: bool,
    /// Two holders overlapped, by the witness or by the timeline.
    pub(crate) violated: bool,
    /// The CPU the cell took, the drain included.
    pub(crate) cpu: Cpu,
    /// Acquisitions over the whole cell, drain included: what the CPU
    /// bought.
    pub(crate) acquired: usize,
}

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")
}

/// Jain's fairness index of `counts`: 1 when all are equal, 1/n when one
/// worker took everything.
pub(crate) fn jain(counts: &[u64]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (counts.len() as f64 * squares)
}

/// The figures of `run`.
pub(crate) fn figures(run: &Run) -> Figures {
    let (start, end) = run.window;
    let within = |at: u64| at >= start && at <= end;
    let mut all: Vec<Acquisition> = run
        .outcomes
        .iter()
        .flat_map(|o| o.acquisitions.iter().copied())
        .collect();
    all.sort_by_key(|a| a.acquired);
    let counts: Vec<u64> = run
        .outcomes
        .iter()
        .map(|o| o.acquisitions.iter().filter(|a| within(a.acquired)).count() as u64)
        .collect();
    let acquisitions: u64 = counts.iter().sum();
    let mut wait = histogram();
    for a in all.iter().filter(|a| within(a.called)) {
        wait.saturating_record((a.acquired - a.called).max(1));
    }
    let (handoff, to_waiter) = handoffs(&all, within);
    let overlap = overlaps(&all);
    let (errors, erred) = describe_errors(run);
    let secs = (end - start) as f64 / 1e9;
    Figures {
        rate: acquisitions as f64 / secs,
        wait,
        handoff,
        to_waiter,
        attempts_per: run.attempts as f64 / all.len().max(1) as f64,
        jain: jain(&counts),
        errors,
        erred,
        violated: run.violated || overlap,
        cpu: run.cpu,
        acquired: all.len(),
    }
}

/// The hand-offs of `all` (sorted by `acquired`) whose next holder
/// acquired `within` the window: the gap from each release returned to the
/// next acquire returned, where at least one caller was waiting when the
/// release began (an acquire called before it returned after it): the time
/// the lock sits free while it is wanted. Also the share of them whose
/// next holder was such a waiter, not a caller that came later.
fn handoffs(all: &[Acquisition], within: impl Fn(u64) -> bool) -> (Histogram<u64>, f64) {
    // The earliest call among the acquisitions from i on: every one of them
    // returned after the holdings before i ended.
    let mut earliest = vec![u64::MAX; all.len() + 1];
    for i in (0..all.len()).rev() {
        earliest[i] = earliest[i + 1].min(all[i].called);
    }
    let mut gaps = histogram();
    let mut to_waiter = 0u64;
    for (i, pair) in all.windows(2).enumerate() {
        let (prev, next) = (&pair[0], &pair[1]);
        if !within(next.acquired) || earliest[i + 1] >= prev.releasing {
            continue;
        }
        // An acquire may return before the previous holder's release call
        // does (the masters had the release): a zero gap.
        gaps.saturating_record(next.acquired.saturating_sub(prev.released).max(1));
        if next.called < prev.releasing {
            to_waiter += 1;
        }
    }
    let share = to_waiter as f64 / gaps.len().max(1) as f64;
    (gaps, share)
}

/// Whether two holdings of `all` (sorted by `acquired`) overlap: on one
/// timeline, every acquire returns after the previous holder began to
/// release.
fn overlaps(all: &[Acquisition]) -> bool {
    let mut overlap = false;
    for pair in all.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        if next.acquired <= prev.releasing {
            overlap = true;
            eprintln!(
                "EXCLUSION VIOLATED: worker {} acquired at {} ns, before worker {} released (from {} ns)",
                next.worker, next.acquired, prev.worker, prev.releasing
            );
        }
    }
    overlap
}

/// `noun`, with an `s` unless `n` is 1.
fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        noun.to_owned()
    } else {
        format!("{noun}s")
    }
}

/// The errors of a run in a few words ("–" for none), and whether there
/// was any.
fn describe_errors(run: &Run) -> (String, bool) {
    let gave_up: u64 = run.outcomes.iter().map(|o| o.gave_up).sum();
    let unlock: u64 = run.outcomes.iter().map(|o| o.unlock_errors).sum();
    let stopped = run.outcomes.iter().filter(|o| o.stopped.is_some()).count();
    let mut parts = Vec::new();
    if gave_up > 0 {
        parts.push(format!("{gave_up} gave up after {PATIENCE:?}"));
    }
    if unlock > 0 {
        parts.push(format!("{unlock} {} failed", plural(unlock, "release")));
    }
    if stopped > 0 {
        parts.push(format!(
            "{stopped} {} stopped",
            plural(stopped as u64, "worker")
        ));
    }
    if parts.is_empty() {
        return ("–".to_owned(), false);
    }
    if let Some(first) = run.outcomes.iter().find_map(|o| o.first_error.as_ref()) {
        // Its kind, without the per-master details.
        let kind = first.split(':').next().unwrap_or(first);
        parts.push(format!("first: {kind}"));
        eprintln!("first error of the cell: {first}");
    }
    (parts.join(", "), true)
}
