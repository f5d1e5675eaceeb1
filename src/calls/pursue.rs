//! The acquire that waits (`lock`, `lock_until`, `lock_all`, their async
//! forms, the embedded `lock_until`): [`Pursue`], attempts until one wins
//! or the call's terms say to stop, with the waits between them, as one
//! machine free of I/O that every front end drives with its own I/O.
//!
//! While releases tell waiters, a call holds a slot of the client's table
//! of waits for its whole length (its [`Wait`]): each attempt is an
//! acquire that waits ([`WAIT_ACQUIRE_SCRIPT`](crate::scripts::WAIT_ACQUIRE_SCRIPT)),
//! which queues the caller where it is refused under the slot's id, and
//! between attempts the caller waits until a quorum of masters has told
//! it (a release handed it the lock; the masters whose grant a failed
//! attempt had count as having told it, see [`Granted`]) or until its
//! fallback ([`Pursuit`], [`free_in`]). When the call ends, returned or
//! dropped, its queue entries go
//! ([`LEAVE_SCRIPT`](crate::scripts::LEAVE_SCRIPT)), unless no master its
//! attempts reached refused it or failed (one that granted took them).
//!
//! The front end asks [`Pursue::poll`] what to do: make an attempt (a
//! plain one, whose [`command`](Pursue::command) it submits and whose
//! round it hands to [`handle_attempt`](Pursue::handle_attempt), or a
//! fenced one, run by the fenced machine with [`fenced`](Pursue::fenced)'s
//! queue and handed to [`handle_fenced`](Pursue::handle_fenced)), wait
//! until told or until an instant ([`handle_told`](Pursue::handle_told),
//! [`handle_timeout`](Pursue::handle_timeout)), or stop with
//! [`result`](Pursue::result); at the end, or when dropped, it sends
//! [`leave`](Pursue::leave)'s command and frees its slot.

use std::io;
use std::time::{Duration, Instant};

use super::acquire::{Acquired, Claim};
use super::wait::{Times, Wait};
use crate::client::Lock;
use crate::commands::{Command, Keys, TOKEN_LEN};
use crate::error::Error;
use crate::ids::WaitId;
use crate::rules::wait::{Entries, Next, Pursuit, Terms};
use crate::rules::{self, Decision, NodeState, Report, Round, free_in};

/// How a fenced attempt's acquire round ended for a call that waits: the
/// round, and when the keys that refused it expire (`free_in`).
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub type Waited = Option<(Round, Option<Duration>)>;

/// One call that waits for a lock of `keys` (their bytes: `K`), from its
/// start to its end (see the module docs).
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Pursue<K> {
    keys: Keys<K>,
    ttl_ms: u64,
    pursuit: Pursuit,
    times: Times,
    /// Its slot in the table of waits and place in the masters' queues, if
    /// releases tell this client's waiters (else it waits by its fallback
    /// alone).
    wait: Option<Wait>,
    /// The token of the plain attempt under way or last made.
    token: [u8; TOKEN_LEN],
    /// The wait's entries before the attempt under way: what they stay if
    /// it cannot go out.
    before: Entries,
    state: State,
    /// [`leave`](Pursue::leave) was asked: the wait is the front end's to
    /// have freed.
    left: bool,
}

impl<K: AsRef<[u8]>> std::fmt::Debug for Pursue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pursue")
            .field("wait", &self.wait_id())
            .finish_non_exhaustive()
    }
}

/// Where a call is.
enum State {
    /// An attempt is due now.
    Ready,
    /// An attempt is under way.
    Attempting,
    /// Between attempts, after one that failed with `error`: until told,
    /// or until `until`.
    Waiting { until: Instant, error: Error },
    /// Over: what the call returns, until taken.
    Done(Option<Result<Lock, Error>>),
}

