//! The simulator's client: a front end of the library, as the blocking,
//! async and embedded ones are, single-threaded and free of sockets and
//! of the clock. It drives the library's sans-IO machines through the
//! hidden door `redlock_mio::sim` (feature `sim`): the driver's [`Core`]
//! and the calls' machines.
//!
//! The simulator owns the sockets (simulated ones) and the time: it moves
//! bytes between them and the client as the `mio` driver does
//! ([`Client::socket`], [`Client::transmit`], [`Client::handle_read`], ...)
//! and runs the calls as the blocking front end does, each as a pair: a
//! `begin_*` that starts the call's round, and, once the round is decided,
//! an `end_*` that makes of it what the front end makes of it (a [`Held`]
//! lock with its validity, an [`Error`], the release of a failed acquire).
//! A caller that waits for a contended lock is a [`Pursue`]: the front
//! ends' own machine of the acquire that waits (`calls::Pursue`: its
//! attempts, its waits, its queue entries and its leave). With
//! [`Settings::fencing`], an acquire is a [`Fenced`]: the front ends' own
//! state machine of its rounds (`FencedAcquire`), which this client runs
//! step by step (`client/fenced.rs`).
//!
//! The front ends' own rules are called, not copied: the machines of the
//! plain calls (`calls`: the checks of a resource, a TTL and an extend,
//! the limit on extensions included; a round's set-up; what each round's
//! decision means, its errors' kinds, the validity a lock keeps after each
//! outcome, the table in [`Lock`](redlock_mio::Lock)'s docs; the release
//! that follows a failed or dropped acquire; what a lock's loss watch
//! does after a call on it; the acquire that waits, `calls::Pursue`), the
//! fenced acquire (`FencedAcquire`), and the keeping of a lock
//! (`calls::Keeping`, which [`Client::keep`] hands out: the keeper
//! thread's own machine, which the simulator drives as the thread does).
//! This client only moves their commands and rounds through its [`Core`],
//! so the simulator's checkers hold the front ends' own decisions to the
//! guarantees. What it adds of its own are the deliberate faults
//! ([`Client::skip_raises`], ...), which prove that the checkers catch
//! them.

mod fenced;

use std::time::{Duration, Instant};

use smallvec::SmallVec;

pub use fenced::Fenced;

use redlock_mio::sim::calls::{
    self, Acquire, Acquired, Claim, Extend, Holding, Keeping, Limits, Release, Rewatch, Step,
    Validity, Wait, check_resource,
};
use redlock_mio::sim::{
    Command, Core, FenceBook, Keys, LinkConfig, RoundId, Terms, WakeChannel, WatchId, builder,
    commands,
};
use redlock_mio::sim::{Decision, Round, rules};
use redlock_mio::{Error, NodeError, Op, Report, ServerAddr, TOKEN_LEN};

/// A client's settings: those of [`Builder`](redlock_mio::Builder), which the
/// front end turns into the sessions' and the rounds' as [`Client::new`]
/// does.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long a round waits for the masters.
    pub request_timeout: Duration,
    /// How long a connect and its handshake may take.
    pub connect_timeout: Duration,
    /// The longest back-off between reconnects.
    pub backoff_max: Duration,
    /// The clock drift allowed, a fraction of the TTL.
    pub drift_factor: f64,
    /// Attempts of a call that waits, after the first.
    pub retry_count: u32,
    /// The retry delay and its jitter.
    pub retry_delay: Duration,
    /// How far a retry delay strays from `retry_delay`, either way.
    pub retry_jitter: Duration,
    /// The most rounds in flight at once.
    pub in_flight: usize,
    /// Ask each server who it is at the handshake.
    pub identify: bool,
    /// Releases tell the waiters they hand a lock to.
    pub wake: bool,
    /// The restart guard's longest TTL, if it is on.
    pub restart_guard: Option<Duration>,
    /// Fencing's longest TTL, if it is on (the same as the guard's when
    /// both are, as the builder requires).
    pub fencing: Option<Duration>,
    /// How often a lock may be extended, if there is a limit.
    pub max_extensions: Option<u32>,
}

