//! [`EmbeddedRedlock::lock_until`](super::EmbeddedRedlock::lock_until)'s
//! calls in progress: the attempts of a [`Pursuit`] and the waits between
//! them, driven by the caller's loop.
//!
//! The decisions are [`Pursuit`]'s, as for the blocking and async calls
//! (see `client/wait.rs`); here nothing blocks and nothing is woken: each
//! time the caller hands the client its events or the time, every call
//! looks at its round (decided?) or its wait (told by a quorum of
//! masters, given a time to try at by one, or over?) and moves on
//! ([`LockUntil::step`]). A waiting call's time goes into the client's
//! `next_timeout`. Its slot in the table of waits and its place in the
//! masters' queues last from its start to its end, as a blocking call's
//! do.

use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::super::wait::Wait;
use super::{Base, Ticket};
use crate::calls::Claim;
use crate::client::{Lock, TOKEN_LEN};
use crate::commands::{Command, Keys};
use crate::driver::Driver;
use crate::error::Error;
use crate::rules::wait::{Next, Pursuit, Terms};
use crate::rules::{self, Round};

/// The bit that sets a `lock_until` ticket apart from the tickets of
/// single rounds (their ids, which never reach it).
pub(super) const TICKET_TAG: u64 = 1 << 63;

/// A `lock_until` call in progress.
pub(super) struct LockUntil {
    ticket: Ticket,
    call: Call,
    stage: Stage,
}

/// What a call keeps from its start to its end.
struct Call {
    pursuit: Pursuit,
    /// Its slot in the table of waits and place in the masters' queues,
    /// if releases tell this client's waiters (else it waits by its
    /// fallback alone); `None` once it ended.
    wait: Option<Wait>,
    resource: SmallVec<[u8; 64]>,
    ttl_ms: u64,
}

/// Where a call is.
enum Stage {
    /// An attempt's round is in flight.
    Attempt { id: u64, token: [u8; TOKEN_LEN] },
    /// Between attempts, after one that failed with `error`: until told,
    /// or until `until`.
    Wait { until: Instant, error: Error },
    /// Ended, its wait too: what its ticket completes with.
    Done(Result<Lock, Error>),
}

impl LockUntil {
    /// Starts a call of ticket `ticket`: takes its wait and makes its
    /// first attempt now.
    ///
    /// # Errors
    ///
    /// [`Error::TooManyInFlight`] when its attempt meets the cap of rounds in flight
    /// (nothing was sent, its wait ended).
    pub(super) fn start(
        base: &mut Base,
        ticket: Ticket,
        resource: &[u8],
        ttl_ms: u64,
        deadline: Instant,
    ) -> Result<LockUntil, Error> {
        let config = &base.config;
        let mut call = Call {
            pursuit: Pursuit::new(Terms::Deadline(deadline), config.request_timeout),
            wait: config
                .wake
                .and_then(|channel| Wait::begin(&mut base.driver, &channel, config)),
            resource: SmallVec::from_slice(resource),
            ttl_ms,
        };
        match call.attempt(base, crate::clock::now()) {
            Ok(stage) => Ok(LockUntil {
                ticket,
                call,
                stage,
            }),
            Err(busy) => {
                call.end(&mut base.driver);
                Err(busy)
            }
        }
    }

    /// The call's ticket.
    pub(super) fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// Whether it ended: its ticket is complete.
    pub(super) fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done(_))
    }

    /// What its ticket completes with, if it ended.
    pub(super) fn into_result(self) -> Option<Result<Lock, Error>> {
        match self.stage {
            Stage::Done(result) => Some(result),
            Stage::Attempt { .. } | Stage::Wait { .. } => None,
        }
    }

    /// When it next has something to do without being told: the end of
    /// its wait, or the earlier time a master told it to try at.
    pub(super) fn wakes_at(&self, driver: &Driver) -> Option<Instant> {
        match &self.stage {
            Stage::Wait { until, .. } => Some(self.call.wait_end(driver, *until)),
            Stage::Attempt { .. } | Stage::Done(_) => None,
        }
    }

    /// The time is `now`: after an attempt's round was decided, the lock
    /// or the next wait; after a wait was told or is over, the next
    /// attempt. Once it ends, it leaves its queues and frees its wait.
    pub(super) fn step(&mut self, base: &mut Base, now: Instant) {
        let stage = match &self.stage {
            Stage::Attempt { id, token } if base.driver.decided(&[*id]) => {
                let round = base.take(*id);
                self.call.attempted(base, *token, round.as_ref(), now)
            }
            Stage::Wait { until, error } => {
                let told = self.call.is_told(&base.driver);
                if !told && now < self.call.wait_end(&base.driver, *until) {
                    return;
                }
                if told && !self.call.pursuit.may_attempt(now) {
                    // Told too late: an attempt now could end past the
                    // deadline. (Its error is copied once, as the call
                    // ends.)
                    Stage::Done(Err(error.clone()))
                } else {
                    match self.call.attempt(base, now) {
                        Ok(stage) => stage,
                        Err(busy) => self.call.failed(base, busy, None, now),
                    }
                }
            }
            Stage::Attempt { .. } | Stage::Done(_) => return,
        };
        if matches!(stage, Stage::Done(_)) {
            self.call.end(&mut base.driver);
        }
        if let Stage::Wait { error, .. } = std::mem::replace(&mut self.stage, stage) {
            // The error of the wait just over is not the call's outcome:
            // its report's box serves the next one.
            base.recycle(error);
        }
    }
}

