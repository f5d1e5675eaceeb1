//! [`Lock`], one acquisition, and [`LockGuard`], which releases on drop.

use std::fmt;
use std::ops::Deref;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::{Redlock, TOKEN_LEN};
use crate::calls::{Holding, Release, Validity};
use crate::commands::{self, Command, Keys};
use crate::error::Error;

/// Resource names up to this many bytes are stored inside the [`Lock`].
pub(super) const INLINE_RESOURCE: usize = 64;

/// One acquisition of a resource, held on a quorum of masters: the
/// resource, the unique token, and until when it may be trusted.
///
/// A `Lock` is not `Clone`: it stands for one acquisition, and its
/// extension count (see [`Builder::max_extensions`]) belongs to that
/// acquisition.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_mio::Redlock;
///
/// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
/// let ttl = Duration::from_secs(10);
/// let mut lock = redlock.lock("orders:42", ttl)?;
/// for _step in 0..3 {
///     if lock.validity() < Duration::from_secs(2) {
///         redlock.extend(&mut lock, ttl)?; // more time for the next step
///     }
///     // ... one step, guarded by lock.token() or lock.fence() ...
/// }
/// redlock.unlock(&mut lock)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// ```compile_fail
/// fn copy(lock: &redlock_mio::Lock) -> redlock_mio::Lock {
///     lock.clone() // a second handle would reset `max_extensions`
/// }
/// ```
///
/// # What [`validity`](Self::validity) means
///
/// The lock never claims more than the masters granted. With `t0` the start
/// of a round and `drift = ttl * drift_factor + 2 ms`:
///
/// | after | valid until |
/// |---|---|
/// | an acquire that succeeded | `t0 + ttl - drift` |
/// | an [`extend`](Redlock::extend) that succeeded | `t0 + ttl - drift` of the extend round (shorter than before if the new TTL is, though the masters keep the later expiry: an extend never shortens a key) |
/// | an extend that was sent and failed ([`Error::Unavailable`], [`Error::TooSlow`], [`Error::Io`]) | `min(before, t0 + ttl - drift)`: what the masters that applied it grant |
/// | an extend that found the token gone on a quorum ([`Error::NotHeld`]) | expired |
/// | an extend refused before anything was sent ([`Error::Expired`], [`Error::ExtensionLimit`], [`Error::InvalidTtl`]) | unchanged |
/// | an [`unlock`](Redlock::unlock), whatever its outcome | expired |
///
/// Resource names up to 64 bytes are stored inline; acquiring and releasing
/// such a lock allocates nothing.
///
/// Dropping a `Lock` releases nothing: the masters keep it until its TTL
/// runs out. Release it with [`unlock`](Redlock::unlock) (or
/// [`unlock_async`](Redlock::unlock_async)), or hold it in a guard that
/// releases it when dropped ([`LockGuard::new`],
/// [`AsyncLockGuard::new`](crate::AsyncLockGuard::new)).
///
/// [`Builder::max_extensions`]: crate::Builder::max_extensions
#[derive(PartialEq, Eq)]
#[must_use = "dropping a Lock releases nothing: the masters keep it until its TTL; unlock it, or hold it in a LockGuard"]
pub struct Lock {
    /// The resource name, or for a lock over several resources their names
    /// packed by [`commands::pack_key`].
    resource: SmallVec<[u8; INLINE_RESOURCE]>,
    many: bool,
    token: [u8; TOKEN_LEN],
    valid_until: Instant,
    extensions: u32,
    fence: Option<u64>,
    /// The masters the acquire went out to (see `Command::reaching`).
    reach: u64,
    /// Its loss watch, once [`Redlock::watch`] started one.
    pub(super) watch: Option<super::watch::Watched>,
}

impl Lock {
    pub(crate) fn new(
        keys: Keys<&[u8]>,
        token: [u8; TOKEN_LEN],
        valid_until: Instant,
        fence: Option<u64>,
        reach: u64,
    ) -> Lock {
        let (resource, many) = keys.parts();
        Lock {
            resource: SmallVec::from_slice(resource),
            many,
            token,
            valid_until,
            extensions: 0,
            fence,
            reach,
            watch: None,
        }
    }

