//! Many callers, one driver: threads share the connections and the rounds
//! in flight, and take turns at the poller.
//!
//! A caller starts its rounds (their commands go out at once, in its own
//! write to each master) and then waits for their decisions. While nobody
//! polls, it polls itself, for everyone: it reads every reply that
//! arrives, hands each to its round, and wakes the callers whose rounds
//! are decided (alone, it looks without waiting, yielding between looks,
//! for up to [`Builder::spin`]; with remote masters from the first reply). Otherwise it parks until its
//! rounds are decided or their deadline passes. A lone caller therefore
//! never pays a cross-thread wake-up: it writes, polls and reads on its
//! own thread, as a client without sharing would. When the polling caller's rounds are decided it
//! wakes one of the callers still waiting, which takes the poller over.
//!
//! Tasks (the async API) cannot block in a poll. A task alone on the
//! client (nothing else in flight) writes its commands at once and polls
//! for the replies itself, without waiting, each time the executor polls
//! it, for a short while ([`Builder::spin`]); then, and for every
//! task under load, a background thread, started at the first async call,
//! takes the poller's part. It writes what the tasks queued in one write
//! per master, however many rounds that holds, polls, and wakes the tasks
//! whose rounds are decided. It also keeps the timers of the tasks' retry
//! delays. While a thread polls, the background thread leaves the polling
//! to it. While a lock is watched, the background thread polls for the
//! masters' pushes whenever nobody else does; a caller alone on the
//! client (a thread, or a task that polls for itself) writes its commands
//! at once, asks it for the poller and polls for itself
//! ([`Engine::take_poller`]), and the background thread leaves the
//! polling to the callers as long as one comes back within a millisecond
//! (`RESUME`) of the last one's poll. It looks at that a millisecond after
//! it let go, then at rests that double while the callers keep coming
//! back (`LONGEST_REST`): its looks never cost a busy caller much CPU.
//!
//! Ticks: the callers woken at their rounds' decisions usually come back
//! with new rounds at once (a release after an acquire, the next
//! acquire). Commands queued while some of them have yet to come back do
//! not interrupt the poll; the last one to come back does, so that one
//! write per master carries what they all queued. One that never comes
//! back (a future no longer polled) delays the others' commands by
//! [`DEFER`] at most.
//!
//! Lock order: the poller before the driver, and the poller is only ever
//! taken with `try_lock` while the driver is held, so no two callers can
//! wait for each other. Waiters are woken once the driver is free
//! ([`Wakes`]), so that they do not wake only to wait for it.
//!
//! [`Builder::spin`]: crate::Builder::spin

use std::io;
use std::sync::{Mutex, MutexGuard};

use crate::sync::lock;
use std::task::Waker;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::{Driver, Need, Poller};
use crate::commands::Command;
use crate::ids::{RoundId, WaitId};
use crate::rules::Round;

mod tasks;
mod watches;

pub(crate) use tasks::Polling;
pub(crate) use watches::{Holders, Loss};

/// The poller token of the engine's waker (never a connection's index).
pub(crate) const WAKE: mio::Token = mio::Token(usize::MAX);

/// Who waits for a round.
pub(crate) enum Waiter {
    /// A thread, parked.
    Thread(Thread),
    /// A task, through its waker.
    Task(Waker),
}

impl Waiter {
    pub(crate) fn wake(self) {
        match self {
            Waiter::Thread(thread) => thread.unpark(),
            Waiter::Task(waker) => waker.wake(),
        }
    }

    pub(crate) fn is_thread(&self) -> bool {
        matches!(self, Waiter::Thread(_))
    }
}

/// Round ids of one call.
pub(crate) type Ids = SmallVec<[RoundId; 4]>;

/// How many waiters a [`Wakes`] holds.
const WAKES: usize = 64;

/// Waiters to wake once the driver's mutex is let go, so that none of them
/// wakes only to wait for it (a convoy: under load, most callers woken
/// with the mutex held met it taken, and parked again on it). A caller
/// collects them while it holds the driver and wakes them as soon as it
/// lets go: before it blocks, and at the latest when the batch drops (it
/// is declared before the driver's guard, so that it drops after it).
/// Past its room (a tick that decides more rounds than that) the rest are
/// woken at once: it never allocates.
pub(crate) struct Wakes(SmallVec<[Waiter; WAKES]>);

