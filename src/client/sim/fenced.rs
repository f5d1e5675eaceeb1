//! Fenced acquires for the simulator: the front ends' own state machine
//! ([`FencedAcquire`]: a read and a sync of the counters when due, the
//! acquire, the raise), its rounds run by the simulator's [`Client`] one
//! step after another, between the simulator's events, where the blocking
//! and async front ends run them within one call. What the machine needs
//! of a client (tokens, its clock, what it knows of the counters, the
//! release of a failed acquire) comes through [`Host`], as the front
//! ends' does. [`FenceMachine`] runs the same machine with no core at
//! all: its caller says how each round ended, to hold another
//! transcription of the machine (the model check's) to it step by step.

use std::ops::DerefMut;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::{Client, Held, Names, Pursue};
use crate::TOKEN_LEN;
use crate::calls;
use crate::calls::{Waited, release_behind};
use crate::client::fence::{FenceBook, FencedAcquire, Host};
use crate::client::rounds::{Ends, RoundEnd};
use crate::commands::Command;
use crate::error::Error;
use crate::ids::RoundId;
use crate::rules::{self, NodeState, Op, Reply, Report, Round};

/// A fenced acquire under way (see the module docs): the attempt, the
/// rounds of its step in flight, and copies of its acquire and raise
/// rounds as they ended (for the simulator's checkers).
pub struct Fenced {
    attempt: FencedAcquire<'static>,
    ids: SmallVec<[RoundId; 1]>,
    acquire: Option<Round>,
    raise: Option<Round>,
    /// The steps whose rounds went out, one after another.
    steps: u32,
    /// Whether one of them read the counters.
    read: bool,
    /// Whether a step could not start, or a master failed to answer one of
    /// its rounds (timed out, failed, quarantined).
    troubled: bool,
}

impl std::fmt::Debug for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fenced")
            .field("rounds", &self.ids)
            .field("steps", &self.steps)
            .field("read", &self.read)
            .field("troubled", &self.troubled)
            .finish_non_exhaustive()
    }
}

impl Fenced {
    /// The rounds of its step in flight; empty once it has ended.
    pub fn rounds(&self) -> &[RoundId] {
        &self.ids
    }

    /// Its acquire round, once it ended.
    pub fn acquire_round(&self) -> Option<&Round> {
        self.acquire.as_ref()
    }

    /// Its raise round, once it ended.
    pub fn raise_round(&self) -> Option<&Round> {
        self.raise.as_ref()
    }

    /// How many steps sent their rounds so far, one step after another
    /// (each within a request timeout), and whether one of them read the
    /// counters: the client's docs bound an attempt to five steps, two
    /// when no read is due.
    pub fn steps(&self) -> (u32, bool) {
        (self.steps, self.read)
    }

    /// Whether a step could not start, or a master failed to answer a
    /// round of it (timed out, failed, quarantined): only then may an
    /// attempt in a deployment that never lost a counter end `Unfenced`.
    pub fn troubled(&self) -> bool {
        self.troubled
    }
}

impl Client {
    /// A deliberate fault, to prove that a simulation's checkers catch
    /// it: fenced acquires skip their raise, as though every master had
    /// raised its counter to the fence.
    pub fn skip_raises(&mut self) {
        self.skip_raises = true;
    }

    /// Starts a fenced acquire of `names` by `token` for `ttl` (an attempt
    /// of `pursue`'s call, if given), no round running past `cap`: its
    /// first rounds, or the error the front end returns before sending
    /// anything. Once [`Fenced::rounds`] are decided,
    /// [`step_fenced`](Self::step_fenced) moves it on.
    pub fn begin_fenced(
        &mut self,
        names: &Names,
        token: &[u8; TOKEN_LEN],
        ttl: Duration,
        pursue: Option<&mut Pursue>,
        cap: Option<Instant>,
        now: Instant,
    ) -> Result<Fenced, Error> {
        let ttl_ms = self.check_ttl(ttl)?;
        (self.now, self.token) = (now, *token);
        let keys = [names.bytes.clone()];
        let mut attempt = FencedAcquire::new(&mut *self, keys, names.many, ttl_ms, cap);
        if let Some(pursue) = pursue {
            self.arm(pursue, now);
            if let Some((member, place, margin_ms)) = pursue.0.fenced().queue {
                attempt = attempt.waiting((member.to_vec(), place, margin_ms));
            }
        }
        let mut fenced = Fenced {
            attempt,
            ids: SmallVec::new(),
            acquire: None,
            raise: None,
            steps: 0,
            read: false,
            troubled: false,
        };
        self.run_step(&mut fenced, now);
        Ok(fenced)
    }

