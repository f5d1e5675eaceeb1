//! The extend of a lock: [`Extend`], its checks, its command, and what its
//! round's end (or its caller leaving) does to the lock's validity.

use std::io;
use std::time::{Duration, Instant};

use crate::commands::{Command, Keys, TOKEN_LEN};
use crate::error::Error;
use crate::rules::{Decision, Report, Round};

use super::errors::extend_result;
use super::{Holding, Limits, Validity};

/// One extend of a lock to a new TTL.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Extend<'k> {
    keys: Keys<&'k [u8]>,
    token: &'k [u8; TOKEN_LEN],
    ttl_ms: u64,
    drift_factor: f64,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<'k> Extend<'k> {
    /// An extend of `lock` to `ttl` at `now`, checked against `limits`
    /// before anything is sent (the lock is then unchanged).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTtl`], [`Error::Expired`],
    /// [`Error::ExtensionLimit`].
    pub fn new(
        limits: &Limits,
        lock: Holding<'k>,
        ttl: Duration,
        now: Instant,
    ) -> Result<Extend<'k>, Error> {
        let ttl_ms = limits.extend(ttl, lock.valid_until, lock.extensions, now)?;
        Ok(Extend {
            keys: lock.keys,
            token: lock.token,
            ttl_ms,
            drift_factor: limits.drift_factor,
        })
    }

    /// The command to submit.
    pub fn command(&self) -> Command<'k> {
        Command::extend(self.keys, self.token, self.ttl_ms)
    }

    /// After an extend's round ended as `round` with `decision`
    /// ([`decision`](super::decision)): the call's result (`report` gives
    /// the round's report, asked for errors only), and the lock's validity
    /// after it. (What the end means depends on the round alone: a caller
    /// that kept the round's id and not the call reads it the same way.)
    pub fn handle(
        round: &Round,
        decision: Result<Decision, io::ErrorKind>,
        report: impl FnOnce() -> Box<Report>,
    ) -> (Result<(), Error>, Validity) {
        let result = extend_result(decision, report);
        let validity = Validity::after_extend(&result, round.started(), round.valid_until());
        (result, validity)
    }

    /// After an extend whose round was gone before its outcome was read
    /// (never, for a caller that holds its rounds): the outcome is
    /// unknown, and the lock expired from `now`, as the masters may have
    /// applied a shorter TTL.
    pub(crate) fn handle_lost(now: Instant) -> (Result<(), Error>, Validity) {
        (Err(super::unknown()), Validity::Capped(now))
    }

    /// The lock's validity once its caller is gone with the round, begun
    /// at `begun`, in flight: no more than it could have granted.
    pub(crate) fn dropped(&self, begun: Instant) -> Validity {
        Validity::after_dropped_extend(begun, self.ttl_ms, self.drift_factor)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, reason = "a test fails loudly")]

    use std::time::Duration;

    use super::Extend;
    use crate::calls::tests::{Does, TTL, ended};
    use crate::calls::{Holding, Limits, Validity, decision};
    use crate::commands::{Command, Keys};
    use crate::error::Error;
    use crate::rules::{self, Op, Round};

    const TOKEN: [u8; 20] = [3; 20];

    fn limits() -> Limits {
        Limits {
            request_timeout: Duration::from_millis(50),
            drift_factor: 0.01,
            longest_ttl: None,
            max_extensions: Some(5),
        }
    }

    fn call(extensions: u32) -> Result<Extend<'static>, Error> {
        let now = crate::clock::now();
        let lock = Holding {
            keys: Keys::One(b"r"),
            token: &TOKEN,
            valid_until: now + Duration::from_secs(1),
            extensions,
            reach: u64::MAX,
        };
        Extend::new(&limits(), lock, TTL, now)
    }

    fn handle(round: &Round) -> (Result<(), Error>, Validity) {
        Extend::handle(round, decision(round, Ok(())), || Box::new(round.report()))
    }

    #[test]
    fn its_command_extends_the_keys_by_the_token() {
        let extend = call(0).expect("checked");
        assert_eq!(
            extend.command(),
            Command::extend(Keys::One(&b"r"[..]), &TOKEN, 10_000)
        );
        assert!(matches!(call(5), Err(Error::ExtensionLimit { limit: 5 })));
    }

    /// Renewed on success; expired since the round's start when a quorum
    /// said the token is gone; capped at what the round granted otherwise.
    #[test]
    fn the_validity_after_each_outcome() {
        use Does::*;
        let won = ended(Op::Extend, &[Grants, Grants, Refuses]);
        let (result, validity) = handle(&won);
        assert!(result.is_ok());
        assert_eq!(validity, Validity::Renewed(won.valid_until()));
        let gone = ended(Op::Extend, &[Refuses, Refuses, Grants]);
        let (result, validity) = handle(&gone);
        assert!(matches!(result, Err(Error::NotHeld(_))), "{result:?}");
        assert_eq!(validity, Validity::Capped(gone.started()));
        let down = ended(Op::Extend, &[Fails, Fails, Grants]);
        let (result, validity) = handle(&down);
        assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
        assert_eq!(validity, Validity::Capped(down.valid_until()));
        let slow = ended(Op::Extend, &[Grants, Late, Late]);
        let (result, validity) = handle(&slow);
        assert!(matches!(result, Err(Error::TooSlow(_))), "{result:?}");
        assert_eq!(validity, Validity::Capped(slow.valid_until()));
    }

    /// A dropped extend caps the lock at what it could have granted.
    #[test]
    fn a_dropped_extend_caps_the_lock() {
        let begun = crate::clock::now();
        let validity = call(0).expect("checked").dropped(begun);
        let most = TTL - rules::drift(TTL, 0.01);
        assert_eq!(validity, Validity::Capped(begun + most));
    }

    /// An extend whose outcome cannot be read fails, and the lock is
    /// expired from then: the masters may have applied a shorter TTL.
    #[test]
    fn an_extend_whose_round_is_gone_expires_the_lock() {
        let now = crate::clock::now();
        let (result, validity) = Extend::handle_lost(now);
        assert!(matches!(result, Err(Error::Io(_))), "{result:?}");
        assert_eq!(validity, Validity::Capped(now));
    }
}