impl Wakes {
    pub(crate) fn new() -> Wakes {
        Wakes(SmallVec::new())
    }

    /// Wakes `waiter` with the others, or now if there is no room left.
    pub(crate) fn push(&mut self, waiter: Waiter) {
        if self.0.len() < WAKES {
            self.0.push(waiter);
        } else {
            waiter.wake();
        }
    }

    /// Wakes the waiters collected so far (call it with the driver free).
    pub(crate) fn wake_all(&mut self) {
        for waiter in self.0.drain(..) {
            waiter.wake();
        }
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        self.wake_all();
    }
}

/// The rounds in flight are at the client's cap, and no slot freed up in
/// time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

/// A driver shared by many callers (see the module docs).
pub(crate) struct Engine {
    driver: Mutex<Shared>,
    poller: Mutex<Poller>,
    /// Interrupts a poll in progress, so that what tasks queued is written.
    waker: mio::Waker,
    /// A lone thread yields its CPU before each poll, a lone task once
    /// after it wrote its round: the masters run on this machine
    /// ([`Builder::yield_to_local_masters`]).
    ///
    /// [`Builder::yield_to_local_masters`]: crate::Builder::yield_to_local_masters
    yield_first: bool,
    /// How long a lone caller looks for its replies without waiting,
    /// yielding its CPU between looks, before it waits in the poll
    /// ([`Builder::spin`](crate::Builder::spin)).
    spin: Duration,
}

/// What the driver's mutex guards.
pub(crate) struct Shared {
    pub(crate) driver: Driver,
    /// Callers waiting for a free slot, woken one per freed slot.
    slot_waiters: Vec<Thread>,
    /// The background thread, once started.
    background: Option<Thread>,
    /// Tasks queued commands since the background thread last flushed.
    kicked: bool,
    /// A thread queued commands for the polling caller and woke its poll.
    woken: bool,
    /// Commands were queued without waking the poll, because callers
    /// woken at their rounds' decisions had yet to come back (see
    /// [`Engine::flush_deferred`]): since when, and whether a task queued some.
    deferred: Option<(Instant, bool)>,
    /// Tasks' timers: when, and whom to wake, by timer id.
    timers: Vec<(u64, Instant, Waker)>,
    next_timer: u64,
    /// The client is gone: the background thread ends.
    closed: bool,
    /// The background thread holds the poller (polls, or is about to).
    background_polls: bool,
    /// A thread alone on the client asks the background thread, which
    /// polls for a watched lock, for the poller (see
    /// [`Engine::take_poller`]).
    poller_wanted: bool,
    /// The background thread let the threads poll for the watched locks:
    /// since when, or when a thread last let go of the poller since then.
    /// It polls again once none has come back for a while, or a task
    /// needs it.
    threads_poll: Option<Instant>,
    /// The watched keys' holders, told when their watch finds the lock
    /// lost (see [`crate::flights::Watches`]); a holder that is gone is
    /// forgotten, and its watch stopped.
    losses: Holders,
    /// How often a lone caller yielded its CPU (see `Engine::yield_first`).
    pub(crate) yields: u64,
    /// Waits on the poller so far, those that returned no event, and the
    /// looks at it that did not wait (see [`crate::EngineStats`]).
    pub(crate) polls: u64,
    pub(crate) idle_polls: u64,
    pub(crate) looks: u64,
    pub(crate) idle_looks: u64,
    /// Wake-ups the engine itself sent so far: the background thread
    /// unparked, a poll interrupted, a caller given a freed slot, a task's
    /// timer (the callers woken at their rounds' decisions are the
    /// driver's count).
    pub(crate) wakes: u64,
    /// The background thread's rests while threads poll for the watched
    /// locks (see `tasks::LONGEST_REST`).
    pub(crate) rests: u64,
}

