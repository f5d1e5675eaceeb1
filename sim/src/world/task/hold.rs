//! A task's holding: holds, extends and releases its lock, or forgets it.

use std::time::Duration;

use redlock_mio::Error;

use super::*;
use crate::world::World;
use crate::world::extended;
use crate::world::history::Holding;

impl World {
    /// Task `k` holds `lock` a while.
    pub(super) fn keep_holding(&mut self, c: usize, k: usize, lock: Box<Lock>) {
        if lock.kept.is_some() {
            return self.keeper_next(c, k, lock);
        }
        // Mostly within the validity left, sometimes past it.
        let left = lock.holding.until.saturating_sub(self.t) + 1;
        let rng = &mut self.clients[c].rng;
        let mean = rng.below(left) + 1;
        let at = self.t + rng.exp(mean).min(left + left / 2) + 1;
        self.task_timer_at(c, k, at);
        self.put_state(c, k, State::Hold(lock));
    }

    /// What task `k` does next with `lock`: mostly releases or extends it;
    /// sometimes holds on, forgets it (a holder that crashed), or drops
    /// its extend or release half-way. Once calm, it releases.
    pub(super) fn hold(&mut self, c: usize, k: usize, lock: Box<Lock>) {
        if lock.kept.is_some() {
            return self.keeper_wake(c, k, lock);
        }
        let r = self.clients[c].rng.unit();
        let (choice, drop) = match r {
            _ if self.calm => (Choice::Release, false),
            r if r < 0.45 => (Choice::Release, false),
            r if r < 0.7 => (Choice::Extend, false),
            r if r < 0.8 => (Choice::Keep, false),
            r if r < 0.87 => (Choice::Forget, false),
            r if r < 0.92 => (Choice::DropGuard, false),
            r if r < 0.96 => (Choice::Release, true),
            _ => (Choice::Extend, true),
        };
        match choice {
            Choice::Keep => self.keep_holding(c, k, lock),
            Choice::Forget => {
                self.record(&lock);
                self.think(c, k, self.params.think_mean);
            }
            Choice::DropGuard => {
                let mut lock = lock;
                let now = self.local(c);
                lock.holding.until = lock.holding.until.min(self.t);
                self.record(&lock);
                if self.clients[c].client.drop_guard(&mut lock.held, now) {
                    self.clients[c].rounds += 1;
                }
                self.think(c, k, self.params.think_mean);
            }
            Choice::Extend => self.extend(c, k, lock, drop),
            Choice::Release => self.release(c, k, lock, drop),
        }
    }

    /// Extends `lock` (its round dropped half-way if `drop`); releases it
    /// if the extend is refused before anything is sent (expired), unless
    /// it is kept: its keeper is told.
    pub(super) fn extend(&mut self, c: usize, k: usize, lock: Box<Lock>, drop: bool) {
        let now = self.local(c);
        let ttl = match &lock.kept {
            Some(kept) => kept.ttl,
            None => self.params.ttls[self.clients[c].rng.index(self.params.ttls.len())],
        };
        let begun = self.clients[c].client.begin_extend(&lock.held, ttl, now);
        if matches!(begun, Err(Error::ExtensionLimit { .. })) {
            self.outcome.at_limit += 1;
        }
        let id = match begun {
            Ok(id) => id,
            Err(error) if lock.kept.is_some() => {
                let before = lock.held.clone();
                return self.kept_extended(c, k, lock, &Err(error), &before);
            }
            Err(_) => return self.release(c, k, lock, drop),
        };
        self.clients[c].client.set_waiter(id, k as u64);
        self.clients[c].rounds += 1;
        let pending = self.pending(c, k, id, ttl, drop);
        self.put_state(c, k, State::Extend(lock, pending));
    }

    /// Releases `lock` (its round dropped half-way if `drop`): the lock is
    /// no longer counted on from the release's start. (A kept lock's
    /// keeper asked its keeping before: see `keeper_wake`.)
    pub(super) fn release(&mut self, c: usize, k: usize, mut lock: Box<Lock>, drop: bool) {
        let now = self.local(c);
        lock.holding.until = lock.holding.until.min(self.t);
        self.note(|| format!("client {c} task {k}: releases lock {}", lock.holding.lock));
        self.record(&lock);
        match self.clients[c].client.begin_release(&lock.held, now) {
            Ok(id) => {
                self.clients[c].client.set_waiter(id, k as u64);
                self.clients[c].rounds += 1;
                let mut pending = self.pending(c, k, id, Duration::ZERO, drop);
                pending.idle = self.idle_windows(&lock.res);
                self.put_state(c, k, State::Release(lock, pending));
            }
            Err(error) => self.kept_released(c, k, lock, &Err(error)),
        }
    }

