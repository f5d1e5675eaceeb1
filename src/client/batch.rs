//! Batches: many independent locks in one tick. Every acquire (or
//! release) of the batch goes to every master in the same write, the
//! replies are matched to their rounds by each connection's order, and
//! each round decides on its own.

use std::time::Duration;

use super::{Lock, Redlock, TOKEN_LEN};
use crate::calls::{Acquire, check_resource};
use crate::commands::{Command, Keys};
use crate::error::Error;

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
    /// release, as `try_lock` does.
    ///
    /// With [`Builder::fencing`](crate::Builder::fencing) the batch takes
    /// the rounds of one fenced acquire, each holding every lock: all the
    /// acquires in one tick, then the raises of the locks won in one tick
    /// (after a read and a sync of the counters when due), so it returns
    /// within the bound of one fenced [`try_lock`](Self::try_lock) (see
    /// [`Redlock`]'s time bounds). Each lock's fence is larger than those
    /// of the earlier holders of its resource; the fences of one batch's
    /// locks are in no particular order.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::Redlock;
    ///
    /// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
    /// let jobs = ["job:1", "job:2", "job:3"];
    /// let mut won: Vec<_> = redlock.try_lock_many(&jobs, Duration::from_secs(30))?
    ///     .into_iter()
    ///     .filter_map(Result::ok) // the others are someone else's
    ///     .collect();
    /// // ... run the jobs won ...
    /// for outcome in redlock.unlock_many(&mut won)? {
    ///     outcome?;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
        let ttl_ms = self.check_ttl(ttl)?;
        if self.config.fencing.is_some() {
            let keys = resources.iter().map(AsRef::as_ref);
            return Ok(self.fenced_attempt(keys, false, ttl_ms, None).into_vec());
        }
        let tokens: Vec<[u8; TOKEN_LEN]> = {
            let mut source = self.tokens();
            resources.iter().map(|_| source.token()).collect()
        };
        let calls: Vec<Acquire<'_>> = resources
            .iter()
            .zip(tokens)
            .map(|(resource, token)| Acquire::new(Keys::One(resource.as_ref()), token, ttl_ms))
            .collect();
        let commands: Vec<Command<'_>> = calls.iter().map(Acquire::command).collect();
        let ends = self.rounds(&commands, None);
        let mut results = Vec::with_capacity(commands.len());
        for (call, end) in calls.iter().zip(ends) {
            let end = match end {
                Ok(end) => end,
                Err(error) => {
                    // Not started: nothing was sent.
                    results.push(Err(error));
                    continue;
                }
            };
            results.push(self.acquired(call.claim(), &end));
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
        let commands: Vec<Command<'_>> = locks.iter().map(Lock::release).collect();
        let ends = self.rounds(&commands, None);
        drop(commands);
        let mut results = Vec::with_capacity(locks.len());
        for (lock, end) in locks.iter_mut().zip(ends) {
            let end = match end {
                Ok(end) => end,
                Err(error) => {
                    // Not started: the lock is unchanged.
                    results.push(Err(error));
                    continue;
                }
            };
            results.push(self.unlocked(lock, &end));
        }
        Ok(results)
    }
}
