//! The blocking public API: [`Redlock`], its [`Builder`], [`Lock`] and
//! [`LockGuard`].

use std::cell::RefCell;
use std::fmt;
use std::ops::Deref;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smallvec::SmallVec;

use crate::addr::ServerAddr;
use crate::commands::Command;
use crate::driver::{ConnConfig, Driver};
use crate::error::{ConfigError, Error};
use crate::rules::{self, Decision, Op, Report, Round};

/// The longest resource name accepted, in bytes.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// The longest TTL accepted: 2^31 - 1 milliseconds (about 24.8 days).
pub const MAX_TTL: Duration = Duration::from_millis(i32::MAX as u64);

/// Resource names up to this many bytes are stored inside the [`Lock`].
const INLINE_RESOURCE: usize = 64;

/// Bytes of a lock token.
pub const TOKEN_LEN: usize = 20;

/// Configures and builds a [`Redlock`]. Made by [`Redlock::builder`].
///
/// `Debug` shows the server addresses with their passwords masked.
#[derive(Clone)]
pub struct Builder {
    servers: Vec<String>,
    request_timeout: Duration,
    connect_timeout: Duration,
    stall_timeout: Duration,
    backoff_max: Duration,
    retry_count: u32,
    retry_delay: Duration,
    retry_jitter: Duration,
    drift_factor: f64,
    max_extensions: Option<u32>,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self.servers.iter().map(|s| redact(s)).collect();
        f.debug_struct("Builder")
            .field("servers", &servers)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("stall_timeout", &self.stall_timeout)
            .field("max_backoff", &self.backoff_max)
            .field("retry_count", &self.retry_count)
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .field("drift_factor", &self.drift_factor)
            .field("max_extensions", &self.max_extensions)
            .finish()
    }
}

/// An address as given, with any password (after `user:` before `@`, or a
/// `pass=`/`password=` parameter) replaced by `***`. Textual only: it
/// resolves nothing, and it masks even what does not parse.
fn redact(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((userinfo, host)) => {
                let user = userinfo.split_once(':').map_or("", |(user, _)| user);
                format!("{scheme}://{user}:***@{host}")
            }
            None => head.to_owned(),
        },
        None if head.contains('@') => "***".to_owned(),
        None => head.to_owned(),
    };
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key @ ("pass" | "password"), _)) => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

impl Builder {
    /// How long one round waits for the masters: a master that has not
    /// answered by then counts as failed for the round. Default 50 ms; it
    /// should be far below the TTLs used.
    pub fn request_timeout(mut self, timeout: Duration) -> Builder {
        self.request_timeout = timeout;
        self
    }