/// What a call that waits does next ([`Pursue::poll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub enum Step {
    /// Make an attempt now, its round cut short at `cap`: first forget
    /// what told wait `arm` so far (only what comes after counts for the
    /// next wait), then send [`Pursue::command`] (or a fenced attempt with
    /// [`Pursue::fenced`]).
    Attempt {
        /// The wait to arm, if the call has one.
        arm: Option<WaitId>,
        /// When the attempt's round must end at the latest.
        cap: Option<Instant>,
    },
    /// An attempt is under way: its end goes to
    /// [`handle_attempt`](Pursue::handle_attempt) or
    /// [`handle_fenced`](Pursue::handle_fenced).
    InFlight,
    /// Wait until wait `told` is told (then
    /// [`handle_told`](Pursue::handle_told)), or until `until`, sooner if
    /// a master told it a time to try at (then
    /// [`handle_timeout`](Pursue::handle_timeout)).
    Wait {
        /// The wait that may be told, if the call has one.
        told: Option<WaitId>,
        /// When the wait ends if nobody tells it.
        until: Instant,
    },
    /// Over: [`result`](Pursue::result) is what the call returns.
    Done,
}

/// How a plain attempt ended ([`Pursue::handle_attempt`]).
#[derive(Debug)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Attempted<'p> {
    /// After a failed attempt, the release to queue on every master the
    /// command went out to, without waiting.
    pub release: Option<Command<'p>>,
    /// The attempt's outcome, to count.
    pub outcome: Result<(), &'p Error>,
    /// After a failed attempt, the masters to count as having told the
    /// wait ([`Granted`]).
    pub granted: Option<Granted>,
}

/// The masters whose grant a failed attempt of a call with a wait had,
/// where another master refused it: each counts as having told the wait
/// before the caller waits ([`Waits::handle_granted`]). The key there is
/// free for the caller (a reservation for it that the attempt took, or a
/// key nobody held), and no release tells the caller there: the grant
/// took its queue entry. Among them may be the masters whose tell came
/// before the attempt was armed, and was forgotten with it.
///
/// [`Waits::handle_granted`]: crate::flights::Waits::handle_granted
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Granted {
    /// The wait.
    pub wait: WaitId,
    /// The masters that granted, bit `i` for master `i` (masters past the
    /// 64th in bit 63, as the table of waits counts them).
    pub masters: u64,
}

/// A fenced attempt's arguments ([`Pursue::fenced`]).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Fenced<'p> {
    /// The keys it acquires.
    pub keys: Keys<&'p [u8]>,
    /// The TTL, in milliseconds.
    pub ttl_ms: u64,
    /// The queue member, place and margin its acquire queues the caller
    /// with, if the call has a wait.
    pub queue: Option<(&'p [u8], u64, u64)>,
}

