//! Calls that wait for a lock (`lock`, `lock_until`, `lock_all` and their
//! async forms): attempts until one wins, with the waits between them.
//!
//! The decisions are [`Pursuit`]'s, free of I/O. While releases tell
//! waiters ([`Builder::wake_on_release`](crate::Builder::wake_on_release)),
//! a call holds a slot of the client's table of waits for its whole
//! length: each attempt is an acquire that waits
//! ([`WAIT_ACQUIRE_SCRIPT`](crate::scripts::WAIT_ACQUIRE_SCRIPT)), which
//! queues the caller where it is refused under the slot's id, and between
//! attempts the caller sleeps until a quorum of masters has told it (a
//! release handed it the lock) or until its fallback. When the call ends,
//! its queue entries go ([`LEAVE_SCRIPT`](crate::scripts::LEAVE_SCRIPT)),
//! unless no master its last attempt reached refused it or failed (one
//! that granted took them).

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use smallvec::SmallVec;

use super::builder::Config;
use super::fence::FencedAcquire;
use super::rounds::RoundEnd;
use super::{Lock, Redlock};
use crate::calls::Claim;
use crate::commands::{Command, Keys, WakeChannel};
use crate::driver::Driver;
use crate::error::Error;
use crate::rules::wait::{Entries, Next, Pursuit, Terms};
use crate::rules::{self, Round};

/// Room for a queue member: `<window ms>|<wait id>|<channel>`.
const MEMBER: usize = 80;

/// The most a waiter's reservation window may be.
const MAX_WINDOW: Duration = Duration::from_secs(10);

/// The least a waiter's reservation window may be: a release's hand-off
/// must reach a waiter on a busy machine and its attempt come back.
const MIN_WINDOW: Duration = Duration::from_millis(50);

/// A call's place in the client's table of waits and in the masters'
/// queues.
// Public for the simulator's front end alone, which re-exports it.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Wait {
    /// Its slot's id: what releases publish to tell it.
    pub(super) id: u64,
    member: [u8; MEMBER],
    member_len: usize,
    /// When it began to wait, in microseconds of the wall clock: its place
    /// in the queues, the same on every master.
    place: u64,
    /// How long its queue entries outlive the keys that block it, in ms.
    margin_ms: u64,
    /// Whether a master may hold an entry of it: the wait leaves the
    /// queues when it ends.
    pub(super) entries: Entries,
}

impl Wait {
    /// The member, as the scripts read it.
    fn member(&self) -> &[u8] {
        &self.member[..self.member_len]
    }

    /// The member, place and margin, as a fenced acquire that waits takes
    /// them.
    pub(super) fn queue(&self) -> (&[u8], u64, u64) {
        (self.member(), self.place, self.margin_ms)
    }

    /// The acquire that waits, for `keys` with `token`.
    pub(super) fn acquire<'a>(
        &'a self,
        keys: Keys<&'a [u8]>,
        token: &'a [u8],
        ttl_ms: u64,
    ) -> Command<'a> {
        Command::wait_acquire(keys, token, ttl_ms, self.queue())
    }
}

impl Wait {
    /// Takes a slot in `driver`'s table of waits for a call of a client
    /// whose connections hear `channel`; `None` when the table is full.
    /// The call's place in the queues is now.
    pub(super) fn begin(
        driver: &mut Driver,
        channel: &WakeChannel,
        config: &Config,
    ) -> Option<Wait> {
        let id = driver.begin_wait()?;
        let place = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as u64);
        let times = (
            config.request_timeout,
            config.retry_delay,
            config.retry_jitter,
        );
        let wait = Wait::new(id, channel, place, times);
        if wait.is_none() {
            driver.end_wait(id);
        }
        wait
    }

    /// The wait of slot `id` of a client whose connections hear `channel`,
    /// which began to wait at `place`, for a client with these request
    /// timeout, retry delay and jitter (`times`): its queue member and
    /// margin; `None` if the member does not fit.
    pub(super) fn new(
        id: u64,
        channel: &WakeChannel,
        place: u64,
        times: (Duration, Duration, Duration),
    ) -> Option<Wait> {
        let (request_timeout, retry_delay, retry_jitter) = times;
        let window = (request_timeout * 4).clamp(MIN_WINDOW, MAX_WINDOW);
        let mut member = [0; MEMBER];
        let mut out = &mut member[..];
        write!(out, "{}|{id}|", window.as_millis())
            .and_then(|()| out.write_all(channel))
            .ok()?;
        let member_len = MEMBER - out.len();
        let margin = window + retry_delay + retry_jitter + request_timeout;
        Some(Wait {
            id,
            member,
            member_len,
            place,
            margin_ms: margin.as_millis() as u64,
            entries: Entries::default(),
        })
    }

    /// Ends the wait: leaves the queues of `keys` on every master if it
    /// may be queued somewhere (queued on `driver`, without waiting), and
    /// frees its slot.
    pub(super) fn end(self, driver: &mut Driver, keys: Keys<&[u8]>) {
        if let Some(leave) = self.leave(keys) {
            driver.queue(&leave, crate::clock::now());
        }
        driver.end_wait(self.id);
    }

    /// The command that takes it off the queues of `keys` when its call
    /// ends, if a master may hold an entry of it.
    pub(super) fn leave<'a>(&'a self, keys: Keys<&'a [u8]>) -> Option<Command<'a>> {
        self.entries
            .queued()
            .then(|| Command::leave(keys, self.member()).with_script())
    }
}