    /// How long a connect and its handshake may take. Default 1 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Builder {
        self.connect_timeout = timeout;
        self
    }

    /// After how long without an answer a connection is considered stalled
    /// and dropped (then re-established with back-off). Default 1 s; at
    /// least the request timeout.
    pub fn stall_timeout(mut self, timeout: Duration) -> Builder {
        self.stall_timeout = timeout;
        self
    }

    /// The longest wait between reconnect attempts to a master that is
    /// down; the wait starts at 10 ms and doubles. Default 1 s.
    pub fn max_backoff(mut self, backoff: Duration) -> Builder {
        self.backoff_max = backoff;
        self
    }

    /// How many times [`Redlock::lock`] tries again after a failed attempt.
    /// Default 3 (so 4 attempts); 0 makes `lock` a single attempt.
    pub fn retry_count(mut self, count: u32) -> Builder {
        self.retry_count = count;
        self
    }

    /// The average wait before retrying. Default 200 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Builder {
        self.retry_delay = delay;
        self
    }

    /// The most the wait before a retry differs from
    /// [`retry_delay`](Self::retry_delay), drawn uniformly at random so that
    /// contending clients desynchronise. Default 100 ms.
    pub fn retry_jitter(mut self, jitter: Duration) -> Builder {
        self.retry_jitter = jitter;
        self
    }

    /// The clock drift allowed, as a fraction of the TTL; 2 ms are added.
    /// Default 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Builder {
        self.drift_factor = factor;
        self
    }

    /// The most times one lock may be extended, so that a stuck holder
    /// cannot keep a resource forever. Default: no limit (the caller's
    /// policy).
    pub fn max_extensions(mut self, limit: u32) -> Builder {
        self.max_extensions = Some(limit);
        self
    }

    /// Checks the configuration, resolves the addresses, and connects to
    /// every master (waiting up to the connect timeout for the
    /// handshakes). Masters that cannot be reached now are retried in the
    /// background of later calls: building succeeds anyway.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] says what is wrong.
    pub fn build(self) -> Result<Redlock, ConfigError> {
        if self.servers.is_empty() {
            return Err(ConfigError::NoServers);
        }
        let mut addrs: Vec<ServerAddr> = Vec::with_capacity(self.servers.len());
        for (index, url) in self.servers.iter().enumerate() {
            let addr = ServerAddr::parse(url)
                .map_err(|error| ConfigError::InvalidAddr { index, error })?;
            if let Some(first) = addrs.iter().position(|a| a.endpoint() == addr.endpoint()) {
                return Err(ConfigError::DuplicateServer { index, first });
            }
            addrs.push(addr);
        }
        for (name, value) in [
            ("request_timeout", self.request_timeout),
            ("connect_timeout", self.connect_timeout),
            ("stall_timeout", self.stall_timeout),
            ("max_backoff", self.backoff_max),
        ] {
            if value.is_zero() {
                return Err(ConfigError::ZeroTimeout(name));
            }
        }
        if self.stall_timeout < self.request_timeout {
            return Err(ConfigError::StallBeforeRequestTimeout);
        }
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(ConfigError::InvalidDriftFactor);
        }
        let conn = ConnConfig {
            request_timeout: self.request_timeout,
            connect_timeout: self.connect_timeout,
            stall_timeout: self.stall_timeout,
            backoff_min: Duration::from_millis(10).min(self.backoff_max),
            backoff_max: self.backoff_max,
        };
        let mut driver = Driver::new(&addrs, conn).map_err(|e| ConfigError::Io(e.kind()))?;
        driver
            .connect_all(Instant::now() + self.connect_timeout)
            .map_err(|e| ConfigError::Io(e.kind()))?;
        let n = driver.len();
        let now = Instant::now();
        Ok(Redlock {
            inner: RefCell::new(Inner {
                driver,
                rng: StdRng::from_os_rng(),
                round: Round::new(
                    Op::Acquire,
                    n,
                    Duration::ZERO,
                    Duration::ZERO,
                    Duration::ZERO,
                    now,
                ),
            }),
            config: Config {
                request_timeout: self.request_timeout,
                retry_count: self.retry_count,
                retry_delay: self.retry_delay,
                retry_jitter: self.retry_jitter,
                drift_factor: self.drift_factor,
                max_extensions: self.max_extensions,
            },
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Config {
    request_timeout: Duration,
    retry_count: u32,
    retry_delay: Duration,
    retry_jitter: Duration,
    drift_factor: f64,
    max_extensions: Option<u32>,
}

struct Inner {
    driver: Driver,
    rng: StdRng,
    round: Round,
}

/// A Redlock client over N independent Redis masters.
///
/// Every operation is one or more rounds: the command is written to all
/// masters in the same event-loop tick, and the call returns as soon as the
/// outcome is certain (a quorum agreed, or a quorum has become impossible),
/// or at the request timeout.
///
/// # Threads
///
/// A client owns its connections and is [`Send`] but not [`Sync`]: its
/// methods take `&self` but must not be called from two threads at once.
/// For many threads, give each thread its own client (each keeps one
/// connection per master, so N masters × T threads connections in all),
/// or share one behind a `Mutex` if lock traffic is light. One client per
/// thread is the low-latency choice: no thread waits for another's round.
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
pub struct Redlock {
    inner: RefCell<Inner>,
    config: Config,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_struct("Redlock");
        if let Ok(inner) = self.inner.try_borrow() {
            let servers: Vec<String> = inner.driver.addrs().map(ToString::to_string).collect();
            list.field("servers", &servers);
        }
        list.field("request_timeout", &self.config.request_timeout)
            .field("retry_count", &self.config.retry_count)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// Starts configuring a client for these masters: each a
    /// `redis://[[user]:password@]host[:port][/db]` or
    /// `unix:///path[?db=N&user=U&pass=P]` address.
    pub fn builder<I, S>(servers: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder {
            servers: servers.into_iter().map(|s| s.as_ref().to_owned()).collect(),
            request_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            stall_timeout: Duration::from_secs(1),
            backoff_max: Duration::from_secs(1),
            retry_count: 3,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
            drift_factor: 0.01,
            max_extensions: None,
        }
    }

    /// The number of masters.
    pub fn masters(&self) -> usize {
        self.inner.borrow().driver.len()
    }

    /// How many masters must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        rules::quorum(self.masters())
    }

    /// Tries once to acquire `resource` for `ttl`.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`], [`Error::Unavailable`] or [`Error::TooSlow`]
    /// when no lock was won (it was released on every master), or a typed
    /// error for a bad TTL or resource.
    pub fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.check(resource, ttl)?;
        self.attempt(resource, ttl_ms)
    }

    /// Acquires `resource` for `ttl`, trying again up to the configured
    /// retry count after a random delay.
    ///
    /// # Errors
    ///
    /// The last attempt's error, as for [`try_lock`](Self::try_lock).
    pub fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.check(resource, ttl)?;
        let mut attempts_left = self.config.retry_count;
        loop {
            match self.attempt(resource, ttl_ms) {
                Err(error) if error.is_retryable() && attempts_left > 0 => {
                    attempts_left -= 1;
                    std::thread::sleep(self.retry_delay());
                }
                result => return result,
            }
        }
    }

    /// Acquires `resource` for `ttl`, trying again after random delays
    /// until `deadline`.
    ///
    /// Every attempt gets the full request timeout: a retry is only started
    /// if it can finish by the deadline. The first attempt always runs, so
    /// with a deadline closer than one request timeout the call may end up
    /// to one request timeout late.
    ///
    /// # Errors
    ///
    /// The last attempt's error, as for [`try_lock`](Self::try_lock).
    pub fn lock_until(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.check(resource, ttl)?;
        loop {
            match self.attempt(resource, ttl_ms) {
                Err(error) if error.is_retryable() => {
                    let delay = self.retry_delay();
                    if Instant::now() + delay + self.config.request_timeout > deadline {
                        return Err(error);
                    }
                    std::thread::sleep(delay);
                }
                result => return result,
            }
        }
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
        Ok(LockGuard {
            client: self,
            lock,
            released: false,
        })
    }

    /// Extends `lock` to `ttl` from now, if its token still owns the
    /// resource on a quorum; on success its validity is renewed.
    ///
    /// # Errors
    ///
    /// [`Error::Expired`] without asking the servers if the lock's validity
    /// has run out; [`Error::ExtensionLimit`]; [`Error::NotHeld`] if the
    /// token no longer owns the resource on a quorum; [`Error::Unavailable`]
    /// or [`Error::TooSlow`]. On error the lock keeps its old validity.
    pub fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        let ttl_ms = self.check(&lock.resource, ttl)?;
        if lock.is_expired() {
            return Err(Error::Expired);
        }
        if let Some(limit) = self.config.max_extensions {
            if lock.extensions >= limit {
                return Err(Error::ExtensionLimit { limit });
            }
        }
        let command = Command {
            op: Op::Extend,
            resource: &lock.resource,
            token: &lock.token,
            ttl_ms,
            eval: false,
        };
        let (decision, valid_until) = self.round(&command)?;
        match decision {
            Decision::Quorum { .. } => {
                lock.valid_until = valid_until;
                lock.extensions += 1;
                Ok(())
            }
            Decision::TooSlow => Err(Error::TooSlow(self.report())),
            Decision::NoQuorum => Err(self.no_quorum(self.report(), Error::NotHeld)),
        }
    }

    /// Releases `lock` on every master.
    ///
    /// Returns as soon as a quorum has released it (the other masters get
    /// the release too; their replies are read later).
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] if the token did not own the resource on a quorum
    /// any more (it expired or was already released), or
    /// [`Error::Unavailable`].
    pub fn unlock(&self, lock: &Lock) -> Result<(), Error> {
        let command = Command {
            op: Op::Release,
            resource: &lock.resource,
            token: &lock.token,
            ttl_ms: 0,
            eval: false,
        };
        let (decision, _) = self.round(&command)?;
        match decision {
            Decision::Quorum { .. } => Ok(()),
            Decision::TooSlow | Decision::NoQuorum => {
                Err(self.no_quorum(self.report(), Error::NotHeld))
            }
        }
    }

    fn check(&self, resource: &[u8], ttl: Duration) -> Result<u64, Error> {
        if resource.is_empty() || resource.len() > MAX_RESOURCE_LEN {
            return Err(Error::InvalidResource {
                len: resource.len(),
            });
        }
        let invalid = |reason| Err(Error::InvalidTtl { ttl, reason });
        if ttl > MAX_TTL {
            return invalid("longer than MAX_TTL (2^31 - 1 ms)");
        }
        let ttl_ms = ttl.as_millis() as u64;
        if ttl_ms == 0 {
            return invalid("shorter than 1 ms");
        }
        let whole = Duration::from_millis(ttl_ms);
        if whole <= self.config.request_timeout {
            return invalid("not longer than the request timeout");
        }
        let drift = rules::drift(whole, self.config.drift_factor);
        if rules::validity(whole, self.config.request_timeout, drift).is_none() {
            return invalid("no validity would be left after the request timeout and drift");
        }
        Ok(ttl_ms)
    }

    fn retry_delay(&self) -> Duration {
        let unit: f64 = self.inner.borrow_mut().rng.random();
        rules::retry_delay(self.config.retry_delay, self.config.retry_jitter, unit)
    }

    /// One acquire attempt; on failure, releases everywhere at once.
    fn attempt(&self, resource: &[u8], ttl_ms: u64) -> Result<Lock, Error> {
        let token: [u8; TOKEN_LEN] = self.inner.borrow_mut().rng.random();
        let command = Command {
            op: Op::Acquire,
            resource,
            token: &token,
            ttl_ms,
            eval: false,
        };
        let (decision, valid_until) = self.round(&command)?;
        if let Decision::Quorum { .. } = decision {
            return Ok(Lock {
                resource: SmallVec::from_slice(resource),
                token,
                valid_until,
                extensions: 0,
            });
        }
        // Release on all masters, also those that seemed to fail: a reply
        // may have been lost after the server set the key. EVAL cannot meet
        // an empty script cache, so nothing needs to wait for the replies.
        let release = Command {
            op: Op::Release,
            eval: true,
            ..command
        };
        let report = self.report();
        let flush_by = Instant::now() + self.config.request_timeout;
        self.inner
            .borrow_mut()
            .driver
            .send_only(&release, flush_by)?;
        Err(match decision {
            Decision::TooSlow => Error::TooSlow(report),
            _ => self.no_quorum(report, Error::Contended),
        })
    }

    /// Runs one round of `command`.
    fn round(&self, command: &Command<'_>) -> Result<(Decision, Instant), Error> {
        let mut inner = self.inner.borrow_mut();
        let Inner { driver, round, .. } = &mut *inner;
        let now = Instant::now();
        let timeout = self.config.request_timeout;
        let ttl = Duration::from_millis(command.ttl_ms);
        let drift = rules::drift(ttl, self.config.drift_factor);
        round.restart(command.op, driver.len(), ttl, drift, timeout, now);
        driver.run(round, command)?;
        let decision = round.decision().unwrap_or(Decision::NoQuorum);
        Ok((decision, round.valid_until()))
    }

    /// The last round's per-node report (allocates: for errors only).
    fn report(&self) -> Box<Report> {
        Box::new(self.inner.borrow().round.report())
    }

    /// The error for a round that found no quorum: [`Error::Unavailable`]
    /// when the unreachable masters alone prevent a quorum, else `other`.
    fn no_quorum(&self, report: Box<Report>, other: fn(Box<Report>) -> Error) -> Error {
        let n = report.nodes().len();
        if report.unreachable() > n - report.quorum() {
            Error::Unavailable(report)
        } else {
            other(report)
        }
    }
}