impl Engine {
    pub(crate) fn new(
        driver: Driver,
        poller: Poller,
        yield_first: bool,
        spin: Duration,
    ) -> io::Result<Engine> {
        let waker = mio::Waker::new(poller.poll.registry(), WAKE)?;
        Ok(Engine {
            driver: Mutex::new(Shared {
                slot_waiters: Vec::with_capacity(driver.core.flights.capacity()),
                driver,
                background: None,
                kicked: false,
                woken: false,
                deferred: None,
                timers: Vec::new(),
                next_timer: 1,
                closed: false,
                background_polls: false,
                poller_wanted: false,
                threads_poll: None,
                losses: Holders::default(),
                yields: 0,
                polls: 0,
                idle_polls: 0,
                looks: 0,
                idle_looks: 0,
                wakes: 0,
                rests: 0,
            }),
            poller: Mutex::new(poller),
            waker,
            yield_first,
            spin,
        })
    }

    /// The shared driver, for a short step (queueing a release, reading
    /// statistics).
    pub(crate) fn driver(&self) -> MutexGuard<'_, Shared> {
        lock(&self.driver)
    }

    /// Runs one round per command, `restart` setting each up, until all
    /// are decided (each by its own deadline) or the poller fails; then
    /// hands their ids, in the order of `commands`, to `done` with the
    /// driver held (the rounds are freed when it returns), and returns
    /// what `done` made with the poller's error, if any.
    ///
    /// Rounds take slots of the client's table; when all are taken the
    /// call waits for others to finish, until `wait_until`. Then it fails
    /// with [`Full`] if it could start none of its rounds; a batch that
    /// started some runs those (`done` gets fewer ids than commands: the
    /// first ones).
    pub(crate) fn run<T>(
        &self,
        commands: &[Command<'_>],
        wait_until: Instant,
        mut restart: impl FnMut(&mut Round, &Command<'_>, Instant),
        done: impl FnOnce(&Driver, &[RoundId]) -> T,
    ) -> Result<(T, io::Result<()>), Full> {
        // (Dropped after the guards: it wakes with the driver free.)
        let mut wakes = Wakes::new();
        let mut shared = lock(&self.driver);
        let mut poller = self.poller.try_lock().ok();
        let mut now = crate::clock::now();
        if let Some(poller) = poller.as_mut() {
            if self.read_stale(&mut shared, poller, now) {
                now = crate::clock::now();
            }
        }
        let mut ids = Ids::new();
        while ids.len() < commands.len() {
            // While another caller polls, the commands are queued for it
            // to write, with whatever else is queued, once its poll
            // returns (woken for it): one write per master per tick
            // however many callers start rounds meanwhile. A caller alone
            // on the client that will take the poller over from the
            // background thread (`take_poller`) has nothing to share a
            // write with: it writes at once.
            let flush = poller.is_some() || (shared.alone() && self.may_take_poller(&shared));
            let started =
                shared
                    .driver
                    .submit(&commands[ids.len()..], &mut restart, &mut ids, flush, now);
            if !flush && started > 0 {
                self.wake_poll(&mut shared, false);
            }
            if ids.len() == commands.len() {
                break;
            }
            // No free slot. None can free up if every round in flight is
            // this call's own; else wait for one (polling while nobody
            // else does: the rounds holding the slots need their replies).
            now = crate::clock::now();
            let only_ours = shared.driver.core.flights.len() == ids.len();
            if started > 0 || only_ours || now >= wait_until {
                if ids.is_empty() {
                    leave(self, &mut shared, &mut poller, &mut wakes);
                    return Err(Full);
                }
                if only_ours || now >= wait_until {
                    // Part of a batch is out: wait for it, and fail the
                    // rest.
                    break;
                }
                continue;
            }
            shared.driver.check_timers(now);
            shared.wake_decided(&mut wakes);
            // (A poller error is met again, and returned, by the wait.)
            shared = self
                .turn(
                    shared,
                    &mut poller,
                    wait_until,
                    Waiting::Slot,
                    now,
                    &mut wakes,
                )
                .0;
            now = crate::clock::now();
        }
        if poller.is_none() && shared.driver.core.flights.len() == ids.len() {
            shared = self.take_poller(shared, &mut poller, &ids, &mut wakes);
            now = crate::clock::now();
        }
        let (mut shared, result) = self.wait(shared, &mut poller, &ids, now, &mut wakes);
        let value = done(&shared.driver, &ids);
        shared.driver.core.finish(&ids);
        shared.slots_freed(ids.len());
        self.flush_deferred(&mut shared);
        leave(self, &mut shared, &mut poller, &mut wakes);
        Ok((value, result))
    }

    /// Waits until every round of `ids` is decided: polling while nobody
    /// else does, else parked until woken or the earliest deadline. The
    /// time is `now`.
    ///
    /// A caller alone on the client looks for its replies without waiting,
    /// yielding its CPU between looks, for up to [`spin`](Self::spin): a
    /// thread that sleeps in the poll pays a wake-up per reply that wakes
    /// it, which costs as much as a local master's whole answer. With the
    /// masters on this machine it spins from the start (they answer within
    /// microseconds); with remote ones, from the first reply on (the others
    /// come within the spread of the masters' round trips, where a sleeper
    /// would wake once more for each; before it, a spin would only burn a
    /// round trip of CPU). Once other rounds are in flight, or the spin is
    /// over, it waits in the poll.
    fn wait<'a>(
        &'a self,
        mut shared: MutexGuard<'a, Shared>,
        poller: &mut Option<MutexGuard<'a, Poller>>,
        ids: &[RoundId],
        mut now: Instant,
        wakes: &mut Wakes,
    ) -> (MutexGuard<'a, Shared>, io::Result<()>) {
        let spin_from = |now: Instant| Some(now.checked_add(self.spin).unwrap_or(now));
        let mut spin_until = if self.yield_first {
            spin_from(now)
        } else {
            None
        };
        loop {
            let alone = poller.is_some() && shared.driver.core.flights.len() == ids.len();
            if spin_until.is_none() && heard(&shared.driver.core.flights, ids) {
                spin_until = spin_from(now);
            }
            let spinning = alone && spin_until.is_some_and(|until| now < until);
            if alone && (self.yield_first || (spinning && !shared.driver.core.decided(ids))) {
                // Alone, with the masters on this machine: their processes,
                // woken by the requests, may be waiting for this CPU. Once
                // they have had it, the poll finds their replies instead of
                // sleeping until each one wakes this thread; and after the
                // decision, the masters that have yet to answer finish
                // before the next round's requests meet them. A caller that
                // spins yields between its looks whatever the masters' place:
                // it must not keep a CPU from others. (The driver is free
                // meanwhile; the time is read again, so that the poll still
                // ends at the deadline.)
                drop(shared);
                wakes.wake_all();
                thread::yield_now();
                shared = lock(&self.driver);
                shared.yields += u64::from(self.yield_first);
                now = crate::clock::now();
            }
            // (A caller woken at its rounds' decision skips the timers:
            // whoever polls keeps them.)
            if !shared.driver.core.decided(ids) {
                shared.driver.check_timers(now);
            }
            shared.wake_decided(wakes);
            if shared.driver.core.decided(ids) {
                return (shared, Ok(()));
            }
            let deadline = ids
                .iter()
                .filter_map(|&id| shared.driver.core.flights.round(id))
                .filter(|round| round.decision().is_none())
                .map(Round::deadline)
                .min()
                .unwrap_or(now);
            let undecided = ids.iter().find(|&&id| !shared.driver.core.decided(&[id]));
            let waiting = undecided.map_or(Waiting::Slot, |&id| Waiting::Round(id));
            // A look that does not wait is a poll until now.
            let until = if spinning { now } else { deadline };
            let result;
            (shared, result, now) = self.turn(shared, poller, until, waiting, now, wakes);
            if let Err(error) = result {
                return (shared, Err(error));
            }
        }
    }

    /// A caller alone on the client (its rounds `ids` the only ones in
    /// flight, written) found the poller taken by the background thread,
    /// which polls while a lock is watched. Rather than wait for the
    /// background thread to read its replies and wake it (two wake-ups
    /// across threads per round), it asks for the poller and looks for it
    /// as a lone caller looks for its replies, yielding between looks, for
    /// up to [`spin`](Self::spin): the background thread lets go at its
    /// poll's next return (woken now), while the masters answer, and leaves
    /// the polling to the threads while they keep coming back. Taken, the
    /// caller waits as a lone caller does. Not taken in time, or with the
    /// spin off, it waits as it would have.
    fn take_poller<'a>(
        &'a self,
        mut shared: MutexGuard<'a, Shared>,
        poller: &mut Option<MutexGuard<'a, Poller>>,
        ids: &[RoundId],
        wakes: &mut Wakes,
    ) -> MutexGuard<'a, Shared> {
        if !self.may_take_poller(&shared) {
            return shared;
        }
        let now = crate::clock::now();
        let until = now.checked_add(self.spin).unwrap_or(now);
        self.ask_for_poller(&mut shared);
        while poller.is_none() && !shared.driver.core.decided(ids) && crate::clock::now() < until {
            drop(shared);
            wakes.wake_all();
            thread::yield_now();
            *poller = self.poller.try_lock().ok();
            shared = lock(&self.driver);
        }
        shared.poller_wanted = false;
        shared
    }

    /// Whether a caller alone on the client may take the poller over from
    /// the background thread: it holds it (for a watched lock), and the
    /// caller may spin while it lets go.
    pub(super) fn may_take_poller(&self, shared: &Shared) -> bool {
        !self.spin.is_zero() && shared.background_polls
    }

    /// Asks the background thread for the poller: it lets go at its poll's
    /// next return, woken now, unless tasks need it. (A failed wake leaves
    /// the caller to wait as it would have.)
    pub(super) fn ask_for_poller(&self, shared: &mut Shared) {
        if shared.poller_wanted {
            return;
        }
        shared.poller_wanted = true;
        shared.wakes += 1;
        let _ = self.waker.wake();
    }

    /// Waits until wait `id` is told (a release handed its caller a lock;
    /// see [`crate::flights::Waits`]) or until `until` (sooner if a master
    /// told it a time to try at), polling for
    /// everyone while nobody else does, else parked. Returns whether it
    /// was told.
    pub(crate) fn wait_told(&self, id: WaitId, until: Instant) -> bool {
        // (Dropped after the guards: it wakes with the driver free.)
        let mut wakes = Wakes::new();
        let mut shared = lock(&self.driver);
        let mut poller = self.poller.try_lock().ok();
        let mut now = crate::clock::now();
        let told = loop {
            shared.driver.check_timers(now);
            shared.wake_decided(&mut wakes);
            if shared.driver.core.waits.is_told(id) {
                break true;
            }
            // A master may have told it to try sooner.
            let until = shared
                .driver
                .core
                .waits
                .hinted(id)
                .map_or(until, |at| at.min(until));
            if now >= until {
                break false;
            }
            // (A poller error is met again by the next round's wait.)
            (shared, _, now) = self.turn(
                shared,
                &mut poller,
                until,
                Waiting::Told(id),
                now,
                &mut wakes,
            );
        };
        shared.driver.core.waits.take_waiter(id);
        leave(self, &mut shared, &mut poller, &mut wakes);
        told
    }

    /// One turn of waiting, until `until` at the latest, from `now`: polls
    /// for every caller and dispatches what it read if this caller holds
    /// the poller or nobody does, else parks until woken. Returns with the
    /// time the poll or the park ended (timers checked with it fire at
    /// most the dispatch's few microseconds late; replies are timed as
    /// they are read). Wakes `wakes` once the driver is free.
    fn turn<'a>(
        &'a self,
        mut shared: MutexGuard<'a, Shared>,
        poller: &mut Option<MutexGuard<'a, Poller>>,
        until: Instant,
        waiting: Waiting,
        now: Instant,
        wakes: &mut Wakes,
    ) -> (MutexGuard<'a, Shared>, io::Result<()>, Instant) {
        if poller.is_none() {
            *poller = self.poller.try_lock().ok();
        }
        match poller.as_mut() {
            Some(held) => {
                let until = shared.deferred_until(now, until);
                let timeout = shared.driver.poll_timeout(now, until);
                // Poll with the driver free, so that other callers can
                // start their rounds meanwhile.
                drop(shared);
                wakes.wake_all();
                let polled = held.poll(timeout);
                let now = held.last;
                shared = lock(&self.driver);
                shared.count_poll(&held.events, timeout);
                if polled.is_ok() {
                    shared.driver.dispatch(&held.events);
                    // What other callers and tasks queued meanwhile (they
                    // woke this poll).
                    shared.woken = false;
                    shared.flush(now);
                }
                (shared, polled, now)
            }
            None => {
                match waiting {
                    Waiting::Round(id) => shared
                        .driver
                        .core
                        .flights
                        .set_waiter(id, Waiter::Thread(thread::current())),
                    Waiting::Slot => shared.slot_waiters.push(thread::current()),
                    Waiting::Told(id) => shared
                        .driver
                        .core
                        .waits
                        .set_waiter(id, Waiter::Thread(thread::current())),
                    // Woken by the thread that polls when it leaves.
                    Waiting::Background => {}
                }
                drop(shared);
                wakes.wake_all();
                thread::park_timeout(until.saturating_duration_since(now));
                shared = lock(&self.driver);
                if waiting == Waiting::Slot {
                    let me = thread::current().id();
                    shared.slot_waiters.retain(|t| t.id() != me);
                }
                (shared, Ok(()), crate::clock::now())
            }
        }
    }
}