impl Redlock {
    /// A slot in the table of waits, if releases tell this client's
    /// waiters and the table has room (else the call waits by its
    /// fallback alone).
    pub(super) fn begin_wait(&self) -> Option<Wait> {
        let channel = self.config.wake?;
        Wait::begin(&mut self.engine.driver().driver, &channel, &self.config)
    }

    /// Ends `wait`: leaves the queues of `keys` on every master if it may
    /// be queued somewhere (without waiting), and frees its slot.
    pub(super) fn end_wait(&self, wait: Wait, keys: Keys<&[u8]>) {
        wait.end(&mut self.engine.driver().driver, keys);
    }

    /// Forgets what told `wait` so far: only what comes after counts for
    /// the next wait.
    pub(super) fn arm(&self, wait: &Wait) {
        self.engine.driver().driver.arm_wait(wait.id);
    }

    /// A pursuit of a lock on these terms.
    pub(super) fn pursuit(&self, terms: Terms) -> Pursuit {
        Pursuit::new(terms, self.config.request_timeout)
    }

    /// After a failed attempt that ended with `error` at `now`: what the
    /// pursuit does next, with a retry delay and a jitter drawn now.
    pub(super) fn next(
        &self,
        pursuit: &mut Pursuit,
        error: &Error,
        free_in: Option<Duration>,
        now: Instant,
    ) -> Next {
        let delay = self.retry_delay();
        let unit = self.tokens().unit();
        pursuit.after_failure(error.is_retryable(), free_in, delay, unit, now)
    }

    /// Attempts to acquire `keys` until one attempt wins or `terms` says
    /// to stop, waiting between attempts (see the module docs).
    pub(super) fn pursue(
        &self,
        keys: Keys<&[u8]>,
        ttl_ms: u64,
        terms: Terms,
    ) -> Result<Lock, Error> {
        let mut pursuit = self.pursuit(terms);
        let mut wait = self.begin_wait();
        let result = loop {
            let (result, free_in) = match wait.as_mut() {
                Some(wait) => self.attempt_waiting(keys, ttl_ms, wait, pursuit.deadline()),
                None => {
                    let (resource, many) = keys.parts();
                    (
                        self.attempt(resource, many, ttl_ms, pursuit.deadline()),
                        None,
                    )
                }
            };
            let error = match result {
                Ok(lock) => break Ok(lock),
                Err(error) => error,
            };
            let now = crate::clock::now();
            let at = match self.next(&mut pursuit, &error, free_in, now) {
                Next::Stop => break Err(error),
                Next::Until(at) => at,
            };
            let told = match &wait {
                Some(wait) => self.engine.wait_told(wait.id, at),
                None => {
                    std::thread::sleep(at.saturating_duration_since(now));
                    false
                }
            };
            if told && !pursuit.may_attempt(crate::clock::now()) {
                break Err(error);
            }
            self.recycle(error);
        };
        if let Some(wait) = wait {
            self.end_wait(wait, keys);
        }
        result
    }

    /// One attempt of an acquire that waits, its round cut short at
    /// `deadline` if one is given; with, when it failed because the keys
    /// are held, when they expire ([`rules::free_in`]).
    fn attempt_waiting(
        &self,
        keys: Keys<&[u8]>,
        ttl_ms: u64,
        wait: &mut Wait,
        deadline: Option<Instant>,
    ) -> (Result<Lock, Error>, Option<Duration>) {
        self.ready_attempt(wait);
        if self.config.fencing.is_some() {
            let (resource, many) = keys.parts();
            let (waited, results) = {
                let attempt = FencedAcquire::new(self, [resource], many, ttl_ms, deadline);
                let mut attempt = attempt.waiting(wait.queue());
                self.run_fenced(&mut attempt);
                (attempt.waited.take(), attempt.finish(self))
            };
            return self.fence_waited(wait, waited, results);
        }
        let token = self.tokens().token();
        let end = self.round(&wait.acquire(keys, &token, ttl_ms), deadline);
        self.waited(Claim::new(keys, &token), wait, end)
    }

    /// After a fenced attempt of an acquire that waits, its acquire round
    /// having ended as `waited` says (the round, and when the keys that
    /// refused it expire): the lock or the error, and when the keys
    /// expire.
    pub(super) fn fence_waited(
        &self,
        wait: &mut Wait,
        waited: Option<(Round, Option<Duration>)>,
        results: SmallVec<[Result<Lock, Error>; 1]>,
    ) -> (Result<Lock, Error>, Option<Duration>) {
        let result = results
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(self.busy()));
        match waited {
            Some((round, free_in)) => {
                wait.entries.note(&round);
                (result, free_in)
            }
            None => (result, None),
        }
    }

    /// Before an attempt of an acquire that waits: forgets what told
    /// `wait` so far, and counts it as queued until its round says
    /// otherwise (a call dropped meanwhile leaves its queues).
    pub(super) fn ready_attempt(&self, wait: &mut Wait) {
        self.arm(wait);
        wait.entries.attempting();
    }

    /// After an attempt of an acquire that waits (of `claim`), whose round
    /// ended with `end`: the lock or the error, and when the keys that
    /// refused it expire ([`rules::free_in`]).
    pub(super) fn waited(
        &self,
        claim: Claim<'_>,
        wait: &mut Wait,
        end: Result<RoundEnd, Error>,
    ) -> (Result<Lock, Error>, Option<Duration>) {
        let end = match end {
            Ok(end) => end,
            Err(error) => return (Err(error), None),
        };
        wait.entries.note(&end.round);
        let free_in = rules::free_in(&end.round);
        (self.acquired(claim, &end), free_in)
    }
}
