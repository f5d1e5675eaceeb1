//! [`EmbeddedRedlock::lock_until`](super::EmbeddedRedlock::lock_until)'s
//! calls in progress: the machine of `calls::Pursue`, as the blocking and
//! async calls drive it, moved on by the caller's loop.
//!
//! Here nothing blocks and nothing is woken: each time the caller hands
//! the client its events or the time, every call looks at what its
//! machine waits for (its round decided? its wait told by a quorum of
//! masters, given a time to try at by one, or over?) and moves on
//! ([`LockUntil::step`]). A waiting call's time goes into the client's
//! `next_timeout`.

use std::time::Instant;

use smallvec::SmallVec;

use super::super::wait::{begin_wait, end_wait};
use super::{Base, Ticket};
use crate::calls::{self, Pursue, Step};
use crate::client::Lock;
use crate::commands::Keys;
use crate::driver::Driver;
use crate::error::Error;
use crate::ids::{RoundId, WaitId};
use crate::rules::wait::Terms;

/// The bit that sets a `lock_until` ticket apart from the tickets of
/// single rounds (their ids, which never reach it).
pub(super) const TICKET_TAG: u64 = 1 << 63;

/// A `lock_until` call in progress.
pub(super) struct LockUntil {
    ticket: Ticket,
    call: Pursue<SmallVec<[u8; 64]>>,
    /// The round of the attempt under way.
    round: Option<RoundId>,
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
        let wait = config
            .wake
            .and_then(|channel| begin_wait(&mut base.driver, &channel, config));
        let keys = Keys::One(SmallVec::from_slice(resource));
        let terms = Terms::Deadline(deadline);
        let mut call = LockUntil {
            ticket,
            call: Pursue::new(keys, ttl_ms, terms, config.times(), wait),
            round: None,
        };
        if let Err(busy) = call.attempt(base, crate::clock::now()) {
            call.end(&mut base.driver);
            return Err(busy);
        }
        Ok(call)
    }

    /// The call's ticket.
    pub(super) fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// Whether it ended: its ticket is complete.
    pub(super) fn is_done(&self) -> bool {
        self.call.poll() == Step::Done
    }

    /// What its ticket completes with, if it ended.
    pub(super) fn into_result(mut self) -> Option<Result<Lock, Error>> {
        self.call.result()
    }

    /// When it next has something to do without being told: the end of
    /// its wait, or the earlier time a master told it to try at.
    pub(super) fn wakes_at(&self, driver: &Driver) -> Option<Instant> {
        match self.call.poll() {
            Step::Wait { told, until } => Some(wait_end(driver, told, until)),
            Step::Attempt { .. } | Step::InFlight | Step::Done => None,
        }
    }

    /// The time is `now`: after an attempt's round was decided, the lock
    /// or the next wait; after a wait was told or is over, the next
    /// attempt. Once it ends, it leaves its queues and frees its wait.
    pub(super) fn step(&mut self, base: &mut Base, now: Instant) {
        loop {
            match self.call.poll() {
                Step::Attempt { .. } => {
                    if let Err(busy) = self.attempt(base, now) {
                        self.call.handle_unsent(busy, || base.tokens.unit(), now);
                    }
                }
                Step::InFlight => {
                    let decided = self.round.filter(|&id| base.driver.core.decided(&[id]));
                    let Some(id) = decided else {
                        return;
                    };
                    self.round = None;
                    self.attempted(base, id, now);
                }
                Step::Wait { told, until } => {
                    let spent = if told.is_some_and(|id| base.driver.core.waits.is_told(id)) {
                        self.call.handle_told(now)
                    } else if now >= wait_end(&base.driver, told, until) {
                        self.call.handle_timeout()
                    } else {
                        return;
                    };
                    if let Some(error) = spent {
                        base.recycle(error);
                    }
                }
                Step::Done => return self.end(&mut base.driver),
            }
        }
    }

    /// Starts the attempt that is due at `now`, its round cut short at the
    /// deadline.
    ///
    /// # Errors
    ///
    /// [`Error::TooManyInFlight`] at the cap of rounds in flight (nothing was sent).
    fn attempt(&mut self, base: &mut Base, now: Instant) -> Result<(), Error> {
        let Step::Attempt { arm, cap } = self.call.poll() else {
            return Ok(());
        };
        if let Some(id) = arm {
            base.driver.core.waits.arm(id, now);
        }
        let token = base.tokens.token();
        let timeout = calls::timeout(base.config.request_timeout, cap, now);
        self.round = Some(base.start(&self.call.command(token), timeout, now)?);
        Ok(())
    }

    /// The attempt's round `id` was decided, at `now`: the machine reads
    /// it, and the release of a failed attempt is queued without waiting.
    fn attempted(&mut self, base: &mut Base, id: RoundId, now: Instant) {
        let Some(round) = base.take(id) else {
            let release = self.call.handle_lost(|| base.tokens.unit(), now);
            return base.driver.queue(&release, crate::clock::now());
        };
        let decision = calls::decision(&round, Ok(()));
        let Base {
            driver,
            masters,
            tokens,
            spare_reports,
            ..
        } = base;
        let report = || super::report(masters, spare_reports, &round);
        let attempted = self
            .call
            .handle_attempt(&round, decision, report, || tokens.unit(), now);
        if let Some(release) = &attempted.release {
            driver.queue(release, crate::clock::now());
        }
        if let Some(granted) = attempted.granted {
            driver
                .core
                .waits
                .handle_granted(granted.wait, granted.masters);
        }
    }

    /// Ends its wait, if it has not yet: leaves its queues on every master
    /// if it may be queued somewhere (without waiting), frees its slot.
    fn end(&mut self, driver: &mut Driver) {
        if let Some(leave) = self.call.leave() {
            end_wait(driver, leave);
        }
    }
}

/// When a wait (of slot `told`, if it has one) until `until` ends if
/// nobody tells it: then, or at the earlier time a master told it to try
/// at.
fn wait_end(driver: &Driver, told: Option<WaitId>, until: Instant) -> Instant {
    let hinted = told.and_then(|id| driver.core.waits.hinted(id));
    hinted.map_or(until, |at| at.min(until))
}
