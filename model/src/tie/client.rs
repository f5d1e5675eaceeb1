//! The model's client against the library's fenced acquire machine.
//!
//! Both take the same events: a client of three masters starts attempts
//! one after another; each round it sends ends with the masters' answers
//! (counts, losses with their ids and clocks, grants, refusals, failures)
//! at given ticks, some masters never answering once the round is
//! decided, and the client takes the round's end at a later tick. After
//! each step both must agree on the round's decision, on what the client
//! does next (read, sync with which value, mode and loss ids, acquire,
//! raise to which fence, hold with which fence and validity, or fail and
//! why), on what its fence book keeps, and on the releases it sends.
//!
//! A tick is a second on the library's clock. The rounds wait long for the
//! masters: a time-out is given as a failure, at a step of its own, as the
//! model has it (its rounds keep no deadline). The library's acquires have
//! a TTL of the model's validity plus the least drift, so that a lock's
//! validity is the model's to the tick.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a test fails loudly"
)]

use std::time::{Duration, Instant};

use redlock_mio::scripts;
use redlock_mio::sim::rules::drift;
use redlock_mio::sim::{Decision as LibDecision, Reply, Round};
use redlock_mio::{Error, NodeError};

use super::machine::FenceMachine;
use super::{Rng, resp_args};
use crate::client as model;
use crate::config::{Config, N};
use crate::log::Log;
use crate::state::{Decision, Issued, Node, Op, Phase, Request, State, loss_id};

/// A lock's validity, in ticks.
const VALIDITY: u8 = 2;

/// The wait before a lost counter is put back, in ticks.
const WAIT: u8 = 3;

/// What a client does after a step, in the terms both sides share.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Next {
    /// Reads every counter.
    Read,
    /// Puts masters back in sync: the value, whether it starts the
    /// counters, the loss ids (sorted).
    Sync {
        value: u64,
        start: bool,
        ids: Vec<u64>,
    },
    /// Acquires the lock.
    Acquire,
    /// Raises the counters to the fence.
    Raise { fence: u64 },
    /// Holds the lock with its fence, valid until the tick.
    Held { fence: u64, valid_until: u64 },
    /// The attempt failed.
    Failed(Why),
}

/// Why an attempt failed, as finely as the model tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// The acquire missed a quorum (`Contended`, `Unavailable`, or
    /// `Unfenced` for a quorum short of masters in sync).
    NoQuorum,
    /// The acquire's quorum came when no validity was left (`TooSlow`).
    TooSlow,
    /// The acquire won a quorum with no count among it (`Unfenced`).
    Unfenced,
    /// The raise's quorum ended after the lock's validity (`TooSlow`).
    RaiseLate,
    /// The raise missed a quorum (`Unfenced`, or `Unavailable`).
    RaiseShort,
}

/// The model's client and the library's machine side by side.
struct Pair {
    config: Config,
    state: State,
    machine: FenceMachine,
    base: Instant,
    ttl_ms: u64,
    /// Each side's releases so far: the model's, counted off its wire.
    model_releases: usize,
    /// The steps so far, for a failure's message.
    trail: Vec<String>,
}

impl Pair {
    fn new() -> Pair {
        let config = Config {
            clients: 1,
            validity: VALIDITY,
            wait: WAIT,
            read_every: 1,
            ..Config::default()
        };
        let least = drift(Duration::ZERO, 0.0);
        let ttl = Duration::from_secs(VALIDITY.into()) + least;
        assert_eq!(drift(ttl, 0.0), least, "the least drift, whatever the TTL");
        assert_eq!(
            ttl.subsec_nanos() % 1_000_000,
            0,
            "a TTL in whole milliseconds"
        );
        let base = Instant::now();
        let wait = Duration::from_secs(WAIT.into());
        Pair {
            state: State::initial(&config),
            config,
            machine: FenceMachine::new(N, wait, 0.0, base),
            base,
            ttl_ms: ttl.as_millis() as u64,
            model_releases: 0,
            trail: Vec::new(),
        }
    }

