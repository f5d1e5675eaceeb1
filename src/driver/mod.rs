//! The `mio` driver: one non-blocking connection per master, every round
//! written to all of them in one event-loop tick, replies read as they
//! arrive ("poor man's multiplexing").
//!
//! The driver moves bytes and keeps time; what the replies mean for the
//! lock is decided by [`crate::rules::Round`], which it feeds.

mod conn;
#[cfg(feature = "tls")]
mod tls;

use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry};

use crate::addr::ServerAddr;
use crate::commands::{Command, Outcome};
use crate::link::{Live, OnReply};
use crate::rules::{NodeError, NodeState, Round};

use conn::Conn;
pub(crate) use conn::TlsConfig;

use crate::link::LinkConfig;

/// Readiness events handled per poll.
const EVENTS: usize = 64;

pub(crate) struct Driver {
    poll: Poll,
    events: Events,
    conns: Vec<Conn>,
    next_round: u64,
}

impl Driver {
    pub(crate) fn new(
        addrs: &[ServerAddr],
        config: LinkConfig,
        tls: &TlsConfig,
    ) -> io::Result<Driver> {
        let now = Instant::now();
        Ok(Driver {
            poll: Poll::new()?,
            events: Events::with_capacity(EVENTS),
            conns: addrs
                .iter()
                .enumerate()
                .map(|(i, addr)| Conn::new(i, addr.clone(), config, tls, now))
                .collect(),
            next_round: 1,
        })
    }

    /// The number of masters.
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// The masters' addresses, in order.
    pub(crate) fn addrs(&self) -> impl Iterator<Item = &ServerAddr> {
        self.conns.iter().map(Conn::addr)
    }

    /// How many connects each master has had, and how many times the
    /// restart guard found it suspect, in order.
    pub(crate) fn connects(&self) -> impl Iterator<Item = (u64, u64)> {
        self.conns
            .iter()
            .map(|c| (c.link().connects(), c.link().sighting().suspicions()))
    }

    /// Each master that is not ready, with why.
    pub(crate) fn failures(&self) -> impl Iterator<Item = (&ServerAddr, NodeError)> {
        self.conns
            .iter()
            .filter_map(|conn| Some((conn.addr(), conn.link().failure()?)))
    }

    /// Connects every master that is down and waits, until `deadline` at
    /// the latest, for the handshakes.
    pub(crate) fn connect_all(&mut self, deadline: Instant) -> io::Result<()> {
        let now = Instant::now();
        let registry = self.poll.registry();
        for conn in &mut self.conns {
            if conn.link().is_down() {
                // A failure leaves it down, with its back-off started.
                let _ = conn.connect(registry, now);
            }
        }
        let id = self.next_rounds(0);
        self.wait(&mut Rounds::new(id, &mut []), deadline, Until::Connected)
    }

    /// Reserves `n` consecutive round ids; returns the first.
    fn next_rounds(&mut self, n: usize) -> u64 {
        let id = self.next_round;
        self.next_round += n as u64;
        id
    }

    /// Runs one round: queues `command` on every connection, writes them
    /// all in the same tick, then reads replies into `round` until it is
    /// decided or its deadline passes. (A `NOSCRIPT` reply is answered by
    /// the connection itself, with `EVAL`, within the round.)
    pub(crate) fn run(&mut self, round: &mut Round, command: &Command<'_>) -> io::Result<()> {
        self.run_many(std::slice::from_mut(round), std::slice::from_ref(command))
    }

