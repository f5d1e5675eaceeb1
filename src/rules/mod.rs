//! The Redlock rules, free of I/O.
//!
//! Everything here is arithmetic on [`Duration`]s and [`Instant`](std::time::Instant)s that the
//! caller passes in, so every branch can be tested with a fake clock:
//!
//! - [`quorum`], [`drift`], [`validity`] and [`retry_delay`] are the pure
//!   formulas of the algorithm;
//! - [`Round`] is one round (acquire, extend or release) over N nodes. It is
//!   told what each node answered ([`Round::handle_reply`]), that a node
//!   failed ([`Round::handle_failure`]) and what time it is
//!   ([`Round::handle_timeout`]), and says when the round is decided
//!   ([`Round::decision`]);
//! - [`free_in`] tells a caller that waits for a contended lock when the
//!   keys that refused it expire.
//!
//! The driver sends the commands and feeds the replies in; it never decides
//! quorum itself.
//!
//! Users meet only a round's [`Report`] and the states and errors in it
//! ([`NodeState`], [`NodeError`], [`ServerError`], [`Op`]), re-exported at
//! the crate root. [`Round`], [`Reply`], [`Decision`] and [`drift`] are
//! public only through the hidden `sim` module (feature `sim`), for the
//! simulator and the model; elsewhere they are the crate's own.

pub(crate) mod identity;
pub(crate) mod keep;
mod round;
pub(crate) mod wait;

use std::time::Duration;

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use round::{Decision, Reply, Round};
pub use round::{NodeError, NodeState, Op, Report, ServerError};
pub(crate) use wait::free_in;

/// The number of nodes that must agree: `n / 2 + 1`.
///
pub(crate) const fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// How long a key set with `ttl` may outlive its grant as seen from any
/// client: the TTL plus the drift allowed for it. A restart guard keeps a
/// fresh master out of quorums this long, and a fence counter's repair
/// waits this long, so that no lock granted before can still be held.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn outlived(ttl: Duration, drift_factor: f64) -> Duration {
    ttl.saturating_add(drift(ttl, drift_factor))
}

/// Redis's expiry precision plus a minimum drift, added to every drift.
pub(crate) const MIN_DRIFT: Duration = Duration::from_millis(2);

/// The clock drift allowed for a lock of `ttl`: `ttl * drift_factor + 2 ms`.
///
/// `drift_factor` is clamped to `0.0..=1.0` (NaN counts as 0), so this never
/// panics; [`crate::Builder`] refuses factors outside `0.0..1.0`.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    let factor = if drift_factor.is_nan() {
        0.0
    } else {
        drift_factor.clamp(0.0, 1.0)
    };
    Duration::try_from_secs_f64(ttl.as_secs_f64() * factor)
        .unwrap_or(Duration::MAX)
        .saturating_add(MIN_DRIFT)
}

/// What is left of a lock's validity: `ttl - elapsed - drift`, or `None`
/// when that is zero or less (the lock must be treated as not held).
///
/// Never underflows, whatever the arguments.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)
        .and_then(|left| left.checked_sub(drift))
        .filter(|left| !left.is_zero())
}

/// The wait before retrying a failed attempt: `base` plus or minus up to
/// `jitter`, chosen by `unit`, a random number in `[0, 1)` that the caller
/// draws (so that this stays deterministic under test). `unit` 0 gives
/// `base - jitter` (floored at zero), `unit` near 1 gives `base + jitter`.
pub(crate) fn retry_delay(base: Duration, jitter: Duration, unit: f64) -> Duration {
    let unit = if unit.is_nan() {
        0.5
    } else {
        unit.clamp(0.0, 1.0)
    };
    let low = base.saturating_sub(jitter);
    let high = base.saturating_add(jitter);
    let spread =
        Duration::try_from_secs_f64((high - low).as_secs_f64() * unit).unwrap_or(high - low);
    low.saturating_add(spread).min(high)
}

#[cfg(test)]
mod tests;
