//! [`Builder`]: the configuration of a [`Redlock`], checked in one place.

use std::fmt;
use std::time::Duration;

use crate::addr::ServerAddr;
use crate::calls::{Limits, Times};
use crate::commands::WakeChannel;
use crate::driver::{Driver, Engine, TlsConfig};
use crate::error::ConfigError;
use crate::link::LinkConfig;
use crate::rules::NodeError;

use super::Redlock;

/// The longest value accepted for every timeout and delay of the
/// [`Builder`]: one hour. Longer values are refused with
/// [`ConfigError::TooLong`], so that no deadline computed from them can
/// overflow an [`Instant`](std::time::Instant).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Configures and builds a [`Redlock`]. Made by [`Redlock::builder`].
///
/// Every timeout and delay has a documented range; [`build`](Self::build)
/// refuses values outside it with a typed [`ConfigError`].
///
/// `Debug` shows the server addresses with their passwords masked.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_mio::{Redlock, Require};
///
/// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .request_timeout(Duration::from_millis(20))
///     .retry_count(5)
///     .retry_delay(Duration::from_millis(100))
///     .require_handshakes(Require::Quorum)
///     .build()?;
/// assert_eq!(redlock.quorum(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A setting out of range is refused before anything connects:
///
/// ```
/// use std::time::Duration;
/// use redlock_mio::{ConfigError, Redlock};
///
/// let built = Redlock::builder(["redis://127.0.0.1:7000"])
///     .request_timeout(Duration::from_secs(2))
///     .stall_timeout(Duration::from_secs(1))
///     .build();
/// assert_eq!(built.err(), Some(ConfigError::StallBeforeRequestTimeout));
/// ```
#[derive(Clone)]
pub struct Builder {
    servers: Vec<String>,
    request_timeout: Duration,
    connect_timeout: Duration,
    /// `None`: derived from the request timeout ([`Builder::stall`]).
    stall_timeout: Option<Duration>,
    backoff_max: Duration,
    retry_count: u32,
    retry_delay: Duration,
    retry_jitter: Duration,
    drift_factor: f64,
    max_extensions: Option<u32>,
    require: Require,
    identify: bool,
    wake: bool,
    restart_guard: Option<Duration>,
    fencing: Option<Duration>,
    max_in_flight: usize,
    spin: Duration,
    local_yield: bool,
    #[cfg(feature = "tls")]
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// The largest cap on rounds in flight ([`Builder::max_in_flight`]).
pub const MAX_IN_FLIGHT: usize = crate::flights::MAX_FLIGHTS;

/// How many masters [`Builder::build`] requires to have completed their
/// handshake (connected, logged in, scripts loaded) within the connect
/// timeout.
///
/// ```no_run
/// use redlock_mio::{ConfigError, Redlock, Require};
///
/// let built = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .require_handshakes(Require::All) // fail at start-up, not at the first lock
///     .build();
/// if let Err(ConfigError::Handshakes { failures, .. }) = &built {
///     for (master, why) in failures {
///         eprintln!("{master}: {why}");
///     }
/// }
/// let redlock = built?;
/// # drop(redlock);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Require {
    /// None: `build` succeeds with masters down or slow, which later calls
    /// retry (the default). A master that answers with a configuration
    /// error fails `build` whatever this says.
    #[default]
    Nothing,
    /// A quorum (`N / 2 + 1`), so that the lock can work at once.
    Quorum,
    /// Every master: a configuration mistake anywhere fails at start-up.
    All,
}

/// What a client keeps of its configuration.
#[derive(Debug, Clone, Copy)]
pub(super) struct Config {
    pub(super) request_timeout: Duration,
    pub(super) retry_count: u32,
    pub(super) retry_delay: Duration,
    pub(super) retry_jitter: Duration,
    pub(super) drift_factor: f64,
    pub(super) max_extensions: Option<u32>,
    /// Fencing on: the longest TTL any client uses on these masters.
    pub(super) fencing: Option<Duration>,
    /// The restart guard's or fencing's longest TTL (the same if both are
    /// on): no lock of this client may be longer.
    pub(super) longest_ttl: Option<Duration>,
    pub(super) max_in_flight: usize,
    pub(super) spin: Duration,
    /// The wake channel its connections subscribe to, when releases are to
    /// tell its waiters ([`Builder::wake_on_release`]).
    pub(super) wake: Option<WakeChannel>,
}

