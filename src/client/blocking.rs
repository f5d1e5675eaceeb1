//! The calls on one lock that most callers need, blocking, with the
//! builder: in a module of their own, declared first, so that docs.rs
//! lists them first among `Redlock`'s methods.

use std::time::{Duration, Instant};

use super::{Builder, Lock, LockGuard, Redlock, waited};
use crate::calls::Extend;
use crate::commands::Keys;
use crate::error::Error;
use crate::rules::Op;
use crate::rules::wait::Terms;

impl Redlock {
    /// Starts configuring a client for these masters: each a
    /// `redis://[[user]:password@]host[:port][/db]` or
    /// `unix:///path[?db=N&user=U&pass=P]` address.
    pub fn builder<I, S>(servers: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::new(servers.into_iter().map(|s| s.as_ref().to_owned()).collect())
    }

    /// Tries once to acquire `resource` for `ttl`. Returns within one
    /// request timeout.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::{Error, Redlock};
    ///
    /// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
    /// match redlock.try_lock("cron:cleanup", Duration::from_secs(60)) {
    ///     Ok(mut lock) => { /* ... run the job ... */ redlock.unlock(&mut lock)? }
    ///     Err(Error::Contended(_)) => println!("another host runs it"),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Contended`], [`Error::Unavailable`] or [`Error::TooSlow`]
    /// when no lock was won (its release is on its way to every master), or
    /// a typed error for a bad TTL or resource.
    pub fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.check(resource, ttl)?;
        self.attempt(resource, false, ttl_ms, None)
    }

    /// Acquires `resource` for `ttl`, trying again up to the configured
    /// retry count. Between attempts it waits until the release that frees
    /// the lock hands it over and tells it (see
    /// [`Builder::wake_on_release`]), until the holder's key expires, or at
    /// most a random retry delay, whichever comes first.
    ///
    /// # Errors
    ///
    /// The last attempt's error, as for [`try_lock`](Self::try_lock):
    /// [`Error::Contended`] when another client still held the resource
    /// at the last attempt. A configuration error
    /// ([`Error::Misconfigured`]) ends the attempts at once.
    pub fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.check(resource, ttl)?;
        let terms = Terms::Retries(self.config.retry_count);
        let started = crate::clock::now();
        waited(self.pursue(Keys::One(resource), ttl_ms, terms), started)
    }

    /// Acquires `resource` for `ttl`, trying again until `deadline`, and
    /// returns by `deadline`.
    ///
    /// Between attempts it waits until the release that frees the lock
    /// hands it over and tells it (waiters are served first come, first
    /// served; see [`Builder::wake_on_release`]), or until the holder's key
    /// expires, or, when neither is known, a random retry delay. Every
    /// attempt waits for the masters until its request timeout or the
    /// deadline, whichever comes first, and the last one starts when its
    /// full request timeout still fits before the deadline.
    ///
    /// ```no_run
    /// use std::time::{Duration, Instant};
    /// use redlock_mio::Redlock;
    ///
    /// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
    /// // Wait for the lock at most 2 s.
    /// let deadline = Instant::now() + Duration::from_secs(2);
    /// let mut lock = redlock.lock_until("orders:42", Duration::from_secs(10), deadline)?;
    /// redlock.unlock(&mut lock)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::DeadlinePassed`] without asking the masters if `deadline`
    /// is not in the future; else the last attempt's error, as for
    /// [`try_lock`](Self::try_lock): [`Error::Contended`] when another
    /// client still held the resource at the deadline (its report says
    /// how long the call waited).
    pub fn lock_until(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let (ttl_ms, deadline, started) = self.check_until(resource, ttl, deadline)?;
        let result = self.pursue(Keys::One(resource), ttl_ms, Terms::Deadline(deadline));
        waited(result, started)
    }

    /// Acquires `resource` as [`lock`](Self::lock) does and returns a guard
    /// that releases it when dropped.
    ///
    /// # Errors
    ///
    /// As for [`lock`](Self::lock).
    pub fn lock_guard(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<LockGuard<'_>, Error> {
        let lock = self.lock(resource, ttl)?;
        Ok(LockGuard::new(self, lock))
    }

    /// Acquires `resource` as [`lock_until`](Self::lock_until) does,
    /// waiting for it until `deadline`, and returns a guard that releases
    /// it when dropped: "wait up to this long, release however the scope
    /// ends" in one call.
    ///
    /// ```no_run
    /// use std::time::{Duration, Instant};
    /// use redlock_mio::{Error, Redlock};
    ///
    /// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
    /// let deadline = Instant::now() + Duration::from_millis(500);
    /// match redlock.lock_guard_until("orders:42", Duration::from_secs(2), deadline) {
    ///     Ok(guard) => {
    ///         // ... work while guard.validity() covers the next step; a `?`
    ///         // or a panic here still releases ...
    ///         guard.release()?;
    ///     }
    ///     Err(Error::Contended(report)) => eprintln!("still held after 500 ms: {report}"),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`lock_until`](Self::lock_until): [`Error::Contended`] when
    /// another client still held the resource at the deadline.
    pub fn lock_guard_until(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<LockGuard<'_>, Error> {
        let lock = self.lock_until(resource, ttl, deadline)?;
        Ok(LockGuard::new(self, lock))
    }

    /// Extends `lock` to `ttl` from now, if its token still owns the
    /// resource on a quorum. Returns within one request timeout.
    ///
    /// Masters that hold the token apply the new TTL whatever the round's
    /// outcome, unless the key already expires later there (an extend
    /// never shortens a key: a delayed one, on a connection the client
    /// gave up, cannot cut a newer one short), so the lock never claims
    /// more than `t0 + ttl - drift` of this round afterwards: see the table
    /// in [`Lock`]'s docs for its validity after each outcome.
    ///
    /// # Errors
    ///
    /// Without asking the masters (the lock is unchanged):
    /// [`Error::Expired`] if the lock's validity has run out,
    /// [`Error::ExtensionLimit`], [`Error::InvalidTtl`]. After a round:
    /// [`Error::NotHeld`] if the token no longer owns the resource on a
    /// quorum (the lock is then expired); [`Error::Unavailable`],
    /// [`Error::TooSlow`] or [`Error::Io`] (the lock's validity is capped
    /// at what this round would have granted).
    pub fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        let call = Extend::new(&self.limits(), lock.holding(), ttl, crate::clock::now())?;
        let end = self.round(&call.command(), None)?;
        let (result, validity) = self.extended(&end);
        lock.apply(validity);
        self.rewatch(Op::Extend, lock);
        result
    }

    /// Releases `lock` on every master. Afterwards the lock is expired,
    /// whatever the outcome: masters that got the release no longer hold
    /// it.
    ///
    /// Returns as soon as a quorum has released it (the other masters get
    /// the release too; their replies are read later), and within one
    /// request timeout.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] if the token did not own the resource on a quorum
    /// any more (it expired or was already released),
    /// [`Error::Unavailable`], or [`Error::Io`].
    pub fn unlock(&self, lock: &mut Lock) -> Result<(), Error> {
        let end = self.round(&lock.release(), None)?;
        self.unlocked(lock, &end)
    }
}