impl Call {
    /// The keys it acquires.
    fn keys(&self) -> Keys<&[u8]> {
        Keys::One(&self.resource)
    }

    /// Whether a quorum of masters told it since its last attempt (a
    /// reconnect tells every wait).
    fn is_told(&self, driver: &Driver) -> bool {
        self.wait
            .as_ref()
            .is_some_and(|wait| driver.is_told(wait.id))
    }

    /// When a wait until `until` ends if nobody tells it: then, or at the
    /// earlier time a master told it to try at.
    fn wait_end(&self, driver: &Driver, until: Instant) -> Instant {
        let hinted = self.wait.as_ref().and_then(|wait| driver.hinted(wait.id));
        hinted.map_or(until, |at| at.min(until))
    }

    /// Starts an attempt at `now`, its round cut short at the deadline:
    /// an acquire that waits (queued where it is refused), or a plain one
    /// without a wait. Only what tells it after this counts for the next
    /// wait.
    ///
    /// # Errors
    ///
    /// [`Error::TooManyInFlight`] at the cap of rounds in flight (nothing was sent).
    fn attempt(&mut self, base: &mut Base, now: Instant) -> Result<Stage, Error> {
        let token = base.tokens.token();
        let keys = self.keys();
        let command = match &self.wait {
            Some(wait) => {
                base.driver.arm_wait(wait.id);
                wait.acquire(keys, &token, self.ttl_ms)
            }
            None => Command::acquire(keys, &token, self.ttl_ms),
        };
        let left = self
            .pursuit
            .deadline()
            .map_or(base.config.request_timeout, |deadline| {
                deadline.saturating_duration_since(now)
            });
        let id = base.start(&command, base.config.request_timeout.min(left), now)?;
        if let Some(wait) = &mut self.wait {
            // Counted as queued until its round says otherwise.
            wait.entries.attempting();
        }
        Ok(Stage::Attempt { id, token })
    }

    /// After an attempt with `token` whose round ended as `round`, at
    /// `now`: the lock, or the wait that follows the failure.
    fn attempted(
        &mut self,
        base: &mut Base,
        token: [u8; TOKEN_LEN],
        round: Option<&Round>,
        now: Instant,
    ) -> Stage {
        if let (Some(wait), Some(round)) = (&mut self.wait, round) {
            wait.entries.note(round);
        }
        let free_in = round.and_then(rules::free_in);
        match base.acquired(Claim::new(self.keys(), &token), round) {
            Ok(lock) => Stage::Done(Ok(lock)),
            Err(error) => self.failed(base, error, free_in, now),
        }
    }

    /// An attempt failed with `error` at `now` (the keys that refused it
    /// expiring in `free_in`, if known): the pursuit says whether it
    /// waits, with a retry delay and a jitter drawn now.
    fn failed(
        &mut self,
        base: &mut Base,
        error: Error,
        free_in: Option<Duration>,
        now: Instant,
    ) -> Stage {
        let config = &base.config;
        let unit = base.tokens.unit();
        let delay = rules::retry_delay(config.retry_delay, config.retry_jitter, unit);
        let unit = base.tokens.unit();
        let next = self
            .pursuit
            .after_failure(error.is_retryable(), free_in, delay, unit, now);
        match next {
            Next::Stop => Stage::Done(Err(error)),
            Next::Until(until) => Stage::Wait { until, error },
        }
    }

    /// Ends its wait, if it has not yet: leaves its queues on every master
    /// if it may be queued somewhere (without waiting), frees its slot.
    fn end(&mut self, driver: &mut Driver) {
        if let Some(wait) = self.wait.take() {
            wait.end(driver, self.keys());
        }
    }
}
