//! The deterministic simulator: K clients, each the library's real core
//! (its sessions, rounds, waits, rules and scripts' commands) with a
//! clock of its own, against M simulated [`Master`]s over a simulated
//! network, all in one thread and driven by one seed.
//!
//! The world keeps a global time in nanoseconds and a queue of events.
//! Clients run workloads ([`task`]): acquires that try once and that
//! wait (the front end's `Pursuit` deciding between attempts), holding,
//! extends, releases, calls dropped half-way, on a few resources (binary
//! names among them) and on names in the crate's key space, which must be
//! refused before anything is sent. All, some or none of a world's
//! clients are fenced: their acquires, plain or waiting, are the front
//! ends' own fenced machine (read and sync when due, acquire, raise).
//! Faults: network delay and spikes, writes cut in pieces, connections
//! reset, partitions, pauses of clients and masters, master crashes and
//! restarts (empty, or from an older snapshot), `FLUSHALL`, steps back of
//! a master's clock, evictions (under a `volatile-*` or an `allkeys-*`
//! policy), and other clients' writes (foreign holders, junk in the wait
//! queues, keys of the wrong type, wake-ups nobody sent, `SCRIPT
//! FLUSH`).
//!
//! The checkers ([`history`]) run over the whole history: no two holders
//! of a resource within their validities (each as its client computed it,
//! mapped to global time through that client's clock) unless every master
//! that granted both lost its data in between (an eviction of a lock's key
//! is such a loss); fences that grow in the order holdings began, where
//! `redlock_mio::fencing` says they do (unless a master left its
//! assumptions in between: an old counter restored, a counter evicted, a
//! start from the clocks after a clock stepped back); every call returns
//! within its documented bound; a release hands the lock on: a caller
//! queued for the resource when it is sent is served (or some caller holds
//! the resource) within a few network trips, one reservation window more
//! per waiter stalled on the way, however many dead entries (waiters
//! nobody hears) are ahead of it, and after a reset of its connections
//! once its link's back-off and a reconnect are over (see
//! `History::handoffs`); a failed acquire's release runs on every master
//! the acquire reached over a connection up at the decision (unless that
//! connection ended or the master lost its data since) and leaves no key
//! with the round's token ([`leftovers`]); an extend reported as a success
//! leaves validity ([`extended`]); no acquire that waits takes a key on a
//! master while a waiter of another client, queued there before it and
//! ahead of it by the bound on a client's clock error, is still queued
//! ([`places`]); and once the clients are quiet, nothing but the crate's
//! permanent keys is left on any master after the longest TTL and the
//! wait queue's margin.
//!
//! A quarter of the worlds have nothing but the waiters' own troubles:
//! connections reset (half the time every connection of one client),
//! clients paused (some just as they are told their turn came), dead
//! waiters put in front of the queues, and calls of one resource each;
//! there the hand-off's bound is checked on most waiters.

mod client;
mod clock;
mod extended;
mod faults;
mod history;
mod leftovers;
mod masters;
mod net;
mod params;
mod places;
mod rng;
mod task;
mod watch;
mod wire;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::Master;

use client::ClientProc;
use history::History;
use leftovers::Leftovers;
use masters::MasterProc;
use net::Net;
use params::Params;
pub use params::Regression;
use places::Places;
use rng::Rng;
use watch::Watching;

/// What to simulate.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Decides everything else.
    pub seed: u64,
    /// A deliberate fault, to prove that the checkers catch it.
    pub regression: Regression,
    /// Record what happens (the faults, every request and reply, every
    /// call's rounds) in [`Outcome::trace`], to follow one seed.
    pub trace: bool,
}

