//! The plain acquire of one resource or of several at once (all or
//! nothing): [`Acquire`], its command, and [`Claim`], what its round's end
//! means: the lock, or the error and the release that must follow it.

use std::io;

use crate::client::Lock;
use crate::commands::{Command, Keys, TOKEN_LEN};
use crate::error::Error;
use crate::rules::{Decision, Report, Round};

use super::errors::{acquire_result, unknown};

/// One plain acquire attempt of `keys` by a new token, its arguments
/// checked before (`Limits::acquire` or
/// `acquire_all`: a call that waits checks
/// them once for all its attempts).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Acquire<'k> {
    keys: Keys<&'k [u8]>,
    token: [u8; TOKEN_LEN],
    ttl_ms: u64,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<'k> Acquire<'k> {
    /// An attempt to acquire `keys` by `token` for `ttl_ms`.
    pub fn new(keys: Keys<&'k [u8]>, token: [u8; TOKEN_LEN], ttl_ms: u64) -> Acquire<'k> {
        Acquire {
            keys,
            token,
            ttl_ms,
        }
    }

    /// The command to submit.
    pub fn command(&self) -> Command<'_> {
        Command::acquire(self.keys, &self.token, self.ttl_ms)
    }

    /// What its round's end means ([`Claim::handle`]).
    pub(crate) fn claim(&self) -> Claim<'_> {
        Claim::new(self.keys, &self.token)
    }
}

/// What an acquire of `keys` by a token claims, once its command went out
/// (a plain acquire's, or a waiting caller's): what the end of its round
/// means, and the release that must follow it if it failed or its caller
/// is gone.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Claim<'k> {
    keys: Keys<&'k [u8]>,
    token: &'k [u8; TOKEN_LEN],
}

/// How an acquire ended for its caller.
#[derive(Debug)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub enum Acquired<'k> {
    /// A quorum granted it in time: the lock, valid until the round's
    /// `t0 + ttl - drift`.
    Won(Lock),
    /// Not won: the error, and the release to queue on every master the
    /// command went out to (also those that seemed to fail: a reply may
    /// have been lost after the server set the key), without waiting.
    Lost {
        /// What the call returns.
        error: Error,
        /// The release to queue.
        release: Command<'k>,
    },
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<'k> Claim<'k> {
    /// The claim of an acquire of `keys` by `token`.
    pub fn new(keys: Keys<&'k [u8]>, token: &'k [u8; TOKEN_LEN]) -> Claim<'k> {
        Claim { keys, token }
    }

    /// After its round ended as `round` with `decision`
    /// ([`decision`](super::decision)): the lock, or the error (`report`
    /// gives the round's report, asked for errors only) and the release
    /// that follows it.
    pub fn handle(
        &self,
        round: &Round,
        decision: Result<Decision, io::ErrorKind>,
        report: impl FnOnce() -> Box<Report>,
    ) -> Acquired<'k> {
        match acquire_result(decision, report) {
            Ok(()) => Acquired::Won(Lock::new(
                self.keys,
                *self.token,
                round.valid_until(),
                None,
                round.reached(),
            )),
            Err(error) => Acquired::Lost {
                error,
                release: self.release(Some(round)),
            },
        }
    }

    /// After a round gone from the table before its caller read it: its
    /// outcome is unknown, and the release goes to every master.
    pub(crate) fn handle_lost(&self) -> Acquired<'k> {
        Acquired::Lost {
            error: unknown(),
            release: self.release(None),
        }
    }

    /// The release that must follow the acquire if it failed, or if its
    /// caller is gone with its round (`round`, while it is known) in
    /// flight: sent as `EVAL` (it cannot meet an empty script cache, so
    /// nothing needs to wait for its replies) to every master where the
    /// acquire may have set its key (not those that refused it), every
    /// master when the round is unknown.
    pub fn release(&self, round: Option<&Round>) -> Command<'k> {
        let release = Command::release(self.keys, self.token).with_script();
        let masters = round.map_or(u64::MAX, Round::may_have_set);
        release.reaching(masters).only_to(masters)
    }
}

/// The release that must follow `command`, if it is an acquire whose
/// caller is gone with its round (`round`, while it is known) in flight,
/// as [`Claim::release`] says.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn release_behind<'c>(command: &Command<'c>, round: Option<&Round>) -> Option<Command<'c>> {
    let undo = command.undo()?;
    let masters = round.map_or(u64::MAX, Round::may_have_set);
    Some(undo.reaching(masters).only_to(masters))
}

#[cfg(test)]
mod tests {
    use super::{Acquire, Acquired, Claim, release_behind};
    use crate::calls::decision;
    use crate::calls::tests::{Does, ended};
    use crate::commands::{Command, Keys};
    use crate::error::Error;
    use crate::rules::{Op, Round};

    const TOKEN: [u8; 20] = [7; 20];