impl Settings {
    /// The longest TTL the client accepts and keeps on the masters: the
    /// restart guard's or fencing's, as the builder has it.
    fn longest_ttl(&self) -> Option<Duration> {
        calls::longest_ttl(self.restart_guard, self.fencing)
    }

    /// What the calls' arguments are checked against, as the front end's
    /// configuration has it.
    fn limits(&self) -> Limits {
        Limits {
            request_timeout: self.request_timeout,
            drift_factor: self.drift_factor,
            longest_ttl: self.longest_ttl(),
            max_extensions: self.max_extensions,
        }
    }
}

/// What a call names: one resource, or several acquired all or nothing
/// (`try_lock_all`, `lock_all`), checked as the front end checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    bytes: Vec<u8>,
    many: bool,
}

impl Names {
    /// One resource, if the front end takes it.
    pub fn one(resource: &[u8]) -> Result<Names, Error> {
        check_resource(resource)?;
        Ok(Names {
            bytes: resource.to_vec(),
            many: false,
        })
    }

    /// Several resources, all or nothing, if the front end takes them.
    pub fn all(resources: &[&[u8]]) -> Result<Names, Error> {
        let mut bytes = Vec::new();
        calls::pack_names(resources.iter().copied(), &mut bytes)?;
        Ok(Names { bytes, many: true })
    }

    /// The resources, in the order given.
    pub fn resources(&self) -> Vec<&[u8]> {
        if self.many {
            commands::unpack_keys(&self.bytes).collect()
        } else {
            vec![&self.bytes]
        }
    }

    fn keys(&self) -> Keys<&[u8]> {
        Keys::new(&self.bytes, self.many)
    }
}

/// One acquisition: what the front end's [`Lock`](redlock_mio::Lock) keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    names: Names,
    token: [u8; TOKEN_LEN],
    valid_until: Instant,
    extensions: u32,
    reach: u64,
    fence: Option<u64>,
    /// Its watch, one per key, if [`Client::watch`] started one (as a
    /// `Lock`'s).
    watch: Vec<WatchId>,
}

impl Held {
    /// Its validity after an extend, a release or a dropped call, as the
    /// front ends apply it to a `Lock`.
    fn apply(&mut self, validity: Validity) {
        validity.apply(&mut self.valid_until, &mut self.extensions);
    }

    /// The lock the front end's machine won, as the simulator keeps it.
    fn from_lock(lock: &redlock_mio::Lock) -> Held {
        let holding = redlock_mio::sim::holding(lock);
        let (bytes, many) = holding.keys.parts();
        Held {
            names: Names {
                bytes: bytes.to_vec(),
                many,
            },
            token: *holding.token,
            valid_until: holding.valid_until,
            extensions: holding.extensions,
            reach: holding.reach,
            fence: lock.fence(),
            watch: Vec::new(),
        }
    }

    /// What an extend or a release of it reads.
    fn holding(&self) -> Holding<'_> {
        Holding {
            keys: self.names.keys(),
            token: &self.token,
            valid_until: self.valid_until,
            extensions: self.extensions,
            reach: self.reach,
        }
    }

    /// What it holds.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The token.
    pub fn token(&self) -> &[u8; TOKEN_LEN] {
        &self.token
    }

    /// Until when the lock may be trusted, on the client's clock.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// How many times it was extended.
    pub fn extensions(&self) -> u32 {
        self.extensions
    }

    /// Its fence, if it was acquired with fencing.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The ids of its watch, one per key ([`Client::watch`]): what
    /// [`Client::take_lost`] gives when the watch finds it lost. Empty
    /// if it is not watched.
    pub fn watch_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.watch.iter().map(|id| id.0)
    }
}

/// What a waiting caller does after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Stop: the call returns the last attempt's error.
    Stop,
    /// Wait until told, or until this instant, then attempt again.
    Until(Instant),
}

