//! The driver's decisions, free of sockets and of the clock: which
//! master's session gets which command, when what is queued is due to be
//! written, where each outcome and wake-up goes, when a master fails and
//! what that does to the rounds in flight, the orphaned rounds that end,
//! the masters found to be one server, and the timers. [`Core`] is driven
//! with the time passed in, as [`Link`] is.
//!
//! Whoever owns the sockets (the `mio` driver, or a simulator) moves bytes
//! between them and the core:
//!
//! - a master needs a socket while its session is not down:
//!   [`socket`](Core::socket) says for which start of the session, so that
//!   a socket of an earlier start is closed and a new one opened; one that
//!   cannot be opened is [`handle_unopened`](Core::handle_unopened), one
//!   whose connect completes [`handle_connected`](Core::handle_connected);
//! - bytes to write are [`transmit`](Core::transmit) and
//!   [`advance`](Core::advance), written at once when
//!   [`take_write_due`](Core::take_write_due) says so (else when the socket
//!   becomes ready);
//! - bytes read go to [`read_buf`](Core::read_buf) and
//!   [`handle_read`](Core::handle_read);
//! - a socket that fails is [`handle_failure`](Core::handle_failure);
//! - the time is [`handle_timeout`](Core::handle_timeout), due by
//!   [`next_timer`](Core::next_timer); after reads,
//!   [`handle_handshakes`](Core::handle_handshakes) tells the waits of
//!   reconnects.
//!
//! After each call that may start or fail a session, the owner of the
//! sockets looks again at [`socket`](Core::socket) and
//! [`take_write_due`](Core::take_write_due) for every master.

use std::time::{Duration, Instant};

use crate::addr::ServerAddr;
use crate::commands::{Command, Outcome};
use crate::flights::{Flights, Waits, Watches};
use crate::ids::{RoundId, WaitId, WatchId};
use crate::link::{Invalidated, KeyRead, Link, LinkConfig, Sink};
use crate::rules::{NodeError, NodeState, Op, Round};

/// What the driver tells of each round it ends on its own (an orphaned
/// one, whose caller is gone), for the client's statistics.
pub(crate) type OnOrphanEnd = Box<dyn FnMut(&Round) + Send>;

/// Room for an encoded command, allocated at build: enough for a command
/// sent with its script's text (a failed acquire's release, a wait's
/// leave), whichever script it is, on the names a `Lock` keeps inline and
/// the other arguments; a larger one (a batch's, many long names) grows
/// it once.
const ENCODED_CAPACITY: usize = crate::scripts::LONGEST_TEXT + 512;

/// One master: its address and session, and what its socket owes it.
struct Master {
    addr: ServerAddr,
    link: Link,
    /// Sessions started so far: the socket the owner holds belongs to one
    /// of them.
    starts: u64,
    /// Starts whose socket could not be opened: no connect was made.
    unopened: u64,
    /// What is queued here is due to be written now.
    write_due: bool,
}

/// The connections' sessions and the rounds in flight, each waited for by
/// an optional `W` (see the module docs).
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Core<W> {
    masters: Vec<Master>,
    /// The rounds in flight. Callers reach the table directly where the
    /// core adds nothing (a round, its waiter, orphaning it, the counts);
    /// the core's own methods are those that also touch the sessions.
    pub flights: Flights<W>,
    /// Callers waiting to be told that a lock was handed to them, reached
    /// directly as `flights` is.
    pub waits: Waits<W>,
    /// The held keys watched for a loss; the core sends their reads.
    pub watches: Watches,
    /// The command being queued, encoded once for all the masters.
    encoded: Vec<u8>,
    /// Rounds were started since the last [`flush_all`](Self::flush_all):
    /// their commands may wait in the sessions' buffers. (Everything else
    /// a session queues is written at once: replays and handshake steps
    /// after a read, releases, or when its socket becomes ready.)
    unflushed: bool,
    /// How long a release the core runs on its own (for a dropped
    /// acquire) waits for the masters: the request timeout.
    request_timeout: Duration,
    /// Told of each orphaned round as it ends (see [`reap`](Self::reap)).
    on_orphan_end: Option<OnOrphanEnd>,
}

