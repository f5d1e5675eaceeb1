//! A kept lock: the keeper thread's own machine (`Keeping`) driven with
//! the simulated time as the thread drives it: it waits, extends and
//! releases when the keeping says, hands each result in, and reports the
//! standings the keeping gives.

use std::time::Duration;

use crate::client::Held;
use redlock_mio::sim::calls::KeepingStep;
use redlock_mio::{Error, Standing};

use super::*;
use crate::world::World;
use crate::world::history::{self, KeepStep, Seen};
use crate::world::params::Regression;

impl World {
    /// Hands `lock` to a keeper, as `Redlock::keep` does, which extends it
    /// to a TTL of the world's on its schedule (every third of it, or a
    /// period asked; now and then up to a hold limit) until the holder
    /// releases it, a few TTLs later. A lock `keep` refuses (expired) is
    /// dropped, as `keep` drops it: its keys expire at their TTL.
    pub(super) fn start_keeping(&mut self, c: usize, k: usize, mut lock: Box<Lock>) {
        let now = self.local(c);
        let p = &self.params;
        let rng = &mut self.clients[c].rng;
        let ttl = p.ttls[rng.index(p.ttls.len())];
        let asked = match rng.below(4) {
            0 => Some(ttl / 4),
            1 => Some(ttl / 2),
            _ => None,
        };
        let ttl_ns = ttl.as_nanos() as u64;
        let hold = rng.exp(3 * ttl_ns).min(8 * ttl_ns) + 1;
        let max_hold = rng
            .chance(0.2)
            .then(|| Duration::from_nanos(rng.below(hold) + 1));
        let client = &self.clients[c].client;
        let Ok(keeping) = client.keep(&lock.held, ttl, asked, max_hold, now) else {
            self.record(&lock);
            return self.think(c, k, self.params.think_mean);
        };
        self.note(|| {
            format!(
                "client {c} task {k}: keeps lock {} (ttl {ttl:?}, period {asked:?}, max hold {max_hold:?})",
                lock.holding.lock
            )
        });
        self.outcome.kept += 1;
        let period = asked.unwrap_or(ttl / 3);
        let due = self.clients[c].clock.global(now + period);
        lock.kept = Some(Box::new(Kept {
            keeping,
            ttl,
            period,
            release_at: self.t + hold,
            woke: now,
            due: Some((due.min(lock.holding.until), self.t)),
        }));
        self.keeper_next(c, k, lock);
    }

    /// `lock`'s keeper does what its keeping says next, as the keeper's
    /// thread does: waits until its wake (or until the holder asks for the
    /// release), extends, releases, or is done. Under
    /// [`Regression::LateKeeper`] it wakes half a period late.
    pub(super) fn keeper_next(&mut self, c: usize, k: usize, mut lock: Box<Lock>) {
        let Some(kept) = lock.kept.as_mut() else {
            return self.keep_holding(c, k, lock);
        };
        match kept.keeping.poll() {
            KeepingStep::Wait { until } => {
                let late = match self.params.regression {
                    Regression::LateKeeper => kept.period / 2,
                    _ => Duration::ZERO,
                };
                let clock = &self.clients[c].clock;
                let wake = until.map(|at| clock.global(at + late));
                let at = wake.map_or(kept.release_at, |at| at.min(kept.release_at));
                self.task_timer_at(c, k, at);
                self.put_state(c, k, State::Hold(lock));
            }
            KeepingStep::Extend => self.extend(c, k, lock, false),
            KeepingStep::Release => self.release(c, k, lock, false),
            // The task hands every result in before it asks again: nothing
            // is in flight here. Done: the keeper's thread ends.
            KeepingStep::InFlight | KeepingStep::Done(_) => {
                self.think(c, k, self.params.think_mean);
            }
        }
    }

