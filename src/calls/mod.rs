//! The plain calls on a lock (the acquire of one or several resources,
//! the extend, the release), the acquire that waits and the keeping of a
//! lock, as machines free of I/O, and what every front end asks before
//! and around a round: the checks of a call's arguments ([`Limits`]), a
//! round's set-up ([`restarter`]), and what each decision means for the
//! caller ([`errors`], [`Validity`]).
//!
//! Each machine is made with its call's arguments, gives the
//! `Command` to submit, and, handed its round
//! as it ended, says what the call returns, the validity the lock keeps,
//! and the release that must follow a failed or dropped acquire. The
//! blocking, async and embedded front ends and the simulator's client
//! drive the same machines, so none of them decides on its own. The
//! keeping of a lock ([`Keeping`]) says when its keeper waits, extends and
//! releases, and the standing it reports: the keeper's thread and the
//! simulator's keeper drive it with the same results.

mod acquire;
mod checks;
mod errors;
mod extend;
mod keeping;
mod pursue;
mod release;
mod validity;
mod wait;

use std::io;
use std::time::{Duration, Instant};

use crate::commands::{Command, Keys, TOKEN_LEN};
use crate::rules::{self, Decision, Round};

pub(crate) use acquire::{Acquire, Acquired, Claim, release_behind};
#[cfg(feature = "sim")]
pub(crate) use checks::pack_names;
pub(crate) use checks::{Limits, check_resource, longest_ttl};
pub(crate) use errors::{acquire_refused, unknown};
pub(crate) use extend::Extend;
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use keeping::{Keeping, KeepingStep};
pub(crate) use pursue::{Fenced, Leave, Pursue, Step, Waited};
pub(crate) use release::Release;
pub(crate) use validity::Validity;
pub(crate) use wait::{Times, Wait};

/// What a lock holds, as an extend or a release of it reads it: the
/// front ends' [`Lock`](crate::Lock) or the simulator's lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holding<'k> {
    /// Its names.
    pub(crate) keys: Keys<&'k [u8]>,
    /// Its token.
    pub(crate) token: &'k [u8; TOKEN_LEN],
    /// Until when it may be trusted, on the client's clock.
    pub(crate) valid_until: Instant,
    /// How many times it was extended.
    pub(crate) extensions: u32,
    /// The masters its acquire went out to.
    pub(crate) reach: u64,
}

/// How a round ended: its decision, one still undecided counting as
/// without a quorum, or the poller's error (`polled`: the commands may
/// have gone out before it failed).
pub(crate) fn decision(
    round: &Round,
    polled: Result<(), io::ErrorKind>,
) -> Result<Decision, io::ErrorKind> {
    polled.map(|()| round.decision().unwrap_or(Decision::NoQuorum))
}

/// How long a round started at `now` waits for the masters: the request
/// timeout, and never past `cap`.
pub(crate) fn timeout(request_timeout: Duration, cap: Option<Instant>, now: Instant) -> Duration {
    match cap {
        Some(cap) => request_timeout.min(cap.saturating_duration_since(now)),
        None => request_timeout,
    }
}

/// Sets up a round of a command over `masters` masters, waiting for them
/// at most `timeout`: its operation, and the TTL of a grant with the drift
/// `drift_factor` allows.
pub(crate) fn restarter(
    drift_factor: f64,
    masters: usize,
    timeout: Duration,
) -> impl Fn(&mut Round, &Command<'_>, Instant) {
    move |round: &mut Round, command: &Command<'_>, now: Instant| {
        let ttl = Duration::from_millis(command.grant_ttl_ms().unwrap_or(0));
        let drift = rules::drift(ttl, drift_factor);
        round.restart(command.op(), masters, ttl, drift, timeout, now);
    }
}

#[cfg(test)]
mod tests;
