//! A kept lock: the keeper thread's own schedule driven with the simulated
//! time, its extensions, its release and the standings it reports.

use std::time::Duration;

use redlock_mio::sim::{Held, KeepAction};
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
        let Ok(keep) = client.keep(&lock.held, ttl, asked, max_hold, now) else {
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
            keep,
            ttl,
            period,
            release_at: self.t + hold,
            woke: now,
            due: Some((due.min(lock.holding.until), self.t)),
        }));
        self.keeper_sleep(c, k, lock);
    }

    /// `lock`'s keeper waits until its schedule wakes it, or until the
    /// holder asks for the release. Under [`Regression::LateKeeper`] it
    /// wakes half a period late.
    pub(super) fn keeper_sleep(&mut self, c: usize, k: usize, lock: Box<Lock>) {
        let Some(kept) = lock.kept.as_ref() else {
            return self.keep_holding(c, k, lock);
        };
        let late = match self.params.regression {
            Regression::LateKeeper => kept.period / 2,
            _ => Duration::ZERO,
        };
        let clock = &self.clients[c].clock;
        let wake = kept.keep.poll_wake().map(|at| clock.global(at + late));
        let at = wake.map_or(kept.release_at, |at| at.min(kept.release_at));
        self.task_timer_at(c, k, at);
        self.put_state(c, k, State::Hold(lock));
    }

    /// `lock`'s keeper wakes: the holder asks for the release (at its time,
    /// or once calm), or the schedule says what to do.
    pub(super) fn keeper_wake(&mut self, c: usize, k: usize, mut lock: Box<Lock>) {
        let now = self.local(c);
        let Some(kept) = lock.kept.as_mut() else {
            return self.hold(c, k, lock);
        };
        if self.calm || self.t >= kept.release_at {
            return self.release(c, k, lock, false);
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
        match kept.keep.on_wake(now, &lock.held) {
            KeepAction::Extend => {
                self.outcome.kept_extensions += 1;
                kept.woke = now;
                kept.due = None;
                self.extend(c, k, lock, false)
            }
            KeepAction::Wait => {
                // Past its hold limit: only the validity's end is left.
                let until = self.clients[c].clock.global(lock.held.valid_until());
                kept.due = Some((until, self.t));
                self.keep_step(c, &mut lock, Seen::Wake, None);
                self.keeper_sleep(c, k, lock);
            }
            KeepAction::Lost => {
                kept.due = None;
                self.keep_step(c, &mut lock, Seen::Wake, Some(Standing::Lost));
                self.keeper_sleep(c, k, lock);
            }
        }
    }

    /// `lock`'s keeper learns its extension's `result` (`before`: the lock
    /// as it was before): it reports what its schedule says, and waits
    /// for the next wake. Under [`Regression::KeptNotHeld`] it takes a
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
            kept.keep
                .on_extended(&Err(Error::DeadlinePassed), now, before)
        } else {
            kept.keep.on_extended(result, now, &lock.held)
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
        self.keeper_sleep(c, k, lock);
    }

    /// `lock`'s release came to `result`: its keeper's last standing, if
    /// it is kept.
    pub(super) fn kept_released(&mut self, c: usize, lock: &mut Lock, result: &Result<(), Error>) {
        let Some(kept) = lock.kept.as_ref() else {
            return;
        };
        let standing = kept.keep.on_released(result);
        let gone = matches!(result, Err(Error::NotHeld(_)));
        self.keep_step(c, lock, Seen::Released { gone }, Some(standing));
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