    fn at(&self, tick: u8) -> Instant {
        self.base + Duration::from_secs(tick.into())
    }

    fn tick(&self, at: Instant) -> u64 {
        let since = at.duration_since(self.base);
        assert_eq!(since.subsec_nanos(), 0, "{}", self.trail.join("\n"));
        since.as_secs()
    }

    /// Both start an attempt at the tick the model is at.
    fn begin(&mut self) -> Next {
        let mut log = Log::on();
        model::begin(&mut self.state, 0, &self.config, &mut log);
        self.machine
            .begin(b"r", self.ttl_ms, self.at(self.state.now));
        self.trail.push(format!("tick {}: begin", self.state.now));
        self.agree(log, None, None)
    }

    /// Both take the end of the round in flight at tick `now`.
    fn handle(&mut self, rounds: Vec<Round>, now: u8, last: &Next) -> Next {
        self.state.now = now;
        let mut log = Log::on();
        let issued = model::handle(&mut self.state, 0, 0, &self.config, &mut log);
        self.machine.handle(rounds, self.at(now));
        self.trail.push(format!("tick {now}: handle"));
        self.agree(log, issued, Some(last))
    }

    /// What each side does next; the test fails where they differ, in it
    /// or in the book or the releases.
    fn agree(&mut self, log: Log, issued: Option<Issued>, last: Option<&Next>) -> Next {
        let ours = self.model_next(log, issued);
        let theirs = self.library_next(last);
        self.trail
            .push(format!("  model {ours:?}, library {theirs:?}"));
        assert_eq!(ours, theirs, "{}", self.trail.join("\n"));
        let last_read = self.machine.last_read();
        let lost: Vec<Option<(u64, u64)>> = (self.machine.losses().iter())
            .map(|slot| slot.map(|(id, seen)| (id, self.tick(seen))))
            .collect();
        let book = &self.state.clients[0].book;
        let model_lost: Vec<Option<(u64, u64)>> = book
            .lost
            .iter()
            .map(|slot| slot.map(|(id, seen)| (id, seen.into())))
            .collect();
        assert_eq!(model_lost, lost, "the losses:\n{}", self.trail.join("\n"));
        assert_eq!(
            book.last_read.map(u64::from),
            last_read.map(|at| self.tick(at)),
            "the last read:\n{}",
            self.trail.join("\n")
        );
        assert_eq!(
            self.model_releases,
            self.machine.releases(),
            "the releases:\n{}",
            self.trail.join("\n")
        );
        ours
    }

    /// The model's next step: its phase, the request it sent, and the
    /// holding it began, if it did.
    fn model_next(&mut self, log: Log, issued: Option<Issued>) -> Next {
        let client = self.state.clients[0];
        let sent: Vec<Request> = self.state.wire.drain(..).map(|msg| msg.request).collect();
        // A release goes to every master: one request each.
        self.model_releases += sent
            .iter()
            .filter(|r| matches!(r, Request::Release { .. }))
            .count()
            / N;
        match client.phase {
            Phase::Read => Next::Read,
            Phase::Sync { .. } => {
                let Some(&Request::Sync { value, start, ids }) = sent.first() else {
                    panic!("a sync sent nothing: {sent:?}");
                };
                let mut ids: Vec<u64> = ids.into_iter().filter(|&id| id != 0).collect();
                ids.sort_unstable();
                Next::Sync { value, start, ids }
            }
            Phase::Acquire => Next::Acquire,
            Phase::Raise { fence, .. } => Next::Raise { fence },
            Phase::Holding { .. } => {
                let issued = issued.expect("a holding that began");
                Next::Held {
                    fence: issued.fence,
                    valid_until: issued.valid_until.into(),
                }
            }
            Phase::Idle => {
                let lines = log.into_lines();
                let why = lines
                    .iter()
                    .find_map(|line| Some(line.split_once("fails (")?.1.split_once(')')?.0))
                    .unwrap_or("?");
                Next::Failed(match why {
                    "no quorum" => Why::NoQuorum,
                    "too slow" => Why::TooSlow,
                    "unfenced" => Why::Unfenced,
                    "raise too late" => Why::RaiseLate,
                    "raise without a quorum" => Why::RaiseShort,
                    other => panic!("the model failed for {other:?}: {lines:?}"),
                })
            }
        }
    }

