//! The callers of each client: each makes calls one after another, as a
//! thread of the blocking front end would: an acquire that tries once
//! (`try_lock`), that waits with the configured retries (`lock`) or until
//! a deadline (`lock_until`), the pursuit between attempts being the
//! front end's own; then it holds the lock, extends it, releases it,
//! forgets it (a holder that crashed), or drops a call half-way (a future
//! dropped); or it hands the lock to a keeper, the keeper thread's own
//! schedule driven with the simulated time, which extends it on time
//! until the holder releases it. Now and then it asks for a name in the crate's key space,
//! which must be refused before anything is sent. A fenced client's
//! attempts are fenced acquires, the front ends' own machine of rounds.
//!
//! Each call is checked against its documented bound, and each lock's
//! validity, as the client computed it, is recorded in global time for
//! the mutual exclusion checker (a kept lock's only while its keeper has
//! not reported it lost), and its fence for the fence checker; each step
//! of a keeper, with the standing it reported, for the standing checker;
//! and each keeper's wake is checked against the periods and the validity
//! end its documentation promises.

use std::time::{Duration, Instant};

use redlock_mio::rules::{NodeState, Round};
use redlock_mio::sim::{Fenced, Held, Keep, KeepAction, Names, Next, Pursuit, Wait};
use redlock_mio::{Error, Standing};

use super::history::{self, Holding, KeepStep, Seen};
use super::params::Regression;
use super::{Ev, World};

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
    id: u64,
    begun: Instant,
    begun_g: u64,
    ttl: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Try,
    Lock,
    Until(Instant),
}

