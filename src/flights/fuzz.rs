//! A fuzz harness for the table of rounds in flight: [`Flights`] run by a
//! little program against a model that keeps every round in a map by id,
//! with a fake clock.
//!
//! The input's first bytes pick the table's cap (small, so that slots are
//! reused and the list of decided rounds overflows) and the number of
//! masters; then each step is an opcode byte and its operands: start a
//! round, hand an outcome to a round (live, ended, or never issued),
//! fail a master, let time pass, set a waiter, wake the decided rounds'
//! waiters, claim or finish a round, take a waiter over. After every
//! step the table must agree with the model:
//!
//! - a round is in flight exactly while the model holds it; an id is
//!   never handed out twice, and an outcome for an ended round reaches no
//!   round (a reply is matched to exactly one request);
//! - each round in flight has the model's node states and decision, and
//!   the earliest deadline is that of the undecided rounds;
//! - a wake takes exactly the waiters of the decided rounds, each once,
//!   and the unclaimed count follows the waiters expected back;
//! - a waiter taken over is that of an undecided round, and there is one
//!   whenever the model has one;
//! - nothing the table allocated at first grows.
//!
//! Compiled for the crate's tests, which run seeded random programs and
//! replay `fuzz/seeds/flights/` and `fuzz/regressions/flights/`, and with
//! the `fuzzing` feature, for the fuzz crate's `flights` target.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Flights;
use crate::commands::Outcome;
use crate::ids::RoundId;
use crate::rules::{NodeError, Op, Reply, Round, ServerError};

/// What a run saw, so that a replay can tell that its programs reach the
/// interesting states (and is not vacuous).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FlightsSeen {
    /// Rounds started.
    pub started: u64,
    /// Rounds decided by an outcome handed to them.
    pub decided: u64,
    /// Waiters woken at their rounds' decisions.
    pub woken: u64,
    /// Outcomes handed to ids no longer (or never) in flight.
    pub stale: u64,
    /// Starts refused at the cap.
    pub full: u64,
    /// Wakes that went over every slot (the list of decided rounds had
    /// overflowed).
    pub rescans: u64,
    /// Waiters taken over.
    pub taken: u64,
}

/// A waiter: a number, unique in a run; its parity stands for whether it
/// may take the polling over (as the engine picks threads).
type Waiter = u32;

/// One round of the model.
struct Entry {
    round: Round,
    waiter: Option<Waiter>,
    unclaimed: bool,
}

struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn is_empty(&self) -> bool {
        self.at >= self.data.len()
    }

    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
}

struct Run {
    flights: Flights<Waiter>,
    model: HashMap<u64, Entry>,
    /// Every id handed out, in order.
    issued: Vec<u64>,
    unclaimed: usize,
    cap: usize,
    masters: usize,
    now: Instant,
    next_waiter: Waiter,
    seen: FlightsSeen,
    /// What the table allocated at first.
    capacities: (usize, usize, usize),
}

/// Ids never handed out: 0, one past every slot, and a sequence number
/// far ahead in slot 0.
const NEVER: [u64; 3] = [0, u64::MAX, 1 << 40];

const TIMEOUT: Duration = Duration::from_millis(50);
const TTL: Duration = Duration::from_secs(1);
const DRIFT: Duration = Duration::from_millis(2);

/// Runs the program `data` (see the module docs), panicking when the table
/// and the model disagree; returns what it saw.
pub fn flights(data: &[u8]) -> FlightsSeen {
    let mut input = Input { data, at: 0 };
    let cap = 1 + usize::from(input.byte() % 8);
    let masters = 1 + usize::from(input.byte() % 7);
    let flights = Flights::new(cap, masters);
    let capacities = (
        flights.slots.capacity(),
        flights.free.capacity(),
        flights.decided.capacity(),
    );
    let mut run = Run {
        flights,
        model: HashMap::new(),
        issued: Vec::new(),
        unclaimed: 0,
        cap,
        masters,
        now: Instant::now(),
        next_waiter: 1,
        seen: FlightsSeen::default(),
        capacities,
    };
    while !input.is_empty() {
        let op = input.byte();
        run.step(op, &mut input);
        run.check();
    }
    run.seen
}

impl Run {
    /// An id to act on: one handed out (live or ended), or now and then
    /// one never issued.
    fn pick(&self, b: u8) -> u64 {
        if b >= 0xfd || self.issued.is_empty() {
            return NEVER[usize::from(b % 3)];
        }
        self.issued[self.issued.len() - 1 - usize::from(b) % self.issued.len()]
    }