impl Engine {
    /// Reads, without waiting, whatever arrived while nobody polled, if
    /// that was a while ago ([`Poller::stale`]): late replies to earlier
    /// rounds, so that their requests do not look stalled, and anything
    /// unprompted, so that a reply to nothing fails its connection before
    /// a new request could be matched to it.
    ///
    /// The time is `now`; returns whether it polled (then time passed).
    fn read_stale(&self, shared: &mut Shared, poller: &mut Poller, now: Instant) -> bool {
        if !poller.stale(now) {
            return false;
        }
        // (Should the poller fail, the caller's wait says so.)
        if poller.poll(Duration::ZERO).is_ok() {
            shared.driver.dispatch(&poller.events);
        }
        shared.count_poll(&poller.events, Duration::ZERO);
        true
    }
}

/// Whether a master has answered one of the rounds `ids` (or failed it).
fn heard(flights: &crate::flights::Flights<Waiter>, ids: &[RoundId]) -> bool {
    ids.iter().filter_map(|&id| flights.round(id)).any(|round| {
        round
            .nodes()
            .iter()
            .any(|state| *state != crate::rules::NodeState::Pending)
    })
}

/// The longest that commands queued for a tick wait for the callers still
/// to come back (a caller whose future is never polled again must not
/// hold the others' commands back for long).
const DEFER: Duration = Duration::from_micros(250);

