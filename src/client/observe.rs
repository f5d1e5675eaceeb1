//! Optional observability: a `tracing` span per round (feature `tracing`)
//! and round metrics through the `metrics` facade (feature `metrics`).
//! With both features off everything here compiles to nothing.

use std::time::Duration;

use crate::error::Error;
use crate::rules::{NodeState, Op};

/// The span of one round, entered while the round runs so that the
/// driver's events (reconnects, dropped connections) nest in it.
pub(super) struct RoundSpan {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
}

impl RoundSpan {
    /// Opens the span of a round of `op` on a resource of `resource_len`
    /// bytes (its length only: resource names stay out of logs).
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(super) fn new(op: Op, resource_len: usize) -> RoundSpan {
        #[cfg(feature = "metrics")]
        metrics::gauge!("redlock_rounds_in_flight").increment(1.0);
        RoundSpan {
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!(
                "redlock.round",
                op = op.name(),
                resource_len,
                outcome = tracing::field::Empty,
                elapsed_us = tracing::field::Empty,
                masters = tracing::field::Empty,
            ),
        }
    }

    /// Runs `f` inside the span.
    pub(super) fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        #[cfg(feature = "tracing")]
        let _entered = self.span.enter();
        f()
    }
}

/// What a round's outcome is called in spans and metric labels.
#[cfg(any(feature = "tracing", feature = "metrics"))]
fn outcome(op: Op, result: Result<(), &Error>) -> &'static str {
    match (op, result) {
        (Op::Acquire, Ok(())) => "acquired",
        (Op::Extend, Ok(())) => "extended",
        (Op::Release, Ok(())) => "released",
        (_, Ok(())) => "ok",
        (_, Err(Error::Contended(_))) => "contended",
        (_, Err(Error::Unavailable(_))) => "unavailable",
        (_, Err(Error::TooSlow(_))) => "too_slow",
        (_, Err(Error::Misconfigured(_))) => "misconfigured",
        (_, Err(Error::Unfenced(_))) => "unfenced",
        (_, Err(Error::NotHeld(_))) => "not_held",
        (_, Err(_)) => "error",
    }
}

/// A round ended: records its outcome, time and per-master results in its
/// span and in the metrics.
#[allow(unused_variables, reason = "each feature uses some of the arguments")]
pub(super) fn round_ended(
    span: &RoundSpan,
    op: Op,
    result: Result<(), &Error>,
    elapsed: Duration,
    nodes: &[NodeState],
    masters: &[String],
) {
    #[cfg(feature = "tracing")]
    {
        let outcome = outcome(op, result);
        span.span.record("outcome", outcome);
        span.span.record(
            "elapsed_us",
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        );
        if !span.span.is_disabled() {
            let states: Vec<&str> = nodes.iter().map(state_name).collect();
            span.span.record("masters", states.join(",").as_str());
        }
    }
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!("redlock_rounds_in_flight").decrement(1.0);
        let outcome = outcome(op, result);
        let name = match op {
            Op::Acquire => "redlock_acquire_seconds",
            Op::Extend => "redlock_extend_seconds",
            // A waiter leaving its queues is sent without a round.
            Op::Release | Op::Leave => "redlock_release_seconds",
            Op::Raise | Op::FenceRead | Op::FenceSync => "redlock_fence_seconds",
        };
        metrics::histogram!(name, "outcome" => outcome).record(elapsed.as_secs_f64());
        if op == Op::Acquire {
            metrics::counter!("redlock_attempts_total", "outcome" => outcome).increment(1);
        }
        for (state, master) in nodes.iter().zip(masters) {
            match state {
                NodeState::Failed(_) => {
                    metrics::counter!("redlock_master_errors_total", "master" => master.clone())
                        .increment(1);
                }
                NodeState::TimedOut => {
                    metrics::counter!("redlock_master_timeouts_total", "master" => master.clone())
                        .increment(1);
                }
                _ => {}
            }
        }
    }
}

#[cfg(feature = "tracing")]
fn state_name(state: &NodeState) -> &'static str {
    match state {
        NodeState::Pending => "pending",
        NodeState::Ok => "ok",
        NodeState::Refused => "refused",
        NodeState::Failed(_) => "failed",
        NodeState::TimedOut => "timed_out",
        NodeState::Quarantined => "quarantined",
        NodeState::Unsynced => "unsynced",
    }
}