    fn step(&mut self, op: u8, input: &mut Input<'_>) {
        match op % 10 {
            0 => self.begin(input.byte()),
            1 => {
                let id = self.pick(input.byte());
                let node = usize::from(input.byte()) % (self.masters + 1);
                let outcome = outcome(input.byte());
                self.deliver(id, node, outcome);
            }
            2 => {
                let node = usize::from(input.byte()) % (self.masters + 1);
                let error = NodeError::Closed;
                self.flights.fail_master(node, &error, self.now);
                for entry in self.model.values_mut() {
                    entry.round.handle_failure(node, error.clone(), self.now);
                }
            }
            3 => {
                self.now += Duration::from_millis(u64::from(input.byte() % 64));
                self.flights.handle_timeout(self.now);
                for entry in self.model.values_mut() {
                    if self.now >= entry.round.deadline() {
                        entry.round.handle_timeout(self.now);
                    }
                }
            }
            4 => {
                let id = self.pick(input.byte());
                let waiter = self.next_waiter;
                self.next_waiter += 1;
                self.flights.set_waiter(RoundId::from_raw(id), waiter);
                if let Some(entry) = self.model.get_mut(&id) {
                    entry.waiter = Some(waiter);
                }
            }
            5 => self.wake(input.byte()),
            6 => {
                let id = self.pick(input.byte());
                self.flights.claim(RoundId::from_raw(id));
                self.claim(id);
            }
            7 => {
                let id = self.pick(input.byte());
                self.flights.finish(RoundId::from_raw(id));
                self.claim(id);
                self.model.remove(&id);
            }
            8 => self.take_over(input.byte() % 2),
            _ => {
                // The driver's path for a master skipped as lagging.
                let id = self.pick(input.byte());
                let node = usize::from(input.byte()) % (self.masters + 1);
                let now = self.now;
                self.flights.update(RoundId::from_raw(id), |round| {
                    round.handle_failure(node, NodeError::Lagging, now)
                });
                if let Some(entry) = self.model.get_mut(&id) {
                    entry.round.handle_failure(node, NodeError::Lagging, now);
                }
            }
        }
    }

    fn begin(&mut self, b: u8) {
        let op = [Op::Acquire, Op::Extend, Op::Release, Op::FenceRead][usize::from(b % 4)];
        let Some(id) = self.flights.begin().map(RoundId::get) else {
            assert_eq!(self.model.len(), self.cap, "a start refused below the cap");
            self.seen.full += 1;
            return;
        };
        assert!(self.model.len() < self.cap, "a start past the cap");
        assert!(
            id != 0 && !self.issued.contains(&id),
            "id {id:#x} issued twice"
        );
        let (now, masters) = (self.now, self.masters);
        self.flights.update(RoundId::from_raw(id), |round| {
            round.restart(op, masters, TTL, DRIFT, TIMEOUT, now)
        });
        let round = Round::new(op, masters, TTL, DRIFT, TIMEOUT, now);
        self.issued.push(id);
        self.model.insert(
            id,
            Entry {
                round,
                waiter: None,
                unclaimed: false,
            },
        );
        self.seen.started += 1;
    }

    fn deliver(&mut self, id: u64, node: usize, outcome: Outcome) {
        let before = self.model.get(&id).map(|e| e.round.decision().is_some());
        self.flights
            .deliver(RoundId::from_raw(id), node, outcome.clone(), self.now);
        let Some(entry) = self.model.get_mut(&id) else {
            self.seen.stale += 1;
            return;
        };
        let round = &mut entry.round;
        match outcome {
            Outcome::Reply(reply) => round.handle_reply(node, reply, self.now),
            Outcome::Server(error) => {
                round.handle_failure(node, NodeError::Server(error), self.now);
            }
            Outcome::Quarantined => round.handle_quarantined(node, self.now),
            Outcome::Failed(error) => round.handle_failure(node, error, self.now),
            Outcome::NoScript | Outcome::Unexpected => {}
        }
        if before == Some(false) && round.decision().is_some() {
            self.seen.decided += 1;
        }
    }