impl Engine {
    /// Commands were queued while another caller polls: wakes the poll so
    /// that it writes them, unless callers woken at their rounds'
    /// decisions have yet to come back, likely with commands of their
    /// own; then the wake waits for the last of them
    /// ([`flush_deferred`](Self::flush_deferred)), and one write per master carries
    /// what they all queued.
    fn wake_poll(&self, shared: &mut Shared, task: bool) {
        if shared.driver.core.flights.unclaimed() > 0 {
            let since = shared.deferred.map_or_else(Instant::now, |(at, _)| at);
            let task = task || shared.deferred.is_some_and(|(_, t)| t);
            shared.deferred = Some((since, task));
            return;
        }
        if task {
            self.kick(shared);
        } else if !shared.woken {
            shared.woken = true;
            shared.wakes += 1;
            // A failed wake leaves the commands to the poll's next return
            // (at the latest a deadline).
            let _ = self.waker.wake();
        }
    }

    /// A caller came back for its rounds: once none woken is left to come
    /// back, what was queued meanwhile is written (the poll is woken).
    fn flush_deferred(&self, shared: &mut Shared) {
        if shared.driver.core.flights.unclaimed() > 0 {
            return;
        }
        if let Some((_, task)) = shared.deferred.take() {
            self.wake_poll(shared, task);
        }
    }
}

