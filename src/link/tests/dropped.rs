//! A dropped acquire, with a fake clock and no socket: three masters'
//! links and the table of rounds in flight, wired as the driver wires
//! them. The acquire's caller goes away while its round waits behind the
//! connects and handshakes, or once its command is written; from the
//! moment a command can be written until the release that follows it has
//! been answered by every master (or failed, or timed out there), a live
//! round of the table covers it.

#![allow(clippy::expect_used, reason = "a test fails loudly")]

use std::time::{Duration, Instant};

use super::{MS, command, config, scripts, take};
use crate::commands::{Command, Outcome};
use crate::flights::Flights;
use crate::ids::RoundId;
use crate::link::{Link, Sink, encoded};
use crate::rules::{Decision, NodeError, NodeState, Op, Round};

const TTL_MS: u64 = 30_000;
const TIMEOUT: Duration = Duration::from_millis(50);

/// Hands a master's outcomes to the live rounds, as the driver does.
struct ToFlights<'a> {
    flights: &'a mut Flights<()>,
    node: usize,
}

impl Sink for ToFlights<'_> {
    fn is_live(&self, id: RoundId) -> bool {
        self.flights.is_live(id)
    }

    fn on_reply(&mut self, id: RoundId, _: Op, outcome: Outcome, now: Instant) {
        self.flights.deliver(id, self.node, outcome, now);
    }
}

struct Masters {
    links: Vec<Link>,
    flights: Flights<()>,
    /// What each master did in the rounds the table ended on its own.
    ended: Vec<Vec<NodeState>>,
}

impl Masters {
    /// Three masters whose connects have started at `t0`: each handshake
    /// waits for its connect, and commands for the handshake.
    fn connecting(t0: Instant) -> Masters {
        let links = (0..3)
            .map(|_| {
                let mut link = Link::new(config(), t0);
                link.start(None, None, 0, t0);
                link
            })
            .collect();
        Masters {
            links,
            flights: Flights::new(4, 3),
            ended: Vec::new(),
        }
    }

    /// Three masters through connect and handshake at `t0`.
    fn ready(t0: Instant) -> Masters {
        let mut masters = Masters::connecting(t0);
        for node in 0..3 {
            let handshake = masters.connect(node, t0);
            assert!(handshake.contains("SCRIPT"), "{handshake}");
        }
        masters
    }

    /// Queues `command` for round `id` on every link.
    fn send(&mut self, id: RoundId, command: &Command<'_>, now: Instant) {
        for link in &mut self.links {
            link.queue(command, &encoded(command), id, true, now)
                .expect("the link takes it");
        }
    }

    /// Starts an acquire round, its command queued on every link.
    fn acquire(&mut self, now: Instant) -> RoundId {
        let id = self.flights.begin().expect("a free slot");
        self.flights.update(id, |round| {
            round.restart(
                Op::Acquire,
                3,
                Duration::from_millis(TTL_MS),
                2 * MS,
                TIMEOUT,
                now,
            )
        });
        self.send(id, &command(Op::Acquire, TTL_MS), now);
        id
    }

    /// The acquire's caller is gone: the driver's path for a dropped
    /// acquire future. Returns the id of its release.
    fn drop_acquire(&mut self, id: RoundId, now: Instant) -> RoundId {
        let release_id = self
            .flights
            .pass_to_release(id)
            .expect("the acquire was in flight");
        self.flights.update(release_id, |round| {
            round.restart(Op::Release, 3, Duration::ZERO, Duration::ZERO, TIMEOUT, now)
        });
        let release = command(Op::Release, 0).with_script().reaching(0b111);
        self.send(release_id, &release, now);
        release_id
    }

    /// Master `node`'s connect completes and its handshake is answered:
    /// returns what the link wrote.
    fn connect(&mut self, node: usize, now: Instant) -> String {
        self.links[node].connected(now);
        let handshake = take(&mut self.links[node]);
        self.answer(node, &scripts(), now);
        assert!(self.links[node].is_ready());
        handshake + &take(&mut self.links[node])
    }

    /// Master `node` sends `replies`, read at `now`.
    fn answer(&mut self, node: usize, replies: &str, now: Instant) {
        let link = &mut self.links[node];
        let buf = link.read_buf().expect("room");
        buf[..replies.len()].copy_from_slice(replies.as_bytes());
        let mut sink = ToFlights {
            flights: &mut self.flights,
            node,
        };
        link.handle_read(replies.len(), now, &mut sink)
            .expect("a healthy reply");
        self.reap();
    }

    /// Master `node`'s connection fails at `now`.
    fn fail(&mut self, node: usize, now: Instant) {
        let error = NodeError::Connect(std::io::ErrorKind::TimedOut);
        self.flights.fail_master(node, &error, now);
        self.links[node].close(error, now);
        self.reap();
    }

    fn reap(&mut self) {
        let ended = &mut self.ended;
        self.flights
            .reap(|round: &Round| ended.push(round.nodes().to_vec()));
    }

    /// Every command a link holds is covered by a live round: the last
    /// one's (replies come in order, and the table keeps that round until
    /// its reply, or its master's failure or timeout).
    fn assert_tracked(&self) {
        for (node, link) in self.links.iter().enumerate() {
            if let Some(last) = link.request_rounds().last() {
                assert!(
                    self.flights.is_live(last),
                    "master {node} holds commands no live round covers"
                );
            }
        }
    }
}

/// Where `what` is in `sent`.
fn at(sent: &str, what: &str) -> usize {
    sent.find(what)
        .unwrap_or_else(|| panic!("{what} not in {sent}"))
}