/// A lock held on a quorum of masters: the resource, the unique token, and
/// until when it may be trusted.
///
/// Resource names up to 64 bytes are stored inline; acquiring and releasing
/// such a lock allocates nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct Lock {
    resource: SmallVec<[u8; INLINE_RESOURCE]>,
    token: [u8; TOKEN_LEN],
    valid_until: Instant,
    extensions: u32,
}

impl Lock {
    /// The resource name.
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The token that owns the resource on the masters: 20 random bytes
    /// from a generator seeded by the operating system, new for every
    /// attempt. The protected resource can use it as a compare-and-set
    /// guard (see the crate docs on fencing).
    pub fn token(&self) -> &[u8; TOKEN_LEN] {
        &self.token
    }

    /// Until when the lock may be trusted: `t0 + ttl - drift`, with `t0`
    /// the start of the round that won (or last extended) it.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// What is left of the validity now; zero once expired.
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// `true` once the validity has run out: the lock must no longer be
    /// relied on.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.valid_until
    }

    /// How many times the lock was extended.
    pub fn extensions(&self) -> u32 {
        self.extensions
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
        f.debug_struct("Lock")
            .field(
                "resource",
                &format_args!("b\"{}\"", self.resource.escape_ascii()),
            )
            .field("token", &Hex(&self.token))
            .field("validity", &self.validity())
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// A [`Lock`] that is released when dropped. Made by
/// [`Redlock::lock_guard`].
///
/// Dropping ignores a failed release (the lock then expires at its TTL);
/// call [`release`](LockGuard::release) to see the outcome.
pub struct LockGuard<'a> {
    client: &'a Redlock,
    lock: Lock,
    released: bool,
}

impl LockGuard<'_> {
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
        self.client.unlock(&self.lock)
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
            let _ = self.client.unlock(&self.lock);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_masks_every_password_form() {
        for (given, shown) in [
            ("redis://127.0.0.1:7000", "redis://127.0.0.1:7000"),
            (
                "redis://:pw@127.0.0.1:7000/2",
                "redis://:***@127.0.0.1:7000/2",
            ),
            ("redis://alice:pw@h:1", "redis://alice:***@h:1"),
            ("redis://alice@h:1", "redis://:***@h:1"),
            ("redis://a:p@w@h:1", "redis://a:***@h:1"),
            (
                "unix:///s.sock?db=1&pass=pw",
                "unix:///s.sock?db=1&pass=***",
            ),
            (
                "unix:///s.sock?password=pw&user=u",
                "unix:///s.sock?password=***&user=u",
            ),
            ("junk:pw@host", "***"),
        ] {
            assert_eq!(redact(given), shown, "{given}");
        }
    }
}
