//! The callers of each client: each makes calls one after another, as a
//! thread of the blocking front end would: an acquire that tries once
//! (`try_lock`), that waits with the configured retries (`lock`) or until
//! a deadline (`lock_until`), the pursuit between attempts being the
//! front end's own; then it holds the lock, extends it, releases it,
//! forgets it (a holder that crashed), or drops a call half-way (a future
//! dropped); or it hands the lock to a keeper, the keeper thread's own
//! machine (`Keeping`) driven with the simulated time, which extends it on
//! time until the holder asks for the release, and then releases it. Now
//! and then it asks for a name in the crate's key space,
//! which must be refused before anything is sent. A fenced client's
//! attempts are fenced acquires, the front ends' own machine of rounds.
//!
//! Each call is checked against its documented bound, and each lock's
//! validity, as the client computed it, is recorded in global time for
//! the mutual exclusion checker (a kept lock's only while its keeper has
//! not reported it lost), and its fence for the fence checker; each step
//! of a keeper, with the standing it reported, for the standing checker
//! and the checker of what a keeper sends after its release;
//! and each keeper's wake is checked against the periods and the validity
//! end its documentation promises.

use std::time::{Duration, Instant};

use crate::client::{Fenced, Held, Names, Pursue};
use redlock_mio::NodeState;
use redlock_mio::sim::calls::Keeping;
use redlock_mio::sim::{Round, RoundId};

use super::history::{self, Holding};
use super::{Ev, World};

mod call;
mod hold;
mod kept;

/// One caller.
pub(crate) struct Task {
    state: State,
    /// Its timer's generation: a timer event of another is stale.
    timer: u64,
}

enum State {
    /// Between calls: its timer starts the next.
    Idle,
    /// A call that acquires.
    Acquire(Box<Call>),
    /// Holds a lock: its timer decides what next.
    Hold(Box<Lock>),
    /// An extend of the lock in flight (its timer, if set, drops it).
    Extend(Box<Lock>, Pending),
    /// The release of the lock in flight (its timer, if set, drops it).
    Release(Box<Lock>, Pending),
    /// No more calls: the world is calm.
    Done,
}

/// A call's round in flight.
#[derive(Debug, Clone, Copy)]
struct Pending {
    id: RoundId,
    begun: Instant,
    begun_g: u64,
    ttl: Duration,
    /// A release's: the reservations its hand-off may make for nobody
    /// who comes (see `World::idle_windows`).
    idle: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Try,
    Lock,
    Until(Instant),
}

impl Kind {
    /// The kind as a trace shows it: a deadline as the time from the
    /// call's start `begun`, never as a host `Instant`, so that a seed's
    /// replay prints the same trace byte for byte.
    fn describe(self, begun: Instant) -> String {
        match self {
            Kind::Try => "Try".to_owned(),
            Kind::Lock => "Lock".to_owned(),
            Kind::Until(deadline) => {
                format!("Until(+{:?})", deadline.saturating_duration_since(begun))
            }
        }
    }
}

/// An attempt in flight: its round, or a fenced acquire's rounds.
enum Flight {
    Plain(RoundId),
    Fenced(Box<Fenced>),
}

/// An acquire call.
struct Call {
    /// The resources, by index, and as the front end names them.
    res: Vec<usize>,
    names: Names,
    ttl: Duration,
    kind: Kind,
    token: [u8; 20],
    /// The attempt in flight, if one is; else the call waits between
    /// attempts until `until`, unless told sooner.
    round: Option<Flight>,
    until: Instant,
    /// The front end's machine of a call that waits (none for a `try_lock`).
    pursue: Option<Pursue>,
    begun: Instant,
    begun_g: u64,
    /// The rounds its fenced attempts ran beyond one each.
    more_rounds: u32,
    /// When its attempts ended refused, if it waits in the masters'
    /// queues, and whether each left it queued for the hand-off.
    queued: Vec<(u64, bool)>,
    /// It stalled when told, and has not attempted since.
    stalled: bool,
    /// Its place in the queues (its client's wall clock when it began).
    place: u64,
}

