//! The `mio` driver: one non-blocking connection per master, every round
//! written to all of them in one event-loop tick, replies read as they
//! arrive ("poor man's multiplexing"), many rounds in flight at once over
//! the same connections.
//!
//! The driver moves bytes and keeps time; what the replies mean for the
//! lock is decided by [`crate::rules::Round`], which it feeds, and which
//! rounds are in flight (and who waits for them) is kept by
//! [`crate::flights::Flights`]. [`Engine`] lets many callers share one
//! driver: whoever waits for a round polls for everyone while nobody else
//! does.

mod conn;
mod engine;
#[cfg(feature = "tls")]
mod tls;

use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry};

use crate::addr::ServerAddr;
use crate::commands::{Command, Outcome};
use crate::flights::{Flights, Waits};
use crate::link::Sink;
use crate::rules::{NodeError, NodeState, Op, Round};

use conn::Conn;
pub(crate) use conn::TlsConfig;
pub(crate) use engine::{Engine, Full, Ids, Polling, Waiter, Wakes};

use crate::link::LinkConfig;

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

/// The connections and the rounds in flight: the state callers share.
pub(crate) struct Driver {
    registry: Registry,
    conns: Vec<Conn>,
    flights: Flights<Waiter>,
    /// Callers waiting to be told that a lock was handed to them.
    waits: Waits<Waiter>,
    /// The poller token of connection 0.
    base: usize,
    /// The command being queued, encoded once for all the connections.
    encoded: Vec<u8>,
    /// Rounds were started since the last [`flush_all`](Self::flush_all):
    /// their commands may wait in the connections' buffers. (Everything
    /// else a connection queues it writes at once: replays and handshake
    /// steps after a read, releases, or when its socket becomes ready.)
    unflushed: bool,
    /// How long a release this driver runs on its own (for a dropped
    /// acquire) waits for the masters: the request timeout.
    request_timeout: Duration,
    /// Told of each orphaned round as it ends (see [`reap`](Self::reap)).
    on_orphan_end: Option<OnOrphanEnd>,
}

/// What the driver tells of each round it ends on its own (an orphaned
/// one, whose caller is gone), for the client's statistics.
pub(crate) type OnOrphanEnd = Box<dyn FnMut(&Round) + Send>;