/// A call that waits for a lock (`lock`, `lock_until`, `lock_all`): the
/// front ends' machine (`calls::Pursue`), its attempts made and ended by
/// [`Client::begin_acquire`] and [`Client::end_acquire`] (or their fenced
/// forms), its waits by the simulator's events.
pub struct Pursue(calls::Pursue<Vec<u8>>);

impl Pursue {
    /// Whether it holds a slot in the table of waits: its attempts queue
    /// it where they are refused, and releases tell it.
    pub fn waits(&self) -> bool {
        self.0.wait_id().is_some()
    }

    /// The lock its last attempt won, as the simulator keeps it.
    fn won(&mut self) -> Result<Held, Error> {
        match self.0.result() {
            Some(Ok(lock)) => Ok(Held::from_lock(&lock)),
            Some(Err(error)) => Err(error),
            None => Err(calls::unknown()),
        }
    }

    /// What it does after its last attempt failed.
    pub fn next(&self) -> Next {
        match self.0.poll() {
            Step::Wait { until, .. } => Next::Until(until),
            Step::Attempt { .. } | Step::InFlight | Step::Done => Next::Stop,
        }
    }
}

impl std::fmt::Debug for Pursue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pursue")
            .field("waits", &self.waits())
            .finish_non_exhaustive()
    }
}

/// A client: the driver's core, waited for by callers named by `u64`s
/// (see the module docs).
pub struct Client {
    core: Core<u64>,
    settings: Settings,
    wake: Option<WakeChannel>,
    n: usize,
    /// What it knows of the masters' fence counters, as the front end's.
    fences: FenceBook,
    /// The time of the call that runs a fenced acquire's step, and the
    /// token it acquires with (see `fenced.rs`).
    now: Instant,
    token: [u8; TOKEN_LEN],
    /// A deliberate fault: fenced acquires skip their raise.
    skip_raises: bool,
    /// A deliberate fault: an extend decided too slow succeeds.
    slow_extends_succeed: bool,
    /// A deliberate fault: extensions never have their watch read again.
    skip_rearms: bool,
    /// A deliberate fault: a dropped connection is a loss of every lock
    /// watched (see [`drops_are_losses`](Self::drops_are_losses)).
    drops_are_losses: bool,
    /// The watches started and not stopped, for that fault.
    watched: Vec<WatchId>,
    /// The watches that fault found lost, not yet taken.
    dropped_lost: Vec<WatchId>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("masters", &self.n)
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the masters at `addrs`, with `settings`, named `id`
    /// (its wake channel and restart-guard marker), at `now`; every
    /// session is down and may connect at once.
    pub fn new(addrs: &[ServerAddr], settings: Settings, id: u64, now: Instant) -> Client {
        let wake = settings.wake.then(|| commands::wake_channel(id));
        let config = LinkConfig {
            request_timeout: settings.request_timeout,
            connect_timeout: settings.connect_timeout,
            stall_timeout: builder::default_stall(settings.request_timeout),
            backoff_min: builder::backoff_min(settings.backoff_max),
            backoff_max: settings.backoff_max,
            identify: settings.identify,
            fencing: settings.fencing.is_some(),
            in_flight: settings.in_flight,
            guard: settings.restart_guard.map(|ttl| {
                let guard = rules::outlived(ttl, settings.drift_factor);
                (guard, marker(id))
            }),
            longest_ttl: settings.longest_ttl().map(|ttl| ttl.as_millis() as u64),
            wake,
        };
        Client {
            core: Core::new(addrs, config, now),
            settings,
            wake,
            n: addrs.len(),
            fences: FenceBook::new(addrs.len()),
            now,
            token: [0; TOKEN_LEN],
            skip_raises: false,
            slow_extends_succeed: false,
            skip_rearms: false,
            drops_are_losses: false,
            watched: Vec::new(),
            dropped_lost: Vec::new(),
        }
    }

    // The sockets, as the driver moves bytes (see `Core`).

    /// Which start of master `i`'s session needs a socket now.
    pub fn socket(&self, i: usize) -> Option<u64> {
        self.core.socket(i)
    }

    /// The socket of master `i`'s current start could not be opened.
    pub fn handle_unopened(&mut self, i: usize, error: NodeError, now: Instant) {
        self.core.handle_unopened(i, error, now);
    }