    /// The library's next step: the command it would send, or its result.
    fn library_next(&mut self, last: Option<&Next>) -> Next {
        let commands = self.machine.commands();
        let Some(first) = commands.first() else {
            return match self.machine.finish().expect("an attempt that ended") {
                Ok(held) => Next::Held {
                    fence: held.fence().expect("a fenced lock"),
                    valid_until: self.tick(held.valid_until()),
                },
                Err(error) => Next::Failed(why(&error, last)),
            };
        };
        let args = resp_args(first);
        let text = |i: usize| String::from_utf8(args[i].clone()).expect("text");
        let number = |i: usize| text(i).parse::<u64>().expect("a number");
        assert_eq!(text(0), "EVALSHA");
        let sha = text(1);
        if sha == scripts::FENCE_READ_SHA1 {
            Next::Read
        } else if sha == scripts::FENCE_SYNC_SHA1 {
            // EVALSHA sha 2 fence lost value mode id...
            let mut ids: Vec<u64> = (7..args.len()).map(number).collect();
            ids.sort_unstable();
            Next::Sync {
                value: number(5),
                start: text(6) == "start",
                ids,
            }
        } else if sha == scripts::FENCED_ACQUIRE_SHA1 {
            Next::Acquire
        } else if sha == scripts::RAISE_SHA1 {
            Next::Raise {
                fence: number(args.len() - 1),
            }
        } else {
            panic!("an unexpected command: {args:?}");
        }
    }

    /// The rounds of the step each side just sent, answered by `rng`: the
    /// library's rounds as they stand, and the tick the client takes their
    /// end at.
    fn answer(&mut self, rng: &mut Rng, forced: Option<&[Node; N]>) -> (Vec<Round>, u8) {
        let mut now = self.state.now;
        let mut rounds = self
            .machine
            .rounds(self.at(now), Duration::from_secs(3_600));
        assert_eq!(rounds.len(), 1, "one lock, one round");
        let round = &mut rounds[0];
        let op = self.state.clients[0].round.expect("a round in flight").op;
        let answers = match forced {
            Some(answers) => *answers,
            None => [0, 1, 2].map(|m| answer(rng, op, m)),
        };
        let mut order = [0, 1, 2];
        if forced.is_none() {
            for i in (1..N).rev() {
                order.swap(i, rng.below(i + 1));
            }
        }
        for m in order {
            if forced.is_none() {
                now += rng.pick(&[(3, 0), (1, 1)]);
            }
            let node = answers[m];
            let at = self.at(now);
            match (node, op) {
                (Node::Ok(count), Op::Read | Op::Acquire) => {
                    round.handle_reply(m, Reply::Count(count), at);
                }
                (Node::Ok(_), Op::Sync | Op::Raise) => round.handle_reply(m, Reply::Ok, at),
                (Node::Refused, _) => round.handle_reply(m, Reply::Refused, at),
                (Node::Unsynced { lost, clock, .. }, Op::Read) => {
                    round.handle_reply(m, Reply::UnsyncedRead { lost, clock }, at);
                }
                (Node::Unsynced { lost, .. }, _) => {
                    round.handle_reply(m, Reply::Unsynced(lost), at)
                }
                (Node::Failed, _) => round.handle_failure(m, NodeError::Closed, at),
                (Node::Pending, _) => {}
            }
            let ours = self.state.clients[0].round.as_mut().expect("a round");
            ours.record(m, node, now, VALIDITY);
            let decided = ours.decided;
            let theirs = round.decision().map(|d| match d {
                LibDecision::Quorum { .. } => Decision::Quorum,
                LibDecision::TooSlow => Decision::TooSlow,
                LibDecision::NoQuorum => Decision::NoQuorum,
                other => panic!("an unexpected decision {other:?}"),
            });
            self.trail
                .push(format!("  tick {now}: m{m} {node:?} -> {decided:?}"));
            assert_eq!(
                decided,
                theirs,
                "the round's decision:\n{}",
                self.trail.join("\n")
            );
            // Once decided, the other masters may never answer.
            if decided.is_some() && forced.is_none() && rng.below(2) == 0 {
                break;
            }
        }
        if forced.is_none() {
            now += rng.pick(&[(3, 0), (1, 1), (1, 2)]);
        }
        (rounds, now)
    }

