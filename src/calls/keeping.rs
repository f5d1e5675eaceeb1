//! The keeping of a lock, from the keeper's start to its final standing:
//! [`Keeping`], one machine free of I/O that every keeper drives with its
//! own I/O (the keeper's thread, `client/keeper.rs`, and the simulator's
//! keeper, through the hidden `sim` module).
//!
//! It takes every decision of the keeping: when the keeper wakes and when
//! it extends (its [`Schedule`]), what an extension's result means, the
//! standing to report after each event, that the holder's ask for the
//! release ends the extending, that the release goes out once and nothing
//! after it, and the final standing.
//!
//! The driver asks [`Keeping::poll`] what to do: wait until an instant,
//! until the holder asks for the release, or until the lock's loss watch
//! finds it lost (then [`handle_wake`](Keeping::handle_wake),
//! [`handle_asked`](Keeping::handle_asked) or
//! [`handle_lost`](Keeping::handle_lost)); send an extension or the
//! release, each handed out once (its result then goes to
//! [`handle_extended`](Keeping::handle_extended) or
//! [`handle_released`](Keeping::handle_released)); or stop. Each `handle_*`
//! gives the standing to report, if any.

use std::time::{Duration, Instant};

use crate::error::Error;
use crate::rules::keep::{Action, Extension, Schedule, Standing};

/// The keeping of one lock (see the module docs).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Keeping {
    schedule: Schedule,
    state: State,
}

/// Where a keeping is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waits for the schedule's wake, or for the holder's ask.
    Waiting,
    /// An extension is due: the next poll hands it out.
    ExtendDue,
    /// The extension handed out has not come back.
    Extending,
    /// The release is due: the next poll hands it out.
    ReleaseDue,
    /// The release handed out has not come back.
    Releasing,
    /// Over, with its final standing: nothing more goes out.
    Done(Standing),
}

/// What a keeper does next ([`Keeping::poll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub enum KeepingStep {
    /// Wait until `until` (then [`Keeping::handle_wake`]), or until the
    /// holder asks for the release (then [`Keeping::handle_asked`]).
    Wait {
        /// When the keeper wakes on its own; `None` once the lock is
        /// lost: then only the holder's ask ends the wait.
        until: Option<Instant>,
    },
    /// Extend the lock now, then hand the result to
    /// [`Keeping::handle_extended`].
    Extend,
    /// Release the lock now, then hand the result to
    /// [`Keeping::handle_released`].
    Release,
    /// The extension or the release handed out has not come back.
    InFlight,
    /// Over, with this final standing (which
    /// [`handle_released`](Keeping::handle_released) gave): nothing more
    /// goes out.
    Done(Standing),
}

// Public for the simulator (feature `sim`).
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl Keeping {
    /// The keeping of a lock valid until `valid_until`, handed to its
    /// keeper at `now`: it extends the lock to `ttl` every `period` (a
    /// third of `ttl` if not given), and no longer once held for
    /// `max_hold`. The first extension is due a period from `now`.
    pub fn new(
        ttl: Duration,
        period: Option<Duration>,
        max_hold: Option<Duration>,
        valid_until: Instant,
        now: Instant,
    ) -> Keeping {
        let period = Schedule::period(ttl, period);
        let hold_until = max_hold.and_then(|d| now.checked_add(d));
        Keeping {
            schedule: Schedule::new(period, hold_until, valid_until, now),
            state: State::Waiting,
        }
    }

    /// What to do next. An extension and the release are each handed out
    /// once: until its result comes back, the keeping is
    /// [`InFlight`](KeepingStep::InFlight).
    pub fn poll(&mut self) -> KeepingStep {
        match self.state {
            State::Waiting => KeepingStep::Wait {
                until: self.schedule.poll_wake(),
            },
            State::ExtendDue => {
                self.state = State::Extending;
                KeepingStep::Extend
            }
            State::ReleaseDue => {
                self.state = State::Releasing;
                KeepingStep::Release
            }
            State::Extending | State::Releasing => KeepingStep::InFlight,
            State::Done(standing) => KeepingStep::Done(standing),
        }
    }

    /// The keeper woke at `now` on its own (not for the holder's ask), the
    /// lock valid until `valid_until`: an extension becomes due, or the
    /// keeper waits on; the standing to report, if any (lost, once the
    /// validity ran out). Only a waiting keeping wakes: anywhere else this
    /// changes nothing.
    pub fn handle_wake(&mut self, now: Instant, valid_until: Instant) -> Option<Standing> {
        if self.state != State::Waiting {
            return None;
        }
        match self.schedule.handle_wake(now, valid_until) {
            Action::Extend => {
                self.state = State::ExtendDue;
                None
            }
            Action::Wait => None,
            Action::Lost => Some(Standing::Lost),
        }
    }

    /// The lock's loss watch found it lost: the keeping extends no more,
    /// and waits only for the holder's ask; the standing to report (lost,
    /// once). Seen only while the keeping waits (a word that comes during
    /// an extension is handed in once it is over): anywhere else this
    /// changes nothing.
    pub fn handle_lost(&mut self) -> Option<Standing> {
        if self.state != State::Waiting {
            return None;
        }
        self.schedule.handle_lost()
    }

    /// The extension handed out came to `result`; at `now` the lock is
    /// valid until `valid_until`. The keeping waits again; the standing to
    /// report, if any. Without an extension out this changes nothing.
    pub fn handle_extended(
        &mut self,
        result: &Result<(), Error>,
        now: Instant,
        valid_until: Instant,
    ) -> Option<Standing> {
        if self.state != State::Extending {
            return None;
        }
        self.state = State::Waiting;
        self.schedule
            .handle_extended(extension(result), now, valid_until)
    }

    /// The holder asked for the release, seen at `now` while the keeping
    /// waited, the lock valid until `valid_until`: the extending is over,
    /// and the release is due; the standing to report, if any (lost, if
    /// the validity ran out before). A keeper sees the ask only while it
    /// waits (an ask made during an extension is seen once the extension
    /// is over): anywhere else this changes nothing, and a second ask
    /// never sends a second release.
    pub fn handle_asked(&mut self, now: Instant, valid_until: Instant) -> Option<Standing> {
        if self.state != State::Waiting {
            return None;
        }
        self.state = State::ReleaseDue;
        self.schedule.handle_release(now, valid_until)
    }

    /// The release handed out came to `result`: the keeping is over, with
    /// the final standing to report (released, or lost if the lock was
    /// lost before or the release found it gone). Without the release out
    /// this changes nothing.
    pub fn handle_released(&mut self, result: &Result<(), Error>) -> Option<Standing> {
        if self.state != State::Releasing {
            return None;
        }
        let standing = self.schedule.handle_released(release_gone(result));
        self.state = State::Done(standing);
        Some(standing)
    }
}

/// What an extension's result means to the schedule: the lock is gone
/// when a quorum said the token no longer owns it or it had expired before
/// the extension; the limit on extensions ends them; any other error may
/// pass at the next try.
fn extension(result: &Result<(), Error>) -> Extension {
    match result {
        Ok(()) => Extension::Extended,
        Err(Error::NotHeld(_) | Error::Expired) => Extension::Gone,
        Err(Error::ExtensionLimit { .. }) => Extension::Limit,
        Err(_) => Extension::Failed,
    }
}

/// Whether a release's result says the lock was gone before it: a quorum
/// said the token no longer owned the resource.
fn release_gone(result: &Result<(), Error>) -> bool {
    matches!(result, Err(Error::NotHeld(_)))
}

#[cfg(test)]
mod tests;