/// What one simulation did and found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The seed, which replays it exactly.
    pub seed: u64,
    /// What the checkers found wrong; empty when all held.
    pub violations: Vec<String>,
    /// Rounds the clients started.
    pub rounds: u64,
    /// Locks won, and acquires that failed.
    pub acquired: u64,
    /// Acquires that failed (contended, unavailable, too slow, ...).
    pub refused: u64,
    /// Locks won by fenced acquires (of `acquired`).
    pub fenced: u64,
    /// Locks handed to a keeper (of `acquired`).
    pub kept: u64,
    /// Extensions the keepers of kept locks sent.
    pub kept_extensions: u64,
    /// Extensions refused before anything was sent: the lock was extended
    /// as often as its client allows.
    pub at_limit: u64,
    /// Waiters queued when a release was sent, nothing but the hand-off
    /// holding them up: each checked against the hand-off's bound.
    pub handoffs: u64,
    /// Acquire rounds decided as failed whose release was owed to some
    /// master: each checked for the grants it left behind.
    pub failed_rounds: u64,
    /// Releases of failed rounds the masters ran: each checked to leave
    /// no key with the round's token.
    pub failed_releases: u64,
    /// Extends reported as a success: each checked to leave validity.
    pub extends: u64,
    /// Waiters still queued on a master after a later waiter of another
    /// client took the key there: each checked against the bound on a
    /// client's clock error (`places`).
    pub overtakes: u64,
    /// Losses the watches reported, each checked against the masters'
    /// true state, and losses to a removal fault a watch had to report
    /// within its bound (`watch`).
    pub watch_reports: u64,
    /// See [`watch_reports`](Self::watch_reports).
    pub watch_losses: u64,
    /// Simulated time, in nanoseconds.
    pub simulated: u64,
    /// Events handled.
    pub events: u64,
    /// The shape of the world, for messages.
    pub shape: String,
    /// What happened, a line per event, when [`Options::trace`] asked for
    /// it: times are the simulation's, never the host's, so that a seed's
    /// replay gives the same lines byte for byte.
    pub trace: Vec<String>,
}

/// Events at one instant after which the world is stuck (a busy loop).
const SAME_TIME_LIMIT: u32 = 100_000;

/// Mixed into the seed for the stream the wall clocks are drawn from.
const CLOCKS: u64 = 0xC10C_C10C_C10C_C10C;

/// Something that happens at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ev {
    /// Deliver what is due on a connection, toward the master (`up`) or
    /// the client.
    Pump { conn: usize, up: bool },
    /// A client's socket takes the rest of a write it cut short.
    Writable { conn: usize },
    /// A client's core timers are due.
    ClientTimer { client: usize },
    /// A task's own timer (`timer` tells a stale one).
    Task {
        client: usize,
        task: usize,
        timer: u64,
    },
    /// The next fault.
    Fault,
    /// The other clients write.
    Writer,
    /// A master's snapshot is taken.
    Snapshot { master: usize },
    /// A crashed master starts again.
    Restart { master: usize },
    /// A watched lock's key removed behind its holder's back.
    Remove,
    /// The end of the faults: heal everything, and let the clients finish.
    Calm,
}

/// The world (see the module docs).
pub(crate) struct World {
    /// Global time, ns.
    t: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    rng: Rng,
    params: Params,
    net: Net,
    masters: Vec<MasterProc>,
    clients: Vec<ClientProc>,
    history: History,
    /// The failed acquire rounds and what the masters did with their
    /// releases.
    leftovers: Leftovers,
    /// The masters' wait queues as watched, for the bound on a client's
    /// clock error.
    places: Places,
    /// The watched locks, for the loss watch's checkers.
    watching: Watching,
    /// The faults are over: no new calls, no new faults.
    calm: bool,
    /// A fenced attempt so far had a step that could not start, a master
    /// that failed to answer one of its rounds, or its caller gone: a
    /// start or a sync of the counters may have missed masters since.
    fence_trouble: bool,
    /// Locks handed out so far: each acquisition's id.
    locks: u64,
    outcome: Outcome,
    /// The trace's lines, when asked for.
    trace: Option<std::cell::RefCell<Vec<String>>>,
}

