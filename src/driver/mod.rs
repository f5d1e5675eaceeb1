//! The `mio` driver: one non-blocking connection per master, every round
//! written to all of them in one event-loop tick, replies read as they
//! arrive ("poor man's multiplexing"), many rounds in flight at once over
//! the same connections.
//!
//! The driver moves bytes and keeps time; everything it decides (which
//! session gets which command, where outcomes and wake-ups go, failing a
//! master, the orphaned rounds, the timers) is its [`Core`]'s, free of
//! sockets and of the clock. What the replies mean for the lock is decided
//! by [`crate::rules::Round`], which the core feeds, and which rounds are
//! in flight (and who waits for them) is kept by
//! [`crate::flights::Flights`]. [`Engine`] lets many callers share one
//! driver: whoever waits for a round polls for everyone while nobody else
//! does.

mod conn;
pub(crate) mod core;
mod engine;
#[cfg(feature = "tls")]
mod tls;

use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry};

use crate::addr::ServerAddr;
use crate::commands::Command;
use crate::ids::RoundId;
use crate::link::LinkConfig;
use crate::rules::{NodeError, Round};

use self::core::Core;
use conn::Conn;
pub(crate) use conn::TlsConfig;
pub(crate) use engine::{Engine, Full, Holders, Ids, Loss, Polling, Waiter, Wakes};

/// Readiness events handled per poll.
const EVENTS: usize = 64;

/// How long after the last poll the connections may have received
/// something nobody has read: a caller about to send reads it first (see
/// [`Poller::stale`]).
const FRESH: Duration = Duration::from_millis(1);

/// The poller: whoever holds it waits for readiness for every caller.
pub(crate) struct Poller {
    poll: Poll,
    events: Events,
    /// When the last poll returned.
    last: Instant,
}

impl Poller {
    /// Waits up to `timeout` for readiness events.
    fn poll(&mut self, timeout: Duration) -> io::Result<()> {
        let polled = match self.poll.poll(&mut self.events, Some(timeout)) {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e),
            _ => Ok(()),
        };
        self.last = crate::clock::now();
        polled
    }

    /// Whether what arrived since the last poll must be read before new
    /// requests are sent: bytes that arrived on a connection while nothing
    /// was asked of it (a hostile or broken server's reply to nothing)
    /// would otherwise be matched to the next request. That takes a poll
    /// (a system call) in front of the requests, so a caller that sends
    /// within [`FRESH`] of the last poll skips it: its requests go out a
    /// few microseconds sooner, the late replies of the last round are
    /// read while it waits for the new ones, and an unprompted reply
    /// could slip through only in that millisecond (as it can, with a
    /// poll in front, in the microseconds before the send).
    fn stale(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last) >= FRESH
    }
}

/// What needs the background thread to poll ([`Driver::background_need`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing.
    Nothing,
    /// Only the watched locks: a caller that polls reads for them too.
    Watches,
    /// Tasks' rounds or waits, or orphaned rounds.
    Tasks,
}

/// The connections and the rounds in flight: the state callers share. The
/// decisions are the [`Core`]'s; the driver holds the sockets, moves bytes
/// between them and the core, and reads the clock.
pub(crate) struct Driver {
    registry: Registry,
    conns: Vec<Conn>,
    /// The sans-IO core. Callers reach it directly where the driver adds
    /// nothing (the tables of rounds and waits, the masters' state); the
    /// driver's own methods are those that bring the sockets in line
    /// after the core changed (`submit`, `queue`, `release_after`, ...) or
    /// count what they wake.
    pub(crate) core: Core<Waiter>,
    /// The poller token of connection 0.
    base: usize,
    /// Callers woken at their rounds' decisions, told of a hand-off, or
    /// handed the poller, so far.
    woken: u64,
}

impl Driver {
    /// A driver for `addrs` with room for `config.in_flight` rounds in
    /// flight, and its poller.
    pub(crate) fn new(
        addrs: &[ServerAddr],
        config: LinkConfig,
        tls: &TlsConfig,
    ) -> io::Result<(Driver, Poller)> {
        let poll = Poll::new()?;
        let driver = Driver::embedded(addrs, config, tls, poll.registry(), 0)?;
        let poller = Poller {
            poll,
            events: Events::with_capacity(EVENTS),
            last: crate::clock::now(),
        };
        Ok((driver, poller))
    }

    /// A driver whose sockets are registered with `registry` (the caller's
    /// poller) under tokens `base..base + addrs.len()`.
    pub(crate) fn embedded(
        addrs: &[ServerAddr],
        config: LinkConfig,
        tls: &TlsConfig,
        registry: &Registry,
        base: usize,
    ) -> io::Result<Driver> {
        let conns = (0..addrs.len())
            .map(|i| Conn::new(i, base + i, tls))
            .collect();
        Ok(Driver {
            registry: registry.try_clone()?,
            conns,
            core: Core::new(addrs, config, crate::clock::now()),
            base,
            woken: 0,
        })
    }

    /// The poller tokens of the connections.
    pub(crate) fn tokens(&self) -> std::ops::Range<usize> {
        self.base..self.base + self.conns.len()
    }