/// An attempt in flight: its round, or a fenced acquire's rounds.
enum Flight {
    Plain(u64),
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
    wait: Option<Wait>,
    pursuit: Option<Pursuit>,
    begun: Instant,
    begun_g: u64,
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

/// A kept lock's keeper: what the keeper's thread keeps, its schedule
/// driven by the task with the simulated time.
struct Kept {
    keep: Keep,
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
                let client = &mut self.clients[c].client;
                client.drop_extend(pending.id, &mut lock.held, pending.ttl, pending.begun);
                let until = self.clients[c].clock.global(lock.held.valid_until());
                lock.holding.until = lock.holding.until.min(until);
                self.keep_holding(c, k, lock);
            }
            State::Release(mut lock, pending) => {
                let client = &mut self.clients[c].client;
                client.drop_release(pending.id, &mut lock.held, pending.begun);
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
                    let mut lock = lock;
                    self.released(c, k, &mut lock, pending);
                } else {
                    self.clients[c].client.set_waiter(pending.id, k as u64);
                    self.put_state(c, k, State::Release(lock, pending));
                }
            }
            other => self.put_state(c, k, other),
        }
    }

    /// Starts task `k`'s next call.
    fn start_call(&mut self, c: usize, k: usize) {
        if self.calm {
            self.put_state(c, k, State::Done);
            return;
        }
        let now = self.local(c);
        let p = &self.params;
        let rng = &mut self.clients[c].rng;
        let ttl = p.ttls[rng.index(p.ttls.len())];
        if rng.chance(0.03) {
            let name = p.reserved[rng.index(p.reserved.len())].clone();
            let other = p.resources[rng.index(p.resources.len())].clone();
            self.refused_before_sending(c, &name, &other);
            self.think(c, k, self.params.think_mean);
            return;
        }
        let mut res = vec![rng.index(p.resources.len())];
        if p.resources.len() > 1 && rng.chance(0.15) {
            // All or nothing over two (or more) of them.
            let more = (res[0] + 1 + rng.index(p.resources.len() - 1)) % p.resources.len();
            res.push(more);
        }
        let list: Vec<&[u8]> = res.iter().map(|&r| p.resources[r].as_slice()).collect();
        let names = match list.len() {
            1 => Names::one(list[0]),
            _ => Names::all(&list),
        };
        let Ok(names) = names else {
            self.history
                .errors
                .push(format!("the front end refused {list:?}"));
            return self.think(c, k, self.params.think_mean);
        };
        let kind = match rng.below(5) {
            0 | 1 => Kind::Try,
            2 | 3 => Kind::Lock,
            _ => {
                let rt = p.settings.request_timeout;
                Kind::Until(now + rt + rt.mul_f64(rng.unit() * 20.0))
            }
        };
        let wall = self.clients[c].clock.wall_us(self.t);
        let client = &mut self.clients[c].client;
        let (wait, pursuit) = match kind {
            Kind::Try => (None, None),
            Kind::Lock => (client.begin_wait(wall), Some(client.pursuit(None))),
            Kind::Until(deadline) => (
                client.begin_wait(wall),
                Some(client.pursuit(Some(deadline))),
            ),
        };
        let call = Call {
            res,
            names,
            ttl,
            kind,
            token: [0; 20],
            round: None,
            until: now,
            wait,
            pursuit,
            begun: now,
            begun_g: self.t,
        };
        self.attempt(c, k, Box::new(call));
    }

    /// A name in the crate's key space, alone or beside `other`: refused
    /// before anything is sent.
    fn refused_before_sending(&mut self, c: usize, name: &[u8], other: &[u8]) {
        for names in [Names::one(name), Names::all(&[other, name])] {
            if !matches!(names, Err(Error::ReservedResource)) {
                self.history.errors.push(format!(
                    "client {c}: {} was not refused before sending: {names:?}",
                    super::show(name)
                ));
            }
        }
    }

    /// One attempt of `call`.
    fn attempt(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        let now = self.local(c);
        for byte in &mut call.token {
            *byte = self.clients[c].rng.below(256) as u8;
        }
        let cap = match call.kind {
            Kind::Until(deadline) => Some(deadline),
            _ => None,
        };
        let fenced = self.params.fenced[c];
        let client = &mut self.clients[c].client;
        let (names, token, ttl, wait) = (&call.names, &call.token, call.ttl, call.wait.as_mut());
        let begun = if fenced {
            let begun = client.begin_fenced(names, token, ttl, wait, cap, now);
            begun.map(|fenced| Flight::Fenced(Box::new(fenced)))
        } else {
            let begun = client.begin_acquire(names, token, ttl, wait, cap, now);
            begun.map(Flight::Plain)
        };
        let flight = match begun {
            Ok(flight) => flight,
            Err(error) => return self.call_failed(c, k, call, &error),
        };
        self.note(|| {
            format!(
                "client {c} task {k}: acquire {:?} {} of {:?} token {:02x}{:02x}.. ttl {:?}",
                call.kind,
                match &flight {
                    Flight::Plain(id) => format!("round {id:x}"),
                    Flight::Fenced(_) => "fenced".to_owned(),
                },
                call.res,
                call.token[0],
                call.token[1],
                call.ttl
            )
        });
        call.round = Some(flight);
        // Dropped half-way now and then, as a future may be (a fenced
        // attempt runs up to five rounds, mostly two).
        if self.clients[c].rng.chance(0.03) {
            let rt = self.params.settings.request_timeout.as_nanos() as u64;
            let rounds = if fenced { 3 } else { 1 };
            let at = self.t + self.clients[c].rng.below(rt * rounds);
            self.task_timer_at(c, k, at);
        }
        self.in_flight(c, k, call);
    }

    /// `call`'s attempt has started its rounds (a fenced one, those of its
    /// next step), or, a fenced one, ended.
    fn in_flight(&mut self, c: usize, k: usize, call: Box<Call>) {
        let client = &mut self.clients[c].client;
        let started = match &call.round {
            Some(Flight::Plain(id)) => {
                client.set_waiter(*id, k as u64);
                1
            }
            Some(Flight::Fenced(fenced)) if fenced.rounds().is_empty() => {
                return self.attempted(c, k, call);
            }
            Some(Flight::Fenced(fenced)) => {
                client.set_fenced_waiter(fenced, k as u64);
                fenced.rounds().len() as u64
            }
            None => return,
        };
        self.clients[c].rounds += started;
        self.put_state(c, k, State::Acquire(call));
    }

    /// `call`'s fenced attempt's step is decided: the next one starts.
    fn fenced_step(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        let now = self.local(c);
        if let Some(Flight::Fenced(fenced)) = &mut call.round {
            self.clients[c].client.step_fenced(fenced, now);
        }
        self.in_flight(c, k, call);
    }

    /// `call`'s attempt is decided.
    fn attempted(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        let now = self.local(c);
        let client = &mut self.clients[c].client;
        // The round (the acquire's, of a fenced attempt) and, for a
        // fenced attempt, the masters that raised its fence.
        let (id, round, (result, free_in), raised) = match call.round.take() {
            Some(Flight::Plain(id)) => {
                let round = client.round(id).cloned();
                let ended =
                    client.end_acquire(id, &call.names, &call.token, call.wait.as_mut(), now);
                (Some(id), round, ended, None)
            }
            Some(Flight::Fenced(fenced)) => {
                let round = fenced.acquire_round().cloned();
                let raised = fenced.raise_round().map_or(0, grants);
                let ended = client.end_fenced(*fenced, call.wait.as_mut());
                (None, round, ended, Some(raised))
            }
            None => return,
        };
        self.note(|| {
            format!(
                "client {c} task {k}: {} ended {:?} as {:?}: {}",
                id.map_or("fenced acquire".to_owned(), |id| format!("round {id:x}")),
                round.as_ref().map(|r| r.nodes().to_vec()),
                round.as_ref().and_then(Round::decision),
                match &result {
                    Ok(held) => format!("held, fence {:?}", held.fence()),
                    Err(e) => e.to_string(),
                }
            )
        });
        let held = match result {
            Ok(held) => held,
            Err(error) => return self.retry(c, k, call, &error, free_in),
        };
        self.outcome.acquired += 1;
        if let Some(wait) = call.wait.take() {
            self.clients[c].client.end_wait(wait, &call.names, now);
        }
        self.check_counted_once(c, round.as_ref());
        self.check_call(c, "acquire", &call);
        let clock = &self.clients[c].clock;
        self.locks += 1;
        let holding = Holding {
            resource: call.res[0],
            client: c,
            lock: self.locks,
            from: self.t,
            until: clock.global(held.valid_until()),
            grants: round.as_ref().map_or(0, grants),
            t0: round.map_or(self.t, |r| clock.global(r.started())),
        };
        match (held.fence(), raised) {
            (Some(fence), Some(raised)) => {
                self.outcome.fenced += 1;
                for &resource in &call.res {
                    self.history.fenced.push(history::Fenced {
                        resource,
                        client: c,
                        lock: holding.lock,
                        fence,
                        began: self.t,
                        t0: holding.t0,
                        raised,
                    });
                }
            }
            (None, None) => {}
            _ => self.history.errors.push(format!(
                "client {c}: lock {} fenced as it should not be: {:?}",
                holding.lock,
                held.fence()
            )),
        }
        let lock = Box::new(Lock {
            res: call.res,
            held,
            holding,
            kept: None,
        });
        let kept = self.params.kept;
        if kept > 0.0 && self.clients[c].rng.chance(kept) {
            return self.start_keeping(c, k, lock);
        }
        self.keep_holding(c, k, lock);
    }

    /// `call`'s attempt failed with `error`: its pursuit decides.
    fn retry(
        &mut self,
        c: usize,
        k: usize,
        mut call: Box<Call>,
        error: &Error,
        free_in: Option<Duration>,
    ) {
        let now = self.local(c);
        let units = (self.clients[c].rng.unit(), self.clients[c].rng.unit());
        let client = &mut self.clients[c].client;
        let next = match call.pursuit.as_mut() {
            Some(pursuit) => client.next(pursuit, error, free_in, units, now),
            None => Next::Stop,
        };
        match next {
            Next::Stop => self.call_failed(c, k, call, error),
            Next::Until(at) => {
                call.until = at;
                self.between(c, k, call);
            }
        }
    }

    /// `call` waits between attempts: told by a quorum of masters that
    /// the lock was handed to it, or until its wait ends (sooner if a
    /// master told it a time to try at), as the front end's wait does.
    fn between(&mut self, c: usize, k: usize, call: Box<Call>) {
        let now = self.local(c);
        let client = &mut self.clients[c].client;
        let told = call.wait.as_ref().is_some_and(|w| client.is_told(w));
        let until = match call.wait.as_ref().and_then(|w| client.hinted(w)) {
            Some(hinted) => hinted.min(call.until),
            None => call.until,
        };
        if told || now >= until {
            if let Some(wait) = call.wait.as_ref() {
                client.take_wait_waiter(wait);
            }
            let stop = told
                && call
                    .pursuit
                    .as_ref()
                    .is_some_and(|p| !client.may_attempt(p, now));
            if stop {
                self.outcome.refused += 1;
                return self.end_call(c, k, call);
            }
            return self.attempt(c, k, call);
        }
        if let Some(wait) = call.wait.as_ref() {
            client.set_wait_waiter(wait, k as u64);
        }
        self.task_timer_local(c, k, until);
        self.put_state(c, k, State::Acquire(call));
    }

    /// `call` ends without a lock.
    fn call_failed(&mut self, c: usize, k: usize, call: Box<Call>, error: &Error) {
        self.outcome.refused += 1;
        self.end_call(c, k, call);
        if let Error::Busy { .. } = error {
            // The table of rounds was full: the front end would have
            // waited for a slot; this caller tries again a request timeout
            // later (it does not spin).
            let rt = self.params.settings.request_timeout.as_nanos() as u64;
            self.task_timer_at(c, k, self.t + rt);
        }
    }

    /// `call` ends: checked against its bound, its wait left.
    fn end_call(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        self.check_call(c, "acquire", &call);
        if let Some(wait) = call.wait.take() {
            let now = self.local(c);
            self.clients[c].client.end_wait(wait, &call.names, now);
        }
        self.think(c, k, self.params.think_mean);
    }

    /// `call` is dropped with its round in flight (a future dropped): its
    /// release follows the round, and its wait leaves the queues.
    fn drop_call(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        let now = self.local(c);
        let client = &mut self.clients[c].client;
        match call.round.take() {
            Some(Flight::Plain(id)) => client.drop_acquire(id, &call.names, &call.token, now),
            Some(Flight::Fenced(fenced)) => client.drop_fenced(*fenced, now),
            None => {}
        }
        if let Some(wait) = call.wait.take() {
            client.end_wait(wait, &call.names, now);
        }
        self.think(c, k, self.params.think_mean);
    }

    /// Checks that `round` counted no master twice (a server listed under
    /// two addresses votes once).
    fn check_counted_once(&mut self, c: usize, round: Option<&Round>) {
        let Some(round) = round else {
            return;
        };
        if self.history.counts_twice(grants(round)) {
            self.history.errors.push(format!(
                "client {c}: a round counted a master twice: {:?}",
                round.nodes()
            ));
        }
    }

    /// Checks that `call` returned within its documented bound.
    fn check_call(&mut self, c: usize, what: &str, call: &Call) {
        let bound = match call.kind {
            Kind::Try => self.params.call_bound(1, self.params.fenced[c]),
            Kind::Lock => self
                .params
                .call_bound(self.params.settings.retry_count + 1, self.params.fenced[c]),
            Kind::Until(deadline) => deadline.saturating_duration_since(call.begun),
        };
        self.check_bound(c, what, call.begun, call.begun_g, bound);
    }

    /// Checks that a call of client `c` begun at `begun` (`begun_g` in
    /// global time) returned within `bound`, with the time the client was
    /// paused meanwhile on top.
    fn check_bound(&mut self, c: usize, what: &str, begun: Instant, begun_g: u64, bound: Duration) {
        let took = self.local(c).saturating_duration_since(begun);
        let paused = self.clients[c].paused_within(begun_g, self.t);
        let slack = Duration::from_nanos(paused + paused / 50) + Duration::from_micros(10);
        if took > bound + slack {
            self.history.slow_calls.push(format!(
                "client {c}: {what} took {took:?}, more than its bound {bound:?} (+{slack:?} paused), at {:.6}s",
                super::history::secs(self.t)
            ));
        }
    }

    /// Task `k` holds `lock` a while.
    fn keep_holding(&mut self, c: usize, k: usize, lock: Box<Lock>) {
        if lock.kept.is_some() {
            return self.keeper_sleep(c, k, lock);
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
    fn hold(&mut self, c: usize, k: usize, lock: Box<Lock>) {
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
    fn extend(&mut self, c: usize, k: usize, lock: Box<Lock>, drop: bool) {
        let now = self.local(c);
        let ttl = match &lock.kept {
            Some(kept) => kept.ttl,
            None => self.params.ttls[self.clients[c].rng.index(self.params.ttls.len())],
        };
        let id = match self.clients[c].client.begin_extend(&lock.held, ttl, now) {
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
    /// no longer counted on from the release's start.
    fn release(&mut self, c: usize, k: usize, mut lock: Box<Lock>, drop: bool) {
        let now = self.local(c);
        if let Some(kept) = lock.kept.as_mut() {
            let reported = kept.keep.on_release(now, &lock.held);
            kept.due = None;
            self.keep_step(c, &mut lock, Seen::Asked, reported);
        }
        lock.holding.until = lock.holding.until.min(self.t);
        self.note(|| format!("client {c} task {k}: releases lock {}", lock.holding.lock));
        self.record(&lock);
        match self.clients[c].client.begin_release(&lock.held, now) {
            Ok(id) => {
                self.clients[c].client.set_waiter(id, k as u64);
                self.clients[c].rounds += 1;
                let pending = self.pending(c, k, id, Duration::ZERO, drop);
                self.put_state(c, k, State::Release(lock, pending));
            }
            Err(error) => {
                self.kept_released(c, &mut lock, &Err(error));
                self.think(c, k, self.params.think_mean);
            }
        }
    }

    /// Round `id` of task `k`'s call, begun now; if `drop`, the call is
    /// dropped at a time within the request timeout.
    fn pending(&mut self, c: usize, k: usize, id: u64, ttl: Duration, drop: bool) -> Pending {
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
        }
    }

    /// The extend of `lock` is decided.
    fn extended(&mut self, c: usize, k: usize, mut lock: Box<Lock>, pending: Pending) {
        let round = self.clients[c].client.round(pending.id).cloned();
        let before = lock.held.clone();
        let result = self.clients[c]
            .client
            .end_extend(pending.id, &mut lock.held);
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
            self.params.call_bound(1, false),
        );
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
    fn released(&mut self, c: usize, k: usize, lock: &mut Lock, pending: Pending) {
        let result = self.clients[c]
            .client
            .end_release(pending.id, &mut lock.held);
        self.kept_released(c, lock, &result);
        self.check_bound(
            c,
            "release",
            pending.begun,
            pending.begun_g,
            self.params.call_bound(1, false),
        );
        self.think(c, k, self.params.think_mean);
    }

    /// Hands `lock` to a keeper, as `Redlock::keep` does, which extends it
    /// to a TTL of the world's on its schedule (every third of it, or a
    /// period asked; now and then up to a hold limit) until the holder
    /// releases it, a few TTLs later. A lock `keep` refuses (expired) is
    /// dropped, as `keep` drops it: its keys expire at their TTL.
    fn start_keeping(&mut self, c: usize, k: usize, mut lock: Box<Lock>) {
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
    fn keeper_sleep(&mut self, c: usize, k: usize, lock: Box<Lock>) {
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
    fn keeper_wake(&mut self, c: usize, k: usize, mut lock: Box<Lock>) {
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
    fn kept_extended(
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
            Err(_) => Seen::Missed,
        };
        // The next wake is due a period after this one's (a quarter
        // period after the end of a missed one), by the validity's end.
        let next = match seen {
            Seen::Extended => kept.woke + kept.period,
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
    fn kept_released(&mut self, c: usize, lock: &mut Lock, result: &Result<(), Error>) {
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
    fn keep_step(&mut self, c: usize, lock: &mut Lock, seen: Seen, reported: Option<Standing>) {
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

    /// The stretch of `lock`'s validity counted on so far goes to the
    /// history.
    fn record(&mut self, lock: &Lock) {
        record(&mut self.history, lock);
    }

    /// At the end: the holdings still counted on go to the history.
    pub(crate) fn close_holdings(&mut self, c: usize) {
        for task in &self.clients[c].tasks {
            if let State::Hold(lock) | State::Extend(lock, _) = &task.state {
                record(&mut self.history, lock);
            }
        }
    }
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