#[test]
fn an_acquire_dropped_behind_the_handshakes_is_released_and_followed_to_the_end() {
    let t0 = Instant::now();
    let mut masters = Masters::connecting(t0);
    let acquire = masters.acquire(t0);
    masters.assert_tracked();
    // Dropped before anything of it could be written.
    let release = masters.drop_acquire(acquire, t0 + MS);
    assert!(
        !masters.flights.is_live(acquire),
        "the acquire's round ended"
    );
    assert_eq!(masters.flights.len(), 1, "its slot went to the release");
    assert_eq!(masters.flights.orphans(), 1);
    masters.assert_tracked();
    for node in 0..3 {
        // The handshake done, the acquire goes out, its release behind it.
        let sent = masters.connect(node, t0 + 2 * MS);
        assert!(at(&sent, "SET") < at(&sent, "EVAL"), "{sent}");
        masters.assert_tracked();
    }
    // Two masters answer: the release is decided, but a master has yet to
    // answer it, and the table keeps it.
    for node in 0..2 {
        masters.answer(node, "+OK\r\n:1\r\n", t0 + 3 * MS);
        masters.assert_tracked();
    }
    assert!(matches!(
        masters.flights.round(release).and_then(Round::decision),
        Some(Decision::Quorum { .. })
    ));
    assert!(masters.flights.is_live(release));
    assert!(masters.ended.is_empty());
    // The last one answers: the release ends, told to the client.
    masters.answer(2, "+OK\r\n:1\r\n", t0 + 4 * MS);
    assert!(!masters.flights.is_live(release));
    assert_eq!(masters.ended, [vec![NodeState::Ok; 3]]);
    assert_eq!((masters.flights.len(), masters.flights.orphans()), (0, 0));
}

#[test]
fn an_acquire_dropped_after_its_write_is_followed_until_every_master_answers_or_times_out() {
    let t0 = Instant::now();
    let mut masters = Masters::ready(t0);
    let acquire = masters.acquire(t0);
    for link in &mut masters.links {
        assert!(take(link).contains("SET"));
    }
    let release = masters.drop_acquire(acquire, t0 + MS);
    for link in &mut masters.links {
        assert!(take(link).contains("EVAL"));
    }
    masters.assert_tracked();
    // A quorum answers; the third master says nothing.
    for node in 0..2 {
        masters.answer(node, "+OK\r\n:1\r\n", t0 + 2 * MS);
    }
    masters.assert_tracked();
    let deadline = masters
        .flights
        .round(release)
        .map(Round::deadline)
        .expect("in flight");
    assert_eq!(
        masters.flights.next_deadline(),
        Some(deadline),
        "a decided release still waiting for a master keeps its deadline"
    );
    masters.flights.handle_timeout(deadline);
    masters.reap();
    assert_eq!(
        masters.ended,
        [vec![NodeState::Ok, NodeState::Ok, NodeState::TimedOut]]
    );
    assert_eq!(masters.flights.len(), 0);
}

#[test]
fn a_handshake_that_fails_after_the_drop_ends_the_release_there() {
    let t0 = Instant::now();
    let mut masters = Masters::connecting(t0);
    let acquire = masters.acquire(t0);
    let release = masters.drop_acquire(acquire, t0 + MS);
    // Master 2's handshake times out: neither the acquire nor its release
    // was written there.
    masters.fail(2, t0 + 2 * MS);
    assert_eq!(masters.links[2].request_rounds().count(), 0);
    assert!(masters.flights.is_live(release));
    for node in 0..2 {
        let sent = masters.connect(node, t0 + 3 * MS);
        assert!(at(&sent, "SET") < at(&sent, "EVAL"), "{sent}");
        masters.answer(node, "+OK\r\n:1\r\n", t0 + 4 * MS);
    }
    let failed = NodeState::Failed(NodeError::Connect(std::io::ErrorKind::TimedOut));
    assert_eq!(masters.ended, [vec![NodeState::Ok, NodeState::Ok, failed]]);
    assert_eq!(masters.flights.len(), 0);
}

#[test]
fn a_dropped_unlock_is_followed_until_every_master_answers() {
    let t0 = Instant::now();
    let mut masters = Masters::ready(t0);
    let id = masters.flights.begin().expect("a free slot");
    masters.flights.update(id, |round| {
        round.restart(Op::Release, 3, Duration::ZERO, Duration::ZERO, TIMEOUT, t0)
    });
    masters.send(id, &command(Op::Release, 0), t0);
    assert!(masters.flights.orphan(id));
    masters.assert_tracked();
    masters.answer(0, ":1\r\n", t0 + MS);
    masters.answer(1, ":0\r\n", t0 + MS);
    assert!(masters.flights.is_live(id), "master 2 has yet to answer");
    masters.answer(2, ":1\r\n", t0 + MS);
    assert_eq!(
        masters.ended,
        [vec![NodeState::Ok, NodeState::Refused, NodeState::Ok]]
    );
    assert_eq!(masters.flights.orphans(), 0);
    // Its waiter, had it one, is gone with it.
    masters.flights.set_waiter(id, ());
    assert_eq!(masters.flights.len(), 0);
}

/// What the replies of an ended round's commands cannot do: count for the
/// release that took its slot.
#[test]
fn the_dropped_acquires_late_replies_never_count_for_its_release() {
    let t0 = Instant::now();
    let mut masters = Masters::ready(t0);
    let acquire = masters.acquire(t0);
    let release = masters.drop_acquire(acquire, t0 + MS);
    // The acquire's replies alone: the release has none yet.
    for node in 0..3 {
        masters.answer(node, "+OK\r\n", t0 + 2 * MS);
    }
    let round = masters.flights.round(release).expect("in flight");
    assert_eq!(round.nodes(), vec![NodeState::Pending; 3]);
    assert!(!masters.flights.is_live(acquire));
}