    /// Starts connecting every master that is down (the handshakes go on
    /// as their sockets become ready).
    pub(crate) fn connect(&mut self) {
        let now = crate::clock::now();
        self.core.connect(now);
        self.sync(now);
    }

    /// Connects every master that is down and waits, until `deadline` at
    /// the latest, for the handshakes.
    pub(crate) fn connect_all(&mut self, poller: &mut Poller, deadline: Instant) -> io::Result<()> {
        self.connect();
        loop {
            let now = crate::clock::now();
            self.check_timers(now);
            let handshakes_over = (0..self.core.len()).all(|i| {
                let link = self.core.link(i);
                link.is_ready() || link.is_down()
            });
            if handshakes_over || now >= deadline {
                return Ok(());
            }
            let timeout = self.poll_timeout(now, deadline);
            poller.poll(timeout)?;
            self.dispatch(&poller.events);
        }
    }

    /// Starts one round per command, `restart` setting each round up: the
    /// command goes to every connection, and with `flush` each
    /// connection's share is written at once, in one write. Returns the
    /// rounds' ids, in the order of `commands`; fewer than asked when the
    /// rounds in flight reach the cap (then the caller waits for a slot,
    /// or fails).
    ///
    /// `now` is the rounds' start: taken before anything of theirs is sent
    /// (an earlier time only shortens what a grant is worth).
    pub(crate) fn submit(
        &mut self,
        commands: &[Command<'_>],
        restart: impl FnMut(&mut Round, &Command<'_>, Instant),
        ids: &mut impl Extend<RoundId>,
        flush: bool,
        now: Instant,
    ) -> usize {
        let started = self.core.submit(commands, restart, ids, flush, now);
        self.sync(now);
        started
    }

    /// Has the waiters of the rounds decided so far woken (with `wakes`),
    /// and those of the waits told.
    pub(crate) fn wake_decided(&mut self, wakes: &mut Wakes) {
        let woken = &mut self.woken;
        self.core.wake_decided(|waiter| {
            *woken += 1;
            wakes.push(waiter);
        });
    }

    /// The engine's counters: the sockets' reads and writes, the scans of
    /// the tables and the callers woken here, with `polls` (the waits,
    /// those of them that returned no event, the looks and those that
    /// found nothing), `wakes`, the engine's own, and the background
    /// thread's `rests`.
    pub(crate) fn engine_stats(
        &self,
        polls: [u64; 4],
        wakes: u64,
        rests: u64,
    ) -> crate::EngineStats {
        let (reads, writes) = self
            .conns
            .iter()
            .map(Conn::io_count)
            .fold((0, 0), |(r, w), (cr, cw)| (r + cr, w + cw));
        crate::EngineStats {
            writes,
            reads,
            polls: polls[0],
            idle_polls: polls[1],
            looks: polls[2],
            idle_looks: polls[3],
            watched: self.core.watches.len() as u64,
            wakes: wakes + self.woken,
            rests,
            scanned: self.core.scanned(),
        }
    }

    /// Has one thread waiting for an undecided round woken (with `wakes`),
    /// to take over the poller; returns whether there was one.
    pub(crate) fn hand_over(&mut self, wakes: &mut Wakes) -> bool {
        match self.core.take_waiter(Waiter::is_thread) {
            Some(waiter) => {
                self.woken += 1;
                wakes.push(waiter);
                true
            }
            None => false,
        }
    }

    /// What needs someone to poll when no thread does: a task (not a
    /// thread) that waits for an undecided round or to be told, or an
    /// orphaned round (whose task is gone); else a key watched for a loss.
    pub(crate) fn background_need(&self) -> Need {
        if self.core.needs_polling(|w| !w.is_thread()) {
            Need::Tasks
        } else if !self.core.watches.is_empty() {
            Need::Watches
        } else {
            Need::Nothing
        }
    }

    /// Watches `key`, held with `token`, for a loss: see [`Core::watch`];
    /// the reads are written now as far as the sockets take them.
    pub(crate) fn watch(
        &mut self,
        key: &[u8],
        token: [u8; crate::commands::TOKEN_LEN],
        now: Instant,
    ) -> crate::ids::WatchId {
        let id = self.core.watch(key, token, now);
        self.sync(now);
        id
    }

    /// Reads watch `id`'s key again on every master after an extension:
    /// see [`Core::rearm`]; written now as far as the sockets take it.
    pub(crate) fn rearm(&mut self, id: crate::ids::WatchId, now: Instant) {
        self.core.rearm(id, |_| true, now);
        self.sync(now);
    }

    /// Round `id`'s caller is gone and what it may have done must be
    /// undone by `release` (a dropped acquire): see
    /// [`Core::release_after`], whose release is written now as far as the
    /// sockets take it. Returns whether round `id` was in flight.
    pub(crate) fn release_after(
        &mut self,
        id: RoundId,
        release: &Command<'_>,
        now: Instant,
    ) -> bool {
        let passed = self.core.release_after(id, release, now);
        self.sync(now);
        passed
    }

    /// Starts a round of `release` that nobody waits for (a dropped
    /// guard's), if a slot is free: see [`Core::release_orphan`]; written
    /// now as far as the sockets take it. Returns whether it started.
    pub(crate) fn release_orphan(&mut self, release: &Command<'_>, now: Instant) -> bool {
        let started = self.core.release_orphan(release, now);
        self.sync(now);
        started
    }

    /// Writes the commands of the rounds started since the last call, as
    /// far as the sockets take them now.
    pub(crate) fn flush_all(&mut self) {
        self.core.flush_all();
        self.sync(crate::clock::now());
    }

    /// Queues `command` on every connection that is up (or may reconnect
    /// at once) and writes what can be written now, without waiting (see
    /// [`Core::queue`]).
    pub(crate) fn queue(&mut self, command: &Command<'_>, now: Instant) {
        self.core.queue(command, now);
        self.sync(now);
    }

    /// The time is `now`: fails the connections whose connect, handshake
    /// or oldest request ran out of time, and lets the rounds in flight
    /// count the masters that missed their deadlines.
    pub(crate) fn check_timers(&mut self, now: Instant) {
        self.core.handle_timeout(now);
        self.sync(now);
    }

    /// How long a poll may wait: until [`next_wake`](Self::next_wake),
    /// and at most until `deadline`.
    pub(crate) fn poll_timeout(&self, now: Instant, deadline: Instant) -> Duration {
        let wake = self.next_wake(now).map_or(deadline, |at| at.min(deadline));
        wake.saturating_duration_since(now)
    }

    /// When the next connection timer or round deadline falls due; `now`
    /// while a connection has unread data left by its read budget (it gets
    /// no new event); `None` when nothing waits.
    pub(crate) fn next_wake(&self, now: Instant) -> Option<Instant> {
        if self.conns.iter().any(Conn::has_backlog) {
            return Some(now);
        }
        self.core.next_timer()
    }

    /// Handles the readiness `events` of the last poll: outcomes go to
    /// the rounds in flight; a connection that fails is closed, and the
    /// rounds it owed a reply count it as failed. Then goes on reading
    /// the connections left with a backlog by their read budget.
    pub(crate) fn dispatch(&mut self, events: &Events) {
        for event in events.iter() {
            self.handle_event(event);
        }
        self.after_events();
    }

    /// Handles one readiness event, if it is one of the connections'.
    /// Call [`after_events`](Self::after_events) once the events of a poll
    /// are handled.
    pub(crate) fn handle_event(&mut self, event: &mio::event::Event) {
        if let Some(i) = event.token().0.checked_sub(self.base) {
            if i < self.conns.len() {
                let (conn, core) = (&mut self.conns[i], &mut self.core);
                if let Err(error) = conn.handle_event(event, &self.registry, core) {
                    self.fail(i, error, crate::clock::now());
                }
            }
        }
    }

    /// After the events of a poll: tells the waits of reconnects, and goes
    /// on reading the connections left with a backlog by their read
    /// budget. (A server reached through a second address is refused as
    /// its handshake completes, in [`Core::handle_read`].)
    pub(crate) fn after_events(&mut self) {
        self.check_identities();
        for i in 0..self.conns.len() {
            if self.conns[i].has_backlog() {
                let (conn, core) = (&mut self.conns[i], &mut self.core);
                if let Err(error) = conn.read_more(&self.registry, core) {
                    self.fail(i, error, crate::clock::now());
                }
            }
        }
        self.check_identities();
    }

    /// Fails master `i` after `error`: each round in flight it owed a
    /// reply learns that it failed, and its socket is closed.
    fn fail(&mut self, i: usize, error: NodeError, now: Instant) {
        self.core.handle_failure(i, error, now);
        self.sync_master(i, now);
    }

    /// After reads: reconnects and quarantines (see
    /// [`Core::handle_handshakes`]).
    fn check_identities(&mut self) {
        self.core.handle_handshakes();
        if self.core.watches.has_reads() {
            let now = crate::clock::now();
            self.core.send_reads(now);
            self.sync(now);
        }
    }

    /// Brings every connection in line with the core, at `now` (see
    /// [`sync_master`](Self::sync_master)).
    fn sync(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            self.sync_master(i, now);
        }
    }

    /// Brings connection `i` in line with the core: closes a socket the
    /// session no longer has, opens the one a new start of the session
    /// needs (a socket that cannot be opened fails the master), and
    /// writes what is due to be written (a failed write fails the master).
    fn sync_master(&mut self, i: usize, now: Instant) {
        let (conn, core) = (&mut self.conns[i], &mut self.core);
        let start = core.socket(i);
        if conn.start().is_some() && conn.start() != start {
            conn.close(&self.registry, core.addr(i), &core.link(i).down_reason());
        }
        if let Some(start) = start {
            if conn.start().is_none() {
                if let Err(error) = conn.open(&self.registry, core.addr(i), start) {
                    core.handle_unopened(i, error, now);
                    return;
                }
            }
        }
        if core.take_write_due(i) {
            if let Err(error) = conn.flush(&self.registry, core) {
                core.handle_failure(i, error.clone(), now);
                conn.close(&self.registry, core.addr(i), &error);
            }
        }
    }
}