    /// Runs several rounds at once, `rounds[k]` of `commands[k]`: queues
    /// every command on every connection, writes each connection's share in
    /// one write in the same tick, then reads the replies, each matched to
    /// its round by the connection's order, until every round is decided or
    /// the deadline passes. Each round decides on its own.
    ///
    /// First it reads, without waiting, whatever arrived while the client
    /// was idle: late replies to earlier rounds, so that their requests do
    /// not look stalled, and anything unprompted, so that a reply to
    /// nothing fails its connection before a new request could be matched
    /// to it.
    pub(crate) fn run_many(
        &mut self,
        rounds: &mut [Round],
        commands: &[Command<'_>],
    ) -> io::Result<()> {
        let n = rounds.len().min(commands.len());
        let rounds = &mut rounds[..n];
        let base = self.next_rounds(n);
        self.poll_once(Duration::ZERO, &mut Rounds::new(base, &mut []))?;
        let now = Instant::now();
        let registry = self.poll.registry();
        for (i, conn) in self.conns.iter_mut().enumerate() {
            // Until the next run: the batch is in flight.
            conn.link_mut().allow_batch(n.saturating_sub(1));
            for (k, command) in commands[..n].iter().enumerate() {
                if let Err(error) = conn.send(registry, command, base + k as u64, now) {
                    // A failed send leaves the connection down, with what
                    // the batch had queued there: every round of the batch
                    // fails on this master.
                    for round in rounds.iter_mut() {
                        round.handle_failure(i, error.clone(), now);
                    }
                    break;
                }
            }
        }
        let deadline = rounds.iter().map(Round::deadline).max().unwrap_or(now);
        let mut live = Rounds::new(base, rounds);
        for (i, conn) in self.conns.iter_mut().enumerate() {
            if let Err(error) = conn.flush() {
                fail(conn, registry, i, error, now, &mut live);
            }
        }
        self.wait(&mut live, deadline, Until::Decided)?;
        for round in live.rounds.iter() {
            for (conn, state) in self.conns.iter_mut().zip(round.nodes()) {
                if *state == NodeState::TimedOut {
                    conn.link_mut().note_late(round.started());
                }
            }
        }
        Ok(())
    }

    /// Queues `command` on every connection that is up (or may reconnect at
    /// once) and writes what can be written now, without waiting: not for
    /// a handshake, a full socket buffer or a reply. What is left goes out
    /// as the connections become ready during later calls; the replies are
    /// matched and dropped by later rounds. A master that is paused or
    /// down costs nothing here.
    pub(crate) fn queue(&mut self, command: &Command<'_>, now: Instant) {
        let id = self.next_rounds(1);
        let registry = self.poll.registry();
        for conn in &mut self.conns {
            // A connection dropped in the failed round (say, as stalled,
            // after its SET went out) reconnects at once: the command waits
            // for the handshake on the new one.
            if !conn.link().may_send(now) {
                continue;
            }
            // A failed send leaves the connection down.
            if conn.send(registry, command, id, now).is_ok() {
                if let Err(error) = conn.flush() {
                    conn.close(registry, error, now);
                }
            }
        }
    }

    /// Polls and dispatches readiness until `until` holds or `deadline`
    /// passes. Outcomes of the live rounds go to them; a connection that
    /// fails is closed, and a request of a live round it had counts as
    /// failed.
    fn wait(&mut self, live: &mut Rounds<'_>, deadline: Instant, until: Until) -> io::Result<()> {
        loop {
            let now = Instant::now();
            let registry = self.poll.registry();
            for (i, conn) in self.conns.iter_mut().enumerate() {
                if let Err(error) = conn.link().check_timers(now) {
                    fail(conn, registry, i, error, now, live);
                }
            }
            for round in live.rounds.iter_mut() {
                round.handle_timeout(now);
            }
            let done = match until {
                Until::Decided => live.rounds.iter().all(|r| r.decision().is_some()),
                Until::Connected => self
                    .conns
                    .iter()
                    .all(|c| c.link().is_ready() || c.link().is_down()),
            };
            if done || now >= deadline {
                return Ok(());
            }
            // A connection with unread data left by its read budget gets no
            // new event: look at the others without sleeping, then go on
            // reading it.
            let timeout = if self.conns.iter().any(Conn::has_backlog) {
                Duration::ZERO
            } else {
                let wake = self
                    .conns
                    .iter()
                    .filter_map(|c| c.link().next_timer())
                    .fold(deadline, Instant::min);
                wake.saturating_duration_since(now)
            };
            self.poll_once(timeout, live)?;
            self.read_backlog(live);
        }
    }

    /// Waits up to `timeout` for readiness and handles every event:
    /// outcomes of the live rounds go to them; a connection that fails is
    /// closed, and a request of a live round it had counts as failed.
    fn poll_once(&mut self, timeout: Duration, live: &mut Rounds<'_>) -> io::Result<()> {
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        let registry = self.poll.registry();
        for event in self.events.iter() {
            let i = event.token().0;
            if let Some(conn) = self.conns.get_mut(i) {
                let ids = live.ids();
                serve(conn, registry, i, live, |conn, on_reply| {
                    conn.handle_event(event, ids, on_reply)
                });
            }
        }
        self.check_identities(live);
        Ok(())
    }

    /// Compares the `run_id` of each handshake just completed with the
    /// other ready masters': a server reached through a second address is
    /// refused there ([`NodeError::SameServer`]), so that it never votes
    /// twice.
    fn check_identities(&mut self, live: &mut Rounds<'_>) {
        let registry = self.poll.registry();
        for i in 0..self.conns.len() {
            #[cfg(feature = "tracing")]
            if let Some(suspicion) = self.conns[i].link_mut().take_suspicion() {
                tracing::warn!(master = %self.conns[i].addr(), ?suspicion, "master quarantined");
            }
            let Some(run_id) = self.conns[i].link_mut().take_fresh_run_id() else {
                continue;
            };
            let twin = self.conns.iter().enumerate().position(|(j, other)| {
                j != i
                    && other.link().is_ready()
                    && other.link().sighting().run_id() == Some(&run_id)
            });
            if let Some(other) = twin {
                let error = NodeError::SameServer {
                    other,
                    address: self.conns[other].addr().to_string().into(),
                };
                let now = Instant::now();
                fail(&mut self.conns[i], registry, i, error, now, live);
            }
        }
    }

    /// Goes on reading the connections whose last read stopped at its
    /// budget, one budget each.
    fn read_backlog(&mut self, live: &mut Rounds<'_>) {
        let registry = self.poll.registry();
        for (i, conn) in self.conns.iter_mut().enumerate() {
            if conn.has_backlog() {
                let ids = live.ids();
                serve(conn, registry, i, live, |conn, on_reply| {
                    conn.read_more(ids, on_reply)
                });
            }
        }
        self.check_identities(live);
    }
}

/// The rounds in progress: `rounds[k]` has id `base + k`.
struct Rounds<'a> {
    base: u64,
    rounds: &'a mut [Round],
}