/// What a holder does next.
enum Choice {
    Release,
    Extend,
    Keep,
    /// Never releases it (a holder that crashed).
    Forget,
    /// Drops its guard: the release goes out, nobody waits for it.
    DropGuard,
}

/// A lock held, and the stretch of its validity the client counts on now
/// (for each of its resources).
struct Lock {
    res: Vec<usize>,
    held: Held,
    holding: Holding,
    /// Its keeper, if it is kept.
    kept: Option<Box<Kept>>,
}

/// A kept lock's keeper: what the keeper's thread keeps, its keeping
/// driven by the task with the simulated time.
struct Kept {
    keeping: Keeping,
    /// The TTL each extension sets, and the period between extensions
    /// that the keeper's documentation promises.
    ttl: Duration,
    period: Duration,
    /// When the holder asks for the release (global).
    release_at: u64,
    /// When the keeper last woke to extend (client's clock).
    woke: Instant,
    /// The latest the keeper may wake next, by its documentation, and
    /// since when it waits (global); none once lost.
    due: Option<(u64, u64)>,
}

impl Call {
    /// Whether it holds a slot in the table of waits (it waits in the
    /// masters' queues).
    fn waits(&self) -> bool {
        self.pursue.as_ref().is_some_and(Pursue::waits)
    }
}

impl Task {
    pub(crate) fn new() -> Task {
        Task {
            state: State::Idle,
            timer: 0,
        }
    }

    /// Whether it makes no call and holds no lock.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Whether it makes a call that waits in the queue of resource `r`.
    fn waits_on(&self, r: usize) -> bool {
        matches!(&self.state, State::Acquire(call) if call.waits() && call.res.contains(&r))
    }

    /// The lock it holds, if any, and whether its release has begun.
    pub(crate) fn held(&self) -> Option<(&Held, bool)> {
        match &self.state {
            State::Hold(lock) | State::Extend(lock, _) => Some((&lock.held, false)),
            State::Release(lock, _) => Some((&lock.held, true)),
            _ => None,
        }
    }

    pub(crate) fn describe(&self) -> &'static str {
        match &self.state {
            State::Idle => "idle",
            State::Acquire(call) if call.round.is_some() => "acquiring",
            State::Acquire(_) => "waiting between attempts",
            State::Hold(_) => "holding",
            State::Extend(..) => "extending",
            State::Release(..) => "releasing",
            State::Done => "done",
        }
    }
}

/// The masters that answered `round` with a grant, bit `i` for master `i`.
fn grants(round: &Round) -> u64 {
    round
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, s)| **s == NodeState::Ok)
        .fold(0, |mask, (i, _)| mask | 1 << i.min(63))
}

impl World {
    /// Sets task `k` of client `c`'s timer at `at` (the one before is
    /// stale).
    pub(crate) fn task_timer_at(&mut self, c: usize, k: usize, at: u64) {
        let task = &mut self.clients[c].tasks[k];
        task.timer += 1;
        let timer = task.timer;
        self.at(
            at,
            Ev::Task {
                client: c,
                task: k,
                timer,
            },
        );
    }

    /// Sets task `k`'s timer at `at` on client `c`'s clock.
    fn task_timer_local(&mut self, c: usize, k: usize, at: Instant) {
        let at = self.clients[c].clock.global(at);
        self.task_timer_at(c, k, at);
    }

    /// Task `k` thinks a while before its next step.
    fn think(&mut self, c: usize, k: usize, mean: u64) {
        let at = self.t + self.clients[c].rng.exp(mean) + 1;
        self.task_timer_at(c, k, at);
    }

    fn take_state(&mut self, c: usize, k: usize) -> State {
        std::mem::replace(&mut self.clients[c].tasks[k].state, State::Idle)
    }

    fn put_state(&mut self, c: usize, k: usize, state: State) {
        self.clients[c].tasks[k].state = state;
    }

