//! The engine's side of the async API: rounds started by tasks, the
//! background thread that polls for them, and the timers of their retry
//! delays (see the parent module's docs).

use std::sync::{Arc, MutexGuard};
use std::task::Waker;
use std::thread;
use std::time::Instant;

use super::{Engine, Full, Ids, Poller, Shared, Waiter, Waiting, leave, take};
use crate::commands::Command;
use crate::driver::Driver;
use crate::rules::Round;

impl Engine {
    /// Starts one round per command for a task, `restart` setting each up:
    /// written at once when no other round is in flight, else queued on
    /// every connection and written by the background thread (with what
    /// other tasks queued in the same tick). Returns the
    /// rounds' ids, in order: fewer than asked when the cap is reached,
    /// [`Full`] when none could start.
    pub(crate) fn start(
        self: &Arc<Self>,
        commands: &[Command<'_>],
        restart: impl FnMut(&mut Round, &Command<'_>, Instant),
        waker: &Waker,
    ) -> Result<Ids, Full> {
        let mut shared = take(&self.driver);
        let mut ids = Ids::new();
        // A task alone (no round in flight) writes its commands at once,
        // without waiting for the background thread; under load they are
        // queued, and the background thread writes all that the tasks of
        // a tick queued together.
        let flush = shared.driver.in_flight() == 0 && !shared.kicked;
        shared.driver.submit(commands, restart, &mut ids, flush);
        let Some(&first) = ids.first() else {
            return Err(Full);
        };
        shared.driver.set_waiter(first, Waiter::Task(waker.clone()));
        self.kick(&mut shared);
        Ok(ids)
    }

    /// A task's look at its rounds: once all are decided, `done` makes
    /// the result from them and they end; until then the task's waker is
    /// kept to be woken at their decision.
    pub(crate) fn check<T>(
        &self,
        ids: &[u64],
        waker: &Waker,
        done: impl FnOnce(&Driver, &[u64]) -> T,
    ) -> Option<T> {
        let mut shared = take(&self.driver);
        shared.driver.check_timers(Instant::now());
        if shared.driver.decided(ids) {
            let value = done(&shared.driver, ids);
            shared.driver.finish(ids);
            shared.slots_freed(ids.len());
            return Some(value);
        }
        if let Some(&id) = ids.iter().find(|&&id| !shared.driver.decided(&[id])) {
            shared.driver.set_waiter(id, Waiter::Task(waker.clone()));
        }
        None
    }

    /// A task gave up on its rounds (its future was dropped): they end
    /// now, their late replies will be dropped, and `then` may queue what
    /// must follow (the release of an acquire).
    pub(crate) fn abandon(&self, ids: &[u64], then: impl FnOnce(&mut Driver)) {
        let mut shared = take(&self.driver);
        shared.driver.abandon(ids);
        then(&mut shared.driver);
        shared.slots_freed(ids.len());
    }

    /// Whether timer `id` (0: none yet) has reached `at`; if not, it is
    /// (re)armed to wake `waker` then, and `id` names it.
    pub(crate) fn timer(self: &Arc<Self>, id: &mut u64, at: Instant, waker: &Waker) -> bool {
        let mut shared = take(&self.driver);
        if Instant::now() >= at {
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
        self.kick(&mut shared);
        false
    }

    /// Disarms timer `id`.
    pub(crate) fn cancel_timer(&self, id: u64) {
        take(&self.driver).timers.retain(|(t, _, _)| *t != id);
    }

    /// The client is gone: the background thread ends.
    pub(crate) fn close(&self) {
        let mut shared = take(&self.driver);
        shared.closed = true;
        if let Some(background) = &shared.background {
            background.unpark();
        }
        // A poll in progress returns.
        let _ = self.waker.wake();
    }

    /// Makes sure what tasks queued is written and their rounds are polled
    /// for: starts the background thread, or wakes it and any poll in
    /// progress (once per tick: the first task to queue does it).
    fn kick(self: &Arc<Self>, shared: &mut Shared) {
        if shared.kicked {
            return;
        }
        shared.kicked = true;
        match &shared.background {
            Some(background) => background.unpark(),
            None => {
                let engine = Arc::clone(self);
                let spawned = thread::Builder::new()
                    .name("redlock-mio".into())
                    .spawn(move || engine.background());
                // Without a thread (the system refused one) the tasks'
                // rounds are still polled by any thread that waits, and
                // time out at their deadlines otherwise.
                shared.background = spawned.ok().map(|t| t.thread().clone());
            }
        }
        // Interrupts a poll in progress, the background thread's or a
        // waiting thread's, so that it writes what was queued.
        let _ = self.waker.wake();
    }

    /// The background thread: writes what tasks queue, polls while a task
    /// waits for a round (unless a thread already polls), wakes the tasks
    /// whose rounds are decided and whose timers are due.
    fn background(self: Arc<Self>) {
        let mut poller: Option<MutexGuard<'_, Poller>> = None;
        let mut shared = take(&self.driver);
        while !shared.closed {
            shared.kicked = false;
            shared.driver.flush_all();
            let now = Instant::now();
            shared.driver.check_timers(now);
            shared.driver.wake_decided();
            let mut next_timer: Option<Instant> = None;
            shared.timers.retain_mut(|(_, at, waker)| {
                if *at <= now {
                    waker.wake_by_ref();
                    false
                } else {
                    next_timer = Some(next_timer.map_or(*at, |t| t.min(*at)));
                    true
                }
            });
            if !shared.driver.tasks_waiting() {
                // Nothing to poll for: leave the poller to the threads.
                leave(&self, &mut shared, &mut poller);
                drop(shared);
                match next_timer {
                    Some(at) => thread::park_timeout(at.saturating_duration_since(now)),
                    None => thread::park(),
                }
                shared = take(&self.driver);
                continue;
            }
            let until = next_timer.unwrap_or_else(|| {
                now.checked_add(std::time::Duration::from_secs(1))
                    .unwrap_or(now)
            });
            // A poller error is the waiting tasks' rounds' timeout.
            shared = self.turn(shared, &mut poller, until, Waiting::Background).0;
        }
        leave(&self, &mut shared, &mut poller);
    }
}

impl Shared {
    /// `n` slots were freed: wakes as many threads waiting for one.
    pub(super) fn slots_freed(&mut self, n: usize) {
        for _ in 0..n {
            match self.slot_waiters.pop() {
                Some(waiter) => waiter.unpark(),
                None => break,
            }
        }
    }
}