impl Config {
    /// What the calls' arguments are checked against.
    pub(super) fn limits(&self) -> Limits {
        Limits {
            request_timeout: self.request_timeout,
            drift_factor: self.drift_factor,
            longest_ttl: self.longest_ttl,
            max_extensions: self.max_extensions,
        }
    }

    /// The times a call that waits reads.
    pub(super) fn times(&self) -> Times {
        Times {
            request_timeout: self.request_timeout,
            retry_delay: self.retry_delay,
            retry_jitter: self.retry_jitter,
        }
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self.servers.iter().map(|s| redact(s)).collect();
        f.debug_struct("Builder")
            .field("servers", &servers)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("stall_timeout", &self.stall())
            .field("max_backoff", &self.backoff_max)
            .field("retry_count", &self.retry_count)
            .field("retry_delay", &self.retry_delay)
            .field("retry_jitter", &self.retry_jitter)
            .field("drift_factor", &self.drift_factor)
            .field("max_extensions", &self.max_extensions)
            .field("require", &self.require)
            .field("identify_masters", &self.identify)
            .field("wake_on_release", &self.wake)
            .field("restart_guard", &self.restart_guard)
            .field("fencing", &self.fencing)
            .field("max_in_flight", &self.max_in_flight)
            .field("spin", &self.spin)
            .field("yield_to_local_masters", &self.local_yield)
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
    pub(super) fn new(servers: Vec<String>) -> Builder {
        Builder {
            servers,
            request_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            stall_timeout: None,
            backoff_max: Duration::from_secs(1),
            retry_count: 3,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
            drift_factor: 0.01,
            max_extensions: None,
            require: Require::Nothing,
            identify: true,
            wake: true,
            restart_guard: None,
            fencing: None,
            max_in_flight: 256,
            spin: Duration::from_millis(1),
            local_yield: true,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// How long one round waits for the masters: a master that has not
    /// answered by then counts as failed for the round. Default 50 ms;
    /// more than zero and at most [`MAX_TIMEOUT`]. It should be far below
    /// the TTLs used.
    pub fn request_timeout(mut self, timeout: Duration) -> Builder {
        self.request_timeout = timeout;
        self
    }

    /// How long a connect and its handshake may take. Default 1 s; more
    /// than zero and at most [`MAX_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Builder {
        self.connect_timeout = timeout;
        self
    }

    /// After how long without an answer a connection is considered stalled
    /// and dropped (then re-established with back-off). At least the
    /// request timeout and at most [`MAX_TIMEOUT`]. Default: twice the
    /// request timeout, and at least 1 s (so 1 s with the default request
    /// timeout); a default follows a longer request timeout, so that
    /// setting the request timeout alone never makes the configuration
    /// refuse itself.
    pub fn stall_timeout(mut self, timeout: Duration) -> Builder {
        self.stall_timeout = Some(timeout);
        self
    }

    /// The stall timeout in force: the one given, or the default derived
    /// from the request timeout.
    fn stall(&self) -> Duration {
        self.stall_timeout
            .unwrap_or_else(|| default_stall(self.request_timeout))
    }

    /// The longest wait between reconnect attempts to a master that is
    /// down; the wait starts at 10 ms and doubles. Default 1 s; more than
    /// zero and at most [`MAX_TIMEOUT`].
    pub fn max_backoff(mut self, backoff: Duration) -> Builder {
        self.backoff_max = backoff;
        self
    }

    /// How many times [`Redlock::lock`] tries again after a failed attempt.
    /// Default 3 (so 4 attempts); 0 makes `lock` a single attempt. Any
    /// value is accepted.
    pub fn retry_count(mut self, count: u32) -> Builder {
        self.retry_count = count;
        self
    }

    /// The average wait before retrying. Default 200 ms; zero to
    /// [`MAX_TIMEOUT`].
    pub fn retry_delay(mut self, delay: Duration) -> Builder {
        self.retry_delay = delay;
        self
    }

    /// The most the wait before a retry differs from
    /// [`retry_delay`](Self::retry_delay), drawn uniformly at random so that
    /// contending clients desynchronise. Default 100 ms; zero to
    /// [`MAX_TIMEOUT`] (the wait is never below zero).
    pub fn retry_jitter(mut self, jitter: Duration) -> Builder {
        self.retry_jitter = jitter;
        self
    }

    /// The clock drift allowed, as a fraction of the TTL; 2 ms are added.
    /// Default 0.01; from 0 up to (not including) 1.
    pub fn drift_factor(mut self, factor: f64) -> Builder {
        self.drift_factor = factor;
        self
    }

    /// The most times one lock may be extended, so that a stuck holder
    /// cannot keep a resource forever. Default: no limit (the caller's
    /// policy). The count belongs to the acquisition: a [`Lock`] cannot be
    /// cloned, so it cannot be reset by copying.
    ///
    /// [`Lock`]: crate::Lock
    pub fn max_extensions(mut self, limit: u32) -> Builder {
        self.max_extensions = Some(limit);
        self
    }

    /// How many masters [`build`](Self::build) requires to be ready: with
    /// [`Require::All`] or [`Require::Quorum`], masters down or too slow
    /// to finish their handshake within the connect timeout fail `build`
    /// with [`ConfigError::Handshakes`], which names each such master and
    /// why. (Masters that refuse the configuration fail it in any case:
    /// [`ConfigError::Misconfigured`].) Default [`Require::Nothing`].
    pub fn require_handshakes(mut self, require: Require) -> Builder {
        self.require = require;
        self
    }

    /// Whether the handshake asks each master who it is (`INFO server
    /// replication cluster`, pipelined with the rest: no extra round trip),
    /// to refuse, with a configuration error naming it
    /// ([`NodeError::Replica`], [`NodeError::ClusterMode`],
    /// [`NodeError::SameServer`]), a replica, a cluster-mode node, or one
    /// server listed twice under different addresses (`127.0.0.1` and
    /// `127.0.0.2`, a host name, a Unix socket: compared by `run_id`). Each
    /// of those would otherwise vote twice or fail later as "unavailable".
    /// Default `true`; turn it off for managed servers that refuse `INFO`
    /// (the ACL user then needs no `+info`). The restart guard needs it.
    ///
    /// [`NodeError::Replica`]: crate::NodeError::Replica
    /// [`NodeError::ClusterMode`]: crate::NodeError::ClusterMode
    /// [`NodeError::SameServer`]: crate::NodeError::SameServer
    pub fn identify_masters(mut self, on: bool) -> Builder {
        self.identify = on;
        self
    }

    /// Whether a caller that waits for a lock ([`lock`](crate::Redlock::lock),
    /// [`lock_until`](crate::Redlock::lock_until), [`lock_all`](crate::Redlock::lock_all)
    /// and their async forms) is told when the lock is released, instead of
    /// trying again after a blind delay. Default `true`.
    ///
    /// A waiter's refused attempt queues it on each master (in the crate's
    /// key space, `redlock-mio:queue:<resource>`, which expires by itself);
    /// a release hands the lock to the first waiter in the queue (reserves
    /// it for the waiter's window) and tells it on its client's channel; it
    /// then wins the lock by its own acquire round, within about a round
    /// trip of the release. Each connection speaks RESP3 (`HELLO 3`) and
    /// subscribes to the client's channel at its handshake, so the wake-up
    /// arrives on the connection the replies use. How it works, and how it
    /// fails, is in [`how_it_works`](crate::how_it_works#waiting-for-a-contended-lock).
    ///
    /// Turn it off for servers older than Redis 6 or users without the
    /// permissions it needs (`+hello +subscribe` and the channels
    /// `&redlock-mio:wake:*`; see [`operations`](crate::operations#acl-permissions)):
    /// waiters then try again after the retry delay, or when the key that
    /// refused them expires, as they learn from its TTL.
    pub fn wake_on_release(mut self, on: bool) -> Builder {
        self.wake = on;
        self
    }

    /// Turns on the restart guard: a master that may have lost its keys
    /// since a lock was granted on it is quarantined for `longest_ttl`
    /// (plus its drift) on this client's clock: its grants do not count
    /// toward a quorum, its refusals do, and releases still go to it. This
    /// is the Redlock "delayed restart" rule, applied by the client.
    ///
    /// A master is suspect, at any (re)connect, when its `run_id` changed
    /// (it restarted), when the marker key
    /// [`MARKER_KEY`](crate::MARKER_KEY) (set once, without TTL, by the
    /// first client to see the master, to a value that starts with
    /// `client:`) is missing or was replaced (its data was flushed or
    /// lost), or, the first time this client sees it, when it has been up
    /// for less than `longest_ttl` and its marker was set by a client (it
    /// may have restarted empty while another client held a lock, and a
    /// client may have set the marker again since). Masters started just
    /// now are therefore quarantined at first. Provision the marker
    /// (`SET redlock-mio:marker 1`, any value that does not start with
    /// `client:`) to skip that: a marker that no client wrote, still
    /// there, shows that the master has lost nothing since it was
    /// provisioned (a master keeps every write or loses its whole data
    /// set), so a short uptime is a restart that kept its data. Provision
    /// only a master that has granted no lock since it last lost its data
    /// (a new one, or one kept out for the longest TTL).
    ///
    /// `longest_ttl` must be at least the longest TTL any client uses on
    /// these masters, more than zero and at most [`MAX_TIMEOUT`]; this
    /// client refuses longer TTLs (to acquire, extend or keep) with
    /// [`Error::InvalidTtl`](crate::Error::InvalidTtl). It is the
    /// deployment's: the first guarded or fenced client to meet a master
    /// keeps it there ([`LONGEST_TTL_KEY`](crate::LONGEST_TTL_KEY)), and a
    /// client given another value is refused
    /// ([`ConfigError::LongestTtl`] at build,
    /// [`NodeError::LongestTtl`](crate::NodeError::LongestTtl) at a
    /// later handshake). With [`fencing`](Self::fencing) too, both must be
    /// given the same value ([`ConfigError::LongestTtls`]). The guard
    /// needs [`identify_masters`](Self::identify_masters) and `SET` on the
    /// marker and longest TTL keys. Default: off. A flush while the
    /// connection stays up is not seen until the next reconnect.
    pub fn restart_guard(mut self, longest_ttl: Duration) -> Builder {
        self.restart_guard = Some(longest_ttl);
        self
    }

    /// Turns on fencing: every acquisition also gets a fence,
    /// [`Lock::fence`](crate::Lock::fence), a number that is larger for
    /// every later holder of the resource, which a store can check to turn
    /// away a holder whose lock has run out (it was paused, say). It costs
    /// a second round trip per acquisition. How it works, what it assumes
    /// and why it holds: [`fencing`](crate::fencing).
    ///
    /// `longest_ttl` must be at least the longest TTL any fenced client
    /// acquires with on these masters (this client refuses longer ones,
    /// to acquire, extend or keep, with
    /// [`Error::InvalidTtl`](crate::Error::InvalidTtl)): a master found
    /// without its fence counter takes part in fences again only
    /// `longest_ttl` (plus its drift) after this client first saw it so.
    /// It is kept on the masters, and a client given another is refused,
    /// as for [`restart_guard`](Self::restart_guard) (with both on, give
    /// both the same value). More than zero and at most [`MAX_TIMEOUT`].
    /// Every client that locks the same resources must use fencing.
    /// Default: off.
    pub fn fencing(mut self, longest_ttl: Duration) -> Builder {
        self.fencing = Some(longest_ttl);
        self
    }

    /// The TLS configuration for `rediss://` masters (feature `tls`): the
    /// roots that vouch for the servers (a private CA, say), a client
    /// certificate if the servers ask for one, protocol versions. Each
    /// server's certificate must carry the host name (or IP address) as
    /// written in its address. Without this, `rediss://` masters are
    /// checked against the operating system's roots.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_config(mut self, config: std::sync::Arc<rustls::ClientConfig>) -> Builder {
        self.tls = Some(config);
        self
    }

    /// Checks the configuration, resolves the addresses, and connects to
    /// every master (waiting up to the connect timeout for the
    /// handshakes).
    ///
    /// It refuses what it can see is wrong: settings out of range, bad or
    /// duplicate addresses, and masters that answered but cannot take part
    /// ([`ConfigError::Misconfigured`]: a wrong password, a missing ACL
    /// permission, a replica, a cluster-mode node, one server under two
    /// addresses, a refused TLS certificate) or that keep another longest
    /// TTL ([`ConfigError::LongestTtl`]). Masters that are down or too slow
    /// now are not a configuration error: they are retried in the
    /// background of later calls, and building succeeds anyway unless
    /// [`require_handshakes`](Self::require_handshakes) asks for them.
    ///
    /// An even number of masters is accepted (a deployment growing from 3
    /// to 5 passes through 4), but it survives no more failures than one
    /// master fewer: `N` masters survive `(N - 1) / 2` down.
    ///
    /// Host names are resolved here, once, by the system resolver: that
    /// blocks for as long as the resolver takes (it is not bounded by the
    /// connect timeout), and a later change of the name's address is not
    /// followed. Give IP addresses where start-up time matters.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] says what is wrong.
    pub fn build(self) -> Result<Redlock, ConfigError> {
        let (addrs, conn, tls) = self.prepare()?;
        let (mut driver, mut poller) =
            Driver::new(&addrs, conn, &tls).map_err(|e| ConfigError::Io(e.kind()))?;
        let now = crate::clock::now();
        // In range: the connect timeout is at most MAX_TIMEOUT.
        let deadline = now.checked_add(self.connect_timeout).unwrap_or(now);
        driver
            .connect_all(&mut poller, deadline)
            .map_err(|e| ConfigError::Io(e.kind()))?;
        let n = driver.core.len();
        let required = match self.require {
            Require::Nothing => 0,
            Require::Quorum => crate::rules::quorum(n),
            Require::All => n,
        };
        let failures: Vec<(String, _)> = driver
            .core
            .failures()
            .map(|(addr, error)| (addr.to_string(), error))
            .collect();
        // A master that keeps another longest TTL refuses this client: the
        // deployment is set up two ways, whatever `require` says.
        let disagrees = failures.iter().find_map(|(master, error)| match error {
            &NodeError::LongestTtl {
                deployed,
                configured,
            } => Some(ConfigError::LongestTtl {
                master: master.clone(),
                deployed,
                configured,
            }),
            _ => None,
        });
        if let Some(error) = disagrees {
            return Err(error);
        }
        // What a master that answered shows to be set up wrongly fails the
        // build whatever `require` says: trying again cannot help, and a
        // replica or a duplicate left in the list would lower the number of
        // failures the lock survives without a word.
        let refused: Vec<(String, NodeError)> = failures
            .iter()
            .filter(|(_, error)| error.is_configuration())
            .cloned()
            .collect();
        if !refused.is_empty() {
            return Err(ConfigError::Misconfigured { failures: refused });
        }
        let ready = n - failures.len();
        if ready < required {
            return Err(ConfigError::Handshakes {
                required,
                ready,
                failures,
            });
        }
        let masters = driver.core.addrs().map(ToString::to_string).collect();
        let local = driver.core.addrs().all(|a| a.endpoint().is_local());
        let counters = std::sync::Arc::new(super::stats::Counters::new(n));
        let counted = std::sync::Arc::clone(&counters);
        driver.core.on_orphan_end(Box::new(move |round| {
            counted.drop_release_ended(round.nodes());
        }));
        let engine = Engine::new(driver, poller, self.local_yield && local, self.spin)
            .map_err(|e| ConfigError::Io(e.kind()))?;
        Ok(Redlock::new(engine, self.config(&conn), masters, counters))
    }

    /// Whether fencing is on.
    pub(super) fn fencing_on(&self) -> bool {
        self.fencing.is_some()
    }

    /// What a client keeps of the configuration; `link` is the
    /// connections' (which names the wake channel).
    pub(super) fn config(&self, link: &LinkConfig) -> Config {
        Config {
            request_timeout: self.request_timeout,
            retry_count: self.retry_count,
            retry_delay: self.retry_delay,
            retry_jitter: self.retry_jitter,
            drift_factor: self.drift_factor,
            max_extensions: self.max_extensions,
            fencing: self.fencing,
            longest_ttl: crate::calls::longest_ttl(self.restart_guard, self.fencing),
            max_in_flight: self.max_in_flight,
            spin: self.spin,
            wake: link.wake,
        }
    }

    /// Checks everything, parses the addresses, and makes the connections'
    /// configuration and the TLS client configuration.
    pub(super) fn prepare(&self) -> Result<(Vec<ServerAddr>, LinkConfig, TlsConfig), ConfigError> {
        let addrs = self.check()?;
        let conn = LinkConfig {
            request_timeout: self.request_timeout,
            connect_timeout: self.connect_timeout,
            stall_timeout: self.stall(),
            backoff_min: backoff_min(self.backoff_max),
            backoff_max: self.backoff_max,
            identify: self.identify,
            fencing: self.fencing.is_some(),
            in_flight: self.max_in_flight,
            guard: self.restart_guard.map(|ttl| {
                let guard = crate::rules::outlived(ttl, self.drift_factor);
                // `client:` and 24 random hex digits: see `MARKER_KEY`.
                let mut marker = [0u8; 31];
                let (prefix, digits) = marker.split_at_mut(7);
                prefix.copy_from_slice(crate::rules::identity::CLIENT_MARKER);
                let random: [u8; 12] = rand::random();
                for (pair, byte) in digits.chunks_exact_mut(2).zip(random) {
                    pair[0] = HEX[usize::from(byte >> 4)];
                    pair[1] = HEX[usize::from(byte & 0xf)];
                }
                (guard, marker)
            }),
            longest_ttl: crate::calls::longest_ttl(self.restart_guard, self.fencing)
                .map(|ttl| ttl.as_millis() as u64),
            // One channel per client, named at random.
            wake: self
                .wake
                .then(|| crate::commands::wake_channel(rand::random())),
        };
        #[cfg(feature = "tls")]
        let tls = match (&self.tls, addrs.iter().any(ServerAddr::is_tls)) {
            (Some(config), _) => Some(config.clone()),
            (None, true) => Some(super::tls::system_roots()?),
            (None, false) => None,
        };
        #[cfg(not(feature = "tls"))]
        let tls = ();
        Ok((addrs, conn, tls))
    }

    /// Validates everything and parses the addresses.
    fn check(&self) -> Result<Vec<ServerAddr>, ConfigError> {
        if self.servers.is_empty() {
            return Err(ConfigError::NoServers);
        }
        if !(1..=MAX_IN_FLIGHT).contains(&self.max_in_flight) {
            return Err(ConfigError::MaxInFlight(self.max_in_flight));
        }
        for (name, value, may_be_zero) in [
            ("request_timeout", self.request_timeout, false),
            ("connect_timeout", self.connect_timeout, false),
            ("stall_timeout", self.stall(), false),
            ("max_backoff", self.backoff_max, false),
            ("retry_delay", self.retry_delay, true),
            ("retry_jitter", self.retry_jitter, true),
        ] {
            if value.is_zero() && !may_be_zero {
                return Err(ConfigError::ZeroTimeout(name));
            }
            if value > MAX_TIMEOUT {
                return Err(ConfigError::TooLong {
                    name,
                    max: MAX_TIMEOUT,
                });
            }
        }
        if let Some(ttl) = self.fencing {
            if ttl.is_zero() {
                return Err(ConfigError::ZeroTimeout("fencing"));
            }
            if ttl > MAX_TIMEOUT {
                return Err(ConfigError::TooLong {
                    name: "fencing",
                    max: MAX_TIMEOUT,
                });
            }
        }
        if let Some(ttl) = self.restart_guard {
            if ttl.is_zero() {
                return Err(ConfigError::ZeroTimeout("restart_guard"));
            }
            if ttl > MAX_TIMEOUT {
                return Err(ConfigError::TooLong {
                    name: "restart_guard",
                    max: MAX_TIMEOUT,
                });
            }
            if !self.identify {
                return Err(ConfigError::GuardNeedsIdentify);
            }
            if let Some(fencing) = self.fencing.filter(|&f| f != ttl) {
                return Err(ConfigError::LongestTtls {
                    restart_guard: ttl,
                    fencing,
                });
            }
        }
        if self.stall() < self.request_timeout {
            return Err(ConfigError::StallBeforeRequestTimeout);
        }
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(ConfigError::InvalidDriftFactor);
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
        Ok(addrs)
    }
}

/// Tuning: how the client spends memory and CPU for latency. The defaults
/// suit most services; change them after measuring (the latency and
/// throughput benches show their effect).
impl Builder {
    /// The most rounds this client keeps in flight at once, over all its
    /// callers (a batch counts one round per lock). Default 256 (as many as
    /// [`MAX_BATCH`](crate::MAX_BATCH)); 1 to [`MAX_IN_FLIGHT`]. Each costs
    /// memory allocated by [`build`](Self::build), so that no round
    /// allocates: a slot of a few hundred bytes, and per master about half
    /// a kilobyte of request queue and output buffers (about 150 KB per
    /// master at the default). Past the cap a call waits for a slot to free up, for at
    /// most a request timeout, then fails with
    /// [`Error::TooManyInFlight`](crate::Error::TooManyInFlight), having sent nothing; a batch
    /// that got part of its slots runs those and gives `TooManyInFlight` for the rest.
    pub fn max_in_flight(mut self, cap: usize) -> Builder {
        self.max_in_flight = cap;
        self
    }

