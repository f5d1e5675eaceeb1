//! Fenced acquires for the simulator: the front ends' own state machine
//! ([`FencedAcquire`]: a read and a sync of the counters when due, the
//! acquire, the raise), its rounds run by the simulator's [`Client`] one
//! step after another, between the simulator's events, where the blocking
//! and async front ends run them within one call. What the machine needs
//! of a client (tokens, its clock, what it knows of the counters, the
//! release of a failed acquire) comes through [`Host`], as the front
//! ends' does.

use std::ops::DerefMut;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use redlock_mio::sim::calls::{Waited, release_behind};
use redlock_mio::sim::{Command, Ends, FenceBook, FencedAcquire, Host, RoundEnd, RoundId};
use redlock_mio::sim::{Reply, Round, rules};
use redlock_mio::{Error, NodeState, Op, Report, TOKEN_LEN};

use super::{Client, Held, Names, Pursue};

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
    fn finish_fenced(&mut self, mut fenced: Fenced) -> (Result<redlock_mio::Lock, Error>, Waited) {
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
