//! The release of a lock: [`Release`], its command, and what its round's
//! end (or its caller leaving) does to the lock.

use std::io;
use std::time::Instant;

use crate::commands::{Command, Keys, TOKEN_LEN};
use crate::error::Error;
use crate::rules::{Decision, Report, Round};

use super::errors::release_result;
use super::{Holding, Validity};

/// One release of a lock, on every master its acquire went out to.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Release<'k> {
    keys: Keys<&'k [u8]>,
    token: &'k [u8; TOKEN_LEN],
    reach: u64,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<'k> Release<'k> {
    /// The release of `lock` (a release takes no argument to check).
    pub fn new(lock: Holding<'k>) -> Release<'k> {
        Release {
            keys: lock.keys,
            token: lock.token,
            reach: lock.reach,
        }
    }

    /// The command to submit.
    pub fn command(&self) -> Command<'k> {
        Command::release(self.keys, self.token).reaching(self.reach)
    }

    /// After a release's round ended as `round` with `decision`
    /// ([`decision`](super::decision)): whether a quorum released it
    /// (`report` gives the round's report, asked for errors only), and the
    /// lock's validity after it: expired since the round's start, whatever
    /// the outcome.
    pub fn handle(
        round: &Round,
        decision: Result<Decision, io::ErrorKind>,
        report: impl FnOnce() -> Box<Report>,
    ) -> (Result<(), Error>, Validity) {
        (
            release_result(decision, report),
            Validity::after_release(round.started()),
        )
    }

    /// The lock's validity once its release has begun at `at`, before its
    /// outcome is known (its caller is gone, or reads it later): expired,
    /// as whatever the outcome leaves it.
    pub fn begun(at: Instant) -> Validity {
        Validity::after_release(at)
    }
}

#[cfg(test)]
mod tests {
    use super::Release;
    use crate::calls::tests::{Does, ended};
    use crate::calls::{Holding, Validity, decision};
    use crate::commands::{Command, Keys};
    use crate::error::Error;
    use crate::rules::Op;

    const TOKEN: [u8; 20] = [5; 20];

    fn call() -> Release<'static> {
        Release::new(Holding {
            keys: Keys::One(b"r"),
            token: &TOKEN,
            valid_until: crate::clock::now(),
            extensions: 0,
            reach: 0b101,
        })
    }

    #[test]
    fn its_command_reaches_where_the_acquire_went() {
        let release = Command::release(Keys::One(&b"r"[..]), &TOKEN).reaching(0b101);
        assert_eq!(call().command(), release);
    }

    /// Expired whatever the outcome; not held without a quorum,
    /// unavailable when the masters that failed kept it away, and only the
    /// quorum counts (a release too slow for its validity still deleted
    /// what it reached).
    #[test]
    fn a_release_expires_the_lock_whatever_its_outcome() {
        use Does::*;
        let cases = [
            ([Grants, Grants, Silent], "ok"),
            ([Grants, Late, Silent], "ok"),
            ([Refuses, Refuses, Grants], "not held"),
            ([Fails, Fails, Grants], "unavailable"),
        ];
        for (nodes, expected) in cases {
            let round = ended(Op::Release, &nodes);
            let (result, validity) = Release::handle(&round, decision(&round, Ok(())), || {
                Box::new(round.report())
            });
            let kind = match result {
                Ok(()) => "ok",
                Err(Error::NotHeld(_)) => "not held",
                Err(Error::Unavailable(_)) => "unavailable",
                Err(other) => panic!("{other:?}"),
            };
            assert_eq!(kind, expected, "{nodes:?}");
            assert_eq!(validity, Validity::Capped(round.started()));
        }
        let at = crate::clock::now();
        assert_eq!(Release::begun(at), Validity::Capped(at));
    }
}
