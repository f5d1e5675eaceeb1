//! Calls that wait for a lock (`lock`, `lock_until`, `lock_all`), run on
//! the caller's thread: the machine of `calls::Pursue` (the attempts, the
//! waits between them, the queue entries, the leave) driven with the
//! engine's rounds and [`Engine::wait_told`](crate::driver::Engine); what
//! the async and embedded front ends share with it (a slot in the table
//! of waits, an attempt's end handed to the machine) is here too.

use std::time::{SystemTime, UNIX_EPOCH};

use smallvec::SmallVec;

use super::builder::Config;
use super::fence::FencedAcquire;
use super::rounds::RoundEnd;
use super::{Lock, Redlock};
use crate::calls::{Fenced, Leave, Pursue, Step, Wait, Waited};
use crate::commands::{Keys, WakeChannel};
use crate::driver::Driver;
use crate::error::Error;
use crate::ids::WaitId;
use crate::rules::Op;
use crate::rules::wait::Terms;

/// Takes a slot in `driver`'s table of waits for a call of a client whose
/// connections hear `channel`; `None` when the table is full. The call's
/// place in the queues is now.
pub(super) fn begin_wait(
    driver: &mut Driver,
    channel: &WakeChannel,
    config: &Config,
) -> Option<Wait> {
    let id = driver.core.waits.begin()?;
    let place = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64);
    let wait = Wait::new(id, channel, place, config.times());
    if wait.is_none() {
        driver.core.waits.end(id);
    }
    wait
}

/// Sends what a call that waits leaves behind (see
/// [`Pursue::leave`]) on `driver`, without waiting, and frees its slot.
pub(super) fn end_wait(driver: &mut Driver, leave: Leave<'_>) {
    if let Some(command) = &leave.command {
        driver.queue(command, crate::clock::now());
    }
    driver.core.waits.end(leave.wait);
}

impl Redlock {
    /// A call that waits for `keys` for `ttl_ms` on `terms`, with a slot in
    /// the table of waits if releases tell this client's waiters and the
    /// table has room (else it waits by its fallback alone).
    pub(super) fn pursuing<K: AsRef<[u8]>>(
        &self,
        keys: Keys<K>,
        ttl_ms: u64,
        terms: Terms,
    ) -> Pursue<K> {
        let wait = self.config.wake.and_then(|channel| {
            begin_wait(&mut self.engine.driver().driver, &channel, &self.config)
        });
        Pursue::new(keys, ttl_ms, terms, self.config.times(), wait)
    }

    /// `call` ends, returned or dropped: it leaves the queues if it may be
    /// queued somewhere (without waiting), and its slot is freed.
    pub(super) fn end_pursuit<K: AsRef<[u8]>>(&self, call: &mut Pursue<K>) {
        if let Some(leave) = call.leave() {
            end_wait(&mut self.engine.driver().driver, leave);
        }
    }

    /// Attempts to acquire `keys` until one attempt wins or `terms` says
    /// to stop, waiting between attempts (see `calls::Pursue`).
    pub(super) fn pursue(
        &self,
        keys: Keys<&[u8]>,
        ttl_ms: u64,
        terms: Terms,
    ) -> Result<Lock, Error> {
        let mut call = self.pursuing(keys, ttl_ms, terms);
        loop {
            match call.poll() {
                Step::Attempt { arm, cap } => {
                    self.arm(arm);
                    if self.config.fencing.is_some() {
                        let (waited, results) = {
                            let mut attempt = self.fenced_waiting(call.fenced(), cap);
                            self.run_fenced(&mut attempt);
                            (attempt.waited.take(), attempt.finish(self))
                        };
                        self.fence_attempted(&mut call, waited, results);
                    } else {
                        let token = self.tokens().token();
                        let end = self.round(&call.command(token), cap);
                        self.attempted(&mut call, end);
                    }
                }
                Step::Wait { told, until } => {
                    let told = match told {
                        Some(id) => self.engine.wait_told(id, until),
                        None => {
                            let now = crate::clock::now();
                            std::thread::sleep(until.saturating_duration_since(now));
                            false
                        }
                    };
                    self.resume(&mut call, told);
                }
                Step::InFlight | Step::Done => break,
            }
        }
        self.end_pursuit(&mut call);
        call.result().unwrap_or_else(|| Err(self.busy()))
    }

    /// Before an attempt of a call that waits: forgets what told wait
    /// `arm` so far.
    pub(super) fn arm(&self, arm: Option<WaitId>) {
        if let Some(id) = arm {
            let now = crate::clock::now();
            self.engine.driver().driver.core.waits.arm(id, now);
        }
    }

    /// `call`'s wait is over, told or not: the next attempt (or the end);
    /// the last error's report goes back for the next one.
    pub(super) fn resume<K: AsRef<[u8]>>(&self, call: &mut Pursue<K>, told: bool) {
        let spent = if told {
            call.handle_told(crate::clock::now())
        } else {
            call.handle_timeout()
        };
        if let Some(error) = spent {
            self.recycle(error);
        }
    }

    /// The fenced attempt of a call that waits, made with `fenced`, no
    /// round running past `cap`.
    pub(super) fn fenced_waiting<'p>(
        &self,
        fenced: Fenced<'p>,
        cap: Option<std::time::Instant>,
    ) -> FencedAcquire<'p> {
        let (resource, many) = fenced.keys.parts();
        let attempt = FencedAcquire::new(self, [resource], many, fenced.ttl_ms, cap);
        match fenced.queue {
            Some(queue) => attempt.waiting(queue),
            None => attempt,
        }
    }

    /// `call`'s plain attempt ended with `end`: the machine reads it (the
    /// lock, or the error and the release, queued here without waiting),
    /// and the attempt is counted.
    pub(super) fn attempted<K: AsRef<[u8]>>(
        &self,
        call: &mut Pursue<K>,
        end: Result<RoundEnd, Error>,
    ) {
        let now = crate::clock::now();
        let draw = || self.tokens().unit();
        let end = match end {
            Ok(end) => end,
            Err(error) => return call.handle_unsent(error, draw, now),
        };
        let attempted =
            call.handle_attempt(&end.round, end.result, || self.report(&end), draw, now);
        let mut engine = self.engine.driver();
        if let Some(release) = &attempted.release {
            engine.driver.queue(release, now);
        }
        if let Some(granted) = attempted.granted {
            engine
                .driver
                .core
                .waits
                .handle_granted(granted.wait, granted.masters);
        }
        drop(engine);
        self.tally(Op::Acquire, &end, attempted.outcome);
    }

    /// `call`'s fenced attempt ended with `results`, its acquire round as
    /// `waited` says: the machine reads it.
    pub(super) fn fence_attempted<K: AsRef<[u8]>>(
        &self,
        call: &mut Pursue<K>,
        waited: Waited,
        results: SmallVec<[Result<Lock, Error>; 1]>,
    ) {
        let result = results
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(self.busy()));
        let draw = || self.tokens().unit();
        if let Some(granted) = call.handle_fenced(waited, result, draw, crate::clock::now()) {
            self.engine
                .driver()
                .driver
                .core
                .waits
                .handle_granted(granted.wait, granted.masters);
        }
    }
}
