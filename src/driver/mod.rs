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
use crate::rules::{NodeError, NodeState, Op, Round};

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
        let id = self.next_round();
        self.wait(id, deadline, Until::Connected, None)
    }

    fn next_round(&mut self) -> u64 {
        let id = self.next_round;
        self.next_round += 1;
        id
    }

    /// Runs one round: queues `command` on every connection, writes them
    /// all in the same tick, then reads replies into `round` until it is
    /// decided or its deadline passes. (A `NOSCRIPT` reply is answered by
    /// the connection itself, with `EVAL`, within the round.)
    ///
    /// First it reads, without waiting, whatever arrived while the client
    /// was idle: late replies to earlier rounds, so that their requests do
    /// not look stalled, and anything unprompted, so that a reply to
    /// nothing fails its connection before a new request could be matched
    /// to it.
    pub(crate) fn run(&mut self, round: &mut Round, command: &Command<'_>) -> io::Result<()> {
        let id = self.next_round();
        self.poll_once(Duration::ZERO, id, None)?;
        let now = Instant::now();
        let registry = self.poll.registry();
        for (i, conn) in self.conns.iter_mut().enumerate() {
            if let Err(error) = conn.send(registry, command, id, now) {
                round.handle_failure(i, error, now);
            }
        }
        for (i, conn) in self.conns.iter_mut().enumerate() {
            if let Err(error) = conn.flush() {
                fail(conn, registry, i, id, error, now, Some(&mut *round));
            }
        }
        let deadline = round.deadline();
        self.wait(id, deadline, Until::Decided, Some(&mut *round))?;
        for (conn, state) in self.conns.iter_mut().zip(round.nodes()) {
            if *state == NodeState::TimedOut {
                conn.link_mut().note_late(round.started());
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
        let id = self.next_round();
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
    /// passes. Outcomes of round `id` go to `round`; a connection that
    /// fails is closed, and a request of round `id` it had counts as failed.
    fn wait(
        &mut self,
        id: u64,
        deadline: Instant,
        until: Until,
        mut round: Option<&mut Round>,
    ) -> io::Result<()> {
        loop {
            let now = Instant::now();
            let registry = self.poll.registry();
            for (i, conn) in self.conns.iter_mut().enumerate() {
                if let Err(error) = conn.link().check_timers(now) {
                    fail(conn, registry, i, id, error, now, round.as_deref_mut());
                }
            }
            if let Some(round) = round.as_deref_mut() {
                round.handle_timeout(now);
            }
            let done = match until {
                Until::Decided => round.as_deref().is_none_or(|r| r.decision().is_some()),
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
            self.poll_once(timeout, id, round.as_deref_mut())?;
            self.read_backlog(id, round.as_deref_mut());
        }
    }

    /// Waits up to `timeout` for readiness and handles every event:
    /// outcomes of round `id` go to `round`; a connection that fails is
    /// closed, and a request of round `id` it had counts as failed.
    fn poll_once(
        &mut self,
        timeout: Duration,
        id: u64,
        mut round: Option<&mut Round>,
    ) -> io::Result<()> {
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        let registry = self.poll.registry();
        for event in self.events.iter() {
            let i = event.token().0;
            if let Some(conn) = self.conns.get_mut(i) {
                serve(
                    conn,
                    registry,
                    i,
                    id,
                    round.as_deref_mut(),
                    |conn, on_reply| conn.handle_event(event, id, on_reply),
                );
            }
        }
        self.check_identities(id, round);
        Ok(())
    }

    /// Compares the `run_id` of each handshake just completed with the
    /// other ready masters': a server reached through a second address is
    /// refused there ([`NodeError::SameServer`]), so that it never votes
    /// twice.
    fn check_identities(&mut self, id: u64, mut round: Option<&mut Round>) {
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
                fail(
                    &mut self.conns[i],
                    registry,
                    i,
                    id,
                    error,
                    now,
                    round.as_deref_mut(),
                );
            }
        }
    }

    /// Goes on reading the connections whose last read stopped at its
    /// budget, one budget each.
    fn read_backlog(&mut self, id: u64, mut round: Option<&mut Round>) {
        let registry = self.poll.registry();
        for (i, conn) in self.conns.iter_mut().enumerate() {
            if conn.has_backlog() {
                serve(
                    conn,
                    registry,
                    i,
                    id,
                    round.as_deref_mut(),
                    |conn, on_reply| conn.read_more(id, on_reply),
                );
            }
        }
        self.check_identities(id, round);
    }
}

/// Lets `io` read and write connection `i`, handing the outcomes of round
/// `id` to `round`; if it fails, closes the connection as [`fail`] does.
fn serve(
    conn: &mut Conn,
    registry: &Registry,
    i: usize,
    id: u64,
    mut round: Option<&mut Round>,
    io: impl FnOnce(&mut Conn, &mut dyn FnMut(Op, Outcome, Instant)) -> Result<(), NodeError>,
) {
    let mut target = round.as_deref_mut();
    let result = io(conn, &mut |_, outcome, now| {
        if let Some(round) = target.as_deref_mut() {
            deliver(round, i, outcome, now);
        }
    });
    if let Err(error) = result {
        fail(conn, registry, i, id, error, Instant::now(), round);
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

/// Closes `conn` after `error`; if it owed round `id` a reply, `round`
/// learns that node `i` failed.
fn fail(
    conn: &mut Conn,
    registry: &Registry,
    i: usize,
    id: u64,
    error: NodeError,
    now: Instant,
    round: Option<&mut Round>,
) {
    let owed = conn.link().has_pending_for(id);
    match (owed, round) {
        (true, Some(round)) => {
            conn.close(registry, error.clone(), now);
            round.handle_failure(i, error, now);
        }
        _ => conn.close(registry, error, now),
    }
}
