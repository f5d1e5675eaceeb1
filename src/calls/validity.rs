//! A lock's validity after each outcome of a call on it: one rule for
//! the front ends' [`Lock`](crate::Lock) and the simulator's lock.

use std::time::{Duration, Instant};

use crate::error::Error;
use crate::rules;

/// A lock's validity after an extend, a release or a call dropped with its
/// round in flight, as the table in [`Lock`](crate::Lock)'s docs gives
/// it. The machines of the calls say which; the front ends apply it to
/// their `Lock`, the simulator's client to its `Held`: one rule for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub enum Validity {
    /// An extension reached a quorum: valid until then, extended once more.
    Renewed(Instant),
    /// Valid no later than this.
    Capped(Instant),
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl Validity {
    /// After an extend round that started at `started`, would grant
    /// validity until `granted` and came to `result`: renewed on success;
    /// gone since the round's start when a quorum said the token no longer
    /// owns the resource; else no more than it granted (masters that
    /// applied it expire the key at its TTL).
    pub fn after_extend(
        result: &Result<(), Error>,
        started: Instant,
        granted: Instant,
    ) -> Validity {
        match result {
            Ok(()) => Validity::Renewed(granted),
            Err(Error::NotHeld(_)) => Validity::Capped(started),
            Err(_) => Validity::Capped(granted),
        }
    }

    /// After an extend to `ttl_ms`, begun at `begun` by a client that
    /// allows `drift_factor`, whose caller is gone with its round in
    /// flight: no more than it could have granted.
    pub fn after_dropped_extend(begun: Instant, ttl_ms: u64, drift_factor: f64) -> Validity {
        let whole = Duration::from_millis(ttl_ms);
        let most = whole.saturating_sub(rules::drift(whole, drift_factor));
        Validity::Capped(begun.checked_add(most).unwrap_or(begun))
    }

    /// After a release begun at `at` (its round, or a call dropped with
    /// its round in flight): gone since then, whatever the outcome.
    pub(crate) fn after_release(at: Instant) -> Validity {
        Validity::Capped(at)
    }

    /// Applies it to a lock valid until `valid_until` and extended
    /// `extensions` times.
    pub fn apply(self, valid_until: &mut Instant, extensions: &mut u32) {
        match self {
            Validity::Renewed(until) => {
                *valid_until = until;
                *extensions = extensions.saturating_add(1);
            }
            Validity::Capped(until) => *valid_until = (*valid_until).min(until),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Validity;
    use crate::error::Error;
    use crate::rules::{self, Op, Round};

    /// The table of `Lock`'s docs: a successful extend renews, a quorum
    /// that said the token is gone expires the lock at the round's start,
    /// any other failure caps it at what the round granted; a dropped
    /// extend caps it at what it could have granted; a release expires it.
    #[test]
    fn a_locks_validity_after_each_outcome() {
        let t0 = crate::clock::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let report = || {
            Box::new(
                Round::new(
                    Op::Extend,
                    3,
                    Duration::ZERO,
                    Duration::ZERO,
                    Duration::ZERO,
                    t0,
                )
                .report(),
            )
        };
        let after = |validity: Validity| {
            let (mut until, mut extensions) = (at(500), 2);
            validity.apply(&mut until, &mut extensions);
            (until, extensions)
        };
        let extend = |result: Result<(), Error>, granted| {
            after(Validity::after_extend(&result, at(100), at(granted)))
        };
        assert_eq!(extend(Ok(()), 900), (at(900), 3));
        assert_eq!(
            extend(Ok(()), 300),
            (at(300), 3),
            "a shorter TTL shortens it"
        );
        assert_eq!(extend(Err(Error::NotHeld(report())), 900), (at(100), 2));
        assert_eq!(extend(Err(Error::Unavailable(report())), 900), (at(500), 2));
        assert_eq!(extend(Err(Error::TooSlow(report())), 300), (at(300), 2));
        // What the extend could have granted: its TTL less the drift.
        let dropped = Validity::after_dropped_extend(at(0), 1_000, 0.01);
        assert_eq!(
            dropped,
            Validity::Capped(at(1_000) - rules::drift(Duration::from_secs(1), 0.01))
        );
        assert_eq!(
            after(Validity::after_dropped_extend(at(0), 200, 0.01)).0,
            at(200) - rules::drift(Duration::from_millis(200), 0.01)
        );
        assert_eq!(after(Validity::after_release(at(50))), (at(50), 2));
        assert_eq!(after(Validity::after_release(at(700))), (at(500), 2));
    }
}
