//! The blocking public API: [`Redlock`], its [`Builder`], [`Lock`] and
//! [`LockGuard`].
//!
//! Each operation is one round (or, with retries, several) of
//! [`rules::Round`], driven by the private `mio` driver. This module turns
//! rounds into results and keeps the caller's [`Lock`] honest about its
//! validity after every outcome.

// docs.rs lists `Redlock`'s methods module by module, in the order the
// modules are declared here, and this file's after them: the calls most
// callers need first (one lock, blocking), then their async forms, the
// scoped and kept locks, and batches. Each stands alone so that
// rustfmt keeps the order.
mod blocking;

mod tasks;

mod scoped;

mod keeper;

mod batch;

// These hold no public method of `Redlock`.
pub(crate) mod builder;
mod embed;
pub(crate) mod fence;
mod lock;
mod observe;
pub(crate) mod rounds;
mod stats;
#[cfg(feature = "tls")]
mod tls;
mod token;
mod wait;
mod watch;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::calls::{Acquire, Limits};
use crate::commands::Keys;
use crate::driver::Engine;
use crate::error::Error;
use crate::rules;
use crate::rules::wait::Terms;

pub use batch::MAX_BATCH;
pub use builder::{Builder, MAX_IN_FLIGHT, MAX_TIMEOUT, Require};
pub use embed::{Completion, EmbeddedRedlock, Ticket};
pub use keeper::{KeepOptions, Keeper, LossSignal, OnChange, Standing};
pub use lock::{Lock, LockGuard};
pub use stats::{EngineStats, MasterStats, Stats};
pub use tasks::AsyncLockGuard;
pub use watch::LockLoss;

use builder::Config;
pub(crate) use rounds::RoundEnd;
use stats::Counters;
use token::TokenSource;

/// The longest resource name accepted, in bytes.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// The longest TTL accepted: 2^31 - 1 milliseconds (about 24.8 days).
pub const MAX_TTL: Duration = Duration::from_millis(i32::MAX as u64);

pub use crate::commands::TOKEN_LEN;

/// A Redlock client over N independent Redis masters.
///
/// Every operation is one or more rounds: the command is written to all
/// masters in the same event-loop tick, and the call returns as soon as the
/// outcome is certain (a quorum agreed, or a quorum has become impossible),
/// or at the request timeout.
///
/// # Time bounds
///
/// - [`try_lock`](Self::try_lock), [`extend`](Self::extend) and
///   [`unlock`](Self::unlock) return within one request timeout (plus
///   scheduling noise). A failed acquire queues its release on every master
///   that did not refuse it and returns without waiting for it: a paused or dead minority of
///   masters costs nothing, whether the attempt succeeds or fails.
/// - [`lock_until`](Self::lock_until) returns by its deadline.
/// - [`lock`](Self::lock) returns within `retry_count + 1` request timeouts
///   plus the retry delays.
/// - A master that floods the client with data it did not ask for is
///   dropped; it cannot hold a call past these bounds.
/// - With [`Builder::fencing`], an acquire attempt (a batch's too) runs
///   its rounds one after another, each within a request timeout: the
///   acquire and the raise, and before them, when due (on first use, and
///   after a master lost its counter), a read and a sync of the counters
///   (two reads when the counters start from the clocks). Each attempt
///   above counts up to five request timeouts, two when no read is due;
///   `lock_until` still returns by its deadline.
///
/// # Threads and processes
///
/// A client owns one connection per master and is [`Send`] and [`Sync`]:
/// one client serves any number of threads over the same N connections,
/// borrowed by scoped threads, in an `Arc`, or cloned. A clone is another
/// handle on the same client, as cheap as an `Arc`'s: the same
/// connections, rounds in flight, configuration and [`stats`](Self::stats);
/// the client closes when its last handle goes (a [`Keeper`]'s thread
/// holds one until it has released its lock). The callers' rounds are
/// in flight at once, each reply matched to its round by the connection's
/// order; a caller that waits polls for everyone while nobody else does,
/// so a lone caller pays no cross-thread wake-up. At most
/// [`Builder::max_in_flight`] rounds are in flight at once; past that a
/// call waits for a free slot, up to a request timeout, then fails with
/// [`Error::TooManyInFlight`]. Fenced acquires, with [`Builder::fencing`], are no
/// exception: each runs its rounds in order (a read and a sync of the
/// counters when due, the acquire, the raise), beside the other callers'.
///
/// Do not use a client across `fork()`: parent and child would share its
/// sockets and read each other's replies. Build a new client in the child.
/// (Should it happen anyway, the child's tokens still differ from the
/// parent's: the token generator reseeds itself in a new process.)
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_mio::Redlock;
///
/// let redlock = Redlock::builder(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001", "redis://127.0.0.1:7002"])
///     .build()?;
/// let guard = redlock.lock_guard("orders:42", Duration::from_secs(10))?;
/// // ... work while guard.validity() > the time the work needs ...
/// guard.release()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Redlock {
    engine: Arc<Engine>,
    tokens: Arc<Mutex<TokenSource>>,
    fences: Arc<Mutex<fence::FenceBook>>,
    config: Config,
    /// The masters' addresses, passwords masked, for reports.
    masters: Arc<[String]>,
    /// Shared with the driver, which counts the releases it runs on its
    /// own for dropped futures.
    counters: Arc<Counters>,
    /// Boxes of reports that callers waiting for a lock dropped, for the
    /// next reports ([`recycle`](Self::recycle)); room for one per round
    /// in flight, allocated at build, and the first boxes made then
    /// (`rounds::spare_reports`).
    #[allow(
        clippy::vec_box,
        reason = "the boxes are what is kept: each goes back into an error"
    )]
    spare_reports: Arc<Mutex<Vec<Box<rules::Report>>>>,
    /// Shared by every handle: the last one to go closes the engine.
    _open: Arc<Open>,
}

