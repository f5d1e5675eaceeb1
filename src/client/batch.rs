//! Batches: many independent locks in one tick. Every acquire (or
//! release) of the batch goes to every master in the same write, the
//! replies are matched to their rounds by each connection's order, and
//! each round decides on its own.

use std::time::{Duration, Instant};

use super::observe::RoundSpan;
use super::{Inner, Lock, Redlock, RoundEnd, TOKEN_LEN, check_resource};
use crate::commands::Command;
use crate::error::Error;
use crate::rules::{self, Decision, Op, Round};

/// The most locks one batch may take or release (so that a batch of
/// commands, about 130 bytes each for a 64-byte name, stays far below a
/// connection's 64 KiB limit of unwritten bytes).
pub const MAX_BATCH: usize = 256;

impl Redlock {
    /// Tries once to acquire each of `resources` for `ttl`, each its own
    /// lock: all the acquires go to every master in one write per master in
    /// the same tick, and each decides on its own, as
    /// [`try_lock`](Self::try_lock) would. Returns one result per resource,
    /// in order, within one request timeout. A failed one queues its
    /// release everywhere, as `try_lock` does.
    ///
    /// With [`Builder::fencing`](crate::Builder::fencing) the locks are
    /// taken one after another (each needs its own raise round).
    ///
    /// # Errors
    ///
    /// Without asking the masters: [`Error::InvalidResources`] for more
    /// than [`MAX_BATCH`] resources, [`Error::InvalidResource`] or
    /// [`Error::InvalidTtl`] as for `try_lock`. Each element: as for
    /// `try_lock`.
    pub fn try_lock_many<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Result<Vec<Result<Lock, Error>>, Error> {
        if resources.len() > MAX_BATCH {
            return Err(Error::InvalidResources {
                count: resources.len(),
            });
        }
        for resource in resources {
            check_resource(resource.as_ref())?;
        }
        let ttl_ms = self.check_acquire_ttl(ttl)?;
        if self.config.fencing.is_some() {
            return Ok(resources
                .iter()
                .map(|r| self.attempt(r.as_ref(), false, ttl_ms, None))
                .collect());
        }
        let _turn = self.turn();
        let tokens: Vec<[u8; TOKEN_LEN]> = {
            let mut inner = self.inner();
            resources.iter().map(|_| inner.tokens.token()).collect()
        };
        let commands: Vec<Command<'_>> = resources
            .iter()
            .zip(&tokens)
            .map(|(resource, token)| Command {
                op: Op::Acquire,
                resource: resource.as_ref(),
                token,
                ttl_ms,
                eval: false,
                many: false,
                fenced: false,
            })
            .collect();
        let (rounds, ends) = self.run_batch(&commands);
        let mut results = Vec::with_capacity(commands.len());
        for ((command, round), end) in commands.iter().zip(&rounds).zip(&ends) {
            let report = || Box::new(round.report().with_masters(self.masters.clone()));
            let error = match end.result {
                Ok(Decision::Quorum { .. }) => {
                    self.tally_nodes(Op::Acquire, end, round.nodes(), Ok(()));
                    let token = tokens[results.len()];
                    let lock = Lock::new(command.resource, false, token, end.valid_until, None);
                    results.push(Ok(lock));
                    continue;
                }
                Ok(Decision::TooSlow) => Error::TooSlow(report()),
                Ok(Decision::NoQuorum) => self.no_quorum(report(), Error::Contended),
                Err(kind) => Error::Io(kind),
            };
            let release = Command {
                op: Op::Release,
                eval: true,
                ..*command
            };
            self.inner().driver.queue(&release, Instant::now());
            self.tally_nodes(Op::Acquire, end, round.nodes(), Err(&error));
            results.push(Err(error));
        }
        Ok(results)
    }

    /// Releases each of `locks` on every master, all in one write per
    /// master in the same tick, each round deciding on its own as
    /// [`unlock`](Self::unlock) would. Afterwards every lock is expired.
    /// Returns one result per lock, in order, within one request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResources`] for more than [`MAX_BATCH`] locks,
    /// without asking the masters (the locks are unchanged). Each element:
    /// as for `unlock`.
    pub fn unlock_many(&self, locks: &mut [Lock]) -> Result<Vec<Result<(), Error>>, Error> {
        if locks.len() > MAX_BATCH {
            return Err(Error::InvalidResources { count: locks.len() });
        }
        let _turn = self.turn();
        let commands: Vec<Command<'_>> = locks.iter().map(Lock::release).collect();
        let (rounds, ends) = self.run_batch(&commands);
        drop(commands);
        let mut results = Vec::with_capacity(locks.len());
        for ((lock, round), end) in locks.iter_mut().zip(&rounds).zip(&ends) {
            lock.expire(end.started);
            let result = match end.result {
                Ok(Decision::Quorum { .. }) => Ok(()),
                Ok(Decision::TooSlow | Decision::NoQuorum) => {
                    let report = Box::new(round.report().with_masters(self.masters.clone()));
                    Err(self.no_quorum(report, Error::NotHeld))
                }
                Err(kind) => Err(Error::Io(kind)),
            };
            self.tally_nodes(Op::Release, end, round.nodes(), result.as_ref().map(|_| ()));
            results.push(result);
        }
        Ok(results)
    }

    /// Runs one round per command, all at once, for at most the request
    /// timeout; returns the rounds and how each ended.
    fn run_batch(&self, commands: &[Command<'_>]) -> (Vec<Round>, Vec<RoundEnd>) {
        let mut inner = self.inner();
        let Inner { driver, .. } = &mut *inner;
        let now = Instant::now();
        let mut rounds: Vec<Round> = commands
            .iter()
            .map(|command| {
                let ttl = match command.op {
                    Op::Acquire | Op::Extend => Duration::from_millis(command.ttl_ms),
                    _ => Duration::ZERO,
                };
                let drift = rules::drift(ttl, self.config.drift_factor);
                Round::new(
                    command.op,
                    driver.len(),
                    ttl,
                    drift,
                    self.config.request_timeout,
                    now,
                )
            })
            .collect();
        let spans: Vec<RoundSpan> = commands
            .iter()
            .map(|c| RoundSpan::new(c.op, c.resource.len()))
            .collect();
        let result = driver
            .run_many(&mut rounds, commands)
            .map_err(|error| error.kind());
        let ended = Instant::now();
        let ends = rounds
            .iter()
            .zip(spans)
            .map(|(round, span)| RoundEnd {
                result: result.map(|()| round.decision().unwrap_or(Decision::NoQuorum)),
                started: round.started(),
                valid_until: round.valid_until(),
                ended,
                span,
            })
            .collect();
        (rounds, ends)
    }
}