impl World {
    fn new(options: Options) -> World {
        let mut rng = Rng::new(options.seed);
        let mut params = Params::draw(&mut rng.fork(), options.regression);
        params.sync_clocks(&mut Rng::new(options.seed ^ CLOCKS));
        let base = Instant::now();
        let mut setup = rng.fork();
        let masters: Vec<MasterProc> = (0..params.procs)
            .map(|m| {
                let mut model = Master::new(setup.next_u64(), params.master_epochs[m]);
                if options.regression == Regression::DoubleGrants && m < params.procs / 2 + 1 {
                    model = model.with_double_grants();
                }
                if let Some(fault) = options.regression.handoff_fault() {
                    model = model.with_handoff_fault(fault);
                }
                MasterProc::new(model, params.master_clock(m))
            })
            .collect();
        let clients: Vec<ClientProc> = (0..params.clients)
            .map(|c| ClientProc::new(c, &params, base, &mut setup))
            .collect();
        let channels = clients.iter().map(|c| c.channel.clone()).collect();
        let net = Net::new(params.timing.clone(), params.clients, params.masters);
        let outcome = Outcome {
            seed: options.seed,
            shape: params.describe(),
            ..Outcome::default()
        };
        World {
            t: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            history: History::new(params.proc_of.clone()),
            leftovers: Leftovers::new(params.clients, params.masters),
            places: Places::new(params.procs, channels),
            watching: Watching::new(options.seed, &params),
            rng,
            params,
            net,
            masters,
            clients,
            calm: false,
            fence_trouble: false,
            locks: 0,
            outcome,
            trace: options.trace.then(Default::default),
        }
    }

    /// Records `what` happened now, when tracing.
    pub(crate) fn note(&self, what: impl FnOnce() -> String) {
        if let Some(trace) = &self.trace {
            let line = format!("{:>12.6} {}", history::secs(self.t), what());
            trace.borrow_mut().push(line);
        }
    }

