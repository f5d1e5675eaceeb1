//! Errors of the public API.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::addr::AddrError;
use crate::rules::{NodeError, Report};

/// Why [`Builder::build`](crate::Builder::build) refused a configuration.
/// Never contains a password.
///
/// ```
/// use std::time::Duration;
/// use redlock_mio::{ConfigError, Redlock};
///
/// let none: [&str; 0] = [];
/// assert_eq!(Redlock::builder(none).build().err(), Some(ConfigError::NoServers));
///
/// let zero = Redlock::builder(["redis://127.0.0.1:7000"]).request_timeout(Duration::ZERO).build();
/// assert_eq!(zero.err(), Some(ConfigError::ZeroTimeout("request_timeout")));
///
/// let typo = Redlock::builder(["redis://127.0.0.1:7000", "redis://127.0.0.1:70o1"]).build();
/// assert!(matches!(typo, Err(ConfigError::InvalidAddr { index: 1, .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The server list is empty.
    NoServers,
    /// Server number `index` (from 0) has a bad address.
    InvalidAddr {
        /// Position in the server list.
        index: usize,
        /// What is wrong with it.
        error: AddrError,
    },
    /// Server number `index` is the same master as server number `first`.
    /// Redlock needs independent masters.
    DuplicateServer {
        /// Position of the duplicate.
        index: usize,
        /// Position of its first occurrence.
        first: usize,
    },
    /// A timeout that must be positive is zero; the field is named.
    ZeroTimeout(&'static str),
    /// A timeout or delay is longer than
    /// [`MAX_TIMEOUT`](crate::MAX_TIMEOUT); the field is named.
    TooLong {
        /// The setting.
        name: &'static str,
        /// The longest value accepted.
        max: Duration,
    },
    /// The stall timeout is shorter than the request timeout.
    StallBeforeRequestTimeout,
    /// The drift factor is not a number from 0 (inclusive) to 1
    /// (exclusive).
    InvalidDriftFactor,
    /// Fewer masters than [`Builder::require_handshakes`] asks for completed
    /// their handshake within the connect timeout.
    ///
    /// [`Builder::require_handshakes`]: crate::Builder::require_handshakes
    Handshakes {
        /// How many were required.
        required: usize,
        /// How many completed it.
        ready: usize,
        /// Every master that did not, by its address (password masked),
        /// with why.
        failures: Vec<(String, NodeError)>,
    },
    /// [`Builder::restart_guard`](crate::Builder::restart_guard) is on but
    /// [`Builder::identify_masters`](crate::Builder::identify_masters) is
    /// off: the guard needs `INFO`.
    GuardNeedsIdentify,
    /// [`Builder::restart_guard`](crate::Builder::restart_guard) and
    /// [`Builder::fencing`](crate::Builder::fencing) were given different
    /// longest TTLs: both mean the longest TTL any client uses on these
    /// masters, one value for the deployment
    /// ([`LONGEST_TTL_KEY`](crate::LONGEST_TTL_KEY)).
    LongestTtls {
        /// The restart guard's.
        restart_guard: Duration,
        /// Fencing's.
        fencing: Duration,
    },
    /// A master keeps another longest TTL for the deployment
    /// ([`LONGEST_TTL_KEY`](crate::LONGEST_TTL_KEY)) than this client's
    /// restart guard or fencing was given
    /// ([`NodeError::LongestTtl`](crate::NodeError::LongestTtl)):
    /// clients configured differently would void the guarantees of both.
    /// Found by [`Builder::build`](crate::Builder::build) at the handshake,
    /// whatever [`Builder::require_handshakes`](crate::Builder::require_handshakes)
    /// says; a client built while that master was out of reach is refused
    /// by it at its first handshake there instead.
    LongestTtl {
        /// The master, by its address (password masked).
        master: String,
        /// The value kept on the master.
        deployed: Duration,
        /// This client's.
        configured: Duration,
    },
    /// Masters that answered showed a configuration that cannot work, so
    /// [`Builder::build`](crate::Builder::build) refuses it whatever
    /// [`Builder::require_handshakes`](crate::Builder::require_handshakes)
    /// says: each error is one of
    /// [`NodeError::is_configuration`](crate::NodeError::is_configuration)
    /// (a wrong password or a missing ACL permission, a replica or a
    /// cluster-mode node in the list, one server listed twice under
    /// different addresses, a TLS certificate refused, a foreign key in the
    /// crate's key space). Masters that are merely down or slow are never
    /// in it.
    Misconfigured {
        /// Every master that refused, by its address (password masked),
        /// with why.
        failures: Vec<(String, NodeError)>,
    },
    /// The TLS configuration could not be made (no root certificates in
    /// the system store, say).
    Tls(String),
    /// [`Builder::build_embedded`](crate::Builder::build_embedded) cannot
    /// serve this configuration: what it cannot do.
    NotEmbeddable(&'static str),
    /// [`Builder::max_in_flight`](crate::Builder::max_in_flight) was 0 or
    /// more than [`MAX_IN_FLIGHT`](crate::MAX_IN_FLIGHT).
    MaxInFlight(usize),
    /// The operating system refused to create the event poller.
    Io(io::ErrorKind),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoServers => f.write_str("no servers given"),
            ConfigError::NotEmbeddable(what) => {
                write!(f, "an embedded client cannot do this: {what}")
            }
            ConfigError::MaxInFlight(cap) => write!(
                f,
                "max_in_flight {cap}: it must be 1 to {}",
                crate::MAX_IN_FLIGHT
            ),
            ConfigError::InvalidAddr { index, error } => write!(f, "server #{index}: {error}"),
            ConfigError::DuplicateServer { index, first } => {
                write!(f, "server #{index} is the same master as server #{first}")
            }
            ConfigError::ZeroTimeout(name) => write!(f, "{name} must be greater than zero"),
            ConfigError::TooLong { name, max } => {
                write!(f, "{name} must not be longer than {max:?}")
            }
            ConfigError::StallBeforeRequestTimeout => {
                f.write_str("stall_timeout must not be shorter than request_timeout")
            }
            ConfigError::Tls(message) => write!(f, "TLS configuration: {message}"),
            ConfigError::LongestTtls {
                restart_guard,
                fencing,
            } => write!(
                f,
                "restart_guard ({restart_guard:?}) and fencing ({fencing:?}) must be given the same longest TTL"
            ),
            ConfigError::LongestTtl {
                master,
                deployed,
                configured,
            } => write!(
                f,
                "{master} keeps {deployed:?} as the deployment's longest TTL, this client was given {configured:?}"
            ),
            ConfigError::GuardNeedsIdentify => {
                f.write_str("restart_guard needs identify_masters (it reads INFO)")
            }
            ConfigError::InvalidDriftFactor => {
                f.write_str("drift_factor must be a number from 0 up to (not including) 1")
            }
            ConfigError::Handshakes {
                required,
                ready,
                failures,
            } => {
                let n = ready + failures.len();
                write!(
                    f,
                    "{ready} of {n} {} completed the handshake within the connect timeout, \
                     {required} required; not ready:",
                    masters(n)
                )?;
                for (i, (master, error)) in failures.iter().enumerate() {
                    let sep = if i == 0 { " " } else { "; " };
                    write!(f, "{sep}{master}: {error}")?;
                }
                Ok(())
            }
            ConfigError::Misconfigured { failures } => {
                f.write_str("masters refused the configuration:")?;
                for (i, (master, error)) in failures.iter().enumerate() {
                    let sep = if i == 0 { " " } else { "; " };
                    write!(f, "{sep}{master}: {error}")?;
                }
                Ok(())
            }
            ConfigError::Io(kind) => write!(f, "cannot create the event poller: {kind}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why a lock operation failed.
///
/// The round outcomes carry a [`Report`] of what every node did, so that a
/// caller can tell a contended resource ([`Error::Contended`]) from an
/// unreachable majority ([`Error::Unavailable`]) from a round that took too
/// long ([`Error::TooSlow`]).
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_mio::Redlock;
///
/// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
/// match redlock.try_lock("orders:42", Duration::from_secs(10)) {
///     Ok(mut lock) => redlock.unlock(&mut lock)?,
///     Err(error) if error.is_retryable() => {
///         // Contended, unavailable, too slow: the report says what each master did.
///         if let Some(report) = error.report() {
///             eprintln!("not now: {report}");
///         }
///     }
///     Err(error) => return Err(error.into()), // a bad argument, or fix the configuration
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The TTL cannot be used: zero, too long, not longer than the request
    /// timeout, or no longer than its own drift.
    InvalidTtl {
        /// The TTL given.
        ttl: Duration,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The resource name is empty or longer than
    /// [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN).
    InvalidResource {
        /// Its length in bytes.
        len: usize,
    },
    /// The resource name starts with
    /// [`RESERVED_PREFIX`](crate::RESERVED_PREFIX) (`redlock-mio:`), the
    /// key space where the crate keeps its own keys on the masters (fence
    /// counters, the restart guard's marker, the deployment's longest TTL):
    /// a lock there could take the place of one of them, or be deleted by
    /// a script that keeps them. Refused wherever a resource name is
    /// checked, before anything is sent.
    ReservedResource,
    /// [`Redlock::try_lock_all`](crate::Redlock::try_lock_all) was given no
    /// resource, or more than 64; or a batch
    /// ([`Redlock::try_lock_many`](crate::Redlock::try_lock_many),
    /// [`unlock_many`](crate::Redlock::unlock_many)) more than
    /// [`MAX_BATCH`](crate::MAX_BATCH).
    InvalidResources {
        /// How many were given.
        count: usize,
    },
    /// No quorum: other clients hold the resource on some masters (at
    /// least one refused, and the unreachable masters alone would not
    /// have prevented a quorum). Also what a call that waits
    /// ([`lock`](crate::Redlock::lock),
    /// [`lock_until`](crate::Redlock::lock_until), their guard, async and
    /// scoped forms) returns when its attempts or its deadline ran out
    /// while another client held the resource.
    Contended(Box<Report>),
    /// No quorum: so many nodes failed, timed out or were quarantined (see
    /// [`Builder::restart_guard`](crate::Builder::restart_guard)) that a
    /// quorum could not be reached whatever the others answered.
    Unavailable(Box<Report>),
    /// A quorum agreed, but the round took so long that no validity was
    /// left (the partial lock was released).
    TooSlow(Box<Report>),
    /// No quorum, because so many masters refuse the client's
    /// configuration that a quorum is impossible: a wrong or missing
    /// password, a missing ACL permission, a replica, a cluster-mode node
    /// ([`NodeError::is_configuration`](crate::NodeError::is_configuration)).
    /// The report names each master by its address and gives the server's
    /// message. Trying again does not help: fix the configuration.
    Misconfigured(Box<Report>),
    /// Extend or unlock: the token does not own the resource on a quorum
    /// (it expired, or was released).
    NotHeld(Box<Report>),
    /// Extend: the lock's validity had already run out; the servers were
    /// not asked, because the lock may already belong to someone else.
    Expired,
    /// Extend: the lock was already extended as often as
    /// [`Builder::max_extensions`](crate::Builder::max_extensions) allows.
    ExtensionLimit {
        /// The limit.
        limit: u32,
    },
    /// A fenced acquire ([`Builder::fencing`](crate::Builder::fencing))
    /// could not be given a fence, so no lock was taken (its release is on
    /// its way to every master): too few masters with their fence counter
    /// in sync granted it (the report shows the others as
    /// [`NodeState::Unsynced`](crate::NodeState::Unsynced)), or the
    /// second round, which raises the counters to the fence, did not reach
    /// a quorum while the lock was valid. The report is that of the round
    /// that fell short. Retryable: masters that lost their counter are put
    /// back in sync once the configured longest TTL has passed.
    Unfenced(Box<Report>),
    /// [`lock_until`](crate::Redlock::lock_until): the deadline had
    /// already passed; the masters were not asked.
    DeadlinePassed,
    /// [`with_lock`](crate::Redlock::with_lock) or
    /// [`with_lock_async`](crate::Redlock::with_lock_async): the lock was
    /// lost while the work ran (its keeper's standing became
    /// [`Standing::Lost`](crate::Standing::Lost): a quorum of masters said
    /// its token no longer owned the resource, at an extension or at the
    /// release; or its validity ran out before an extension got through;
    /// or the hold limit was reached). The work's value was dropped: part
    /// of the work may have run after another client could take the lock.
    /// Not counted as retryable: whether the work may simply run again is
    /// the caller's to decide.
    Lost,
    /// Too many rounds in flight on this client, not a lock held by
    /// another: the client had as many rounds in flight as
    /// [`Builder::max_in_flight`](crate::Builder::max_in_flight) allows
    /// for a whole request timeout, so nothing was sent (a lock is
    /// unchanged). Retryable; if it comes often, raise `max_in_flight`
    /// or make fewer calls at once. (A lock that another client holds is
    /// [`Contended`](Error::Contended), also when a wait for it runs out.)
    TooManyInFlight {
        /// The cap on rounds in flight.
        limit: usize,
    },
    /// The event poller failed. If an acquire was under way, its release
    /// was queued on every master.
    Io(io::ErrorKind),
}

impl Error {
    /// The per-node report, for errors that come from a round.
    pub fn report(&self) -> Option<&Report> {
        match self {
            Error::Contended(report)
            | Error::Unavailable(report)
            | Error::TooSlow(report)
            | Error::Misconfigured(report)
            | Error::NotHeld(report)
            | Error::Unfenced(report) => Some(report),
            _ => None,
        }
    }

    /// The per-node report, for errors that come from a round, to add to.
    pub(crate) fn report_mut(&mut self) -> Option<&mut Report> {
        match self {
            Error::Contended(report)
            | Error::Unavailable(report)
            | Error::TooSlow(report)
            | Error::Misconfigured(report)
            | Error::NotHeld(report)
            | Error::Unfenced(report) => Some(report),
            _ => None,
        }
    }

    /// The per-node report's box, for errors that come from a round: a
    /// caller that drops the error keeps the box for the next report.
    pub(crate) fn into_report(self) -> Option<Box<Report>> {
        match self {
            Error::Contended(report)
            | Error::Unavailable(report)
            | Error::TooSlow(report)
            | Error::Misconfigured(report)
            | Error::NotHeld(report)
            | Error::Unfenced(report) => Some(report),
            _ => None,
        }
    }

    /// `true` when trying again later may succeed: contention, an
    /// unreachable majority, a slow round, no fence yet, or a client at
    /// its cap of rounds in flight.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Contended(_)
                | Error::Unavailable(_)
                | Error::TooSlow(_)
                | Error::Unfenced(_)
                | Error::TooManyInFlight { .. }
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidTtl { ttl, reason } => write!(f, "invalid TTL {ttl:?}: {reason}"),
            Error::InvalidResource { len } => write!(
                f,
                "invalid resource name of {len} bytes: it must have 1 to {} bytes",
                crate::MAX_RESOURCE_LEN
            ),
            Error::ReservedResource => write!(
                f,
                "resource names starting with {:?} are reserved for the crate's own keys",
                crate::RESERVED_PREFIX
            ),
            Error::InvalidResources { count } => write!(
                f,
                "{count} resources given: a lock covers 1 to {}, a batch up to {}",
                crate::commands::MAX_KEYS,
                crate::MAX_BATCH
            ),
            Error::Contended(report) => write!(
                f,
                "held by another client (refused by {} of {} {}, {} must grant): {report}",
                report.refused(),
                report.nodes().len(),
                masters(report.nodes().len()),
                report.quorum(),
            ),
            Error::Unavailable(report) => unavailable(f, report),
            Error::TooSlow(report) => write!(
                f,
                "the masters agreed, but too late: the attempt took {:?} and left no validity \
                 of the TTL (use a longer TTL or a shorter request timeout): {report}",
                report.elapsed()
            ),
            Error::Misconfigured(report) => write!(
                f,
                "{} of {} masters refuse this client's configuration (not retried): {report}",
                report.misconfigured(),
                report.nodes().len()
            ),
            Error::NotHeld(report) => write!(
                f,
                "lock not held any more (it expired, or was released or deleted): {report}"
            ),
            Error::Unfenced(report) => {
                write!(f, "no fence could be given, no lock taken: {report}")
            }
            Error::Expired => f.write_str("lock expired before it could be extended"),
            Error::ExtensionLimit { limit } => write!(f, "lock already extended {limit} times"),
            Error::DeadlinePassed => {
                f.write_str("the deadline had passed before the first attempt")
            }
            Error::Lost => f.write_str(
                "the lock was lost while the work ran (the masters no longer held it for this \
                 client): another client may have taken it; the work's result was dropped",
            ),
            Error::TooManyInFlight { limit } => write!(
                f,
                "too many rounds in flight on this client: {limit}, its cap (Builder::max_in_flight), \
                 for a whole request timeout; nothing was sent (try again, raise max_in_flight, or \
                 make fewer calls at once)"
            ),
            Error::Io(kind) => write!(f, "event poller failed: {kind}"),
        }
    }
}

impl std::error::Error for Error {}

/// "master" or "masters", for `n` of them.
fn masters(n: usize) -> &'static str {
    if n == 1 { "master" } else { "masters" }
}

/// Too few masters reachable for a quorum: how many were, how many were
/// needed, and what to check.
fn unavailable(f: &mut fmt::Formatter<'_>, report: &Report) -> fmt::Result {
    let n = report.nodes().len();
    let reachable = n - report.unreachable();
    write!(
        f,
        "no quorum: {reachable} of {n} {} reachable, {} needed",
        masters(n),
        report.quorum()
    )?;
    match report.quarantined() {
        0 => {}
        // Reachable, but their grants do not count.
        q => write!(
            f,
            ", and {q} of those restarted within the longest TTL (the restart guard does not count them)"
        )?,
    }
    write!(
        f,
        "; check that the others are running and reachable from this host: {report}"
    )
}

impl From<io::Error> for Error {
    fn from(error: io::Error) -> Error {
        Error::Io(error.kind())
    }
}
