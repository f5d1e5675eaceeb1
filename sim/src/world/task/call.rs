//! A task's calls: an acquire, once or waiting, plain or fenced, from its
//! start to its end or its drop, each checked against its bound.

use std::time::{Duration, Instant};

use crate::client::{Names, Next};
use redlock_mio::Error;
use redlock_mio::sim::Round;

use super::*;
use crate::world::World;
use crate::world::history::{self, Holding};
use crate::world::leftovers::Failed;

impl World {
    /// Starts task `k`'s next call.
    pub(super) fn start_call(&mut self, c: usize, k: usize) {
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
        if p.resources.len() > 1 && rng.chance(p.several) {
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
        let pursue = match kind {
            Kind::Try => Ok(None),
            Kind::Lock => client.begin_pursuit(&names, ttl, None, wall).map(Some),
            Kind::Until(deadline) => client
                .begin_pursuit(&names, ttl, Some(deadline), wall)
                .map(Some),
        };
        let (pursue, refused) = match pursue {
            Ok(pursue) => (pursue, None),
            Err(error) => (None, Some(error)),
        };
        let call = Call {
            res,
            names,
            ttl,
            kind,
            token: [0; 20],
            round: None,
            until: now,
            pursue,
            begun: now,
            begun_g: self.t,
            more_rounds: 0,
            queued: Vec::new(),
            stalled: false,
            place: wall,
        };
        if let Some(error) = refused {
            return self.call_failed(c, k, Box::new(call), &error);
        }
        self.attempt(c, k, Box::new(call));
    }

    /// A name in the crate's key space, alone or beside `other`: refused
    /// before anything is sent.
    pub(super) fn refused_before_sending(&mut self, c: usize, name: &[u8], other: &[u8]) {
        for names in [Names::one(name), Names::all(&[other, name])] {
            if !matches!(names, Err(Error::ReservedResource)) {
                self.history.errors.push(format!(
                    "client {c}: {} was not refused before sending: {names:?}",
                    crate::world::show(name)
                ));
            }
        }
    }

    /// One attempt of `call`.
    pub(super) fn attempt(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        let now = self.local(c);
        call.stalled = false;
        for byte in &mut call.token {
            *byte = self.clients[c].rng.below(256) as u8;
        }
        let cap = match call.kind {
            Kind::Until(deadline) => Some(deadline),
            _ => None,
        };
        let fenced = self.params.fenced[c];
        let client = &mut self.clients[c].client;
        let (names, token, ttl) = (&call.names, &call.token, call.ttl);
        let pursue = call.pursue.as_mut();
        let begun = if fenced {
            let begun = client.begin_fenced(names, token, ttl, pursue, cap, now);
            begun.map(|fenced| Flight::Fenced(Box::new(fenced)))
        } else {
            let begun = client.begin_acquire(names, token, ttl, pursue, cap, now);
            begun.map(Flight::Plain)
        };
        let flight = match begun {
            Ok(flight) => flight,
            Err(error) => return self.call_failed(c, k, call, &error),
        };
        self.note(|| {
            format!(
                "client {c} task {k}: acquire {} {} of {:?} token {:02x}{:02x}.. ttl {:?}",
                call.kind.describe(call.begun),
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
    pub(super) fn in_flight(&mut self, c: usize, k: usize, call: Box<Call>) {
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
    pub(super) fn fenced_step(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        let now = self.local(c);
        if let Some(Flight::Fenced(fenced)) = &mut call.round {
            self.clients[c].client.step_fenced(fenced, now);
        }
        self.in_flight(c, k, call);
    }

    /// Client `c` decided `call`'s attempt, `round`, as failed, and queued
    /// its release: owed to each master the round reached over a
    /// connection that is up now (a session down drops what it queued),
    /// but for those that refused the acquire, which must hold no key with
    /// its token (unless their server, named twice, did not refuse it
    /// through its other address).
    fn failed_round(&mut self, c: usize, call: &Call, round: &Round) {
        let up = (0..self.params.masters).filter(|&i| {
            self.clients[c].socks[i].is_some_and(|conn| {
                let conn = &self.net.conns[conn];
                conn.connected && !conn.dead
            })
        });
        let refused = (round.nodes().iter().enumerate())
            .filter(|(_, state)| **state == redlock_mio::NodeState::Refused)
            .fold(0u64, |mask, (i, _)| mask | 1 << i);
        let failed = Failed {
            client: c,
            token: call.token,
            resources: call.names.resources().iter().map(|r| r.to_vec()).collect(),
            decided: self.t,
            owed: round.reached() & !refused & up.fold(0, |mask, i| mask | 1 << i),
            answered: vec![None; self.params.masters],
        };
        // (A server named twice may have refused through one address what
        // it granted through the other: the release through that one frees
        // the key.)
        let twin_granted = |a: usize| {
            (0..self.params.masters).any(|b| {
                b != a && self.params.proc_of[b] == self.params.proc_of[a] && refused >> b & 1 == 0
            })
        };
        for a in (0..self.params.masters).filter(|&a| refused >> a & 1 == 1 && !twin_granted(a)) {
            let m = self.params.proc_of[a];
            let now_us = self.masters[m].clock.now_us(self.t);
            self.leftovers
                .refused_by(a, &self.masters[m].model, now_us, &failed);
        }
        self.leftovers.decided(failed);
    }

    /// `call`'s attempt is decided.
    pub(super) fn attempted(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        let now = self.local(c);
        // A call that waits draws what its pursuit needs after a failed
        // attempt from the client's numbers.
        let clients = &mut self.clients[c];
        let (client, rng) = (&mut clients.client, &mut clients.rng);
        let draw = || rng.unit();
        // The round (the acquire's, of a fenced attempt) and, for a
        // fenced attempt, the masters that raised its fence.
        let (id, round, result, raised) = match call.round.take() {
            Some(Flight::Plain(id)) => {
                let round = client.round(id).cloned();
                let ended = match call.pursue.as_mut() {
                    Some(pursue) => client.end_attempt(id, pursue, draw, now),
                    None => client.end_acquire(id, &call.names, &call.token, now),
                };
                if let (Err(_), Some(round)) = (&ended, &round) {
                    self.failed_round(c, &call, round);
                }
                (Some(id), round, ended, None)
            }
            Some(Flight::Fenced(fenced)) => {
                let round = fenced.acquire_round().cloned();
                let raised = fenced.raise_round().map_or(0, grants);
                let (steps, read) = fenced.steps();
                if steps > 5 || (!read && steps > 2) {
                    self.history.errors.push(format!(
                        "client {c} task {k}: a fenced attempt ran {steps} rounds one after another (read: {read})"
                    ));
                }
                call.more_rounds += steps.saturating_sub(1);
                self.fence_trouble |= fenced.troubled();
                let clients = &mut self.clients[c];
                let (client, rng) = (&mut clients.client, &mut clients.rng);
                let ended = match call.pursue.as_mut() {
                    Some(pursue) => client.end_fenced_attempt(*fenced, pursue, || rng.unit(), now),
                    None => client.end_fenced(*fenced),
                };
                if matches!(ended, Err(Error::Unfenced(_))) && !self.fence_trouble {
                    self.check_unfenced(c, k);
                }
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
        let any = |state| round.as_ref().is_some_and(|r| r.nodes().contains(&state));
        if any(redlock_mio::NodeState::Quarantined) {
            // The restart guard counts a master that started lately for
            // nothing until the longest TTL has passed: its waiters wait
            // for that, not for a hand-off.
            let guard = self.params.settings.restart_guard.unwrap_or_default();
            let to = self.t + guard.as_nanos() as u64 + self.params.reconnect_bound();
            self.disturb((Some(c), None, false), to, "a master quarantined");
        }
        if any(redlock_mio::NodeState::Unsynced) {
            // A fenced attempt that finds a master's counter missing (its
            // data lost) gives no fence until the client has put the
            // counter back, which it does only after waiting the longest
            // TTL (`crate::fencing`): its waiters wait for that, not for a
            // hand-off.
            let to =
                self.t + self.params.longest().as_nanos() as u64 + self.params.reconnect_bound();
            self.disturb(
                (Some(c), None, false),
                to,
                "a master's fence counter missing",
            );
        }
        let held = match result {
            Ok(held) => held,
            Err(error) => return self.retry(c, k, call, &error),
        };
        self.outcome.acquired += 1;
        record_wait(&mut self.history, c, &call, self.t, true);
        if let Some(pursue) = call.pursue.as_mut() {
            self.clients[c].client.end_pursuit(pursue, now);
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
        let mut held = held;
        self.maybe_watch(c, holding.lock, &call.res, &mut held);
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
    pub(super) fn retry(&mut self, c: usize, k: usize, mut call: Box<Call>, error: &Error) {
        // Queued for the hand-off to serve: refused as contended, and
        // in a quorum of the queues. (A fenced client's attempts where a
        // server is listed twice never hear every master, and their
        // counters may never start: nothing a release hands on serves
        // them.)
        let twice = self.params.masters != self.params.procs;
        let served = !(twice && self.params.fenced[c]) && matches!(error, Error::Contended(_));
        if call.waits() {
            let queued = served && self.queued_on_quorum(c, &call.res);
            call.queued.push((self.t, queued));
        }
        let next = match call.pursue.as_ref() {
            Some(pursue) => pursue.next(),
            None => {
                // A `try_lock` draws as a pursuit's failed attempt does, so
                // that each kind of call moves the client's numbers alike.
                let rng = &mut self.clients[c].rng;
                let _ = (rng.unit(), rng.unit());
                Next::Stop
            }
        };
        match next {
            Next::Stop => self.call_failed(c, k, call, error),
            Next::Until(at) => {
                call.until = at;
                self.between(c, k, call);
            }
        }
    }

    /// Whether a client told that its turn has come stalls there: now and
    /// then in a world of the waiters' own troubles where clients pause,
    /// while the faults go on.
    fn stalls_when_told(&mut self) -> bool {
        let pauses = self.params.weights.client_pause > 0;
        self.params.waits_only && pauses && !self.calm && self.rng.chance(0.25)
    }

    /// Whether a quorum of the masters' queues of each of `res` hold an
    /// entry of client `c` (a waiter of its is queued there). A queue of
    /// another type, which a waiting attempt cannot join (and whose life
    /// it extends all the same), holds none.
    fn queued_on_quorum(&self, c: usize, res: &[usize]) -> bool {
        let suffix = [b"|".as_slice(), &self.clients[c].channel].concat();
        let queued = (0..self.params.masters)
            .filter(|&i| {
                let master = &self.masters[self.params.proc_of[i]];
                let now_us = master.clock.now_us(self.t);
                !master.down
                    && res.iter().all(|&r| {
                        let queue = crate::world::queue_key(&self.params.resources[r]);
                        let members = master.model.members(0, &queue, now_us);
                        members.iter().any(|(m, _)| m.ends_with(&suffix))
                    })
            })
            .count();
        queued > self.params.masters / 2
    }

    /// `call` waits between attempts: told by a quorum of masters that
    /// the lock was handed to it, or until its wait ends (sooner if a
    /// master told it a time to try at), as the front end's wait does.
    pub(super) fn between(&mut self, c: usize, k: usize, call: Box<Call>) {
        let now = self.local(c);
        let client = &mut self.clients[c].client;
        let told = call.pursue.as_ref().is_some_and(|p| client.is_told(p));
        let until = match call.pursue.as_ref().and_then(|p| client.hinted(p)) {
            Some(hinted) => hinted.min(call.until),
            None => call.until,
        };
        if told && !call.stalled && self.stalls_when_told() {
            // Its process stops as its turn comes; the caller goes on
            // when it resumes.
            let rt = self.params.settings.request_timeout.as_nanos() as u64;
            let longest = self.params.longest().as_nanos() as u64;
            let mean = 2 * rt + self.rng.below(longest);
            let until = self.fault_end(mean);
            self.note(|| {
                format!(
                    "client {c} pauses as it is told, until {:.6}",
                    history::secs(until)
                )
            });
            self.pause_client(c, until);
            let mut call = call;
            call.stalled = true;
            self.task_timer_at(c, k, self.t);
            return self.put_state(c, k, State::Acquire(call));
        }
        let client = &mut self.clients[c].client;
        if told || now >= until {
            let mut call = call;
            let go = match call.pursue.as_mut() {
                Some(pursue) => {
                    client.take_wait_waiter(pursue);
                    client.resume(pursue, told, now)
                }
                None => true,
            };
            if !go {
                self.outcome.refused += 1;
                return self.end_call(c, k, call);
            }
            return self.attempt(c, k, call);
        }
        if let Some(pursue) = call.pursue.as_ref() {
            client.set_wait_waiter(pursue, k as u64);
        }
        self.task_timer_local(c, k, until);
        self.put_state(c, k, State::Acquire(call));
    }

    /// `call` ends without a lock.
    pub(super) fn call_failed(&mut self, c: usize, k: usize, call: Box<Call>, error: &Error) {
        self.outcome.refused += 1;
        self.end_call(c, k, call);
        if let Error::TooManyInFlight { .. } = error {
            // The table of rounds was full: the front end would have
            // waited for a slot; this caller tries again a request timeout
            // later (it does not spin).
            let rt = self.params.settings.request_timeout.as_nanos() as u64;
            self.task_timer_at(c, k, self.t + rt);
        }
    }

    /// `call` ends: checked against its bound, its wait left.
    pub(super) fn end_call(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        self.check_call(c, "acquire", &call);
        record_wait(&mut self.history, c, &call, self.t, false);
        if let Some(pursue) = call.pursue.as_mut() {
            let now = self.local(c);
            self.clients[c].client.end_pursuit(pursue, now);
        }
        self.think(c, k, self.params.think_mean);
    }

    /// `call` is dropped with its round in flight (a future dropped): its
    /// release follows the round, and its wait leaves the queues.
    pub(super) fn drop_call(&mut self, c: usize, k: usize, mut call: Box<Call>) {
        let now = self.local(c);
        record_wait(&mut self.history, c, &call, self.t, false);
        let client = &mut self.clients[c].client;
        match call.round.take() {
            Some(Flight::Plain(id)) => client.drop_acquire(id, &call.names, &call.token, now),
            Some(Flight::Fenced(fenced)) => {
                self.fence_trouble = true;
                client.drop_fenced(*fenced, now);
            }
            None => {}
        }
        if let Some(pursue) = call.pursue.as_mut() {
            client.end_pursuit(pursue, now);
        }
        self.think(c, k, self.params.think_mean);
    }

    /// A fenced attempt of task `k` of client `c` ended `Unfenced`, in a
    /// world where every round of every fenced attempt so far was answered
    /// by every master (none timed out, failed or was quarantined, every
    /// step could start, no caller left one half-way): an error unless a
    /// master has lost data (its counter, or a lock's key, which its raise
    /// then finds gone) or left what fencing assumes, or a server is
    /// listed twice (identification refuses the second address, so no
    /// read hears every master and the counters never start). There, a
    /// master without a counter has yet to be started, and an attempt
    /// reads the counters until a read finds a quorum of them in sync or a
    /// start has reached a quorum, and a start reaches every master: so
    /// every master it asks has a counter. (Once a round went unanswered,
    /// a start may have missed a master, which then refuses to count until
    /// it is put back in sync.)
    fn check_unfenced(&mut self, c: usize, k: usize) {
        let h = &self.history;
        let twice = self.params.masters != self.params.procs;
        let mut lost = h.wipes.iter().chain(&h.breaks).chain(&h.losses);
        if !twice && lost.all(Vec::is_empty) {
            self.history.errors.push(format!(
                "client {c} task {k}: a fenced attempt ended Unfenced, every master having answered, none having lost its counter, at {:.6}s",
                super::history::secs(self.t)
            ));
        }
    }

    /// Checks that `round` counted no master twice (a server listed under
    /// two addresses votes once).
    pub(super) fn check_counted_once(&mut self, c: usize, round: Option<&Round>) {
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
    pub(super) fn check_call(&mut self, c: usize, what: &str, call: &Call) {
        let bound = match call.kind {
            Kind::Try => self.params.call_bound(1, call.more_rounds),
            Kind::Lock => self
                .params
                .call_bound(self.params.settings.retry_count + 1, call.more_rounds),
            Kind::Until(deadline) => deadline.saturating_duration_since(call.begun),
        };
        self.check_bound(c, what, call.begun, call.begun_g, bound);
    }

    /// Checks that a call of client `c` begun at `begun` (`begun_g` in
    /// global time) returned within `bound`, with the time the client was
    /// paused meanwhile on top.
    pub(super) fn check_bound(
        &mut self,
        c: usize,
        what: &str,
        begun: Instant,
        begun_g: u64,
        bound: Duration,
    ) {
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
}
