//! The engine's side of the async API: rounds started by tasks, the
//! background thread that polls for them, and the timers of their retry
//! delays (see the parent module's docs).

use std::sync::{Arc, MutexGuard};
use std::task::Waker;
use std::thread;
use std::time::Instant;

use super::{Engine, Full, Ids, Poller, Shared, Waiter, Waiting, Wakes, leave};
use crate::commands::Command;
use crate::driver::Driver;
use crate::driver::Need;
use crate::ids::{RoundId, WaitId};
use crate::rules::Round;
use crate::sync::lock;

/// How long the background thread leaves the polling for watched locks to
/// the threads after one of them last polled: a thread that calls again
/// within it finds the poller free, and wakes nobody.
const RESUME: std::time::Duration = std::time::Duration::from_millis(1);

/// The longest the background thread rests between two looks at whether
/// threads still poll for the watched locks. The first look comes
/// [`RESUME`] after it let go; while the threads keep coming back, the
/// rests double up to this: a look wakes a CPU, and a thousand a second
/// cost a thread that keeps calling about a tenth of its speed on a busy
/// machine. A push that comes after a busy thread's last call waits this
/// and [`RESUME`] at most; after a lone call, [`RESUME`].
const LONGEST_REST: std::time::Duration = std::time::Duration::from_millis(16);

/// Who polls for a task's rounds until they are decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Polling {
    /// The task itself, without waiting, each time it is polled.
    Myself,
    /// The background thread, from now on: the task polled until now.
    HandOver,
    /// The background thread (or a thread that waits).
    Background,
}