    /// Schedules `ev` at `at` (never before now).
    fn at(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at.max(self.t), self.seq, ev)));
    }

    /// Runs the world: the faults until the end of its time, then calm
    /// until the clients are quiet; then the checks.
    fn run(mut self) -> Outcome {
        for c in 0..self.clients.len() {
            self.start_client(c);
        }
        let first = self.params.fault_gap(&mut self.rng);
        self.at(first, Ev::Fault);
        let gap = self.params.writer_gap(&mut self.rng);
        self.at(gap, Ev::Writer);
        for m in 0..self.masters.len() {
            let gap = self.params.snapshot_gap(&mut self.rng);
            self.at(gap, Ev::Snapshot { master: m });
        }
        self.start_watching();
        self.at(self.params.duration, Ev::Calm);
        let give_up = self.params.duration + self.params.calm_limit();
        let mut quiet_since = None;
        let mut same_time = 0u32;
        while let Some(Reverse((at, _, ev))) = self.queue.pop() {
            same_time = if at == self.t { same_time + 1 } else { 0 };
            if same_time > SAME_TIME_LIMIT {
                self.history.errors.push(format!(
                    "no progress: {SAME_TIME_LIMIT} events at {:.9}s, the last {ev:?}",
                    history::secs(self.t)
                ));
                break;
            }
            self.t = at;
            self.outcome.events += 1;
            let watched = self.watching.any_open();
            if watched {
                self.sample_watches();
            }
            self.handle(ev);
            if watched {
                self.sample_watches();
            }
            if self.calm {
                if self.is_quiet() {
                    let since = *quiet_since.get_or_insert(self.t);
                    if self.t >= since + self.params.settle() {
                        break;
                    }
                } else {
                    quiet_since = None;
                }
                if self.t > give_up {
                    let busy = self.busy_report();
                    self.history.errors.push(format!(
                        "not quiet {:.3}s after the faults ended: {busy}",
                        history::secs(self.t - self.params.duration)
                    ));
                    break;
                }
            }
        }
        self.finish()
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Pump { conn, up: true } => self.pump_up(conn),
            Ev::Pump { conn, up: false } => self.pump_down(conn),
            Ev::Writable { conn } => self.writable(conn),
            Ev::ClientTimer { client } => self.client_timer(client),
            Ev::Task {
                client,
                task,
                timer,
            } => self.task_timer(client, task, timer),
            Ev::Fault => {
                if !self.calm {
                    self.fault();
                    let gap = self.params.fault_gap(&mut self.rng);
                    self.at(self.t + gap, Ev::Fault);
                }
            }
            Ev::Writer => {
                if !self.calm {
                    self.foreign_write();
                    let gap = self.params.writer_gap(&mut self.rng);
                    self.at(self.t + gap, Ev::Writer);
                }
            }
            Ev::Snapshot { master } => {
                let m = &mut self.masters[master];
                if !m.down {
                    let snapshot = m.model.snapshot();
                    m.snapshots.push((self.t, snapshot));
                    if m.snapshots.len() > 4 {
                        m.snapshots.remove(0);
                    }
                }
                if !self.calm {
                    let gap = self.params.snapshot_gap(&mut self.rng);
                    self.at(self.t + gap, Ev::Snapshot { master });
                }
            }
            Ev::Restart { master } => self.restart(master),
            Ev::Remove => {
                if !self.calm {
                    self.remove_fault();
                    let gap = self.watching.next_gap();
                    self.at(self.t + gap, Ev::Remove);
                }
            }
            Ev::Calm => self.calm_down(),
        }
    }

    /// The faults end (every pause and partition ended with them, and a
    /// crashed master comes back at its time): the tasks make no new
    /// calls.
    fn calm_down(&mut self) {
        self.calm = true;
        self.note(|| "calm".to_owned());
    }

    /// Whether every task is idle, no round is in flight and nothing is
    /// on the wire.
    fn is_quiet(&self) -> bool {
        self.clients.iter().all(ClientProc::is_quiet)
            && self
                .net
                .conns
                .iter()
                .all(|c| c.up.segs.is_empty() && c.down.segs.is_empty())
    }

    fn busy_report(&self) -> String {
        let mut parts = Vec::new();
        for (c, client) in self.clients.iter().enumerate() {
            if !client.is_quiet() {
                parts.push(format!("client {c}: {}", client.busy()));
            }
        }
        let on_wire = self
            .net
            .conns
            .iter()
            .filter(|c| !c.up.segs.is_empty() || !c.down.segs.is_empty())
            .count();
        parts.push(format!("{on_wire} connections with bytes on the wire"));
        parts.join("; ")
    }

    /// The checks, once the clients are quiet.
    fn finish(mut self) -> Outcome {
        for c in 0..self.clients.len() {
            self.close_holdings(c);
        }
        let names: Vec<String> = self.params.resources.iter().map(|r| show(r)).collect();
        let mut violations = self.history.overlaps(&names);
        violations.extend(self.history.fence_order(&names));
        violations.extend(self.history.standings());
        violations.extend(self.history.after_release());
        violations.extend(self.handoffs(&names));
        violations.append(&mut self.history.slow_calls);
        violations.append(&mut self.history.errors);
        violations.extend(self.leftovers());
        violations.extend(self.partial_grants());
        violations.append(&mut self.places.errors);
        violations.extend(self.watch_checks());
        (self.outcome.watch_reports, self.outcome.watch_losses) = self.watching.checked;
        self.outcome.overtakes = self.places.overtakes;
        self.outcome.violations = violations;
        self.outcome.simulated = self.t;
        self.outcome.rounds = self.clients.iter().map(|c| c.rounds).sum();
        if let Some(trace) = self.trace.take() {
            self.outcome.trace = trace.into_inner();
        }
        self.outcome
    }

    /// The waiters left waiting after a release past the hand-off's bound
    /// (see `History::handoffs`), the network's spikes counting as
    /// disturbances of their clients' paths.
    fn handoffs(&mut self, names: &[String]) -> Vec<String> {
        for &(client, from, to) in &self.net.spikes {
            self.history.disturbed.push(history::Disturbance {
                client: Some(client),
                resource: None,
                wipes: false,
                from,
                to: to + self.params.one_way(),
            });
        }
        let fenced = self.params.fenced.iter().any(|&f| f);
        let params = &self.params;
        let bound = |left, passed, stalled| params.handoff_bound(fenced, left, passed, stalled);
        let pauses: Vec<Vec<(u64, u64)>> = self.clients.iter().map(|c| c.pauses.clone()).collect();
        let (found, checked) = self.history.handoffs(names, &bound, &pauses);
        self.outcome.handoffs = checked;
        found
    }

    /// The failed rounds' releases: those that left a key with their
    /// token behind as they ran, and those owed and never run though the
    /// connection stayed up and the master kept its data (see
    /// `leftovers`).
    fn partial_grants(&mut self) -> Vec<String> {
        let history = &self.history;
        let proc_of = &self.params.proc_of;
        let end = self.t;
        let lost = |a: usize, from: u64| {
            let m = proc_of[a];
            [&history.losses[m], &history.wipes[m]]
                .iter()
                .any(|times| times.iter().any(|&t| t >= from && t <= end))
        };
        let mut found = self.leftovers.unanswered(lost);
        found.append(&mut self.leftovers.errors);
        self.outcome.failed_rounds = self.leftovers.examined();
        self.outcome.failed_releases = self
            .leftovers
            .failed
            .iter()
            .map(|f| f.answered.iter().flatten().count() as u64)
            .sum();
        found
    }

    /// What is left on the masters past its bound: once quiet at `t`, the
    /// crate leaves nothing but its permanent keys after the longest TTL
    /// and the wait queue's margin (on each master's own clock).
    fn leftovers(&self) -> Vec<String> {
        let permanent = [
            redlock_mio::MARKER_KEY,
            redlock_mio::LONGEST_TTL_KEY,
            redlock_mio::FENCE_KEY,
            redlock_mio::FENCE_LOST_KEY,
        ];
        let mut found = Vec::new();
        for (m, master) in self.masters.iter().enumerate() {
            // The crate's space holds nothing but its own keys (a lock's
            // name there is refused before anything is sent).
            let now_us = master.clock.now_us(self.t);
            for (key, _) in master.model.keys(0, now_us) {
                let ours = permanent.iter().any(|p| key == p.as_bytes())
                    || key.starts_with(b"redlock-mio:queue:")
                    || key.starts_with(b"redlock-mio:turn:");
                if key.starts_with(redlock_mio::RESERVED_PREFIX.as_bytes()) && !ours {
                    found.push(format!(
                        "master {m} holds {} in the crate's space",
                        show(key)
                    ));
                }
            }
            let bound = master.clock.global_len(self.params.leftover_bound());
            let later = self.t + bound.as_nanos() as u64 + master.stepped_back;
            let now_us = master.clock.now_us(later);
            for db in 0..16 {
                for (key, expires) in master.model.keys(db, now_us) {
                    if db == 0 && permanent.iter().any(|p| key == p.as_bytes()) {
                        continue;
                    }
                    found.push(format!(
                        "master {m} db {db} still holds {} (expiry {expires:?} ms, clock {} ms) {:.3}s after the clients went quiet",
                        show(key),
                        now_us / 1000,
                        Duration::from_nanos(later - self.t).as_secs_f64()
                    ));
                }
            }
        }
        found
    }
}

/// Runs one simulation.
pub fn simulate(options: Options) -> Outcome {
    World::new(options).run()
}

/// Bytes as text: printable ASCII as is, the rest escaped; a long name
/// cut short.
/// The key of `resource`'s wait queue on the masters (`queue()` in the
/// scripts' `handoff.lua`).
pub(crate) fn queue_key(resource: &[u8]) -> Vec<u8> {
    [b"redlock-mio:queue:".as_slice(), resource].concat()
}

pub(crate) fn show(bytes: &[u8]) -> String {
    if bytes.len() > 48 {
        return format!("{}... ({} bytes)", bytes[..40].escape_ascii(), bytes.len());
    }
    bytes.escape_ascii().to_string()
}