    /// The lock's fence, with [`Builder::fencing`](crate::Builder::fencing)
    /// on: a number larger than the fence of every holder of the resource
    /// (or of any resource this lock covers) whose holding began before
    /// this one. A store that remembers the largest fence it has seen for
    /// a resource and refuses smaller ones turns away a holder whose lock
    /// has run out. `None` without fencing. See [`fencing`](crate::fencing)
    /// for what this assumes.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The resource name; for a lock over several resources
    /// ([`Redlock::try_lock_all`]), the first of them.
    pub fn resource(&self) -> &[u8] {
        if self.many {
            commands::unpack_keys(&self.resource)
                .next()
                .unwrap_or_default()
        } else {
            &self.resource
        }
    }

    /// Every resource the lock covers, in the order given: one, or for
    /// [`Redlock::try_lock_all`] all of them.
    pub fn resources(&self) -> impl Iterator<Item = &[u8]> {
        let (one, many) = if self.many {
            (None, Some(commands::unpack_keys(&self.resource)))
        } else {
            (Some(&self.resource[..]), None)
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// The release of this lock.
    pub(super) fn release(&self) -> Command<'_> {
        Release::new(self.holding()).command()
    }

    /// What an extend or a release of it reads.
    pub(crate) fn holding(&self) -> Holding<'_> {
        Holding {
            keys: self.keys(),
            token: &self.token,
            valid_until: self.valid_until,
            extensions: self.extensions,
            reach: self.reach,
        }
    }

    /// The masters the acquire went out to (see [`release`](Self::release)).
    pub(crate) fn reach(&self) -> u64 {
        self.reach
    }

    /// What the commands carry: the name, or the packed names.
    pub(crate) fn keys(&self) -> Keys<&[u8]> {
        Keys::new(&self.resource, self.many)
    }

    /// The token that owns the resource on the masters: 20 random bytes
    /// from a generator seeded by the operating system, new for every
    /// attempt. The protected resource can use it as a compare-and-set
    /// guard; for an ordered guard, see [`fence`](Self::fence).
    pub fn token(&self) -> &[u8; TOKEN_LEN] {
        &self.token
    }

    /// Until when the lock may be trusted (see the table in the type's
    /// docs).
    pub fn valid_until(&self) -> Instant {
        crate::clock::to_std(self.valid_until)
    }

    /// [`valid_until`](Self::valid_until) on the client's clock.
    pub(crate) fn valid_until_here(&self) -> Instant {
        self.valid_until
    }

    /// What is left of the validity now; zero once expired.
    pub fn validity(&self) -> Duration {
        self.valid_until
            .saturating_duration_since(crate::clock::now())
    }

    /// `true` once the validity has run out: the lock must no longer be
    /// relied on.
    pub fn is_expired(&self) -> bool {
        crate::clock::now() >= self.valid_until
    }

    /// How many times the lock was extended.
    pub fn extensions(&self) -> u32 {
        self.extensions
    }

    /// Whether the lock's loss watch ([`Redlock::watch`]) found it lost:
    /// fewer masters than a quorum can still hold its token (its keys were
    /// deleted, overwritten, evicted, flushed, expired, or their masters
    /// restarted empty). `false` for a lock that is not watched, or whose
    /// masters keep no watch (see [`Redlock::watch`]).
    pub fn is_lost(&self) -> bool {
        self.watch
            .as_ref()
            .is_some_and(super::watch::Watched::is_lost)
    }