    /// Whether master `i`'s session waits for its socket to connect.
    pub fn is_connecting(&self, i: usize) -> bool {
        self.core.is_connecting(i)
    }

    /// Master `i`'s socket connected.
    pub fn handle_connected(&mut self, i: usize, now: Instant) {
        self.core.handle_connected(i, now);
    }

    /// Whether master `i`'s bytes are due to be written now (once).
    pub fn take_write_due(&mut self, i: usize) -> bool {
        self.core.take_write_due(i)
    }

    /// The bytes to write to master `i` now.
    pub fn transmit(&self, i: usize) -> &[u8] {
        self.core.transmit(i)
    }

    /// `n` bytes of [`transmit`](Self::transmit) were written to master `i`.
    pub fn advance(&mut self, i: usize, n: usize) {
        self.core.advance(i, n);
    }

    /// Where the next bytes read from master `i` go.
    pub fn read_buf(&mut self, i: usize) -> Result<&mut [u8], NodeError> {
        self.core.read_buf(i)
    }

    /// `n` bytes were read from master `i` at `now`; an error means the
    /// socket must be closed ([`handle_failure`](Self::handle_failure)).
    pub fn handle_read(&mut self, i: usize, n: usize, now: Instant) -> Result<(), NodeError> {
        self.core.handle_read(i, n, now)
    }

    /// Master `i`'s socket failed after `error`.
    pub fn handle_failure(&mut self, i: usize, error: NodeError, now: Instant) {
        self.core.handle_failure(i, error, now);
        if self.drops_are_losses {
            self.dropped_lost.append(&mut self.watched);
        }
    }