    /// Whether the rounds of `fenced`'s step are decided.
    pub fn is_fenced_decided(&self, fenced: &Fenced) -> bool {
        self.core.decided(&fenced.ids)
    }

    /// Has `caller` woken when a round of `fenced`'s step is decided.
    pub fn set_fenced_waiter(&mut self, fenced: &Fenced, caller: u64) {
        for &id in &fenced.ids {
            self.core.flights.set_waiter(id, caller);
        }
    }

    /// `fenced`'s step is decided, at `now`: the machine takes how its
    /// rounds ended and starts the next step's. Returns whether the
    /// attempt has ended ([`end_fenced`](Self::end_fenced) then).
    pub fn step_fenced(&mut self, fenced: &mut Fenced, now: Instant) -> bool {
        self.now = now;
        let mut ends = Ends::new();
        for id in std::mem::take(&mut fenced.ids) {
            let Some(round) = self.take(id) else {
                break;
            };
            fenced.keep(&round);
            ends.push(Ok(RoundEnd::decided(round, now)));
        }
        fenced.attempt.handle(&mut *self, ends);
        self.run_step(fenced, now);
        fenced.ids.is_empty()
    }

    /// Ends `fenced`, which has ended (a `try_lock`): the lock, or the
    /// error after which its release is queued on every master.
    pub fn end_fenced(&mut self, fenced: Fenced) -> Result<Held, Error> {
        let (result, _) = self.finish_fenced(fenced);
        result.map(|lock| Held::from_lock(&lock))
    }

    /// Ends `fenced`, an attempt of `pursue`'s call, which has ended, at
    /// `now`: as [`end_fenced`](Self::end_fenced), and the call then
    /// decides what follows with the numbers `draw` gives
    /// ([`Pursue::next`]).
    pub fn end_fenced_attempt(
        &mut self,
        fenced: Fenced,
        pursue: &mut Pursue,
        draw: impl FnMut() -> f64,
        now: Instant,
    ) -> Result<Held, Error> {
        let (result, waited) = self.finish_fenced(fenced);
        let held = result.as_ref().map(Held::from_lock).map_err(Clone::clone);
        if let Some(granted) = pursue.0.handle_fenced(waited, result, draw, now) {
            self.core
                .waits
                .handle_granted(granted.wait, granted.masters);
        }
        held
    }

    /// The lock or the error `fenced` ended with, and how its acquire
    /// round ended for a call that waits.
    fn finish_fenced(&mut self, mut fenced: Fenced) -> (Result<crate::Lock, Error>, Waited) {
        let waited = fenced.attempt.waited.take();
        let result = fenced.attempt.finish(&mut *self).into_iter().next();
        (result.unwrap_or_else(|| Err(self.busy())), waited)
    }

    /// The caller of `fenced` is gone during a step (a dropped future), at
    /// `now`, as the async front end has it: an acquire round's release
    /// follows it on every master, another round ends now, and a lock won
    /// whose raise is in flight is released, followed until every master
    /// has answered.
    pub fn drop_fenced(&mut self, fenced: Fenced, now: Instant) {
        self.now = now;
        let Some(next) = fenced.attempt.next() else {
            return;
        };
        for (command, &id) in next.commands.iter().zip(&fenced.ids) {
            let behind = release_behind(command, self.core.flights.round(id));
            match behind.filter(|_| next.release_on_drop) {
                Some(release) => {
                    self.core.release_after(id, &release, now);
                }
                None => self.core.abandon(&[id]),
            }
        }
        for release in fenced.attempt.won() {
            self.core.release_orphan(&release, now);
        }
    }