impl<W> std::fmt::Debug for Core<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("masters", &self.masters.len())
            .field("in_flight", &self.flights.len())
            .finish_non_exhaustive()
    }
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<W> Core<W> {
    /// A core for `addrs` with room for `config.in_flight` rounds in
    /// flight; every session is down and may connect at once.
    pub fn new(addrs: &[ServerAddr], config: LinkConfig, now: Instant) -> Core<W> {
        let masters: Vec<Master> = addrs
            .iter()
            .map(|addr| Master {
                addr: addr.clone(),
                link: Link::new(config, now),
                starts: 0,
                unopened: 0,
                write_due: false,
            })
            .collect();
        Core {
            flights: Flights::new(config.in_flight, masters.len()),
            waits: Waits::new(config.in_flight, masters.len(), config.request_timeout),
            watches: Watches::new(masters.len(), crate::rules::quorum(masters.len())),
            masters,
            encoded: Vec::with_capacity(ENCODED_CAPACITY),
            unflushed: false,
            request_timeout: config.request_timeout,
            on_orphan_end: None,
        }
    }

    /// Has `on_end` told of each orphaned round as it ends.
    pub(crate) fn on_orphan_end(&mut self, on_end: OnOrphanEnd) {
        self.on_orphan_end = Some(on_end);
    }

    /// The number of masters.
    pub(crate) fn len(&self) -> usize {
        self.masters.len()
    }

    /// The masters' addresses, in order.
    pub(crate) fn addrs(&self) -> impl Iterator<Item = &ServerAddr> {
        self.masters.iter().map(|master| &master.addr)
    }

    /// Master `i`'s address.
    pub(crate) fn addr(&self, i: usize) -> &ServerAddr {
        &self.masters[i].addr
    }

    /// Master `i`'s session.
    pub(crate) fn link(&self, i: usize) -> &Link {
        &self.masters[i].link
    }

    /// How many connects each master has had, and how many times the
    /// restart guard found it suspect, in order.
    pub(crate) fn connects(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.masters.iter().map(|master| {
            let connects = master.link.connects().saturating_sub(master.unopened);
            (connects, master.link.sighting().suspicions())
        })
    }

    /// Each master that is not ready, with why.
    pub(crate) fn failures(&self) -> impl Iterator<Item = (&ServerAddr, NodeError)> {
        self.masters
            .iter()
            .filter_map(|master| Some((&master.addr, master.link.failure()?)))
    }

    // The sockets: what the core asks of them, and what they tell it.

    /// Which start of master `i`'s session needs a socket now: `None`
    /// while the session is down (then no socket may stay open).
    pub fn socket(&self, i: usize) -> Option<u64> {
        let master = &self.masters[i];
        (!master.link.is_down()).then_some(master.starts)
    }

    /// Starts master `i`'s session: its handshake waits for a socket
    /// ([`socket`](Self::socket)) to connect.
    fn start(&mut self, i: usize, now: Instant) {
        let master = &mut self.masters[i];
        master.starts += 1;
        master.write_due = false;
        let addr = &master.addr;
        master
            .link
            .start(addr.user(), addr.password(), addr.db(), now);
    }

    /// The socket of master `i`'s current start could not be opened: the
    /// session is down, with its back-off doubled like any other failure,
    /// and no connect was made.
    pub fn handle_unopened(&mut self, i: usize, error: NodeError, now: Instant) {
        self.masters[i].unopened += 1;
        self.handle_failure(i, error, now);
    }

    /// Whether master `i`'s session waits for its socket to connect.
    pub fn is_connecting(&self, i: usize) -> bool {
        self.masters[i].link.is_connecting()
    }

    /// Master `i`'s socket connected: its handshake may be written.
    pub fn handle_connected(&mut self, i: usize, now: Instant) {
        self.masters[i].link.connected(now);
    }

    /// Whether what master `i`'s session holds is due to be written now
    /// (once: the flag is cleared).
    pub fn take_write_due(&mut self, i: usize) -> bool {
        std::mem::take(&mut self.masters[i].write_due)
    }

    /// The bytes to write to master `i` now.
    pub fn transmit(&self, i: usize) -> &[u8] {
        self.masters[i].link.transmit()
    }

    /// `n` bytes of [`transmit`](Self::transmit) were written to master
    /// `i`.
    pub fn advance(&mut self, i: usize, n: usize) {
        self.masters[i].link.advance(n);
    }

    /// Where the next bytes read from master `i` go.
    pub fn read_buf(&mut self, i: usize) -> Result<&mut [u8], NodeError> {
        self.masters[i].link.read_buf()
    }

    /// `n` bytes were read from master `i` into [`read_buf`](Self::read_buf)
    /// at `now`: the outcomes of the rounds in flight go to them, the
    /// wake-ups to the waits. An error means the socket must be closed
    /// ([`handle_failure`](Self::handle_failure)): among them
    /// [`NodeError::SameServer`] for a handshake that completed here with
    /// the `run_id` of another ready master.
    pub fn handle_read(&mut self, i: usize, n: usize, now: Instant) -> Result<(), NodeError> {
        let mut sink = MasterSink {
            flights: &mut self.flights,
            waits: &mut self.waits,
            watches: &mut self.watches,
            master: i,
        };
        self.masters[i].link.handle_read(n, now, &mut sink)?;
        self.check_twin(i)?;
        self.send_reads(now);
        Ok(())
    }

    /// Watches `key`, held with `token`, for a loss (see [`Watches`]): its
    /// reads go out at once.
    pub fn watch(
        &mut self,
        key: &[u8],
        token: [u8; crate::commands::TOKEN_LEN],
        now: Instant,
    ) -> WatchId {
        let id = self.watches.watch(key, token);
        for master in &mut self.masters {
            master.write_due |= master.link.track(now);
        }
        self.send_reads(now);
        id
    }

    /// This client extended watch `id`'s key on the masters in `masters`:
    /// those are read again, at once (see [`Watches::rearm`]).
    pub fn rearm(&mut self, id: WatchId, masters: impl Fn(usize) -> bool, now: Instant) {
        self.watches.rearm(id, masters);
        self.send_reads(now);
    }

    /// Queues the watches' reads that are due, each due to be written now;
    /// one that cannot be queued leaves its master unknown.
    pub fn send_reads(&mut self, now: Instant) {
        while let Some((id, key, i)) = self.watches.next_read() {
            let master = &mut self.masters[i];
            if master.link.queue_read(id, key, now).is_ok() {
                master.write_due = true;
            } else {
                self.watches.handle_unsent(id, i);
            }
        }
    }

    /// Compares the `run_id` of master `i`'s handshake, if one just
    /// completed, with the other ready masters': a server reached through
    /// a second address is refused there, so that it never votes twice.
    /// This happens before the socket writes anything more: the commands
    /// the session held back for its handshake never reach the server a
    /// second time (an extend of a round already over, overtaking a newer
    /// one sent through the first address, would shorten the key).
    fn check_twin(&mut self, i: usize) -> Result<(), NodeError> {
        let Some(run_id) = self.masters[i].link.take_fresh_run_id() else {
            return Ok(());
        };
        let twin = self.masters.iter().enumerate().position(|(j, other)| {
            j != i && other.link.is_ready() && other.link.sighting().run_id() == Some(&run_id)
        });
        match twin {
            Some(other) => Err(NodeError::SameServer {
                other,
                address: self.masters[other].addr.to_string().into(),
            }),
            None => Ok(()),
        }
    }

    /// Master `i`'s socket failed after `error` (or the core failed it):
    /// the session is down, and each round in flight it owed a reply
    /// learns that master `i` failed.
    pub fn handle_failure(&mut self, i: usize, error: NodeError, now: Instant) {
        self.flights.fail_master(i, &error, now);
        self.watches.handle_down(i);
        self.masters[i].link.close(error, now);
    }

    /// The time is `now`: fails the sessions whose connect, handshake or
    /// oldest request ran out of time, starts again, while a caller waits
    /// to be told, those that are down and whose back-off ended (see
    /// [`next_timer`](Self::next_timer)), and lets the rounds in flight
    /// count the masters that missed their deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        for i in 0..self.masters.len() {
            if let Err(error) = self.masters[i].link.check_timers(now) {
                self.handle_failure(i, error, now);
            }
        }
        if self.keeps_connected() {
            for i in 0..self.masters.len() {
                if self.masters[i].link.retry_at().is_some_and(|at| at <= now) {
                    self.start(i, now);
                }
            }
        }
        self.flights.handle_timeout(now);
        self.waits.handle_timeout(now);
    }

    /// When the next session timer, round deadline or time to try at of a
    /// wait falls due; `None` when nothing waits.
    ///
    /// While a caller waits to be told, a session that is down is due to
    /// connect again at the end of its back-off, round or no round: a
    /// waiter sends nothing between its attempts, and a connection that
    /// is down hears no wake-up, so without this a waiter whose connections
    /// dropped would be told nothing until its own fallback (the holder's
    /// TTL, its deadline). The reconnect then wakes every waiter
    /// ([`Waits::handle_reconnect`]). The same holds while a key is
    /// watched for a loss: a master that dropped is unknown to the watch
    /// until it is back. While nobody waits or watches, a session that is
    /// down stays down until a round needs it (which reconnects it, at once
    /// after a healthy connection dropped): it has nothing to hear, and an
    /// idle client (an embedded one's `next_timeout`, a master gone for
    /// good) keeps no timer and makes no connect for nothing.
    pub fn next_timer(&self) -> Option<Instant> {
        let waiting = self.keeps_connected();
        let reconnects = self
            .masters
            .iter()
            .filter(move |_| waiting)
            .filter_map(|master| master.link.retry_at());
        self.masters
            .iter()
            .filter_map(|master| master.link.next_timer())
            .chain(reconnects)
            .chain(self.flights.next_deadline())
            .chain(self.waits.next_hint())
            .min()
    }

    /// Whether a session that is down reconnects at the end of its
    /// back-off though no round needs it: while a caller waits to be told
    /// (see [`next_timer`](Self::next_timer)), or a key is watched (a
    /// master whose connection dropped is unknown until it is back).
    fn keeps_connected(&self) -> bool {
        !self.waits.is_empty() || !self.watches.is_empty()
    }

    /// After reads: a session that came back after a drop wakes every
    /// wait (wake-ups published meanwhile are lost) and reads again the
    /// watched keys it left unknown, and a master the restart guard just
    /// quarantined is told of (with `tracing`). The reads are queued by
    /// [`send_reads`](Self::send_reads).
    pub fn handle_handshakes(&mut self) {
        for (i, master) in self.masters.iter_mut().enumerate() {
            if master.link.take_reconnected() {
                self.waits.handle_reconnect();
            }
            if master.link.is_ready() {
                self.watches.handle_ready(i);
            }
            #[cfg(feature = "tracing")]
            if let Some(suspicion) = master.link.take_suspicion() {
                tracing::warn!(master = %master.addr, ?suspicion, "master quarantined");
            }
        }
    }

    // The rounds: starting them, and writing their commands.

    /// Starts every session that is down, back-off or not (the
    /// handshakes go on as their sockets connect).
    pub fn connect(&mut self, now: Instant) {
        for i in 0..self.masters.len() {
            if self.masters[i].link.is_down() {
                self.start(i, now);
            }
        }
    }

    /// Starts one round per command, `restart` setting each round up: the
    /// command is queued on every session, and with `flush` each
    /// session's share is due to be written at once, in one write.
    /// Returns how many started (their ids go to `ids`, in the order of
    /// `commands`): fewer than asked when the rounds in flight reach the
    /// cap.
    ///
    /// `now` is the rounds' start: taken before anything of theirs is sent
    /// (an earlier time only shortens what a grant is worth).
    pub fn submit(
        &mut self,
        commands: &[Command<'_>],
        mut restart: impl FnMut(&mut Round, &Command<'_>, Instant),
        ids: &mut impl Extend<RoundId>,
        flush: bool,
        now: Instant,
    ) -> usize {
        let n = self.masters.len();
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

    /// Queues round `id`'s `command` on every session (nothing is due to
    /// be written yet); a master that cannot take it fails the round
    /// there.
    fn send_round(&mut self, id: RoundId, command: &Command<'_>, now: Instant) {
        self.encoded.clear();
        command.encode(&mut self.encoded);
        for i in 0..self.masters.len() {
            let must_reach = command.must_reach(i);
            match self.send(i, command, id, must_reach, now) {
                Ok(()) => {}
                Err(error @ NodeError::Lagging) => {
                    // Only this round goes without this master.
                    self.flights
                        .update(id, |round| round.handle_failure(i, error, now));
                }
                Err(error) => {
                    // A failed send leaves the session down, with what
                    // was queued there: the rounds waiting for it (this
                    // one included) fail on this master.
                    self.flights.fail_master(i, &error, now);
                }
            }
        }
    }

    /// Queues `command` (encoded in `self.encoded`) on master `i` for
    /// `round`, starting the session first if it is down and its back-off
    /// has expired. On error the session is down (closed, if it was up),
    /// except for [`NodeError::Lagging`]: then only this command was
    /// refused (never a release that `must_reach` this master: see
    /// `Link::queue`).
    fn send(
        &mut self,
        i: usize,
        command: &Command<'_>,
        round: RoundId,
        must_reach: bool,
        now: Instant,
    ) -> Result<(), NodeError> {
        if self.masters[i].link.is_down() {
            if !self.masters[i].link.may_send(now) {
                // Say why it is down (a refused handshake, say), not just that.
                return Err(self.masters[i].link.down_reason());
            }
            self.start(i, now);
        }
        let link = &mut self.masters[i].link;
        if let Err(error) = link.queue(command, &self.encoded, round, must_reach, now) {
            // A lagging master keeps its connection, and what it holds.
            if error != NodeError::Lagging {
                link.close(error.clone(), now);
            }
            return Err(error);
        }
        Ok(())
    }

    /// The commands of the rounds started since the last call are due to
    /// be written, as far as the sockets take them now.
    pub(crate) fn flush_all(&mut self) {
        if std::mem::take(&mut self.unflushed) {
            for master in &mut self.masters {
                master.write_due = true;
            }
        }
    }

    /// Queues `command` on every session that is up (or may reconnect at
    /// once) among those it goes to ([`Command::only_to`]), due to be
    /// written at once, waiting for nothing: not for a
    /// handshake, a full socket buffer or a reply. What is left goes out
    /// as the sockets become ready later; the replies are matched and
    /// dropped. A master that is paused or down costs nothing here.
    pub fn queue(&mut self, command: &Command<'_>, now: Instant) {
        if !(0..self.masters.len()).any(|i| command.goes_to(i)) {
            return;
        }
        // An id no round has: its replies are matched and dropped.
        let id = RoundId::FREE;
        self.encoded.clear();
        command.encode(&mut self.encoded);
        for i in 0..self.masters.len() {
            // A session dropped in the failed round (say, as stalled,
            // after its SET went out) reconnects at once: the command waits
            // for the handshake on the new one.
            if !command.goes_to(i) || !self.masters[i].link.may_send(now) {
                continue;
            }
            // A failed send leaves the session down.
            let must_reach = command.must_reach(i);
            if self.send(i, command, id, must_reach, now).is_ok() {
                self.masters[i].write_due = true;
            }
        }
    }

    /// Round `id`'s caller is gone and what it may have done must be
    /// undone by `release` (a dropped acquire): the round ends, and its
    /// slot passes at once to a round of `release`, queued behind it on
    /// every session and due to be written now. That round is orphaned:
    /// it goes on until every master has answered it, failed or timed
    /// out. A master that is down and waiting out its back-off fails it at
    /// once: the key there, if the acquire set one, expires with its TTL.
    /// Returns whether round `id` was in flight (if not, `release` is only
    /// queued, as [`queue`](Self::queue) does).
    pub fn release_after(&mut self, id: RoundId, release: &Command<'_>, now: Instant) -> bool {
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
    pub fn release_orphan(&mut self, release: &Command<'_>, now: Instant) -> bool {
        let Some(id) = self.flights.begin() else {
            self.queue(release, now);
            return false;
        };
        self.flights.orphan(id);
        self.start_release(id, release, now);
        true
    }

    /// Restarts round `id` as a release and queues `release` for it on
    /// every session, due to be written now.
    fn start_release(&mut self, id: RoundId, release: &Command<'_>, now: Instant) {
        let (n, timeout) = (self.masters.len(), self.request_timeout);
        self.flights.update(id, |round| {
            round.restart(Op::Release, n, Duration::ZERO, Duration::ZERO, timeout, now)
        });
        self.send_round(id, release, now);
        for master in &mut self.masters {
            master.write_due = true;
        }
    }

    // The rounds in flight and the waits: their callers' side.

    /// Whether every round of `ids` is decided (or over).
    pub fn decided(&self, ids: &[RoundId]) -> bool {
        ids.iter().all(|&id| self.flights.is_decided(id))
    }

    /// Ends the rounds `ids`: a session that let one of them time out is
    /// marked late (see [`crate::link`]); their slots are freed.
    pub fn finish(&mut self, ids: &[RoundId]) {
        for &id in ids {
            if let Some(round) = self.flights.round(id) {
                note_late(&mut self.masters, round);
            }
            self.flights.finish(id);
        }
    }

    /// Ends the rounds `ids` now, decided or not: their slots are freed
    /// and their late replies will be dropped.
    pub fn abandon(&mut self, ids: &[RoundId]) {
        for &id in ids {
            self.flights.finish(id);
        }
    }

    /// Ends the orphaned rounds that no master is left to answer, telling
    /// the client of each (a session that let one time out is marked
    /// late, as [`finish`](Self::finish) does); returns how many slots
    /// that freed.
    pub fn reap(&mut self) -> usize {
        let (masters, on_end) = (&mut self.masters, &mut self.on_orphan_end);
        self.flights.reap(|round| {
            note_late(masters, round);
            if let Some(on_end) = on_end {
                on_end(round);
            }
        })
    }

    /// Hands `wake` the waiters of the rounds decided so far, and those of
    /// the waits told.
    pub fn wake_decided(&mut self, mut wake: impl FnMut(W)) {
        self.flights.wake_decided(|waiter| {
            wake(waiter);
            // Either comes back for its rounds.
            true
        });
        self.waits.wake_told(wake);
    }

    /// Slots of the tables of rounds and waits looked at by scans so far.
    pub(crate) fn scanned(&self) -> u64 {
        self.flights.scanned() + self.waits.scanned()
    }

    /// The caller of rounds `ids` came back for them.
    pub(crate) fn claim(&mut self, ids: &[RoundId]) {
        for &id in ids {
            self.flights.claim(id);
        }
    }

    /// Takes the waiter, one `pick` chooses, of an undecided round or of
    /// a wait not told yet, if there is one: whoever must take over the
    /// polling when its current driver leaves.
    pub(crate) fn take_waiter(&mut self, pick: impl Fn(&W) -> bool) -> Option<W> {
        self.flights
            .take_undecided_waiter(&pick)
            .or_else(|| self.waits.take_untold_waiter(&pick))
    }

    /// Whether an orphaned round (whose caller is gone) is in flight, or
    /// a waiter `pick` chooses waits for an undecided round or to be told:
    /// each needs someone to poll.
    pub(crate) fn needs_polling(&self, pick: impl Fn(&W) -> bool) -> bool {
        self.flights.orphans() > 0
            || self.flights.any_undecided(&pick)
            || self.waits.any_waiter(&pick)
    }

    /// Empties the list of waits told, waking nobody: for a client that
    /// asks [`is_told`](Self::is_told) of its waits instead of having
    /// waiters woken (the embedded one).
    pub(crate) fn forget_told(&mut self) {
        self.waits.wake_told(|_| {});
    }
}

#[cfg(test)]
mod tests;

/// Marks late the session of each master that let `round` time out.
fn note_late(masters: &mut [Master], round: &Round) {
    for (master, state) in masters.iter_mut().zip(round.nodes()) {
        if *state == NodeState::TimedOut {
            master.link.note_late(round.started());
        }
    }
}

/// Hands the outcomes read on master `master` to the rounds in flight,
/// the wake-ups to the waits, and what the watches asked to the watches.
struct MasterSink<'a, W> {
    flights: &'a mut Flights<W>,
    waits: &'a mut Waits<W>,
    watches: &'a mut Watches,
    master: usize,
}

impl<W> Sink for MasterSink<'_, W> {
    fn is_live(&self, id: RoundId) -> bool {
        self.flights.is_live(id)
    }

    fn is_waiting(&self, id: WaitId) -> bool {
        self.waits.is_waiting(id)
    }

    fn on_reply(&mut self, id: RoundId, _: Op, outcome: Outcome, now: Instant) {
        self.flights.deliver(id, self.master, outcome, now);
    }

    fn on_wake(&mut self, id: WaitId, later: Option<Duration>, now: Instant) {
        match later {
            None => self.waits.handle_wake(id, self.master),
            Some(later) => {
                let at = crate::clock::after(now, later);
                self.waits.handle_hint(id, self.master, at);
            }
        }
    }

    fn on_invalidate(&mut self, what: Invalidated<'_>, _: Instant) {
        self.watches.handle_invalidate(self.master, what);
    }

    fn on_read(&mut self, id: WatchId, read: KeyRead<'_>, _: Instant) {
        self.watches.handle_read(id, self.master, read);
    }
}