impl Engine {
    /// Starts one round per command for a task, `restart` setting each up.
    /// A task alone (no round in flight) writes its commands at once and
    /// is told to poll for the replies itself ([`check`](Self::check)
    /// with `spin`): `Ok((ids, true))`. Otherwise they are queued on every
    /// connection and written by whoever polls (with what other callers
    /// queued in the same tick), and the task is woken at their decision.
    /// The ids are in order: fewer than asked when the cap is reached,
    /// [`Full`] when none could start.
    pub(crate) fn start(
        self: &Arc<Self>,
        commands: &[Command<'_>],
        restart: impl FnMut(&mut Round, &Command<'_>, Instant),
        waker: &Waker,
        may_spin: bool,
    ) -> Result<(Ids, bool), Full> {
        let mut shared = lock(&self.driver);
        let mut ids = Ids::new();
        let alone = shared.driver.core.flights.len() == 0 && !shared.kicked;
        let mut now = crate::clock::now();
        if alone {
            if let Ok(mut poller) = self.poller.try_lock() {
                if self.read_stale(&mut shared, &mut poller, now) {
                    now = crate::clock::now();
                }
            }
        }
        shared
            .driver
            .submit(commands, restart, &mut ids, alone, now);
        let Some(&first) = ids.first() else {
            return Err(Full);
        };
        self.spawn_background(&mut shared);
        if alone && may_spin {
            // No waiter: nobody wakes this task, it polls. With the masters
            // on this machine, it first lets their processes, woken by its
            // requests, have this CPU, as a lone thread does before it
            // waits: its first look then usually finds the replies (one
            // poll per round instead of three or four).
            if self.yield_first {
                shared.yields += 1;
                drop(shared);
                thread::yield_now();
            }
            return Ok((ids, true));
        }
        shared
            .driver
            .core
            .flights
            .set_waiter(first, Waiter::Task(waker.clone()));
        if alone {
            // Written: the background thread polls for the replies.
            self.kick(&mut shared);
        } else {
            self.wake_poll(&mut shared, true);
            // Whatever the wake waits for, the background thread must poll
            // for this task's rounds (a no-op when it does already).
            if let Some(background) = &shared.background {
                background.unpark();
                shared.wakes += 1;
            }
        }
        Ok((ids, false))
    }

    /// A task's look at its rounds: once all are decided, `done` makes
    /// the result from them and they end. Until then, as `polling` says,
    /// the task polls the sockets itself (without waiting, if nobody else
    /// does; nothing will wake it, it must ask again soon), or its waker
    /// is kept to be woken at their decision.
    pub(crate) fn check<T>(
        &self,
        ids: &[RoundId],
        waker: &Waker,
        polling: Polling,
        done: impl FnOnce(&Driver, &[RoundId]) -> T,
    ) -> Option<T> {
        // (Dropped after the guard: it wakes with the driver free.)
        let mut wakes = Wakes::new();
        let mut shared = lock(&self.driver);
        if polling == Polling::Myself && !shared.driver.core.decided(ids) {
            let taken = self.poller.try_lock();
            if taken.is_err() && self.may_take_poller(&shared) {
                // The background thread polls for a watched lock: it lets
                // a task that polls for itself have the poller, as it lets
                // a lone thread (`Engine::take_poller`).
                self.ask_for_poller(&mut shared);
            }
            if let Ok(mut poller) = taken {
                let polled = poller.poll(std::time::Duration::ZERO);
                shared.count_poll(&poller.events, std::time::Duration::ZERO);
                if polled.is_ok() {
                    shared.driver.dispatch(&poller.events);
                    // Others whose rounds this decided.
                    shared.wake_decided(&mut wakes);
                    // What others queued meanwhile (they may have woken
                    // this poll).
                    shared.woken = false;
                    shared.flush(crate::clock::now());
                }
                let mut poller = Some(poller);
                leave(self, &mut shared, &mut poller, &mut wakes);
            }
        }
        if polling == Polling::Myself && !shared.driver.core.decided(ids) {
            // Nobody else keeps the rounds' deadlines (a thread or the
            // background thread that polls does, when it polls).
            shared.driver.check_timers(crate::clock::now());
        }
        if shared.driver.core.decided(ids) {
            let value = done(&shared.driver, ids);
            shared.driver.core.finish(ids);
            shared.slots_freed(ids.len());
            self.flush_deferred(&mut shared);
            return Some(value);
        }
        shared.driver.core.claim(ids);
        self.flush_deferred(&mut shared);
        if polling != Polling::Myself {
            if let Some(&id) = ids.iter().find(|&&id| !shared.driver.core.decided(&[id])) {
                shared
                    .driver
                    .core
                    .flights
                    .set_waiter(id, Waiter::Task(waker.clone()));
            }
        }
        if polling == Polling::HandOver {
            self.kick(&mut shared);
        }
        None
    }

    /// A task gave up on its rounds (its future was dropped): `then` ends
    /// each of them ([`Driver::abandon`]), or leaves it to the driver
    /// until every master has answered ([`Driver::orphan`]), or passes its
    /// slot to the release that must follow it
    /// ([`Driver::release_after`]); or a task left a release to the
    /// driver (a dropped guard: [`Driver::release_orphan`]). The rounds
    /// left to the driver are polled for by the background thread.
    pub(crate) fn abandon(&self, then: impl FnOnce(&mut Driver)) {
        let mut shared = lock(&self.driver);
        let before = shared.driver.core.flights.len();
        then(&mut shared.driver);
        let freed = before.saturating_sub(shared.driver.core.flights.len());
        shared.slots_freed(freed);
        if shared.driver.core.flights.orphans() > 0 {
            self.kick(&mut shared);
        }
        self.flush_deferred(&mut shared);
    }

    /// Whether timer `id` (0: none yet) has reached `at`; if not, it is
    /// (re)armed to wake `waker` then, and `id` names it.
    pub(crate) fn timer(self: &Arc<Self>, id: &mut u64, at: Instant, waker: &Waker) -> bool {
        let mut shared = lock(&self.driver);
        if crate::clock::now() >= at {
            shared.timers.retain(|(t, _, _)| t != id);
            return true;
        }
        match shared.timers.iter_mut().find(|(t, _, _)| t == id) {
            Some(timer) => timer.2.clone_from(waker),
            None => {
                *id = shared.next_timer;
                shared.next_timer += 1;
                shared.timers.push((*id, at, waker.clone()));
            }
        }
        // The background thread keeps the timers, also for a task that
        // has started no round yet (all its attempts found the client at
        // its cap).
        self.spawn_background(&mut shared);
        self.kick(&mut shared);
        false
    }

    /// A task's look at wait `id`: `Ok` if it was told (a release handed
    /// its caller a lock); if not, `waker` is kept to be woken when it is,
    /// the background thread polls meanwhile, and `Err` carries when a
    /// master told it to try at, if one did.
    pub(crate) fn check_told(
        self: &Arc<Self>,
        id: WaitId,
        waker: &Waker,
    ) -> Result<(), Option<Instant>> {
        let mut shared = lock(&self.driver);
        if shared.driver.core.waits.is_told(id) {
            shared.driver.core.waits.take_waiter(id);
            return Ok(());
        }
        shared
            .driver
            .core
            .waits
            .set_waiter(id, Waiter::Task(waker.clone()));
        self.spawn_background(&mut shared);
        self.kick(&mut shared);
        Err(shared.driver.core.waits.hinted(id))
    }

    /// A task stopped waiting for wait `id`.
    pub(crate) fn forget_told(&self, id: WaitId) {
        lock(&self.driver).driver.core.waits.take_waiter(id);
    }

    /// Disarms timer `id`.
    pub(crate) fn cancel_timer(&self, id: u64) {
        lock(&self.driver).timers.retain(|(t, _, _)| *t != id);
    }

    /// The client is gone: the background thread ends.
    pub(crate) fn close(&self) {
        let mut shared = lock(&self.driver);
        shared.closed = true;
        if let Some(background) = &shared.background {
            background.unpark();
        }
        // A poll in progress returns.
        let _ = self.waker.wake();
    }

    /// Starts the background thread, unless it runs.
    pub(super) fn spawn_background(self: &Arc<Self>, shared: &mut Shared) {
        if shared.background.is_some() {
            return;
        }
        let engine = Arc::clone(self);
        let spawned = thread::Builder::new()
            .name("redlock-mio".into())
            .spawn(move || engine.background());
        // Without a thread (the system refused one) the tasks' rounds are
        // still polled by any thread that waits, and time out at their
        // deadlines otherwise.
        shared.background = spawned.ok().map(|t| t.thread().clone());
    }

    /// Makes sure what tasks queued is written and their rounds are polled
    /// for: wakes the background thread and any poll in progress (once
    /// per tick: the first task to queue does it).
    pub(super) fn kick(&self, shared: &mut Shared) {
        if shared.kicked {
            return;
        }
        shared.kicked = true;
        if let Some(background) = &shared.background {
            background.unpark();
            shared.wakes += 1;
        }
        // Interrupts a poll in progress, the background thread's or a
        // waiting thread's, so that it writes what was queued.
        shared.wakes += 1;
        let _ = self.waker.wake();
    }

    /// The background thread: writes what tasks queue, polls while a task
    /// waits for a round (unless a thread already polls), wakes the tasks
    /// whose rounds are decided and whose timers are due.
    fn background(self: Arc<Self>) {
        let mut wakes = Wakes::new();
        let mut poller: Option<MutexGuard<'_, Poller>> = None;
        let mut rest = RESUME;
        let mut shared = lock(&self.driver);
        while !shared.closed {
            shared.kicked = false;
            let now = crate::clock::now();
            shared.flush(now);
            shared.driver.check_timers(now);
            shared.wake_decided(&mut wakes);
            let mut next_timer: Option<Instant> = None;
            let mut fired = 0;
            shared.timers.retain_mut(|(_, at, waker)| {
                if *at <= now {
                    waker.wake_by_ref();
                    fired += 1;
                    false
                } else {
                    next_timer = Some(next_timer.map_or(*at, |t| t.min(*at)));
                    true
                }
            });
            shared.wakes += fired;
            let need = shared.driver.background_need();
            let for_tasks = need == Need::Tasks;
            if std::mem::take(&mut shared.poller_wanted) && !for_tasks {
                // A caller alone on the client takes the poller over
                // (`Engine::take_poller`, or a task that polls for
                // itself): it reads what comes for the watched locks too
                // while it polls.
                shared.threads_poll = Some(now);
                shared.background_polls = false;
                drop(poller.take());
            }
            // While threads come back within `RESUME` of their last poll,
            // they read what comes for the watched locks, and this thread
            // stays parked: a wake-up per call would cost each of them
            // more than their round.
            let resting = (shared.threads_poll)
                .filter(|_| !for_tasks)
                .map(|since| since.checked_add(RESUME).unwrap_or(since))
                .filter(|&until| now < until);
            if resting.is_none() {
                shared.threads_poll = None;
                rest = RESUME;
            }
            if need == Need::Nothing || resting.is_some() {
                // Nothing to poll for, or a thread polls: leave the poller
                // to the threads. (Resting, it holds none: it let go when
                // asked, and takes it again only once it stops resting.)
                if resting.is_none() || poller.is_some() {
                    leave(&self, &mut shared, &mut poller, &mut wakes);
                }
                shared.background_polls = false;
                drop(shared);
                wakes.wake_all();
                // Rests that grow while the threads keep coming back.
                let look = resting.map(|until| {
                    let at = now.checked_add(rest).map_or(until, |at| at.max(until));
                    rest = (rest * 2).min(LONGEST_REST);
                    at
                });
                match next_timer.into_iter().chain(look).min() {
                    Some(at) => thread::park_timeout(at.saturating_duration_since(now)),
                    None => thread::park(),
                }
                shared = lock(&self.driver);
                shared.rests += u64::from(look.is_some());
                continue;
            }
            let until = next_timer.unwrap_or_else(|| {
                now.checked_add(std::time::Duration::from_secs(1))
                    .unwrap_or(now)
            });
            if poller.is_none() {
                poller = self.poller.try_lock().ok();
            }
            shared.background_polls = poller.is_some();
            // A poller error is the waiting tasks' rounds' timeout.
            shared = self
                .turn(
                    shared,
                    &mut poller,
                    until,
                    Waiting::Background,
                    now,
                    &mut wakes,
                )
                .0;
        }
        shared.background_polls = false;
        leave(&self, &mut shared, &mut poller, &mut wakes);
    }
}

impl Shared {
    /// `n` slots were freed: wakes as many threads waiting for one.
    pub(super) fn slots_freed(&mut self, n: usize) {
        for _ in 0..n {
            match self.slot_waiters.pop() {
                Some(waiter) => {
                    self.wakes += 1;
                    waiter.unpark();
                }
                None => break,
            }
        }
    }
}