/// What a call leaves behind when it ends, returned or dropped
/// ([`Pursue::leave`]).
#[derive(Debug)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Leave<'p> {
    /// The slot of the table of waits to free.
    pub wait: WaitId,
    /// The command that takes the caller off the queues, to queue on every
    /// master without waiting, if a master may hold an entry of it.
    pub command: Option<Command<'p>>,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<K: AsRef<[u8]>> Pursue<K> {
    /// A call that acquires `keys` (checked before) for `ttl_ms` on
    /// `terms`, in a client with these `times`, holding `wait` if it got
    /// one: its first attempt is due at once.
    pub fn new(
        keys: Keys<K>,
        ttl_ms: u64,
        terms: Terms,
        times: Times,
        wait: Option<Wait>,
    ) -> Pursue<K> {
        Pursue {
            keys,
            ttl_ms,
            pursuit: Pursuit::new(terms, times.request_timeout),
            times,
            wait,
            token: [0; TOKEN_LEN],
            before: Entries::default(),
            state: State::Ready,
            left: false,
        }
    }

    /// The keys it acquires.
    pub(crate) fn keys(&self) -> Keys<&[u8]> {
        match &self.keys {
            Keys::One(bytes) => Keys::One(bytes.as_ref()),
            Keys::Packed(bytes) => Keys::Packed(bytes.as_ref()),
        }
    }

    /// Its slot in the table of waits, if it has one and has not left.
    pub fn wait_id(&self) -> Option<WaitId> {
        self.wait
            .as_ref()
            .filter(|_| !self.left)
            .map(|wait| wait.id)
    }

    /// What to do next.
    pub fn poll(&self) -> Step {
        match &self.state {
            State::Ready => Step::Attempt {
                arm: self.wait_id(),
                cap: self.pursuit.deadline(),
            },
            State::Attempting => Step::InFlight,
            State::Waiting { until, .. } => Step::Wait {
                told: self.wait_id(),
                until: *until,
            },
            State::Done(_) => Step::Done,
        }
    }

    /// Starts a plain attempt by `token`: the command to submit (queued
    /// where it is refused, if the call has a wait). Until its round says
    /// otherwise, any master may queue the caller (a call dropped
    /// meanwhile leaves).
    pub fn command(&mut self, token: [u8; TOKEN_LEN]) -> Command<'_> {
        self.start();
        self.token = token;
        let keys = self.keys();
        match &self.wait {
            Some(wait) => wait.acquire(keys, &self.token, self.ttl_ms),
            None => Command::acquire(keys, &self.token, self.ttl_ms),
        }
    }

    /// Starts a fenced attempt: what the fenced machine is made with.
    pub fn fenced(&mut self) -> Fenced<'_> {
        self.start();
        Fenced {
            keys: self.keys(),
            ttl_ms: self.ttl_ms,
            queue: self.wait.as_ref().map(Wait::queue),
        }
    }

    /// An attempt goes out.
    fn start(&mut self) {
        self.state = State::Attempting;
        if let Some(wait) = &mut self.wait {
            self.before = wait.entries;
            wait.entries.attempting();
        }
    }

    /// The plain attempt's round ended as `round` with `decision`
    /// ([`decision`](super::decision)), at `now`: the lock, or the error
    /// (`report` gives the round's report, asked for errors only) and the
    /// release that follows it, after which the pursuit decides, with a
    /// retry delay and a jitter drawn from `draw` (twice, in that order,
    /// after a failure only).
    pub fn handle_attempt(
        &mut self,
        round: &Round,
        decision: Result<Decision, io::ErrorKind>,
        report: impl FnOnce() -> Box<Report>,
        draw: impl FnMut() -> f64,
        now: Instant,
    ) -> Attempted<'_> {
        if let Some(wait) = &mut self.wait {
            wait.entries.note(round);
        }
        let claim = Claim::new(self.keys(), &self.token);
        let acquired = match claim.handle(round, decision, report) {
            Acquired::Won(lock) => Ok(lock),
            Acquired::Lost { error, .. } => Err(error),
        };
        let release = match acquired {
            Ok(lock) => {
                self.state = State::Done(Some(Ok(lock)));
                None
            }
            Err(error) => {
                self.failed(error, free_in(round), draw, now);
                Some(round)
            }
        };
        let this = &*self;
        let claim = Claim::new(this.keys(), &this.token);
        Attempted {
            release: release.map(|round| claim.release(Some(round))),
            outcome: this.error().map_or(Ok(()), Err),
            granted: release.and_then(|round| this.granted(round)),
        }
    }

    /// The masters to count as having told the wait after `round`, a
    /// failed attempt ([`Granted`]): none unless a master refused it
    /// (else the caller is queued nowhere, and waits for no tell).
    fn granted(&self, round: &Round) -> Option<Granted> {
        let wait = self.wait_id()?;
        let states = round.nodes();
        if !states.contains(&NodeState::Refused) {
            return None;
        }
        let masters = states
            .iter()
            .enumerate()
            .filter(|(_, state)| **state == NodeState::Ok)
            .fold(0, |mask, (node, _)| mask | 1 << node.min(63));
        (masters != 0).then_some(Granted { wait, masters })
    }

    /// The plain attempt's round is gone from the table before it was
    /// read, at `now`: its outcome is unknown, and its release goes to
    /// every master (returned, to queue); the pursuit decides as after
    /// any failure.
    pub fn handle_lost(&mut self, draw: impl FnMut() -> f64, now: Instant) -> Command<'_> {
        self.failed(super::unknown(), None, draw, now);
        Claim::new(self.keys(), &self.token).release(None)
    }

    /// The attempt could not go out: `error` (the cap of rounds in
    /// flight), at `now`; the queues hold what they held before it, and
    /// the pursuit decides.
    pub(crate) fn handle_unsent(&mut self, error: Error, draw: impl FnMut() -> f64, now: Instant) {
        if let Some(wait) = &mut self.wait {
            wait.entries = self.before;
        }
        self.failed(error, None, draw, now);
    }

    /// The fenced attempt ended with `result`, at `now`, its acquire round
    /// having ended as `waited` says (for a caller that waits: the round,
    /// and when the keys that refused it expire); the fenced machine has
    /// released what it must. The pursuit decides as after a plain one.
    /// Returns, after a failure, the masters to count as having told the
    /// wait ([`Granted`]).
    pub fn handle_fenced(
        &mut self,
        waited: Waited,
        result: Result<Lock, Error>,
        draw: impl FnMut() -> f64,
        now: Instant,
    ) -> Option<Granted> {
        let (free_in, round) = match (&mut self.wait, waited) {
            (Some(wait), Some((round, free_in))) => {
                wait.entries.note(&round);
                (free_in, Some(round))
            }
            _ => (None, None),
        };
        match result {
            Ok(lock) => {
                self.state = State::Done(Some(Ok(lock)));
                None
            }
            Err(error) => {
                self.failed(error, free_in, draw, now);
                round.and_then(|round| self.granted(&round))
            }
        }
    }

    /// An attempt failed with `error` at `now` (the keys that refused it
    /// expiring in `free_in`, if known): the pursuit says whether it
    /// waits.
    fn failed(
        &mut self,
        error: Error,
        free_in: Option<Duration>,
        mut draw: impl FnMut() -> f64,
        now: Instant,
    ) {
        let t = self.times;
        let delay = rules::retry_delay(t.retry_delay, t.retry_jitter, draw());
        let unit = draw();
        let next = self
            .pursuit
            .after_failure(error.is_retryable(), free_in, delay, unit, now);
        self.state = match next {
            Next::Stop => State::Done(Some(Err(error))),
            Next::Until(until) => State::Waiting { until, error },
        };
    }

    /// The wait was told at `now` (a release handed the caller the lock):
    /// the next attempt is due, unless it could end past the deadline
    /// (the call ends with the last error). Returns the last error if it
    /// is not the outcome (its report's box may serve the next one).
    pub fn handle_told(&mut self, now: Instant) -> Option<Error> {
        if self.pursuit.may_attempt(now) {
            return self.handle_timeout();
        }
        if let Some(error) = self.handle_timeout() {
            self.state = State::Done(Some(Err(error)));
        }
        None
    }

    /// The wait is over, nobody having told it: the next attempt is due.
    /// Returns the last error, which is not the outcome (its report's box
    /// may serve the next one).
    pub fn handle_timeout(&mut self) -> Option<Error> {
        match std::mem::replace(&mut self.state, State::Ready) {
            State::Waiting { error, .. } => Some(error),
            other => {
                self.state = other;
                None
            }
        }
    }

    /// The error of the last attempt, if it failed.
    fn error(&self) -> Option<&Error> {
        match &self.state {
            State::Waiting { error, .. } | State::Done(Some(Err(error))) => Some(error),
            _ => None,
        }
    }

    /// What the call returns, once it is over ([`Step::Done`]), once.
    pub fn result(&mut self) -> Option<Result<Lock, Error>> {
        match &mut self.state {
            State::Done(result) => result.take(),
            _ => None,
        }
    }

    /// What the call leaves behind, when it ends or is dropped at any
    /// point (an attempt under way counts as queued), once: its slot to
    /// free and the leave to send, if it has a wait.
    pub fn leave(&mut self) -> Option<Leave<'_>> {
        if self.left {
            return None;
        }
        self.left = true;
        let this = &*self;
        let wait = this.wait.as_ref()?;
        Some(Leave {
            wait: wait.id,
            command: wait.leave(this.keys()),
        })
    }
}

#[cfg(test)]
mod tests;