impl Shared {
    /// Whether no round is in flight and nothing waits to be written: a
    /// caller's commands would go out alone.
    fn alone(&self) -> bool {
        self.driver.core.flights.len() == 0 && !self.kicked && self.deferred.is_none()
    }

    /// The engine's counters, with the driver's.
    pub(crate) fn engine_stats(&self) -> crate::EngineStats {
        self.driver.engine_stats(
            [self.polls, self.idle_polls, self.looks, self.idle_looks],
            self.wakes,
            self.rests,
        )
    }

    /// Counts a call of the poller that waited up to `timeout` and
    /// returned `events`: a look if it did not wait, else a poll, idle if
    /// it returned no event.
    pub(crate) fn count_poll(&mut self, events: &mio::Events, timeout: Duration) {
        if timeout.is_zero() {
            self.looks += 1;
            self.idle_looks += u64::from(events.is_empty());
        } else {
            self.polls += 1;
            self.idle_polls += u64::from(events.is_empty());
        }
    }

    /// Has the waiters of the rounds decided so far woken (with `wakes`),
    /// and ends the orphaned rounds that no master is left to answer
    /// (waking as many callers waiting for a slot).
    pub(crate) fn wake_decided(&mut self, wakes: &mut Wakes) {
        self.driver.wake_decided(wakes);
        let freed = self.driver.core.reap();
        self.slots_freed(freed);
        self.tell_losses();
    }