    /// Round `id` of task `k`'s call, begun now; if `drop`, the call is
    /// dropped at a time within the request timeout.
    pub(super) fn pending(
        &mut self,
        c: usize,
        k: usize,
        id: RoundId,
        ttl: Duration,
        drop: bool,
    ) -> Pending {
        if drop {
            let rt = self.params.settings.request_timeout.as_nanos() as u64;
            let at = self.t + self.clients[c].rng.below(rt);
            self.task_timer_at(c, k, at);
        }
        Pending {
            id,
            begun: self.local(c),
            begun_g: self.t,
            ttl,
            idle: 0,
        }
    }

    /// How many reservation windows a hand-off of `res` may spend on
    /// entries that are not the one waiter every master agrees is first:
    /// one where the masters' queues disagree on the first entry of a
    /// client (an attempt granted by some masters is queued on the others
    /// only; a leave that did not reach every master), and one for each
    /// entry of a client beyond its callers waiting there now (a leave
    /// lost: its client hears the hand-off, and nobody comes).
    pub(super) fn idle_windows(&self, res: &[usize]) -> u64 {
        let mut windows = 0;
        for &r in res {
            let queue = crate::world::queue_key(&self.params.resources[r]);
            let owner = |member: &[u8]| {
                self.clients.iter().position(|client| {
                    member.len() > client.channel.len() + 1
                        && member.ends_with(&client.channel)
                        && member[member.len() - client.channel.len() - 1] == b'|'
                })
            };
            let waiting: Vec<usize> = self
                .clients
                .iter()
                .map(|client| client.tasks.iter().filter(|t| t.waits_on(r)).count())
                .collect();
            let mut firsts = Vec::new();
            let mut ghosts = 0;
            for i in 0..self.params.masters {
                let master = &self.masters[self.params.proc_of[i]];
                if master.down {
                    continue;
                }
                let now_us = master.clock.now_us(self.t);
                let members = master.model.members(0, &queue, now_us);
                let mut count = vec![0usize; self.clients.len()];
                let mut first = None;
                for (member, _) in &members {
                    if let Some(c) = owner(member) {
                        count[c] += 1;
                        first.get_or_insert(member.to_vec());
                    }
                }
                firsts.push(first);
                let excess = count
                    .iter()
                    .zip(&waiting)
                    .map(|(n, w)| n.saturating_sub(*w));
                ghosts = ghosts.max(excess.sum::<usize>() as u64);
            }
            firsts.dedup();
            windows += ghosts + u64::from(firsts.len() > 1);
        }
        windows
    }

    /// The extend of `lock` is decided.
    pub(super) fn extended(&mut self, c: usize, k: usize, mut lock: Box<Lock>, pending: Pending) {
        let round = self.clients[c].client.round(pending.id).cloned();
        let before = lock.held.clone();
        let now = self.local(c);
        let result = self.clients[c]
            .client
            .end_extend(pending.id, &mut lock.held, now);
        self.note(|| {
            format!(
                "client {c} task {k}: extend of lock {} ended {result:?}",
                lock.holding.lock
            )
        });
        self.check_bound(
            c,
            "extend",
            pending.begun,
            pending.begun_g,
            self.params.call_bound(1, 0),
        );
        if result.is_ok() {
            self.outcome.extends += 1;
            let now = self.local(c);
            if !extended::leaves_validity(lock.held.valid_until(), now) {
                self.history.errors.push(format!(
                    "client {c} task {k}: an extend of lock {} reported a success that left no validity ({:?} past it)",
                    lock.holding.lock,
                    now.saturating_duration_since(lock.held.valid_until())
                ));
            }
        }
        let clock = &self.clients[c].clock;
        let until = clock.global(lock.held.valid_until());
        match (&result, round) {
            (Ok(()), Some(round)) => {
                let t0 = clock.global(round.started());
                lock.holding.until = lock.holding.until.min(self.t);
                self.record(&lock);
                lock.holding = Holding {
                    from: self.t,
                    until,
                    grants: grants(&round),
                    t0,
                    ..lock.holding
                };
            }
            _ => lock.holding.until = lock.holding.until.min(until),
        }
        if lock.kept.is_some() {
            return self.kept_extended(c, k, lock, &result, &before);
        }
        self.keep_holding(c, k, lock);
    }

    /// The release of `lock` is decided.
    pub(super) fn released(&mut self, c: usize, k: usize, mut lock: Box<Lock>, pending: Pending) {
        let now = self.local(c);
        let result = self.clients[c]
            .client
            .end_release(pending.id, &mut lock.held, now);
        if result.is_ok() {
            self.history.releases.push(super::history::Release {
                client: c,
                resources: lock.res.clone(),
                sent: pending.begun_g,
                idle: pending.idle,
            });
        }
        self.check_bound(
            c,
            "release",
            pending.begun,
            pending.begun_g,
            self.params.call_bound(1, 0),
        );
        self.kept_released(c, k, lock, &result);
    }
}