/// Closes the engine when dropped: ends the background thread of the
/// async API, if it was started (without waiting for it). Held by every
/// handle of a client, so that the engine stays open while any of them
/// (a keeper's included) may still use it.
struct Open(Arc<Engine>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_struct("Redlock");
        list.field("servers", &self.masters);
        list.field("request_timeout", &self.config.request_timeout)
            .field("retry_count", &self.config.retry_count)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// A client over `engine`'s connections to `masters`.
    fn new(
        engine: Engine,
        config: Config,
        masters: Arc<[String]>,
        counters: Arc<Counters>,
    ) -> Redlock {
        let engine = Arc::new(engine);
        Redlock {
            fences: Arc::new(Mutex::new(fence::FenceBook::new(masters.len()))),
            tokens: Arc::new(Mutex::new(TokenSource::new())),
            spare_reports: Arc::new(Mutex::new(rounds::spare_reports(config.max_in_flight))),
            _open: Arc::new(Open(Arc::clone(&engine))),
            engine,
            config,
            masters,
            counters,
        }
    }

    fn tokens(&self) -> MutexGuard<'_, TokenSource> {
        crate::sync::lock(&self.tokens)
    }

    fn fences(&self) -> MutexGuard<'_, fence::FenceBook> {
        crate::sync::lock(&self.fences)
    }

    /// Tries once to acquire every one of `resources` for `ttl`, all or
    /// nothing: on each master one script sets every key (`NX PX`) if none
    /// of them exists, else none; the quorum and the validity are those of
    /// one resource. The [`Lock`] covers them all: [`extend`](Self::extend)
    /// extends all of them (on a master, only if it still holds every one),
    /// [`unlock`](Self::unlock) releases all of them. Returns within one
    /// request timeout.
    ///
    /// Two locks over overlapping sets never both hold; a failed attempt
    /// leaves no key (its release goes to every master). The [`Lock`]
    /// keeps the names inline while they take at most 64 bytes (each name
    /// plus 2); a larger set costs an allocation per acquisition.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::Redlock;
    ///
    /// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
    /// // A transfer between two accounts holds both, or neither.
    /// let mut lock = redlock.try_lock_all(&["account:17", "account:42"], Duration::from_secs(5))?;
    /// assert_eq!(lock.resources().count(), 2);
    /// redlock.unlock(&mut lock)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`try_lock`](Self::try_lock); [`Error::InvalidResources`] for
    /// an empty list or more than 64 names, [`Error::InvalidResource`] for
    /// a bad name.
    pub fn try_lock_all<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Result<Lock, Error> {
        let mut packed: SmallVec<[u8; 256]> = SmallVec::new();
        let ttl_ms = self.check_all(resources, ttl, &mut packed)?;
        self.attempt(&packed, true, ttl_ms, None)
    }

    /// Acquires every one of `resources` as [`try_lock_all`](Self::try_lock_all)
    /// does, trying again up to the configured retry count, waiting between
    /// attempts as [`lock`](Self::lock) does (queued on each resource).
    ///
    /// # Errors
    ///
    /// The last attempt's error, as for [`try_lock_all`](Self::try_lock_all).
    pub fn lock_all<R: AsRef<[u8]>>(&self, resources: &[R], ttl: Duration) -> Result<Lock, Error> {
        let mut packed: SmallVec<[u8; 256]> = SmallVec::new();
        let ttl_ms = self.check_all(resources, ttl, &mut packed)?;
        let terms = Terms::Retries(self.config.retry_count);
        let started = crate::clock::now();
        waited(self.pursue(Keys::Packed(&packed), ttl_ms, terms), started)
    }

    /// The number of masters.
    pub fn masters(&self) -> usize {
        self.masters.len()
    }

    /// What the client has done since it was built: attempts and their
    /// outcomes, extends, releases, and per master the rounds it failed or
    /// timed out in and the connects made to it. Counting costs a few
    /// relaxed atomic additions per round; this call copies the counters.
    pub fn stats(&self) -> Stats {
        let shared = self.engine.driver();
        let masters = self.masters.iter().map(String::as_str);
        self.counters.snapshot(
            masters.zip(shared.driver.core.connects()),
            shared.yields,
            shared.engine_stats(),
        )
    }

    /// How many masters must agree: `N / 2 + 1`.
    ///
    /// With an even number of masters that is more than half: 2 of 2, 3 of
    /// 4. So 2 masters tolerate no failure at all, and 4 tolerate one, as 3
    /// do: prefer an odd number.
    pub fn quorum(&self) -> usize {
        rules::quorum(self.masters())
    }

    /// What the calls' arguments are checked against.
    fn limits(&self) -> Limits {
        self.config.limits()
    }

    /// The checks of an acquire of `resource` for `ttl`: the TTL in
    /// milliseconds.
    fn check(&self, resource: &[u8], ttl: Duration) -> Result<u64, Error> {
        self.limits().acquire(resource, ttl)
    }

    /// The checks of a call that waits until `deadline`: the TTL in
    /// milliseconds, the deadline on the client's clock and when the call
    /// began; [`Error::DeadlinePassed`], without asking the masters, if the
    /// deadline is not in the future.
    fn check_until(
        &self,
        resource: &[u8],
        ttl: Duration,
        deadline: Instant,
    ) -> Result<(u64, Instant, Instant), Error> {
        let ttl_ms = self.check(resource, ttl)?;
        let deadline = crate::clock::from_std(deadline);
        let started = crate::clock::now();
        if started >= deadline {
            return Err(Error::DeadlinePassed);
        }
        Ok((ttl_ms, deadline, started))
    }

    /// Checks every name and packs them into `packed`; the TTL in
    /// milliseconds.
    fn check_all<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
        packed: &mut SmallVec<[u8; 256]>,
    ) -> Result<u64, Error> {
        let names = resources.iter().map(AsRef::as_ref);
        self.limits().acquire_all(names, ttl, packed)
    }

    fn check_ttl(&self, ttl: Duration) -> Result<u64, Error> {
        self.limits().ttl(ttl)
    }

    /// One acquire attempt, its round cut short at `deadline` if one is
    /// given; on failure, releases without waiting wherever it may have set
    /// its key.
    fn attempt(
        &self,
        resource: &[u8],
        many: bool,
        ttl_ms: u64,
        deadline: Option<Instant>,
    ) -> Result<Lock, Error> {
        if self.config.fencing.is_some() {
            let results = self.fenced_attempt([resource], many, ttl_ms, deadline);
            return results
                .into_iter()
                .next()
                .unwrap_or_else(|| Err(self.busy()));
        }
        let call = Acquire::new(Keys::new(resource, many), self.tokens().token(), ttl_ms);
        let end = self.round(&call.command(), deadline)?;
        self.acquired(call.claim(), &end)
    }
}

/// The result of a call that waited for a lock since `started`: an error's
/// report says how long the call waited, beside its last attempt's time.
pub(super) fn waited(result: Result<Lock, Error>, started: Instant) -> Result<Lock, Error> {
    result.map_err(|mut error| {
        if let Some(report) = error.report_mut() {
            report.set_waited(crate::clock::now().saturating_duration_since(started));
        }
        error
    })
}