    fn wake(&mut self, accept: u8) {
        let rescan = self.flights.rescan;
        let mut woken = Vec::new();
        let mut i = 0;
        self.flights.wake_decided(|waiter| {
            // Which of them are expected back: by the bits of `accept`.
            let back = accept >> (i % 8) & 1 == 1;
            i += 1;
            woken.push((waiter, back));
            back
        });
        let mut expected: Vec<Waiter> = self
            .model
            .values()
            .filter(|e| e.round.decision().is_some())
            .filter_map(|e| e.waiter)
            .collect();
        let mut got: Vec<Waiter> = woken.iter().map(|&(w, _)| w).collect();
        expected.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, expected, "woken: not the decided rounds' waiters");
        for (waiter, back) in woken {
            let Some(entry) = self.model.values_mut().find(|e| e.waiter == Some(waiter)) else {
                panic!("woken: {waiter}, not a waiter of a round in flight");
            };
            entry.waiter = None;
            if back && !entry.unclaimed {
                entry.unclaimed = true;
                self.unclaimed += 1;
            }
            self.seen.woken += 1;
        }
        self.seen.rescans += u64::from(rescan);
    }

    fn claim(&mut self, id: u64) {
        if let Some(entry) = self.model.get_mut(&id) {
            if entry.unclaimed {
                entry.unclaimed = false;
                self.unclaimed -= 1;
            }
        }
    }

    fn take_over(&mut self, parity: u8) {
        let pick = |w: &Waiter| w % 2 == u32::from(parity);
        let any = self.flights.any_undecided(pick);
        let candidates = |model: &HashMap<u64, Entry>| {
            model
                .values()
                .filter(|e| e.round.decision().is_none())
                .filter_map(|e| e.waiter)
                .filter(pick)
                .count()
        };
        let before = candidates(&self.model);
        assert_eq!(any, before > 0, "any_undecided disagrees with the model");
        match self.flights.take_undecided_waiter(pick) {
            Some(waiter) => {
                let Some(entry) = self
                    .model
                    .values_mut()
                    .find(|e| e.waiter == Some(waiter) && e.round.decision().is_none())
                else {
                    panic!("taken over: {waiter}, not a waiter of an undecided round");
                };
                assert!(pick(&waiter), "taken over: a waiter `pick` refused");
                entry.waiter = None;
                self.seen.taken += 1;
            }
            None => assert_eq!(before, 0, "no waiter taken over, but the model has one"),
        }
    }

    /// The table agrees with the model.
    fn check(&self) {
        let flights = &self.flights;
        assert_eq!(flights.len(), self.model.len(), "rounds in flight");
        assert_eq!(flights.unclaimed(), self.unclaimed, "waiters unclaimed");
        for &id in &self.issued {
            match self.model.get(&id) {
                Some(entry) => {
                    let Some(round) = flights.round(RoundId::from_raw(id)) else {
                        panic!("round {id:#x} in flight is not found");
                    };
                    assert_eq!(round.nodes(), entry.round.nodes(), "round {id:#x}'s nodes");
                    assert_eq!(round.decision(), entry.round.decision(), "round {id:#x}");
                    assert_eq!(round.deadline(), entry.round.deadline());
                    assert_eq!(
                        flights.is_decided(RoundId::from_raw(id)),
                        entry.round.decision().is_some()
                    );
                }
                None => {
                    assert!(
                        !flights.is_live(RoundId::from_raw(id)),
                        "ended round {id:#x} still in flight"
                    );
                    assert!(
                        flights.round(RoundId::from_raw(id)).is_none()
                            && flights.is_decided(RoundId::from_raw(id))
                    );
                }
            }
        }
        for never in NEVER {
            assert!(
                !flights.is_live(RoundId::from_raw(never)),
                "an id never issued is in flight"
            );
        }
        let deadline = self
            .model
            .values()
            .filter(|e| e.round.decision().is_none())
            .map(|e| e.round.deadline())
            .min();
        assert_eq!(flights.next_deadline(), deadline, "the next deadline");
        let capacities = (
            flights.slots.capacity(),
            flights.free.capacity(),
            flights.decided.capacity(),
        );
        assert_eq!(capacities, self.capacities, "the table grew");
    }
}

/// An outcome, by a byte.
fn outcome(b: u8) -> Outcome {
    match b % 8 {
        0 | 1 => Outcome::Reply(Reply::Ok),
        2 => Outcome::Reply(Reply::Refused),
        3 => Outcome::Reply(Reply::Count(u64::from(b))),
        4 => Outcome::Reply(Reply::Unsynced(u64::from(b))),
        5 => Outcome::Server(ServerError::new(b"ERR no")),
        6 => Outcome::Quarantined,
        _ => {
            if b & 0x80 == 0 {
                Outcome::NoScript
            } else {
                Outcome::Unexpected
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use std::fs;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn add(all: &mut FlightsSeen, seen: FlightsSeen) {
        all.started += seen.started;
        all.decided += seen.decided;
        all.woken += seen.woken;
        all.stale += seen.stale;
        all.full += seen.full;
        all.rescans += seen.rescans;
        all.taken += seen.taken;
    }

    /// Seeded random programs agree with the model, and together reach
    /// every state worth checking: decisions, wakes, stale outcomes, a
    /// full table, an overflowed list of decided rounds, a take-over.
    #[test]
    fn random_programs_agree_with_the_model() {
        let mut rng = StdRng::seed_from_u64(0x5eed_f11e);
        let mut all = FlightsSeen::default();
        for _ in 0..2_000 {
            let len = rng.random_range(2..400);
            let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            add(&mut all, flights(&data));
        }
        eprintln!("{all:?}");
        assert!(
            all.started > 0
                && all.decided > 0
                && all.woken > 0
                && all.stale > 0
                && all.full > 0
                && all.rescans > 0
                && all.taken > 0,
            "the programs miss a state: {all:?}"
        );
    }

    /// Every seed and regression of the `flights` fuzz target passes.
    #[test]
    fn flights_corpus() {
        let files = crate::fuzz_inputs("flights");
        assert!(!files.is_empty(), "no flights seeds");
        for path in &files {
            let seen = flights(&fs::read(path).unwrap());
            eprintln!("{}: {seen:?}", path.display());
        }
    }

    /// The empty program and a few degenerate ones run.
    #[test]
    fn degenerate_programs() {
        for data in [&b""[..], &[0xff], &[0, 0, 0, 0, 0, 0], &[7; 64], &[255; 64]] {
            flights(data);
        }
    }
}