    /// Starts the rounds of `fenced`'s next step, as the front ends run
    /// them: a step none of whose rounds could start is ended at once
    /// ([`Error::TooManyInFlight`]), and the next one tried. With
    /// [`skip_raises`](Self::skip_raises), a raise is not sent: every
    /// master is taken to have raised.
    fn run_step(&mut self, fenced: &mut Fenced, now: Instant) {
        loop {
            let Some(next) = fenced.attempt.next() else {
                return;
            };
            let op = next.commands.first().map(Command::op);
            let raise = op == Some(Op::Raise);
            fenced.steps += 1;
            fenced.read |= op == Some(Op::FenceRead);
            let mut ends = Ends::new();
            if self.skip_raises && raise {
                for _ in &next.commands {
                    let round = self.raised_everywhere(now);
                    fenced.raise = Some(round.clone());
                    ends.push(Ok(RoundEnd::decided(round, now)));
                }
            } else {
                self.submit_all(&next.commands, next.cap, &mut fenced.ids, now);
                if !fenced.ids.is_empty() {
                    return;
                }
                fenced.troubled = true;
            }
            drop(next);
            fenced.attempt.handle(&mut *self, ends);
        }
    }

    /// A raise round in which every master raised, at `now`.
    fn raised_everywhere(&self, now: Instant) -> Round {
        let timeout = self.settings.request_timeout;
        let mut round = Round::new(
            Op::Raise,
            self.n,
            Duration::ZERO,
            Duration::ZERO,
            timeout,
            now,
        );
        for node in 0..self.n {
            round.handle_reply(node, Reply::Ok, now);
        }
        round
    }
}

impl Fenced {
    /// Keeps a copy of `round` if it is the acquire's or the raise's.
    fn keep(&mut self, round: &Round) {
        self.troubled |= round.nodes().iter().any(|state| {
            matches!(
                state,
                NodeState::TimedOut | NodeState::Failed(_) | NodeState::Quarantined
            )
        });
        match round.op() {
            Op::Acquire => self.acquire = Some(round.clone()),
            Op::Raise => self.raise = Some(round.clone()),
            _ => {}
        }
    }
}

/// The simulator's client as the machine's host, as the front ends'
/// `Redlock` is: its token is the one the call was given, its clock the
/// call's, and it counts nothing.
impl Host for &mut Client {
    fn token(&mut self) -> [u8; TOKEN_LEN] {
        self.token
    }

    fn fence_wait(&self) -> Duration {
        rules::outlived(
            self.settings.fencing.unwrap_or_default(),
            self.settings.drift_factor,
        )
    }

    fn now(&self) -> Instant {
        self.now
    }

    fn fences(&mut self) -> impl DerefMut<Target = FenceBook> {
        &mut self.fences
    }

    fn busy(&self) -> Error {
        Client::busy(self)
    }

    fn report(&self, end: &RoundEnd) -> Box<Report> {
        Box::new(end.round.report())
    }

    fn not_acquired(&mut self, release: &Command<'_>, _end: &RoundEnd, error: Error) -> Error {
        self.core.queue(release, self.now);
        error
    }

    fn won(&mut self, _end: &RoundEnd) {}
}

/// A fenced acquire's machine (`FencedAcquire`, `client/fence.rs`) and one client's fence
/// book with no core, sockets or settings: the caller sets up each step's
/// rounds ([`rounds`](Self::rounds), as the front ends set them up), gives
/// them the masters' answers, and hands them back
/// ([`handle`](Self::handle)). It exists so that the model check can drive
/// the library's own machine and its own transcription with the same
/// events and compare their decisions; a simulation runs [`Fenced`]
/// instead, whose rounds its masters answer.
pub struct FenceMachine {
    host: Bare,
    attempt: Option<FencedAcquire<'static>>,
}

/// What a [`FenceMachine`]'s attempts need of a client: the fence book,
/// the clock the caller sets, numbered tokens, and a count of the
/// releases a failed acquire queues.
struct Bare {
    masters: usize,
    wait: Duration,
    drift_factor: f64,
    now: Instant,
    book: FenceBook,
    tokens: u64,
    released: usize,
}

impl std::fmt::Debug for FenceMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceMachine")
            .field("attempting", &self.attempt.is_some())
            .finish_non_exhaustive()
    }
}

impl FenceMachine {
    /// A client of `masters` masters whose lost counters wait `wait`
    /// before they are put back, its acquires' validity cut by
    /// `drift_factor` of their TTL (and the least drift), at `now`.
    pub fn new(masters: usize, wait: Duration, drift_factor: f64, now: Instant) -> FenceMachine {
        FenceMachine {
            host: Bare {
                masters,
                wait,
                drift_factor,
                now,
                book: FenceBook::new(masters),
                tokens: 0,
                released: 0,
            },
            attempt: None,
        }
    }