    /// Runs the attempt under way to its end, the rounds answered by
    /// `rng`, or by `forced` (one answer per master, each round, in
    /// master order, all at the tick the round began) while it lasts.
    fn run(&mut self, rng: &mut Rng, mut next: Next, forced: &[[Node; N]]) -> Next {
        let mut forced = forced.iter();
        while !matches!(next, Next::Held { .. } | Next::Failed(_)) {
            let (rounds, now) = self.answer(rng, forced.next());
            next = self.handle(rounds, now, &next);
        }
        if matches!(next, Next::Held { .. }) {
            model::release(&mut self.state, 0, &mut Log::off());
            self.state.wire.clear();
        }
        next
    }
}

/// The library's error as the model tells failures apart, after the step
/// `last`.
fn why(error: &Error, last: Option<&Next>) -> Why {
    match (last, error) {
        (Some(Next::Acquire), Error::TooSlow(_)) => Why::TooSlow,
        (Some(Next::Acquire), Error::Unfenced(report)) if report.ok() >= report.quorum() => {
            Why::Unfenced
        }
        (Some(Next::Acquire), Error::Unfenced(_) | Error::Contended(_) | Error::Unavailable(_)) => {
            Why::NoQuorum
        }
        (Some(Next::Raise { .. }), Error::TooSlow(_)) => Why::RaiseLate,
        (Some(Next::Raise { .. }), Error::Unfenced(_) | Error::Unavailable(_)) => Why::RaiseShort,
        _ => panic!("the library failed with {error:?} after {last:?}"),
    }
}

/// Counts a read or an acquire may report.
const COUNTS: [u64; 3] = [100, 101, 105];

/// Clocks (or counters started from one) a read out of sync may report.
const CLOCKS: [u64; 3] = [90, 300, 200];

/// A random answer of master `m` to a round of `op`, from what the model's
/// scripts reply.
fn answer(rng: &mut Rng, op: Op, m: usize) -> Node {
    let lost = loss_id(m, rng.below(2) as u8);
    let count = COUNTS[rng.below(COUNTS.len())];
    let clock = CLOCKS[rng.below(CLOCKS.len())];
    let unsynced = |clock| Node::Unsynced {
        lost,
        clock,
        time: clock,
    };
    match op {
        Op::Read => rng.pick(&[
            (1, Node::Ok(count)),
            (5, unsynced(clock)),
            (1, Node::Failed),
        ]),
        Op::Sync => rng.pick(&[(3, Node::Ok(0)), (1, Node::Refused), (1, Node::Failed)]),
        Op::Acquire => rng.pick(&[
            (4, Node::Ok(count)),
            (1, unsynced(0)),
            (1, Node::Refused),
            (1, Node::Failed),
        ]),
        Op::Raise => rng.pick(&[
            (4, Node::Ok(0)),
            (
                1,
                Node::Unsynced {
                    lost: 0,
                    clock: 0,
                    time: 0,
                },
            ),
            (1, Node::Refused),
            (1, Node::Failed),
        ]),
    }
}