impl<'a> Rounds<'a> {
    fn new(base: u64, rounds: &'a mut [Round]) -> Rounds<'a> {
        Rounds { base, rounds }
    }

    fn ids(&self) -> Live {
        self.base..self.base + self.rounds.len() as u64
    }

    /// The round with id `id`, if it is live.
    fn get(&mut self, id: u64) -> Option<&mut Round> {
        let k = usize::try_from(id.checked_sub(self.base)?).ok()?;
        self.rounds.get_mut(k)
    }
}

/// Lets `io` read and write connection `i`, handing the outcomes of the
/// live rounds to them; if it fails, closes the connection as [`fail`]
/// does.
fn serve(
    conn: &mut Conn,
    registry: &Registry,
    i: usize,
    live: &mut Rounds<'_>,
    io: impl FnOnce(&mut Conn, &mut OnReply<'_>) -> Result<(), NodeError>,
) {
    let result = io(conn, &mut |id, _, outcome, now| {
        if let Some(round) = live.get(id) {
            deliver(round, i, outcome, now);
        }
    });
    if let Err(error) = result {
        fail(conn, registry, i, error, Instant::now(), live);
    }
}

/// What [`Driver::wait`] waits for.
#[derive(Debug, Clone, Copy)]
enum Until {
    /// The round is decided.
    Decided,
    /// Every connection is ready or down.
    Connected,
}

fn deliver(round: &mut Round, i: usize, outcome: Outcome, now: Instant) {
    match outcome {
        Outcome::Reply(reply) => round.handle_reply(i, reply, now),
        Outcome::Server(error) => round.handle_failure(i, NodeError::Server(error), now),
        Outcome::Quarantined => round.handle_quarantined(i, now),
        Outcome::NoScript | Outcome::Unexpected => {}
    }
}

/// Closes `conn` after `error`; each live round it owed a reply learns
/// that node `i` failed.
fn fail(
    conn: &mut Conn,
    registry: &Registry,
    i: usize,
    error: NodeError,
    now: Instant,
    live: &mut Rounds<'_>,
) {
    let base = live.base;
    for (k, round) in live.rounds.iter_mut().enumerate() {
        if conn.link().has_pending_for(base + k as u64) {
            round.handle_failure(i, error.clone(), now);
        }
    }
    conn.close(registry, error, now);
}