    /// The time is `now`: timers and deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now);
    }

    /// After reads at `now`: tells the waits of reconnects, and sends the
    /// watches' reads due (those of a master back after a drop), as the
    /// driver does.
    pub fn handle_handshakes(&mut self, now: Instant) {
        self.core.handle_handshakes();
        if self.core.watches.has_reads() {
            self.core.send_reads(now);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn next_timer(&self) -> Option<Instant> {
        self.core.next_timer()
    }

    /// Starts every session that is down (as a client does at build).
    pub fn connect(&mut self, now: Instant) {
        self.core.connect(now);
    }

    /// Hands `wake` the callers whose rounds are decided or whose waits
    /// were told, and ends the orphaned rounds no master is left to
    /// answer.
    pub fn wake(&mut self, wake: impl FnMut(u64)) {
        self.core.wake_decided(wake);
        self.core.reap();
    }

    /// Has `caller` woken when round `id` is decided.
    pub fn set_waiter(&mut self, id: RoundId, caller: u64) {
        self.core.flights.set_waiter(id, caller);
    }

    /// Whether round `id` is decided (or over).
    pub fn is_decided(&self, id: RoundId) -> bool {
        self.core.decided(&[id])
    }

    /// Round `id`, while it is in flight.
    pub fn round(&self, id: RoundId) -> Option<&Round> {
        self.core.flights.round(id)
    }

    /// Rounds in flight, orphaned ones included.
    pub fn in_flight(&self) -> usize {
        self.core.flights.len()
    }

    // The calls.

    /// Starts an acquire of `names` by `token` for `ttl` (an attempt of
    /// `pursue`'s call, if given), cut short at `cap`: its round's id, or
    /// the error the front end returns before sending anything.
    pub fn begin_acquire(
        &mut self,
        names: &Names,
        token: &[u8; TOKEN_LEN],
        ttl: Duration,
        pursue: Option<&mut Pursue>,
        cap: Option<Instant>,
        now: Instant,
    ) -> Result<RoundId, Error> {
        let ttl_ms = self.check_ttl(ttl)?;
        match pursue {
            Some(pursue) => {
                self.arm(pursue, now);
                self.submit(&pursue.0.command(*token), cap, now)
            }
            None => {
                let call = Acquire::new(names.keys(), *token, ttl_ms);
                self.submit(&call.command(), cap, now)
            }
        }
    }

    /// Before an attempt of `pursue`'s call: forgets what told its wait so
    /// far, as the front ends do.
    fn arm(&mut self, pursue: &Pursue, now: Instant) {
        if let Step::Attempt { arm: Some(id), .. } = pursue.0.poll() {
            self.core.waits.arm(id, now);
        }
    }

    /// Ends the acquire round `id` of `names` by `token` (a `try_lock`),
    /// at `now`: the lock, or the error after which its release is queued
    /// on every master.
    pub fn end_acquire(
        &mut self,
        id: RoundId,
        names: &Names,
        token: &[u8; TOKEN_LEN],
        now: Instant,
    ) -> Result<Held, Error> {
        let Some(round) = self.take(id) else {
            return Err(self.busy());
        };
        let claim = Claim::new(names.keys(), token);
        match claim.handle(&round, decided(&round), || report(&round)) {
            Acquired::Won(lock) => Ok(Held::from_lock(&lock)),
            Acquired::Lost { error, release } => {
                self.core.queue(&release, now);
                Err(error)
            }
        }
    }

    /// Ends the acquire round `id` of an attempt of `pursue`'s call, at
    /// `now`: the lock, or the error after which its release is queued on
    /// every master; the call then decides what follows with the numbers
    /// `draw` gives ([`Pursue::next`]).
    pub fn end_attempt(
        &mut self,
        id: RoundId,
        pursue: &mut Pursue,
        draw: impl FnMut() -> f64,
        now: Instant,
    ) -> Result<Held, Error> {
        let outcome = match self.take(id) {
            Some(round) => {
                let p = &mut pursue.0;
                let attempted =
                    p.handle_attempt(&round, decided(&round), || report(&round), draw, now);
                if let Some(release) = &attempted.release {
                    self.core.queue(release, now);
                }
                if let Some(granted) = attempted.granted {
                    self.core
                        .waits
                        .handle_granted(granted.wait, granted.masters);
                }
                attempted.outcome.map_err(Clone::clone)
            }
            None => {
                let release = pursue.0.handle_lost(draw, now);
                self.core.queue(&release, now);
                Err(calls::unknown())
            }
        };
        outcome.and_then(|()| pursue.won())
    }

    /// The caller of acquire round `id` of `names` by `token` is gone
    /// (a dropped future): its release follows it on every master, as
    /// the async front end does.
    pub fn drop_acquire(
        &mut self,
        id: RoundId,
        names: &Names,
        token: &[u8; TOKEN_LEN],
        now: Instant,
    ) {
        let claim = Claim::new(names.keys(), token);
        let release = claim.release(self.core.flights.round(id));
        self.core.release_after(id, &release, now);
    }

    /// Starts an extend of `held` to `ttl`: its round's id, or the error
    /// the front end returns before sending anything.
    pub fn begin_extend(
        &mut self,
        held: &Held,
        ttl: Duration,
        now: Instant,
    ) -> Result<RoundId, Error> {
        let call = Extend::new(&self.settings.limits(), held.holding(), ttl, now)?;
        self.submit(&call.command(), None, now)
    }

    /// Ends the extend round `id` of `held` at `now`: its validity as the
    /// table in [`Lock`](redlock_mio::Lock)'s docs says; its watch, if it has
    /// one, reads its keys again.
    pub fn end_extend(&mut self, id: RoundId, held: &mut Held, now: Instant) -> Result<(), Error> {
        let Some(round) = self.take(id) else {
            return Err(self.busy());
        };
        let (result, validity) = Extend::handle(&round, decided(&round), || report(&round));
        if self.slow_extends_succeed && matches!(result, Err(Error::TooSlow(_))) {
            let ok = Ok(());
            held.apply(Validity::after_extend(
                &ok,
                round.started(),
                round.valid_until(),
            ));
            self.rewatch(Op::Extend, held, now);
            return ok;
        }
        held.apply(validity);
        self.rewatch(Op::Extend, held, now);
        result
    }

    /// A call of `op` on `held` went out, its round ended or its caller
    /// gone: `held`'s watch, if it has one, does what [`Rewatch`] says,
    /// as the front ends' watches do.
    fn rewatch(&mut self, op: Op, held: &mut Held, now: Instant) {
        match Rewatch::after(op) {
            Some(Rewatch::ReadAgain) if !self.skip_rearms => {
                for &id in &held.watch {
                    self.core.rearm(id, |_| true, now);
                }
            }
            Some(Rewatch::End) => self.unwatch(held),
            Some(Rewatch::ReadAgain) | None => {}
        }
    }

    /// Watches `held` for a loss at `now`, as `Redlock::watch` does: one
    /// watch per key, its reads sent at once. A lock already watched, or
    /// expired, is left as it is.
    pub fn watch(&mut self, held: &mut Held, now: Instant) {
        if !held.watch.is_empty() || now >= held.valid_until {
            return;
        }
        let token = held.token;
        held.watch = (held.names.resources().into_iter())
            .map(|key| self.core.watch(key, token, now))
            .collect();
        self.watched.extend_from_slice(&held.watch);
    }

    /// Stops `held`'s watch, if it has one: its release ended or began
    /// unwatched, or its holder forgot it.
    pub fn unwatch(&mut self, held: &mut Held) {
        for id in held.watch.drain(..) {
            self.core.watches.unwatch(id);
            self.watched.retain(|&w| w != id);
        }
    }

    /// Stops watch `id` (an id of [`Held::watch_ids`]) whose lock is gone
    /// without a release (its holder forgot it, its keeper ended).
    pub fn unwatch_id(&mut self, id: u64) {
        self.core.watches.unwatch(WatchId(id));
        self.watched.retain(|&w| w.0 != id);
    }

    /// The next watch found lost since the last call (an id of
    /// [`Held::watch_ids`]); the caller tells its holder.
    pub fn take_lost(&mut self) -> Option<u64> {
        let id = self.dropped_lost.pop();
        id.or_else(|| self.core.watches.take_lost()).map(|id| id.0)
    }

    /// A deliberate fault, to prove that a simulation's checkers catch
    /// it: an extension leaves its watch as it was, though the servers
    /// forget a key the watching connection changed itself (`NOLOOP`):
    /// a later change of it is told to nobody.
    pub fn skip_rearms(&mut self) {
        self.skip_rearms = true;
    }

    /// A deliberate fault, to prove that a simulation's checkers catch
    /// it: a connection that drops is taken for the loss of every lock
    /// this client watches, where it only leaves its master unknown.
    pub fn drops_are_losses(&mut self) {
        self.drops_are_losses = true;
    }

    /// A deliberate fault, to prove that a simulation's checkers catch
    /// it: an extend decided too slow (its quorum answered once the
    /// validity it asked for was gone) is reported as a success, with
    /// that validity.
    pub fn slow_extends_succeed(&mut self) {
        self.slow_extends_succeed = true;
    }

    /// Hands `held` to a keeper, at `now`, as `Redlock::keep` does: its
    /// keeping, which extends it to `ttl` every `period` (a third of `ttl`
    /// if not given), and no longer once held for `max_hold`; or the error
    /// `keep` returns (expired; a TTL the extensions would refuse). The
    /// caller drives the keeping as the keeper's thread does.
    pub fn keep(
        &self,
        held: &Held,
        ttl: Duration,
        period: Option<Duration>,
        max_hold: Option<Duration>,
        now: Instant,
    ) -> Result<Keeping, Error> {
        if now >= held.valid_until {
            return Err(Error::Expired);
        }
        self.check_ttl(ttl)?;
        Ok(Keeping::new(ttl, period, max_hold, held.valid_until, now))
    }

    /// Starts the release of `held`: its round's id.
    pub fn begin_release(&mut self, held: &Held, now: Instant) -> Result<RoundId, Error> {
        let command = Release::new(held.holding()).command();
        self.submit(&command, None, now)
    }

    /// Ends the release round `id` of `held`: expired, whatever the
    /// outcome, and no longer watched.
    pub fn end_release(&mut self, id: RoundId, held: &mut Held, now: Instant) -> Result<(), Error> {
        self.rewatch(Op::Release, held, now);
        let Some(round) = self.take(id) else {
            return Err(self.busy());
        };
        let (result, validity) = Release::handle(&round, decided(&round), || report(&round));
        held.apply(validity);
        result
    }

    /// The caller of extend round `id` of `held`, begun at `begun` with
    /// `ttl`, is gone at `now` (a dropped future): the round ends, the lock
    /// keeps no more than that extend could have granted, and its watch
    /// reads its keys again, as the async front end has it.
    pub fn drop_extend(
        &mut self,
        id: RoundId,
        held: &mut Held,
        ttl: Duration,
        begun: Instant,
        now: Instant,
    ) {
        let ttl_ms = ttl.as_millis() as u64;
        held.apply(Validity::after_dropped_extend(
            begun,
            ttl_ms,
            self.settings.drift_factor,
        ));
        self.core.abandon(&[id]);
        self.rewatch(Op::Extend, held, now);
    }

    /// The caller of release round `id` of `held`, begun at `begun`, is
    /// gone: the lock is expired, and the round goes on until every master
    /// has answered it, as the async front end has it.
    pub fn drop_release(&mut self, id: RoundId, held: &mut Held, begun: Instant, now: Instant) {
        self.rewatch(Op::Release, held, now);
        held.apply(Release::begun(begun));
        self.core.flights.orphan(id);
    }

    /// `held`'s guard is dropped (the async front end's `AsyncLockGuard`):
    /// the lock is expired, and its release goes out without anyone
    /// waiting for it, followed until every master has answered if a slot
    /// is free (returns whether one was), else only queued.
    pub fn drop_guard(&mut self, held: &mut Held, now: Instant) -> bool {
        self.rewatch(Op::Release, held, now);
        held.apply(Release::begun(now));
        let release = Release::new(held.holding()).command();
        self.core.release_orphan(&release, now)
    }

    /// A call that waits for `names` for `ttl`: `lock` (the configured
    /// retries) without a deadline, `lock_until` with one; with a slot in
    /// the table of waits, its place in the queues `place` (microseconds
    /// of the client's wall clock), if releases tell this client's waiters
    /// and the table has room. Or the error the front end returns before
    /// sending anything.
    pub fn begin_pursuit(
        &mut self,
        names: &Names,
        ttl: Duration,
        deadline: Option<Instant>,
        place: u64,
    ) -> Result<Pursue, Error> {
        let wait = self.begin_wait(place);
        let ttl_ms = match self.check_ttl(ttl) {
            Ok(ttl_ms) => ttl_ms,
            Err(error) => {
                if let Some(wait) = wait {
                    self.core.waits.end(wait.id);
                }
                return Err(error);
            }
        };
        let terms = match deadline {
            Some(deadline) => Terms::Deadline(deadline),
            None => Terms::Retries(self.settings.retry_count),
        };
        let keys = Keys::new(names.bytes.clone(), names.many);
        let times = self.times();
        Ok(Pursue(calls::Pursue::new(keys, ttl_ms, terms, times, wait)))
    }

    /// A slot in the table of waits, if releases tell this client's
    /// waiters and the table has room.
    fn begin_wait(&mut self, place: u64) -> Option<Wait> {
        let channel = self.wake?;
        let id = self.core.waits.begin()?;
        let wait = Wait::new(id, &channel, place, self.times());
        if wait.is_none() {
            self.core.waits.end(id);
        }
        wait
    }

    /// The times a call that waits reads, as the front end's
    /// configuration has them.
    fn times(&self) -> calls::Times {
        let s = &self.settings;
        calls::Times {
            request_timeout: s.request_timeout,
            retry_delay: s.retry_delay,
            retry_jitter: s.retry_jitter,
        }
    }

    /// `pursue`'s call ends, returned or dropped: it leaves the queues if
    /// it may be queued somewhere (without waiting), and its slot is
    /// freed.
    pub fn end_pursuit(&mut self, pursue: &mut Pursue, now: Instant) {
        if let Some(leave) = pursue.0.leave() {
            if let Some(command) = &leave.command {
                self.core.queue(command, now);
            }
            self.core.waits.end(leave.wait);
        }
    }

    /// `pursue`'s wait is over at `now`, told (a quorum of masters told
    /// it) or not: whether it attempts again (else its call ends with the
    /// last error: told once an attempt could end past its deadline).
    pub fn resume(&mut self, pursue: &mut Pursue, told: bool, now: Instant) -> bool {
        if told {
            pursue.0.handle_told(now);
        } else {
            pursue.0.handle_timeout();
        }
        matches!(pursue.0.poll(), Step::Attempt { .. })
    }

    /// Whether a quorum of masters told `pursue`'s wait since its last
    /// attempt.
    pub fn is_told(&self, pursue: &Pursue) -> bool {
        pursue
            .0
            .wait_id()
            .is_some_and(|id| self.core.waits.is_told(id))
    }

    /// When a master told `pursue`'s wait to try, should nobody hand it
    /// the lock before.
    pub fn hinted(&self, pursue: &Pursue) -> Option<Instant> {
        pursue.0.wait_id().and_then(|id| self.core.waits.hinted(id))
    }

    /// Has `caller` woken when `pursue`'s wait is told (or its time to try
    /// comes).
    pub fn set_wait_waiter(&mut self, pursue: &Pursue, caller: u64) {
        if let Some(id) = pursue.0.wait_id() {
            self.core.waits.set_waiter(id, caller);
        }
    }

    /// Takes `pursue`'s caller back.
    pub fn take_wait_waiter(&mut self, pursue: &Pursue) {
        if let Some(id) = pursue.0.wait_id() {
            self.core.waits.take_waiter(id);
        }
    }

    /// Starts one round of `command`, waiting at most the request timeout
    /// and never past `cap`, its command due to be written at once.
    fn submit(
        &mut self,
        command: &Command<'_>,
        cap: Option<Instant>,
        now: Instant,
    ) -> Result<RoundId, Error> {
        let mut ids: SmallVec<[RoundId; 1]> = SmallVec::new();
        self.submit_all(std::slice::from_ref(command), cap, &mut ids, now);
        ids.first().copied().ok_or_else(|| self.busy())
    }

    /// Starts one round per command, as [`submit`](Self::submit) does,
    /// as far as the table has room: the ids of those started go to
    /// `ids`, in order.
    fn submit_all(
        &mut self,
        commands: &[Command<'_>],
        cap: Option<Instant>,
        ids: &mut SmallVec<[RoundId; 1]>,
        now: Instant,
    ) {
        let s = self.settings;
        let timeout = calls::timeout(s.request_timeout, cap, now);
        let restart = calls::restarter(s.drift_factor, self.n, timeout);
        self.core.submit(commands, restart, ids, true, now);
    }

    /// Round `id` as it ended, its slot freed.
    fn take(&mut self, id: RoundId) -> Option<Round> {
        let round = self.core.flights.round(id).cloned();
        self.core.finish(&[id]);
        round
    }

    fn busy(&self) -> Error {
        Error::TooManyInFlight {
            limit: self.settings.in_flight,
        }
    }

    /// The front ends' check of a TTL; the TTL in milliseconds.
    fn check_ttl(&self, ttl: Duration) -> Result<u64, Error> {
        self.settings.limits().ttl(ttl)
    }
}

/// The decision of a round taken out of the table, as the front ends read
/// it (no poller of its own fails it).
fn decided(round: &Round) -> Result<Decision, std::io::ErrorKind> {
    calls::decision(round, Ok(()))
}

fn report(round: &Round) -> Box<Report> {
    Box::new(round.report())
}

/// The restart guard's marker of client `id`: `client:` and 24 hex digits.
fn marker(id: u64) -> [u8; 31] {
    let mut marker = [b'0'; 31];
    marker[..7].copy_from_slice(rules::CLIENT_MARKER);
    let digits = format!("{id:024x}");
    marker[7..].copy_from_slice(&digits.as_bytes()[..24]);
    marker
}
