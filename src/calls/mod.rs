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
use crate::rules::{self, Decision, Op, Round};

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use acquire::{Acquire, Acquired, Claim, release_behind};
#[cfg(feature = "sim")]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use checks::pack_names;
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use checks::{Limits, check_resource, longest_ttl};
pub(crate) use errors::acquire_refused;
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use errors::unknown;
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use extend::Extend;
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use keeping::{Keeping, KeepingStep};
#[cfg(feature = "sim")]
pub use pursue::{Attempted, Granted};
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use pursue::{Fenced, Leave, Pursue, Step, Waited};
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use release::Release;
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use validity::Validity;
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use wait::{Times, Wait};

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
/// What a lock's loss watch does once an extend or a release of the lock
/// has gone out, whether its round ended or its caller dropped it in
/// flight: one rule, which every front end follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewatch {
    /// Its keys are read again on every master: a master that an extend
    /// reached forgets the key for this client's tracking connection,
    /// which is told nothing of its own changes (`NOLOOP`).
    ReadAgain,
    /// The watch ends: the release may have freed the keys, and this
    /// client hears nothing of its own changes.
    End,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl Rewatch {
    /// What the watch does after a call of `op` on the lock: `None` for an
    /// operation that is not a call on a held lock.
    pub fn after(op: Op) -> Option<Rewatch> {
        match op {
            Op::Extend => Some(Rewatch::ReadAgain),
            Op::Release => Some(Rewatch::End),
            Op::Acquire | Op::Raise | Op::FenceRead | Op::FenceSync | Op::Leave => None,
        }
    }
}

/// What a lock holds, as an extend or a release of it reads it: the
/// front ends' [`Lock`](crate::Lock) or the simulator's lock.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Holding<'k> {
    /// Its names.
    pub keys: Keys<&'k [u8]>,
    /// Its token.
    pub token: &'k [u8; TOKEN_LEN],
    /// Until when it may be trusted, on the client's clock.
    pub valid_until: Instant,
    /// How many times it was extended.
    pub extensions: u32,
    /// The masters its acquire went out to.
    pub reach: u64,
}

/// How a round ended: its decision, one still undecided counting as
/// without a quorum, or the poller's error (`polled`: the commands may
/// have gone out before it failed).
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn decision(
    round: &Round,
    polled: Result<(), io::ErrorKind>,
) -> Result<Decision, io::ErrorKind> {
    polled.map(|()| round.decision().unwrap_or(Decision::NoQuorum))
}

/// How long a round started at `now` waits for the masters: the request
/// timeout, and never past `cap`.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn timeout(request_timeout: Duration, cap: Option<Instant>, now: Instant) -> Duration {
    match cap {
        Some(cap) => request_timeout.min(cap.saturating_duration_since(now)),
        None => request_timeout,
    }
}

/// Sets up a round of a command over `masters` masters, waiting for them
/// at most `timeout`: its operation, and the TTL of a grant with the drift
/// `drift_factor` allows.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn restarter(
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