    /// Waits until the lock's loss watch finds it lost (`true`) or
    /// `timeout` passes (`false`); `false` at once for a lock that is not
    /// watched ([`Redlock::watch`]).
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.watch.as_ref().is_some_and(|w| w.wait_lost(timeout))
    }

    /// A future that completes with `true` once the lock's loss watch
    /// ([`Redlock::watch`]) finds it lost, and at once with `false` for a
    /// lock that is not watched. It owns what it needs, so that it can be
    /// moved into another task, or raced against the work the lock
    /// guards:
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redlock_mio::Redlock;
    /// # async fn work() {}
    /// # async fn demo(redlock: &Redlock) -> Result<(), redlock_mio::Error> {
    /// let mut lock = redlock.try_lock_async("orders:42", Duration::from_secs(30)).await?;
    /// redlock.watch(&mut lock);
    /// let lost = lock.lost();
    /// // e.g. tokio::select! { _ = work() => {}, _ = lost => { /* stop: the lock is gone */ } }
    /// # drop(lost);
    /// redlock.unlock_async(&mut lock).await
    /// # }
    /// ```
    pub fn lost(&self) -> super::watch::LockLoss {
        self.watch.as_ref().map_or_else(
            super::watch::LockLoss::unwatched,
            super::watch::Watched::signal,
        )
    }

    /// A lock over nothing, already expired: what a guard keeps once it
    /// gave its lock back.
    pub(super) fn gone() -> Lock {
        Lock {
            resource: SmallVec::new(),
            many: false,
            token: [0; TOKEN_LEN],
            valid_until: crate::clock::now(),
            extensions: 0,
            fence: None,
            reach: 0,
            watch: None,
        }
    }

    /// Its validity after an extend, a release or a dropped call.
    pub(super) fn apply(&mut self, validity: Validity) {
        validity.apply(&mut self.valid_until, &mut self.extensions);
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Hex<'a>(&'a [u8]);
        impl fmt::Debug for Hex<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
        struct Names<'a>(&'a Lock);
        impl fmt::Debug for Names<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut list = f.debug_list();
                for name in self.0.resources() {
                    list.entry(&format_args!("b\"{}\"", name.escape_ascii()));
                }
                list.finish()
            }
        }
        f.debug_struct("Lock")
            .field("resources", &Names(self))
            .field("token", &Hex(&self.token))
            .field("validity", &self.validity())
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// A [`Lock`] that is released when dropped. Made by
/// [`Redlock::lock_guard`] and [`Redlock::lock_guard_until`], or from a
/// lock already taken with [`LockGuard::new`].
///
/// Dropping ignores a failed release (the lock then expires at its TTL);
/// call [`release`](LockGuard::release) to see the outcome.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_mio::Redlock;
///
/// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
/// {
///     let mut guard = redlock.lock_guard("invoices:march", Duration::from_secs(10))?;
///     // ... the first half of the work, while guard.validity() lasts ...
///     guard.extend(Duration::from_secs(10))?;
///     // ... the second half ...
/// } // released here, even on an early return or a panic
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a guard dropped at once releases its lock at once: bind it to a name for as long as the lock is needed"]
pub struct LockGuard<'a> {
    client: &'a Redlock,
    lock: Lock,
    released: bool,
}

impl<'a> LockGuard<'a> {
    /// Guards `lock`, taken by `client` (with [`try_lock`](Redlock::try_lock),
    /// [`lock_all`](Redlock::lock_all), a batch, …): `client` releases it
    /// when the guard is dropped.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::{LockGuard, Redlock};
    ///
    /// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
    /// let lock = redlock.try_lock_all(&["account:17", "account:42"], Duration::from_secs(5))?;
    /// let guard = LockGuard::new(&redlock, lock);
    /// // ... move money between the two accounts; released on every way out ...
    /// guard.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(client: &'a Redlock, lock: Lock) -> LockGuard<'a> {
        LockGuard {
            client,
            lock,
            released: false,
        }
    }

    /// Gives the lock back without releasing it: from then on the caller
    /// releases it (say, after handing it to [`Redlock::keep`]).
    pub fn into_lock(mut self) -> Lock {
        self.released = true;
        std::mem::replace(&mut self.lock, Lock::gone())
    }

    /// Extends the lock, as [`Redlock::extend`].
    ///
    /// # Errors
    ///
    /// As for [`Redlock::extend`].
    pub fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.client.extend(&mut self.lock, ttl)
    }

    /// Releases the lock now and says whether that worked.
    ///
    /// # Errors
    ///
    /// As for [`Redlock::unlock`].
    pub fn release(mut self) -> Result<(), Error> {
        self.released = true;
        self.client.unlock(&mut self.lock)
    }
}

impl Deref for LockGuard<'_> {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.lock
    }
}

impl fmt::Debug for LockGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockGuard").field(&self.lock).finish()
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if !self.released {
            // Best effort: a lock that cannot be released expires at its TTL.
            let _ = self.client.unlock(&mut self.lock);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Lock;
    use crate::clock;
    use crate::commands::Keys;

    #[test]
    fn a_suspend_of_the_host_counts_against_the_validity() {
        let valid_until = clock::now() + Duration::from_secs(10);
        let lock = Lock::new(Keys::One(b"r"), [7; 20], valid_until, None, 0);
        assert!(lock.validity() > Duration::from_secs(9));
        // The host sleeps 4 s: the masters' TTLs ran on, and so does the
        // lock's clock.
        clock::tests::skip(Duration::from_secs(4));
        assert!(lock.validity() <= Duration::from_secs(6));
        assert!(!lock.is_expired());
        clock::tests::skip(Duration::from_secs(6));
        assert!(lock.is_expired());
        assert_eq!(lock.validity(), Duration::ZERO);
    }
}