    /// Task `k` of client `c`'s timer.
    pub(crate) fn task_timer(&mut self, c: usize, k: usize, timer: u64) {
        if self.deferred(
            c,
            Ev::Task {
                client: c,
                task: k,
                timer,
            },
        ) {
            return;
        }
        if self.clients[c].tasks[k].timer != timer {
            return;
        }
        match self.take_state(c, k) {
            State::Idle => self.start_call(c, k),
            State::Acquire(call) if call.round.is_some() => self.drop_call(c, k, call),
            State::Acquire(call) => self.between(c, k, call),
            State::Hold(lock) => self.hold(c, k, lock),
            State::Extend(mut lock, pending) => {
                let now = self.local(c);
                let client = &mut self.clients[c].client;
                client.drop_extend(pending.id, &mut lock.held, pending.ttl, pending.begun, now);
                let until = self.clients[c].clock.global(lock.held.valid_until());
                lock.holding.until = lock.holding.until.min(until);
                self.keep_holding(c, k, lock);
            }
            State::Release(mut lock, pending) => {
                let now = self.local(c);
                let client = &mut self.clients[c].client;
                client.drop_release(pending.id, &mut lock.held, pending.begun, now);
                self.think(c, k, self.params.think_mean);
            }
            State::Done => self.put_state(c, k, State::Done),
        }
        self.settle(c);
    }

    /// Task `k` of client `c` was woken: its round is decided, or its wait
    /// was told.
    pub(crate) fn task_woken(&mut self, c: usize, k: usize) {
        match self.take_state(c, k) {
            State::Acquire(call) => match &call.round {
                Some(Flight::Plain(id)) if self.clients[c].client.is_decided(*id) => {
                    self.attempted(c, k, call)
                }
                Some(Flight::Plain(id)) => {
                    self.clients[c].client.set_waiter(*id, k as u64);
                    self.put_state(c, k, State::Acquire(call));
                }
                Some(Flight::Fenced(fenced))
                    if self.clients[c].client.is_fenced_decided(fenced) =>
                {
                    self.fenced_step(c, k, call)
                }
                Some(Flight::Fenced(fenced)) => {
                    self.clients[c].client.set_fenced_waiter(fenced, k as u64);
                    self.put_state(c, k, State::Acquire(call));
                }
                None => self.between(c, k, call),
            },
            State::Extend(lock, pending) => {
                if self.clients[c].client.is_decided(pending.id) {
                    self.extended(c, k, lock, pending);
                } else {
                    self.clients[c].client.set_waiter(pending.id, k as u64);
                    self.put_state(c, k, State::Extend(lock, pending));
                }
            }
            State::Release(lock, pending) => {
                if self.clients[c].client.is_decided(pending.id) {
                    self.released(c, k, lock, pending);
                } else {
                    self.clients[c].client.set_waiter(pending.id, k as u64);
                    self.put_state(c, k, State::Release(lock, pending));
                }
            }
            other => self.put_state(c, k, other),
        }
    }

    /// The stretch of `lock`'s validity counted on so far goes to the
    /// history.
    fn record(&mut self, lock: &Lock) {
        record(&mut self.history, lock);
    }

    /// At the end: the holdings still counted on go to the history.
    pub(crate) fn close_holdings(&mut self, c: usize) {
        for task in &self.clients[c].tasks {
            match &task.state {
                State::Hold(lock) | State::Extend(lock, _) => record(&mut self.history, lock),
                State::Acquire(call) => record_wait(&mut self.history, c, call, self.t, false),
                _ => {}
            }
        }
    }
}

/// `call` of client `c`, over at `to`, goes to `history` if it waited in
/// the masters' queues.
fn record_wait(
    history: &mut super::history::History,
    c: usize,
    call: &Call,
    to: u64,
    acquired: bool,
) {
    if !call.waits() {
        return;
    }
    history.waits.push(super::history::Waiting {
        client: c,
        resources: call.res.clone(),
        from: call.begun_g,
        place: call.place,
        queued: call.queued.clone(),
        to,
        acquired,
    });
}

/// The stretch of `lock`'s validity counted on so far goes to `history`,
/// for each of its resources.
fn record(history: &mut super::history::History, lock: &Lock) {
    for &resource in &lock.res {
        history.holdings.push(Holding {
            resource,
            ..lock.holding
        });
    }
}