/// Room for an encoded command, allocated at build: enough for the
/// commands sent with their script's text (a failed acquire's release, a
/// wait's leave) on the names a `Lock` keeps inline; a larger one (a
/// batch's, many long names) grows it once.
const ENCODED_CAPACITY: usize = 2048;

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
        let now = crate::clock::now();
        let conns: Vec<Conn> = addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| Conn::new(base + i, addr.clone(), config, tls, now))
            .collect();
        Ok(Driver {
            registry: registry.try_clone()?,
            flights: Flights::new(config.in_flight, conns.len()),
            waits: Waits::new(config.in_flight, conns.len()),
            conns,
            base,
            encoded: Vec::with_capacity(ENCODED_CAPACITY),
            unflushed: false,
            request_timeout: config.request_timeout,
            on_orphan_end: None,
        })
    }

    /// Has `on_end` told of each orphaned round as it ends.
    pub(crate) fn on_orphan_end(&mut self, on_end: OnOrphanEnd) {
        self.on_orphan_end = Some(on_end);
    }

    /// The poller tokens of the connections.
    pub(crate) fn tokens(&self) -> std::ops::Range<usize> {
        self.base..self.base + self.conns.len()
    }

    /// Starts connecting every master that is down (the handshakes go on
    /// as their sockets become ready).
    pub(crate) fn connect(&mut self) {
        let now = crate::clock::now();
        for conn in &mut self.conns {
            if conn.link().is_down() {
                // A failure leaves it down, with its back-off started.
                let _ = conn.connect(&self.registry, now);
            }
        }
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

    /// Rounds in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// The most rounds in flight at once.
    pub(crate) fn capacity(&self) -> usize {
        self.flights.capacity()
    }

    /// Connects every master that is down and waits, until `deadline` at
    /// the latest, for the handshakes.
    pub(crate) fn connect_all(&mut self, poller: &mut Poller, deadline: Instant) -> io::Result<()> {
        self.connect();
        loop {
            let now = crate::clock::now();
            self.check_timers(now);
            let handshakes_over = self
                .conns
                .iter()
                .all(|c| c.link().is_ready() || c.link().is_down());
            if handshakes_over || now >= deadline {
                return Ok(());
            }
            let timeout = self.poll_timeout(now, deadline);
            poller.poll(timeout)?;
            self.dispatch(&poller.events);
        }
    }

    /// Starts one round per command, `restart` setting each round up: the
    /// command goes to every connection, and each connection's share is
    /// written at once, in one write. Returns the rounds' ids, in the
    /// order of `commands`; fewer than asked when the rounds in flight
    /// reach the cap (then the caller waits for a slot, or fails).
    ///
    /// `now` is the rounds' start: taken before anything of theirs is sent
    /// (an earlier time only shortens what a grant is worth).
    pub(crate) fn submit(
        &mut self,
        commands: &[Command<'_>],
        mut restart: impl FnMut(&mut Round, &Command<'_>, Instant),
        ids: &mut impl Extend<u64>,
        flush: bool,
        now: Instant,
    ) -> usize {
        let n = self.conns.len();
        let mut started = 0;
        for command in commands {
            let Some(id) = self.flights.begin() else {
                break;
            };
            self.flights.update(id, |round| {
                restart(round, command, now);
                debug_assert_eq!(round.nodes().len(), n);
            });
            self.send_round(id, command, now);
            ids.extend([id]);
            started += 1;
        }
        self.unflushed |= started > 0;
        if flush {
            self.flush_all();
        }
        started
    }

    /// Queues round `id`'s `command` on every connection (nothing is
    /// written yet); a master that cannot take it fails the round there.
    fn send_round(&mut self, id: u64, command: &Command<'_>, now: Instant) {
        self.encoded.clear();
        command.encode(&mut self.encoded);
        for (i, conn) in self.conns.iter_mut().enumerate() {
            let must_reach = command.must_reach(i);
            match conn.send(&self.registry, command, &self.encoded, id, must_reach, now) {
                Ok(()) => {}
                Err(error @ NodeError::Lagging) => {
                    // Only this round goes without this master.
                    self.flights
                        .update(id, |round| round.handle_failure(i, error, now));
                }
                Err(error) => {
                    // A failed send leaves the connection down, with
                    // what was queued there: the rounds waiting for it
                    // (this one included) fail on this master.
                    self.flights.fail_node(i, &error, now);
                }
            }
        }
    }

    /// Whether every round of `ids` is decided (or over).
    pub(crate) fn decided(&self, ids: &[u64]) -> bool {
        ids.iter().all(|&id| self.flights.is_decided(id))
    }

    /// Round `id`, if it is in flight.
    pub(crate) fn round(&self, id: u64) -> Option<&Round> {
        self.flights.round(id)
    }

    /// Ends the rounds `ids`: a connection that let one of them time out
    /// is marked late (see [`crate::link`]); their slots are freed.
    pub(crate) fn finish(&mut self, ids: &[u64]) {
        for &id in ids {
            if let Some(round) = self.flights.round(id) {
                for (conn, state) in self.conns.iter_mut().zip(round.nodes()) {
                    if *state == NodeState::TimedOut {
                        conn.link_mut().note_late(round.started());
                    }
                }
            }
            self.flights.finish(id);
        }
    }

    /// Sets `waiter` to be woken when round `id` is decided.
    pub(crate) fn set_waiter(&mut self, id: u64, waiter: Waiter) {
        self.flights.set_waiter(id, waiter);
    }

    /// Has the waiters of the rounds decided so far woken (with `wakes`),
    /// and those of the waits told.
    pub(crate) fn wake_decided(&mut self, wakes: &mut Wakes) {
        self.flights.wake_decided(|waiter| {
            wakes.push(waiter);
            // Either comes back for its rounds.
            true
        });
        self.waits.wake_told(|waiter| wakes.push(waiter));
    }

    /// Starts a wait for a caller that waits for a lock (see
    /// [`Waits`]); `None` when the table is full.
    pub(crate) fn begin_wait(&mut self) -> Option<u64> {
        self.waits.begin()
    }

    /// Ends wait `id`.
    pub(crate) fn end_wait(&mut self, id: u64) {
        self.waits.end(id);
    }

    /// Forgets what told wait `id` so far (before an attempt).
    pub(crate) fn arm_wait(&mut self, id: u64) {
        self.waits.arm(id);
    }

    /// Whether a quorum of masters told wait `id` since it was armed.
    pub(crate) fn is_told(&self, id: u64) -> bool {
        self.waits.is_told(id)
    }

    /// When a master told wait `id` to try, should nobody hand it the lock
    /// before (since it was armed).
    pub(crate) fn hinted(&self, id: u64) -> Option<Instant> {
        self.waits.hinted(id)
    }

    /// Forgets which waits were told since the last call, for a client
    /// that asks [`is_told`](Self::is_told) of its waits instead of having
    /// waiters woken (the embedded one): the list of waits told stays
    /// within the room allocated for it.
    pub(crate) fn forget_told(&mut self) {
        self.waits.wake_told(|_| {});
    }

    /// Sets `waiter` to be woken when wait `id` is told.
    pub(crate) fn set_wait_waiter(&mut self, id: u64, waiter: Waiter) {
        self.waits.set_waiter(id, waiter);
    }

    /// Takes wait `id`'s waiter back.
    pub(crate) fn take_wait_waiter(&mut self, id: u64) {
        self.waits.take_waiter(id);
    }

    /// How many callers were woken at their rounds' decisions and have not
    /// come back for them yet.
    pub(crate) fn pending(&self) -> usize {
        self.flights.pending()
    }

    /// The caller of rounds `ids` came back for them.
    pub(crate) fn claim(&mut self, ids: &[u64]) {
        for &id in ids {
            self.flights.claim(id);
        }
    }

    /// Has one thread waiting for an undecided round woken (with `wakes`),
    /// to take over the poller; returns whether there was one.
    pub(crate) fn hand_over(&mut self, wakes: &mut Wakes) -> bool {
        let waiter = self
            .flights
            .take_undecided_waiter(Waiter::is_thread)
            .or_else(|| self.waits.take_untold_waiter(Waiter::is_thread));
        match waiter {
            Some(waiter) => {
                wakes.push(waiter);
                true
            }
            None => false,
        }
    }

    /// Whether a task (not a thread) waits for an undecided round or to
    /// be told, or an orphaned round (whose task is gone) is in flight:
    /// each needs someone to poll.
    pub(crate) fn tasks_waiting(&self) -> bool {
        self.flights.orphans() > 0
            || self.flights.any_undecided(|w| !w.is_thread())
            || self.waits.any_waiter(|w| !w.is_thread())
    }

    /// Ends the rounds `ids` now, decided or not: their slots are freed
    /// and their late replies will be dropped.
    pub(crate) fn abandon(&mut self, ids: &[u64]) {
        for &id in ids {
            self.flights.finish(id);
        }
    }

    /// Round `id`'s caller is gone, its command queued (a dropped unlock):
    /// the round goes on, waited for by nobody, until every master has
    /// answered it, failed or timed out; then it ends (see
    /// [`reap`](Self::reap)). Returns whether it was in flight.
    pub(crate) fn orphan(&mut self, id: u64) -> bool {
        self.flights.orphan(id)
    }

    /// Round `id`'s caller is gone and what it may have done must be
    /// undone by `release` (a dropped acquire): the round ends, and its
    /// slot passes at once to a round of `release`, queued behind it on
    /// every connection and written now as far as the sockets take it.
    /// That round is orphaned: it goes on until every master has answered
    /// it, failed or timed out. A master whose connection is down and
    /// waiting out its back-off fails it at once: the key there, if the
    /// acquire set one, expires with its TTL. Returns whether round `id`
    /// was in flight (if not, `release` is only queued, as
    /// [`queue`](Self::queue) does).
    pub(crate) fn release_after(&mut self, id: u64, release: &Command<'_>, now: Instant) -> bool {
        let Some(next) = self.flights.pass_to_release(id) else {
            // Not in flight (never, for a caller that holds its rounds).
            self.queue(release, now);
            return false;
        };
        self.start_release(next, release, now);
        true
    }

    /// Starts a round of `release` that nobody waits for (a dropped
    /// guard's), if a slot is free: orphaned, it goes on until every
    /// master has answered it, failed or timed out, as
    /// [`release_after`](Self::release_after)'s does. Returns whether it
    /// started; if not, `release` is only queued, as
    /// [`queue`](Self::queue) does.
    pub(crate) fn release_orphan(&mut self, release: &Command<'_>, now: Instant) -> bool {
        let Some(id) = self.flights.begin() else {
            self.queue(release, now);
            return false;
        };
        self.flights.orphan(id);
        self.start_release(id, release, now);
        true
    }

    /// Restarts round `id` as a release and queues `release` for it on
    /// every connection, written now as far as the sockets take it.
    fn start_release(&mut self, id: u64, release: &Command<'_>, now: Instant) {
        let (n, timeout) = (self.conns.len(), self.request_timeout);
        self.flights.update(id, |round| {
            round.restart(Op::Release, n, Duration::ZERO, Duration::ZERO, timeout, now)
        });
        self.send_round(id, release, now);
        for i in 0..n {
            if let Err(error) = self.conns[i].flush(&self.registry) {
                self.fail(i, error, now);
            }
        }
    }

    /// Rounds in flight whose caller is gone.
    pub(crate) fn orphans(&self) -> usize {
        self.flights.orphans()
    }

    /// Ends the orphaned rounds that no master is left to answer, telling
    /// the client of each (a connection that let one time out is marked
    /// late, as [`finish`](Self::finish) does); returns how many slots
    /// that freed.
    pub(crate) fn reap(&mut self) -> usize {
        let (conns, on_end) = (&mut self.conns, &mut self.on_orphan_end);
        self.flights.reap(|round| {
            for (conn, state) in conns.iter_mut().zip(round.nodes()) {
                if *state == NodeState::TimedOut {
                    conn.link_mut().note_late(round.started());
                }
            }
            if let Some(on_end) = on_end {
                on_end(round);
            }
        })
    }

    /// Writes the commands of the rounds started since the last call, as
    /// far as the sockets take them now.
    pub(crate) fn flush_all(&mut self) {
        if !std::mem::take(&mut self.unflushed) {
            return;
        }
        for i in 0..self.conns.len() {
            if let Err(error) = self.conns[i].flush(&self.registry) {
                self.fail(i, error, crate::clock::now());
            }
        }
    }

    /// Queues `command` on every connection that is up (or may reconnect at
    /// once) and writes what can be written now, without waiting: not for
    /// a handshake, a full socket buffer or a reply. What is left goes out
    /// as the connections become ready later; the replies are matched and
    /// dropped. A master that is paused or down costs nothing here.
    pub(crate) fn queue(&mut self, command: &Command<'_>, now: Instant) {
        // An id no round has: its replies are matched and dropped.
        let id = 0;
        self.encoded.clear();
        command.encode(&mut self.encoded);
        for (i, conn) in self.conns.iter_mut().enumerate() {
            // A connection dropped in the failed round (say, as stalled,
            // after its SET went out) reconnects at once: the command waits
            // for the handshake on the new one.
            if !conn.link().may_send(now) {
                continue;
            }
            // A failed send leaves the connection down.
            let must_reach = command.must_reach(i);
            if conn
                .send(&self.registry, command, &self.encoded, id, must_reach, now)
                .is_ok()
            {
                if let Err(error) = conn.flush(&self.registry) {
                    conn.close(&self.registry, error, now);
                }
            }
        }
    }

    /// The time is `now`: fails the connections whose connect, handshake
    /// or oldest request ran out of time, and lets the rounds in flight
    /// count the masters that missed their deadlines.
    pub(crate) fn check_timers(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            if let Err(error) = self.conns[i].link().check_timers(now) {
                self.fail(i, error, now);
            }
        }
        self.flights.handle_timeout(now);
        self.waits.handle_timeout(now);
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
        self.conns
            .iter()
            .filter_map(|c| c.link().next_timer())
            .chain(self.flights.next_deadline())
            .chain(self.waits.next_hint())
            .min()
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
                self.serve(i, |conn, registry, sink| {
                    conn.handle_event(event, registry, sink)
                });
            }
        }
    }

    /// After the events of a poll: compares the identities of masters that
    /// just completed a handshake, and goes on reading the connections
    /// left with a backlog by their read budget.
    pub(crate) fn after_events(&mut self) {
        self.check_identities();
        for i in 0..self.conns.len() {
            if self.conns[i].has_backlog() {
                self.serve(i, |conn, registry, sink| conn.read_more(registry, sink));
            }
        }
        self.check_identities();
    }

    /// Lets `io` read and write connection `i`, handing the outcomes of the
    /// rounds in flight to them; if it fails, closes the connection as
    /// [`fail`](Self::fail) does.
    fn serve(
        &mut self,
        i: usize,
        io: impl FnOnce(&mut Conn, &Registry, &mut dyn Sink) -> Result<(), NodeError>,
    ) {
        let mut sink = NodeSink {
            flights: &mut self.flights,
            waits: &mut self.waits,
            node: i,
        };
        if let Err(error) = io(&mut self.conns[i], &self.registry, &mut sink) {
            self.fail(i, error, crate::clock::now());
        }
    }

    /// Closes connection `i` after `error`; each round in flight it owed a
    /// reply learns that node `i` failed.
    fn fail(&mut self, i: usize, error: NodeError, now: Instant) {
        self.flights.fail_node(i, &error, now);
        self.conns[i].close(&self.registry, error, now);
    }

    /// Compares the `run_id` of each handshake just completed with the
    /// other ready masters': a server reached through a second address is
    /// refused there ([`NodeError::SameServer`]), so that it never votes
    /// twice.
    fn check_identities(&mut self) {
        for i in 0..self.conns.len() {
            if self.conns[i].link_mut().take_reconnected() {
                // Wake-ups published while it was down are lost.
                self.waits.handle_reconnect();
            }
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
                let now = crate::clock::now();
                self.fail(i, error, now);
            }
        }
    }
}

/// Hands the outcomes read on node `node` to the rounds in flight.
struct NodeSink<'a> {
    flights: &'a mut Flights<Waiter>,
    waits: &'a mut Waits<Waiter>,
    node: usize,
}

impl Sink for NodeSink<'_> {
    fn is_live(&self, id: u64) -> bool {
        self.flights.is_live(id)
    }

    fn on_reply(&mut self, id: u64, _: Op, outcome: Outcome, now: Instant) {
        self.flights.deliver(id, self.node, outcome, now);
    }

    fn on_wake(&mut self, id: u64, later: Option<Duration>, now: Instant) {
        match later {
            None => self.waits.handle_wake(id, self.node),
            Some(later) => self.waits.handle_hint(id, crate::clock::after(now, later)),
        }
    }
}