/// Seeded sequences of up to four attempts each: every step of both sides
/// agrees.
#[test]
fn the_model_decides_as_the_library_does() {
    const CASES: u64 = 50_000;
    let mut steps = 0;
    let mut starts = 0;
    for case in 0..CASES {
        let mut rng = Rng::new(case);
        let mut pair = Pair::new();
        pair.trail.push(format!("case {case}"));
        for _ in 0..1 + rng.below(4) {
            let next = pair.begin();
            pair.run(&mut rng, next, &[]);
            pair.state.now += rng.below(usize::from(WAIT) + 2) as u8;
        }
        steps += pair.trail.iter().filter(|l| l.contains("model ")).count();
        starts += pair
            .trail
            .iter()
            .filter(|l| l.contains("start: true"))
            .count();
    }
    println!("{CASES} cases, {steps} steps, {starts} starts from the clocks");
    assert!(starts > 100, "the cases start the counters often enough");
}

fn lost_read(lost: [u64; N], clocks: [u64; N]) -> [Node; N] {
    [0, 1, 2].map(|m| Node::Unsynced {
        lost: lost[m],
        clock: clocks[m],
        time: clocks[m],
    })
}

/// A new deployment: the first read finds every master out of sync with
/// losses the client did not know, so it reads again; the second reports
/// the same losses, so the counters start from the largest clock of the
/// second read, which sits on no particular master.
#[test]
fn a_start_is_confirmed_and_from_the_largest_clock() {
    let ids = [loss_id(0, 0), loss_id(1, 0), loss_id(2, 0)];
    let mut pair = Pair::new();
    let mut rng = Rng::new(0);
    let next = pair.begin();
    assert_eq!(next, Next::Read);
    let (rounds, now) = pair.answer(&mut rng, Some(&lost_read(ids, [90, 300, 200])));
    let next = pair.handle(rounds, now, &next);
    assert_eq!(next, Next::Read, "read again to confirm");
    let (rounds, now) = pair.answer(&mut rng, Some(&lost_read(ids, [95, 310, 205])));
    let next = pair.handle(rounds, now, &next);
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    assert_eq!(
        next,
        Next::Sync {
            value: 310,
            start: true,
            ids: sorted
        }
    );
    let done = [Node::Ok(0); N];
    let granted = [Node::Ok(311); N];
    let end = pair.run(&mut rng, next, &[done, granted, done]);
    assert_eq!(
        end,
        Next::Held {
            fence: 311,
            valid_until: u64::from(VALIDITY)
        }
    );
}

/// A loss during the read: the second read reports a loss the first did
/// not, so nothing starts, and the attempt acquires with no counter to
/// count.
#[test]
fn a_start_needs_the_same_losses_twice() {
    let first = [loss_id(0, 0), loss_id(1, 0), loss_id(2, 0)];
    let second = [loss_id(0, 0), loss_id(1, 1), loss_id(2, 0)];
    let mut pair = Pair::new();
    let mut rng = Rng::new(0);
    let next = pair.begin();
    let (rounds, now) = pair.answer(&mut rng, Some(&lost_read(first, [300, 200, 90])));
    let next = pair.handle(rounds, now, &next);
    assert_eq!(next, Next::Read);
    let (rounds, now) = pair.answer(&mut rng, Some(&lost_read(second, [300, 200, 90])));
    let next = pair.handle(rounds, now, &next);
    assert_eq!(next, Next::Acquire, "no start, no third read");
    let unsynced = [0, 1, 2].map(|m| Node::Unsynced {
        lost: second[m],
        clock: 0,
        time: 0,
    });
    let end = pair.run(&mut rng, next, &[unsynced]);
    assert_eq!(end, Next::Failed(Why::NoQuorum));
}