    /// How long a call that finds the client idle (no other round in
    /// flight) looks for its replies itself without waiting, yielding its
    /// CPU between looks (a task also yields to its executor), before it
    /// waits: a thread in the poll, a task until the client's background
    /// thread wakes it. Default 1 ms: the lone caller pays no wake-up for
    /// the replies that would find it asleep (each costs about as much as a
    /// local master's whole answer; tens of microseconds for a task woken
    /// from another thread); the price is a busy caller, though one that
    /// yields. A thread whose masters run on this machine spins from the
    /// start (their replies come within microseconds); one with remote
    /// masters sleeps until the first reply and spins from there, for the
    /// others, which come within the spread of the masters' round trips,
    /// so that it never burns a whole round trip of CPU. A task spins from
    /// the start. Zero turns it off: a thread then sleeps in the poll at
    /// once. Under load (other rounds in flight) whoever polls waits in the
    /// poll for every caller, and this does not apply.
    pub fn spin(mut self, spin: Duration) -> Builder {
        self.spin = spin;
        self
    }

    /// Whether a caller alone on a client whose masters all run on this
    /// machine (loopback addresses or Unix sockets) yields its CPU
    /// (`sched_yield`) while it waits for replies: a blocking caller before
    /// each look or wait and once more when its round is decided, an async
    /// task that polls for itself ([`spin`](Self::spin)) once after
    /// writing its round. Its requests woke the masters' processes, which
    /// may be waiting for this very CPU: yielded to, they answer before the
    /// caller's first look, which then finds the replies; and the masters
    /// still to answer finish before the caller's next requests meet them.
    /// With five local masters on two cores it lowers a lone task's
    /// `epoll_wait` calls per round to under half (the latency bench
    /// measures the cycle). Default on; it never applies to remote masters,
    /// nor while other rounds are in flight (a spinning caller yields
    /// between its looks whatever its masters' place)
    /// ([`Stats::yields`](crate::Stats::yields) counts the yields). Its
    /// price: on a CPU where other threads are ready to run, the caller may
    /// wait behind them for up to a scheduler time slice (a millisecond or
    /// so); turn it off for services that keep their CPUs busy next to
    /// local masters.
    pub fn yield_to_local_masters(mut self, on: bool) -> Builder {
        self.local_yield = on;
        self
    }
}

/// The stall timeout when none is given: twice the request timeout, at
/// least 1 s (and never below the request timeout itself).
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn default_stall(request_timeout: Duration) -> Duration {
    request_timeout
        .saturating_mul(2)
        .max(Duration::from_secs(1))
        .min(MAX_TIMEOUT)
        .max(request_timeout)
}

/// The shortest back-off between reconnects, for a longest of
/// `backoff_max`.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn backoff_min(backoff_max: Duration) -> Duration {
    Duration::from_millis(10).min(backoff_max)
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