    /// Tells the holders of the watches found lost since the last call.
    fn tell_losses(&mut self) {
        self.losses.tell(&mut self.driver.core.watches, |()| {});
    }

    /// Writes what the callers queued, unless it waits for callers still
    /// to come back (for [`DEFER`] at most).
    fn flush(&mut self, now: Instant) {
        if let Some((since, _)) = self.deferred {
            if now < since + DEFER {
                return;
            }
        }
        self.deferred = None;
        self.driver.flush_all();
    }

    /// How long a poll that starts `now` may wait, given that it would
    /// wait until `until`: while callers woken at their rounds' decisions
    /// have yet to come back, commands may be queued for them and wait,
    /// [`DEFER`] at most, for the others', and the poll must return in
    /// time to write them.
    fn deferred_until(&self, now: Instant, until: Instant) -> Instant {
        let until = match self.deferred {
            Some((since, _)) => until.min(since + DEFER),
            None => until,
        };
        if self.driver.core.flights.unclaimed() > 0 {
            until.min(now + DEFER)
        } else {
            until
        }
    }
}

/// What a parked caller waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// A decision of this round.
    Round(RoundId),
    /// A free slot.
    Slot,
    /// To be told by the masters that a lock was handed over (a wait).
    Told(WaitId),
    /// The background thread: anything to do for the tasks.
    Background,
}

/// Lets go of the poller, if this caller holds it or nobody does, and
/// has a caller still waiting for a round take it over (woken with
/// `wakes`).
fn leave<'a>(
    engine: &'a Engine,
    shared: &mut Shared,
    poller: &mut Option<MutexGuard<'a, Poller>>,
    wakes: &mut Wakes,
) {
    let held = poller.take().or_else(|| engine.poller.try_lock().ok());
    if let Some(held) = held {
        drop(held);
        if shared.driver.hand_over(wakes) {
            return;
        }
        let need = shared.driver.background_need();
        if need != Need::Nothing {
            if shared.threads_poll.is_some() && need == Need::Watches {
                // Only the watched locks need a poll: the background thread
                // takes it back by itself unless a thread comes back soon.
                shared.threads_poll = Some(crate::clock::now());
                return;
            }
            shared.threads_poll = None;
            if let Some(background) = &shared.background {
                background.unpark();
                shared.wakes += 1;
            }
        }
    }
}