    fn handle(round: &Round, polled: Result<(), std::io::ErrorKind>) -> Acquired<'static> {
        let claim = Claim::new(Keys::One(b"r"), &TOKEN);
        claim.handle(round, decision(round, polled), || Box::new(round.report()))
    }

    /// A quorum in time wins a lock valid until the round's `t0 + ttl -
    /// drift`, reaching the masters the command went out to.
    #[test]
    fn a_quorum_wins_the_lock_with_the_rounds_validity() {
        use Does::*;
        let round = ended(Op::Acquire, &[Grants, Grants, Fails]);
        let Acquired::Won(lock) = handle(&round, Ok(())) else {
            panic!("not won");
        };
        assert_eq!(lock.valid_until_here(), round.valid_until());
        assert_eq!(lock.reach(), round.reached());
        assert_eq!(lock.token(), &TOKEN);
        assert_eq!(lock.keys(), Keys::One(&b"r"[..]));
    }

    /// Each way to lose, with its error; every loss queues the release, as
    /// `EVAL`, to the masters the command reached and that did not refuse
    /// it.
    #[test]
    fn each_loss_names_its_error_and_releases_where_the_acquire_went() {
        use Does::*;
        let expected_release = |round: &Round| {
            Command::release(Keys::One(&b"r"[..]), &TOKEN)
                .with_script()
                .reaching(round.may_have_set())
                .only_to(round.may_have_set())
        };
        let contended = ended(Op::Acquire, &[Refuses, Refuses, Grants]);
        let unavailable = ended(Op::Acquire, &[Fails, Fails, Grants]);
        let undecided = ended(Op::Acquire, &[Grants, Silent, Silent]);
        let too_slow = ended(Op::Acquire, &[Grants, Late, Late]);
        let cases: [(&Round, Result<(), std::io::ErrorKind>, &str); 5] = [
            (&contended, Ok(()), "contended"),
            (&unavailable, Ok(()), "unavailable"),
            (&undecided, Ok(()), "contended"),
            (&too_slow, Ok(()), "too slow"),
            (&contended, Err(std::io::ErrorKind::BrokenPipe), "io"),
        ];
        for (round, polled, expected) in cases {
            let Acquired::Lost { error, release } = handle(round, polled) else {
                panic!("{expected}: won");
            };
            let kind = match error {
                Error::Contended(_) => "contended",
                Error::Unavailable(_) => "unavailable",
                Error::TooSlow(_) => "too slow",
                Error::Io(std::io::ErrorKind::BrokenPipe) => "io",
                other => panic!("{other:?}"),
            };
            assert_eq!(kind, expected);
            assert_eq!(release, expected_release(round), "{expected}");
        }
    }

    /// A lost acquire's release skips the masters that refused it, which
    /// set nothing, and goes to every other it reached.
    #[test]
    fn a_lost_acquires_release_skips_the_masters_that_refused_it() {
        use Does::*;
        let round = ended(Op::Acquire, &[Refuses, Grants, Refuses, Fails, Silent]);
        let Acquired::Lost { release, .. } = handle(&round, Ok(())) else {
            panic!("won");
        };
        let goes: Vec<bool> = (0..5).map(|i| release.goes_to(i)).collect();
        assert_eq!(goes, [false, true, false, true, true]);
        let reaches: Vec<bool> = (0..5).map(|i| release.must_reach(i)).collect();
        assert_eq!(reaches, goes);
    }

    /// A round whose end is unknown releases on every master.
    #[test]
    fn a_lost_round_releases_everywhere() {
        let claim = Claim::new(Keys::One(b"r"), &TOKEN);
        let Acquired::Lost { error, release } = claim.handle_lost() else {
            panic!("won");
        };
        assert!(matches!(error, Error::Io(std::io::ErrorKind::Other)));
        let everywhere = Command::release(Keys::One(&b"r"[..]), &TOKEN)
            .with_script()
            .reaching(u64::MAX);
        assert_eq!(release, everywhere);
    }

    /// A dropped acquire's release follows it to where it went, or
    /// everywhere once its round is gone; nothing follows another command.
    #[test]
    fn a_dropped_acquire_leaves_its_release_behind() {
        use Does::*;
        let keys = Keys::Packed(&b"\0\x01a\0\x01b"[..]);
        let call = Acquire::new(keys, TOKEN, 10_000);
        let round = ended(Op::Acquire, &[Grants, Fails, Silent]);
        let behind = release_behind(&call.command(), Some(&round));
        assert_eq!(behind, Some(call.claim().release(Some(&round))));
        assert_eq!(
            release_behind(&call.command(), None),
            Some(call.claim().release(None))
        );
        let extend = Command::extend(keys, &TOKEN, 10_000);
        assert_eq!(release_behind(&extend, Some(&round)), None);
        assert_eq!(
            call.command(),
            Command::acquire(keys, &TOKEN, 10_000),
            "the acquire of its keys"
        );
    }
}