    /// `lock`'s keeper wakes: the holder asks for the release (at its time,
    /// or once calm), or it woke on its own; then it does what its keeping
    /// says.
    pub(super) fn keeper_wake(&mut self, c: usize, k: usize, mut lock: Box<Lock>) {
        let now = self.local(c);
        let Some(kept) = lock.kept.as_mut() else {
            return self.hold(c, k, lock);
        };
        if self.calm || self.t >= kept.release_at {
            let reported = kept.keeping.handle_asked(now, lock.held.valid_until());
            kept.due = None;
            self.keep_step(c, &mut lock, Seen::Asked, reported);
            return self.keeper_next(c, k, lock);
        }
        if let Some((due, since)) = kept.due {
            let paused = self.clients[c].paused_within(since, self.t);
            if self.t > due + paused + paused / 50 + 10_000 {
                self.history.errors.push(format!(
                    "client {c}: the keeper of lock {} woke at {:.6}s, after it was due at {:.6}s ({:.6}s paused)",
                    lock.holding.lock,
                    history::secs(self.t),
                    history::secs(due),
                    history::secs(paused)
                ));
            }
        }
        let reported = kept.keeping.handle_wake(now, lock.held.valid_until());
        match kept.keeping.poll() {
            KeepingStep::Extend => {
                self.outcome.kept_extensions += 1;
                kept.woke = now;
                kept.due = None;
                self.extend(c, k, lock, false)
            }
            _ if reported == Some(Standing::Lost) => {
                kept.due = None;
                self.keep_step(c, &mut lock, Seen::Wake, reported);
                self.keeper_next(c, k, lock);
            }
            _ => {
                // Past its hold limit, or woken early: only the validity's
                // end is left.
                let until = self.clients[c].clock.global(lock.held.valid_until());
                kept.due = Some((until, self.t));
                self.keep_step(c, &mut lock, Seen::Wake, reported);
                self.keeper_next(c, k, lock);
            }
        }
    }

    /// `lock`'s keeper learns its extension's `result` (`before`: the lock
    /// as it was before): it reports what its keeping says, and does what
    /// the keeping says next. Under [`Regression::KeptNotHeld`] it takes a
    /// `NotHeld` for a missed quorum, with the validity from before.
    pub(super) fn kept_extended(
        &mut self,
        c: usize,
        k: usize,
        mut lock: Box<Lock>,
        result: &Result<(), Error>,
        before: &Held,
    ) {
        let now = self.local(c);
        let regress = self.params.regression == Regression::KeptNotHeld
            && matches!(result, Err(Error::NotHeld(_)));
        let Some(kept) = lock.kept.as_mut() else {
            return self.keep_holding(c, k, lock);
        };
        let reported = if regress {
            let missed = Err(Error::DeadlinePassed);
            kept.keeping
                .handle_extended(&missed, now, before.valid_until())
        } else {
            kept.keeping
                .handle_extended(result, now, lock.held.valid_until())
        };
        // What the standing checker holds the report to: the documented
        // meaning of each outcome (not the keeper's own reading of it).
        let seen = match result {
            Ok(()) => Seen::Extended,
            Err(Error::NotHeld(_) | Error::Expired) => Seen::Gone,
            Err(Error::ExtensionLimit { .. }) => Seen::Limit,
            Err(_) => Seen::Missed,
        };
        // The next wake is due a period after this one's (a quarter
        // period after the end of a missed one; at the validity's end
        // once the limit on extensions is reached), by the validity's end.
        let next = match seen {
            Seen::Extended => kept.woke + kept.period,
            Seen::Limit => lock.held.valid_until(),
            _ => now + kept.period / 4,
        };
        let clock = &self.clients[c].clock;
        let due = clock.global(next.min(lock.held.valid_until())).max(self.t);
        kept.due = (seen != Seen::Gone).then_some((due, self.t));
        self.keep_step(c, &mut lock, seen, reported);
        self.keeper_next(c, k, lock);
    }

    /// `lock`'s release came to `result`: its keeper's last standing, if
    /// it is kept, and then what its keeping says (nothing, once over);
    /// else the task thinks before its next call.
    pub(super) fn kept_released(
        &mut self,
        c: usize,
        k: usize,
        mut lock: Box<Lock>,
        result: &Result<(), Error>,
    ) {
        let Some(kept) = lock.kept.as_mut() else {
            return self.think(c, k, self.params.think_mean);
        };
        let standing = kept.keeping.handle_released(result);
        let gone = matches!(result, Err(Error::NotHeld(_)));
        self.keep_step(c, &mut lock, Seen::Released { gone }, standing);
        self.keeper_next(c, k, lock);
    }

    /// A step of `lock`'s keeper, after it saw `seen`, goes to the history
    /// with the standing it `reported`; a kept lock reported lost is no
    /// longer counted on.
    pub(super) fn keep_step(
        &mut self,
        c: usize,
        lock: &mut Lock,
        seen: Seen,
        reported: Option<Standing>,
    ) {
        let valid = self.local(c) < lock.held.valid_until();
        if reported == Some(Standing::Lost) {
            lock.holding.until = lock.holding.until.min(self.t);
        }
        self.note(|| {
            format!(
                "client {c}: keeper of lock {} after {seen:?}: {reported:?}",
                lock.holding.lock
            )
        });
        self.history.keeps.push(KeepStep {
            client: c,
            lock: lock.holding.lock,
            at: self.t,
            seen,
            valid,
            reported,
        });
    }
}