    /// Starts a fenced acquire of the one resource `key` for `ttl_ms` at
    /// `now`, with no deadline, as the front ends' `FencedAcquire::new`
    /// does (it may claim the book's read). An attempt under way is
    /// dropped.
    pub fn begin(&mut self, key: &[u8], ttl_ms: u64, now: Instant) {
        self.host.now = now;
        let attempt = FencedAcquire::new(&mut self.host, [key.to_vec()], false, ttl_ms, None);
        self.attempt = Some(attempt);
    }

    /// The commands of the attempt's next step, each as the driver writes
    /// it to a master (RESP, `EVALSHA`); empty once the attempt has ended
    /// (or before one began).
    pub fn commands(&self) -> Vec<Vec<u8>> {
        let Some(next) = self.attempt.as_ref().and_then(FencedAcquire::next) else {
            return Vec::new();
        };
        next.commands
            .iter()
            .map(|command| {
                let mut out = Vec::new();
                command.encode(&mut out);
                out
            })
            .collect()
    }

    /// The rounds of the next step started at `now`, each waiting
    /// `timeout` for the masters (and no longer than the step's cap: a
    /// raise's lock validity), set up as the front ends set them up.
    pub fn rounds(&self, now: Instant, timeout: Duration) -> Vec<Round> {
        let Some(next) = self.attempt.as_ref().and_then(FencedAcquire::next) else {
            return Vec::new();
        };
        let timeout = calls::timeout(timeout, next.cap, now);
        let restart = calls::restarter(self.host.drift_factor, self.host.masters, timeout);
        next.commands
            .iter()
            .map(|command| {
                let mut round =
                    Round::new(Op::Release, 0, Duration::ZERO, Duration::ZERO, timeout, now);
                restart(&mut round, command, now);
                round
            })
            .collect()
    }

    /// The step's rounds (from [`rounds`](Self::rounds), in order) ended
    /// as they stand, the machine taking them at `now`; a round without a
    /// decision counts as no quorum, as the driver has it.
    pub fn handle(&mut self, rounds: Vec<Round>, now: Instant) {
        self.host.now = now;
        let Some(attempt) = self.attempt.as_mut() else {
            return;
        };
        let ends = rounds
            .into_iter()
            .map(|round| Ok(RoundEnd::decided(round, now)))
            .collect();
        attempt.handle(&mut self.host, ends);
    }

    /// The attempt's result, once it has ended: the lock, or the error
    /// after which its release was queued.
    pub fn finish(&mut self) -> Option<Result<Held, Error>> {
        let attempt = self.attempt.take_if(|attempt| attempt.next().is_none())?;
        let result = attempt.finish(&mut self.host).into_iter().next()?;
        Some(result.map(|lock| Held::from_lock(&lock)))
    }

    /// What the book keeps of each master: the loss id it reported, and
    /// when this client first saw it.
    pub fn losses(&self) -> Vec<Option<(u64, Instant)>> {
        self.host.book.losses().to_vec()
    }

    /// When the book says the counters were last read.
    pub fn last_read(&self) -> Option<Instant> {
        self.host.book.last_read()
    }

    /// How many releases failed acquires queued so far.
    pub fn releases(&self) -> usize {
        self.host.released
    }
}

/// The machine's host: tokens numbered from 1, the caller's clock, and
/// nothing sent (a failed acquire's release is only counted).
impl Host for &mut Bare {
    fn token(&mut self) -> [u8; TOKEN_LEN] {
        self.tokens += 1;
        let mut token = [b'0'; TOKEN_LEN];
        let digits = self.tokens.to_string();
        token[TOKEN_LEN - digits.len()..].copy_from_slice(digits.as_bytes());
        token
    }

    fn fence_wait(&self) -> Duration {
        self.wait
    }

    fn now(&self) -> Instant {
        self.now
    }

    fn fences(&mut self) -> impl DerefMut<Target = FenceBook> {
        &mut self.book
    }

    fn busy(&self) -> Error {
        Error::TooManyInFlight { limit: 0 }
    }

    fn report(&self, end: &RoundEnd) -> Box<Report> {
        Box::new(end.round.report())
    }

    fn not_acquired(&mut self, _release: &Command<'_>, _end: &RoundEnd, error: Error) -> Error {
        self.released += 1;
        error
    }

    fn won(&mut self, _end: &RoundEnd) {}
}
