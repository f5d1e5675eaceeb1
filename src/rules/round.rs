//! One round of the algorithm over N nodes.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::{quorum, validity};
use crate::resp;

/// What a round asks of every node.
///
/// A [`Report`] names its round's operation, so that an error says which
/// step failed:
///
/// ```
/// use redlock_mio::{Error, Op};
///
/// fn failed_step(error: &Error) -> &'static str {
///     error.report().map_or("before any round", |report| report.op().name())
/// }
/// assert_eq!(failed_step(&Error::Expired), "before any round");
/// assert_eq!(Op::Extend.name(), "extend");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// `SET resource token NX PX ttl`.
    Acquire,
    /// The compare-and-`PEXPIRE` script.
    Extend,
    /// The compare-and-delete script.
    Release,
    /// Raise the fence counters to a lock's fence, where the lock's key
    /// still holds its token (the second round of a fenced acquire; the
    /// script [`Script::Raise`](crate::scripts::Script::Raise)).
    Raise,
    /// Read the fence counters (waits for every master, no early
    /// decision).
    FenceRead,
    /// Put a fence counter back on masters that lost it (waits for every
    /// master, no early decision).
    FenceSync,
    /// Leave the wait queues of a resource (sent when a wait ends; no
    /// round waits for it).
    Leave,
}

impl Op {
    /// The operation in lower case: `acquire`, `extend`, `release`, `raise`,
    /// `fence read`, `fence sync` or `leave`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Extend => "extend",
            Op::Release => "release",
            Op::Raise => "raise",
            Op::FenceRead => "fence read",
            Op::FenceSync => "fence sync",
            Op::Leave => "leave",
        }
    }
}

/// A node's answer, classified by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub enum Reply {
    /// The node did what was asked: acquired (`+OK`), extended or released
    /// (`:1`).
    Ok,
    /// The node refused: the resource is held by another token (a null
    /// reply to `SET NX`), or the token no longer owns it (`:0` from a
    /// script).
    Refused,
    /// The node did what was asked and counted: a fenced acquire's
    /// counter after its `INCR`, or a fence read's counter.
    Count(u64),
    /// The node's fence counter is missing (it lost its data, or never had
    /// one): a fenced acquire's grant there does not count, nor does a
    /// read or a raise. A read says so too of a counter started from the
    /// clock that has raised no fence yet. The number names the loss (0 if
    /// not told).
    Unsynced(u64),
    /// A fence read's answer from a master out of sync, as
    /// [`Unsynced`](Reply::Unsynced)`(lost)`, with what a start of the
    /// counters from the masters' clocks needs: `clock`, the larger of the
    /// master's clock (`TIME`, in microseconds) and its counter, if it has
    /// one (a clock start that has raised no fence yet).
    UnsyncedRead {
        /// The loss id.
        lost: u64,
        /// The master's clock, or its counter if that is larger.
        clock: u64,
    },
    /// The node refused an acquire that waits, and queued its waiter: the
    /// resource is held, or reserved for a waiter ahead of it. The key that
    /// blocks it expires in `expires_in_ms` milliseconds (`None`: it has no
    /// TTL).
    Queued {
        /// The blocking key's `PTTL`.
        expires_in_ms: Option<u64>,
    },
}

/// An error reply from a server: its whole message, as sent (at most the
/// decoder's line limit, 8 KiB for lock replies).
///
/// Made only when a server answers with an error, so the allocation of its
/// message never touches the path of a healthy round. Cloning shares it.
///
/// ```
/// use redlock_mio::ServerError;
///
/// let error = ServerError::new(b"NOPERM User locker has no permissions to run the 'evalsha' command");
/// assert_eq!(error.code(), b"NOPERM");
/// assert!(error.is_configuration()); // fix the ACL: trying again cannot help
/// assert!(!ServerError::new(b"LOADING Redis is loading the dataset in memory").is_configuration());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ServerError {
    message: Arc<[u8]>,
}

impl ServerError {
    /// Keeps a copy of `message`.
    pub fn new(message: &[u8]) -> ServerError {
        ServerError {
            message: Arc::from(message),
        }
    }

    /// The message, such as `b"WRONGPASS invalid username-password pair…"`.
    pub fn message(&self) -> &[u8] {
        &self.message
    }

    /// The error code: the message's first word, such as `ERR`, `NOSCRIPT`
    /// or `READONLY`.
    pub fn code(&self) -> &[u8] {
        let message = self.message();
        let end = message
            .iter()
            .position(|&b| b == b' ')
            .unwrap_or(message.len());
        &message[..end]
    }

    /// Whether the error says the client or the server is set up wrongly,
    /// so that trying again cannot help: a refused login (`WRONGPASS`,
    /// `NOAUTH`), a missing ACL permission (`NOPERM`), a replica
    /// (`READONLY`), or a cluster-mode node (`CLUSTERDOWN`, `MOVED`, `ASK`,
    /// or a command "not allowed in cluster mode").
    pub fn is_configuration(&self) -> bool {
        matches!(
            self.code(),
            b"WRONGPASS" | b"NOAUTH" | b"NOPERM" | b"READONLY" | b"CLUSTERDOWN" | b"MOVED" | b"ASK"
        ) || contains(self.message(), b"cluster mode")
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Writes `bytes` as text: UTF-8 as it is (invalid sequences replaced),
/// control characters escaped.
fn write_text(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    for c in String::from_utf8_lossy(bytes).chars() {
        if c.is_control() {
            write!(f, "{}", c.escape_default())?;
        } else {
            write!(f, "{c}")?;
        }
    }
    Ok(())
}

/// A duration as a person reads a wait: whole milliseconds from 10 ms up,
/// else as `Debug` shows it.
struct Millis(Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= Duration::from_millis(10) {
            write!(f, "{} ms", self.0.as_millis())
        } else {
            write!(f, "{:?}", self.0)
        }
    }
}

impl fmt::Debug for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerError(\"")?;
        write_text(f, self.message())?;
        f.write_str("\")")
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_text(f, self.message())
    }
}

/// Why a node failed in a round. It allocates only for a server's error
/// message.
///
/// Met in a [`Report`] ([`NodeState::Failed`]) and in the failures of
/// [`ConfigError`](crate::ConfigError); [`is_configuration`](Self::is_configuration)
/// tells a mistake to fix from a master that is merely down.
///
/// ```
/// use std::io::ErrorKind;
/// use redlock_mio::{NodeError, ServerError};
///
/// let refused = NodeError::Handshake(ServerError::new(b"WRONGPASS invalid username-password pair"));
/// assert!(refused.is_configuration());
/// assert!(!NodeError::Connect(ErrorKind::ConnectionRefused).is_configuration());
/// println!("{refused}"); // handshake refused: WRONGPASS invalid username-password pair
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeError {
    /// Connecting failed (refused, unreachable, or no answer within the
    /// connect timeout: [`io::ErrorKind::TimedOut`]).
    Connect(io::ErrorKind),
    /// The connection is down and its reconnect back-off has not expired.
    Disconnected,
    /// Reading or writing the socket failed.
    Io(io::ErrorKind),
    /// The server closed the connection.
    Closed,
    /// The server broke the protocol; the connection was dropped.
    Protocol(resp::Error),
    /// The server sent a reply that makes no sense for the request (a wrong
    /// type, a reply to nothing, a wrong script SHA1); the connection was
    /// dropped.
    UnexpectedReply,
    /// The handshake (`AUTH`, `SELECT`, `SCRIPT LOAD`) was refused.
    Handshake(ServerError),
    /// The server answered with an error.
    Server(ServerError),
    /// The connection stopped answering: requests older than the stall
    /// limit went unanswered, so it was dropped.
    Stalled,
    /// The master lags behind the others: its connection holds as many
    /// unanswered requests (or unwritten bytes) as the client allows, so
    /// the round skipped it. The connection and what it holds stay (the
    /// master is slow, not stalled; the stall timeout catches one that
    /// stopped), and the release of a lock whose acquire it took is never
    /// refused this way.
    Lagging,
    /// The server kept sending frames that answer nothing (pushes,
    /// attributes) beyond a small budget; the connection was dropped.
    Unsolicited,
    /// TLS failed (`rediss://`): the server's certificate was refused (an
    /// unknown authority, another name), a client certificate was refused,
    /// or the TLS protocol broke; rustls's message says which.
    Tls(Arc<str>),
    /// The server is a replica (`role:slave` in `INFO`): a lock on it is
    /// not a lock on a master.
    Replica,
    /// The server runs in cluster mode, which Redlock's independent masters
    /// are not.
    ClusterMode,
    /// The server is the same as master `other` (same `run_id`), reached
    /// through another address: it must not vote twice.
    SameServer {
        /// The index of the master it duplicates.
        other: usize,
        /// That master's address, password masked.
        address: Arc<str>,
    },
    /// A key of the crate's own key space
    /// ([`RESERVED_PREFIX`](crate::RESERVED_PREFIX)), named here, holds what
    /// this crate never writes there: another type, or a value of the
    /// wrong form (a fence counter that is not a positive integer below
    /// 2^53, say). Someone else wrote it. The master does nothing with it
    /// and does not count: for the rounds that use the key (the fence
    /// counter and its loss id), or, for the restart guard's marker, for
    /// every round but releases. Its connection stays up; delete the key
    /// to end it (a fixed marker is seen at the next reconnect).
    ForeignKey(&'static str),
    /// The master keeps another longest TTL for the deployment
    /// ([`LONGEST_TTL_KEY`](crate::LONGEST_TTL_KEY)) than the one this
    /// client's restart guard or fencing was given: the guarantees of both
    /// rest on every client agreeing on it, so the master refuses this
    /// client (every round but releases fails on it) while the connection
    /// stays up. Seen at each (re)connect.
    LongestTtl {
        /// The value kept on the master.
        deployed: Duration,
        /// This client's.
        configured: Duration,
    },
}

impl NodeError {
    /// Whether the node refused the client's configuration, so that trying
    /// again cannot help: a handshake refused with a configuration error
    /// ([`ServerError::is_configuration`]) or a plain `ERR` (a wrong
    /// database number, `AUTH` without a password set on the server), or
    /// a lock command refused with a configuration error (`NOPERM`,
    /// `READONLY`, …), or a server that is not an independent master of
    /// its own ([`Replica`](NodeError::Replica),
    /// [`ClusterMode`](NodeError::ClusterMode),
    /// [`SameServer`](NodeError::SameServer)), or a master whose own keys
    /// say the deployment is set up otherwise
    /// ([`ForeignKey`](NodeError::ForeignKey),
    /// [`LongestTtl`](NodeError::LongestTtl)). A handshake refused with
    /// `LOADING` or `BUSY` is not: the server will get over it.
    pub fn is_configuration(&self) -> bool {
        match self {
            NodeError::Replica
            | NodeError::ClusterMode
            | NodeError::SameServer { .. }
            | NodeError::ForeignKey(_)
            | NodeError::LongestTtl { .. }
            | NodeError::Tls(_) => true,
            NodeError::Handshake(error) => error.is_configuration() || error.code() == b"ERR",
            NodeError::Server(error) => error.is_configuration(),
            _ => false,
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Connect(kind) => connect_failed(f, *kind),
            NodeError::Disconnected => f.write_str("disconnected, waiting to reconnect"),
            NodeError::Io(kind) => write!(f, "I/O error: {kind}"),
            NodeError::Closed => f.write_str("connection closed by the server"),
            NodeError::Protocol(resp::Error::UnknownType(byte)) => not_redis(f, *byte),
            NodeError::Protocol(error) => write!(
                f,
                "broke the Redis protocol ({error}); the connection was dropped"
            ),
            NodeError::UnexpectedReply => f.write_str("unexpected reply"),
            NodeError::Handshake(error) => write!(f, "handshake refused: {error}"),
            NodeError::Server(error) => write!(f, "server error: {error}"),
            NodeError::Stalled => f.write_str("connection stalled"),
            NodeError::Lagging => f.write_str("lagging behind (too many requests unanswered)"),
            NodeError::Unsolicited => f.write_str("flooded with unsolicited data"),
            NodeError::Tls(message) => {
                write!(f, "TLS failed: {message}")?;
                if message.contains("InvalidContentType") || message.contains("corrupt message") {
                    // What rustls says of bytes that are no TLS record.
                    f.write_str(" (not a TLS server: for a plain Redis port use redis://)")?;
                }
                Ok(())
            }
            NodeError::Replica => f.write_str("a replica, not a master (INFO says role:slave)"),
            NodeError::ClusterMode => {
                f.write_str("a cluster-mode node, not an independent master (cluster_enabled:1)")
            }
            NodeError::SameServer { other, address } => write!(
                f,
                "the same server as master #{other} ({address}): same run_id, another address"
            ),
            NodeError::ForeignKey(key) => write!(
                f,
                "the crate's key {key} holds what redlock-mio never writes there (delete it)"
            ),
            NodeError::LongestTtl {
                deployed,
                configured,
            } => write!(
                f,
                "the deployment's longest TTL on this master is {deployed:?}, this client's {configured:?}"
            ),
        }
    }
}

/// Why a connect failed, with what to check.
fn connect_failed(f: &mut fmt::Formatter<'_>, kind: io::ErrorKind) -> fmt::Result {
    match kind {
        io::ErrorKind::ConnectionRefused => {
            f.write_str("connection refused: no server listens there (is it running, on this port?)")
        }
        io::ErrorKind::TimedOut => f.write_str(
            "connect timed out: no answer within the connect timeout (is the host up and reachable?)",
        ),
        io::ErrorKind::NotFound => {
            f.write_str("no such socket file: no server listens there (is it running?)")
        }
        io::ErrorKind::PermissionDenied => {
            f.write_str("cannot connect: permission denied (the socket file's permissions?)")
        }
        other => write!(f, "cannot connect: {other}"),
    }
}

/// A peer whose first bytes begin no RESP reply: most often a server of
/// another kind at that address. The byte is named, with a guess at what
/// sent it.
fn not_redis(f: &mut fmt::Formatter<'_>, byte: u8) -> fmt::Result {
    let guess = match byte {
        b'H' => ", as an HTTP server does (\"HTTP/1.1 …\")",
        b'<' => ", as a web page does",
        b'S' => ", as an SSH server does (\"SSH-2.0…\")",
        // A TLS alert or handshake record: the plain-text HELLO met a
        // TLS port.
        0x15 | 0x16 => ", as a TLS server does (use a rediss:// address)",
        _ => "",
    };
    f.write_str("not a Redis server: it answered ")?;
    if byte.is_ascii_graphic() {
        write!(f, "{:?} (0x{byte:02x})", char::from(byte))?;
    } else {
        write!(f, "byte 0x{byte:02x}")?;
    }
    write!(
        f,
        "{guess}, where a Redis or Valkey master answers with a RESP reply (+, -, :, $, *, …); \
         check the address and port"
    )
}

/// Where one node stands in a round.
///
/// ```
/// use redlock_mio::{Error, NodeState};
///
/// /// Says what each master did in the round that failed.
/// fn explain(error: &Error) {
///     let Some(report) = error.report() else { return };
///     for (i, state) in report.nodes().iter().enumerate() {
///         match state {
///             NodeState::Ok => println!("#{i} granted"),
///             NodeState::Failed(error) => println!("#{i} failed: {error}"),
///             other => println!("#{i}: {other:?}"),
///         }
///     }
/// }
/// explain(&Error::Expired); // no round, no report: nothing to say
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeState {
    /// No answer yet, or none waited for: the round was decided before
    /// this node answered.
    Pending,
    /// The node did what was asked.
    Ok,
    /// The node refused (held by another, or not held by this token).
    Refused,
    /// The node failed.
    Failed(NodeError),
    /// The node did not answer before the round's deadline.
    TimedOut,
    /// The node granted, but is quarantined (it may have restarted without
    /// its keys, see [`Builder::restart_guard`](crate::Builder::restart_guard)):
    /// its grant does not count toward the quorum.
    Quarantined,
    /// The node's fence counter is missing (it lost its data, or never had
    /// one), or, for a read, was started from the clock and has raised no
    /// fence yet: it does not count toward a fenced round's quorum.
    Unsynced,
}

/// How a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub enum Decision {
    /// A quorum agreed while validity was left. For a release, `validity`
    /// is zero.
    Quorum {
        /// What is left of the lock's validity at the decision.
        validity: Duration,
    },
    /// A quorum agreed, but the round took so long that no validity is left.
    TooSlow,
    /// So many nodes refused or failed that a quorum can no longer agree.
    NoQuorum,
}

/// Nodes per round kept inline; more spill to the heap.
const INLINE_NODES: usize = 8;

/// What each master did in a round: the detail behind its outcome.
///
/// Every error of a round carries one ([`Error::report`](crate::Error::report)).
///
/// Its `Display` names each master with what it did, for instance
/// `acquire on 3 masters (quorum 2) in 1ms: 10.0.0.1:6379: held by another,
/// 10.0.0.2:6379: held by another, 10.0.0.3:6379: answer not needed
/// (decided without it)`.
///
/// ```
/// use redlock_mio::Error;
///
/// /// Logs why a call failed, and whether the masters were the trouble.
/// fn log(error: &Error) {
///     match error.report() {
///         Some(report) if report.unreachable() > report.nodes().len() - report.quorum() => {
///             eprintln!("too few masters answered: {report}");
///         }
///         Some(report) => eprintln!("{report}"),
///         None => eprintln!("{error}"),
///     }
/// }
/// log(&Error::Expired);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    op: Op,
    quorum: usize,
    elapsed: Duration,
    nodes: SmallVec<[NodeState; INLINE_NODES]>,
    masters: Option<Arc<[String]>>,
    waited: Option<Duration>,
}

impl Report {
    /// A report of no round: room for a report, made before any is needed
    /// (see `Redlock::recycle`).
    pub(crate) fn blank() -> Report {
        Report {
            op: Op::Acquire,
            quorum: 0,
            elapsed: Duration::ZERO,
            nodes: SmallVec::new(),
            masters: None,
            waited: None,
        }
    }

    /// Names the nodes, in order (say, by their addresses, passwords
    /// masked): [`Display`](fmt::Display) then shows the names instead of
    /// `#0`, `#1`, …. Names are used only if there is one per node.
    pub(crate) fn with_masters(mut self, masters: Arc<[String]>) -> Report {
        if masters.len() == self.nodes.len() {
            self.masters = Some(masters);
        }
        self
    }

    /// The masters' names (their addresses, passwords masked), in order, when the
    /// client gave them.
    pub fn masters(&self) -> Option<&[String]> {
        self.masters.as_deref()
    }

    /// How many nodes failed with an error that says the client or the
    /// server is set up wrongly ([`NodeError::is_configuration`]).
    pub fn misconfigured(&self) -> usize {
        self.count(|s| matches!(s, NodeState::Failed(e) if e.is_configuration()))
    }

    /// The operation of the round.
    pub fn op(&self) -> Op {
        self.op
    }

    /// How many nodes had to agree.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How long the round took until it was decided.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// For the last attempt of a call that waits for the lock
    /// ([`lock`](crate::Redlock::lock),
    /// [`lock_until`](crate::Redlock::lock_until), their guard, async and
    /// scoped forms): how long the call waited, from its start to its
    /// end, all its attempts included. `None` for a call of one round.
    pub fn waited(&self) -> Option<Duration> {
        self.waited
    }

    /// Records that this is the last attempt of a call that waited
    /// `waited` in all.
    pub(crate) fn set_waited(&mut self, waited: Duration) {
        self.waited = Some(waited);
    }

    /// Each node's state, in the order the servers were configured.
    pub fn nodes(&self) -> &[NodeState] {
        &self.nodes
    }

    /// How many nodes did what was asked.
    pub fn ok(&self) -> usize {
        self.count(|s| matches!(s, NodeState::Ok))
    }

    /// How many nodes refused (held by another, or not held by the token).
    pub fn refused(&self) -> usize {
        self.count(|s| matches!(s, NodeState::Refused))
    }

    /// How many nodes granted but were quarantined
    /// ([`NodeState::Quarantined`]).
    pub fn quarantined(&self) -> usize {
        self.count(|s| matches!(s, NodeState::Quarantined))
    }

    /// How many nodes did not count because their fence counter is
    /// missing ([`NodeState::Unsynced`]).
    pub fn unsynced(&self) -> usize {
        self.count(|s| matches!(s, NodeState::Unsynced))
    }

    /// How many nodes failed or timed out.
    pub fn unreachable(&self) -> usize {
        self.count(|s| matches!(s, NodeState::Failed(_) | NodeState::TimedOut))
    }

    fn count(&self, f: impl Fn(&NodeState) -> bool) -> usize {
        self.nodes.iter().filter(|s| f(s)).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ok, refused) = match self.op {
            Op::Acquire => ("acquired", "held by another"),
            Op::Extend => ("extended", "not held"),
            Op::Release => ("released", "not held"),
            Op::Raise => ("fence raised", "not held"),
            Op::FenceRead => ("fence read", "refused"),
            Op::FenceSync => ("fence in sync", "not repaired"),
            Op::Leave => ("left", "refused"),
        };
        let n = self.nodes.len();
        write!(
            f,
            "{} on {n} {} (quorum {}) ",
            self.op.name(),
            if n == 1 { "master" } else { "masters" },
            self.quorum,
        )?;
        // The call's whole wait, then its last attempt's own time; not for
        // a call that did not wait beyond its one attempt.
        if let Some(waited) = self
            .waited
            .filter(|w| w.saturating_sub(self.elapsed) >= Duration::from_millis(1))
        {
            write!(f, "after waiting {}, the last attempt ", Millis(waited))?;
        }
        // Decided at its start: failures known before anything was sent
        // (connections down) made the outcome certain.
        if self.elapsed.is_zero() {
            f.write_str("decided before any answer:")?;
        } else {
            write!(f, "in {:?}:", self.elapsed)?;
        }
        for (i, state) in self.nodes.iter().enumerate() {
            f.write_str(if i == 0 { " " } else { ", " })?;
            match self.masters.as_deref().and_then(|m| m.get(i)) {
                Some(name) => write!(f, "{name}: ")?,
                None => write!(f, "#{i} ")?,
            }
            match state {
                // Asked, but the outcome was certain before it answered:
                // nothing is said of its health.
                NodeState::Pending => f.write_str("answer not needed (decided without it)")?,
                // A grant short of a quorum: the client releases it.
                NodeState::Ok if self.op == Op::Acquire && self.ok() < self.quorum => {
                    f.write_str("acquired (released again: no quorum)")?;
                }
                NodeState::Ok => f.write_str(ok)?,
                NodeState::Refused => f.write_str(refused)?,
                NodeState::Failed(error) => write!(f, "{error}")?,
                NodeState::TimedOut => f.write_str("timed out")?,
                NodeState::Quarantined => write!(
                    f,
                    "{ok}, but not counted: restarted within the longest TTL (restart guard)"
                )?,
                NodeState::Unsynced => f.write_str("fence counter missing (not counted)")?,
            }
        }
        Ok(())
    }
}

/// One round over N nodes: told what each node did and what time it is,
/// it decides as soon as the outcome is certain.
///
/// The round decides early both ways: as soon as a quorum agreed, or as
/// soon as so many nodes refused or failed that a quorum no longer can.
/// What nodes report after the decision still updates the
/// [`report`](Round::report) but never the decision. Reports about nodes
/// outside the round, or about a node that already has a final state, are
/// ignored.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Round {
    op: Op,
    quorum: usize,
    started: Instant,
    deadline: Instant,
    ttl: Duration,
    drift: Duration,
    nodes: SmallVec<[NodeState; INLINE_NODES]>,
    /// Per node: the count of a [`Reply::Count`], the loss id of a
    /// [`Reply::Unsynced`] or [`Reply::UnsyncedRead`], else 0.
    values: SmallVec<[u64; INLINE_NODES]>,
    /// Per node: the clock of a [`Reply::UnsyncedRead`], else 0.
    clocks: SmallVec<[u64; INLINE_NODES]>,
    ok: usize,
    failed: usize,
    decision: Option<Decision>,
    decided_at: Option<Instant>,
}

// Public for the simulator and the model (feature `sim`).
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl Round {
    /// A round of `op` over `nodes` nodes for a lock of `ttl`, started at
    /// `now`; nodes that have not answered by `now + timeout` count as
    /// failed. With zero nodes the round is decided at once: no quorum.
    pub fn new(
        op: Op,
        nodes: usize,
        ttl: Duration,
        drift: Duration,
        timeout: Duration,
        now: Instant,
    ) -> Round {
        let mut round = Round {
            op,
            quorum: quorum(nodes),
            started: now,
            deadline: now,
            ttl,
            drift,
            nodes: SmallVec::new(),
            values: SmallVec::new(),
            clocks: SmallVec::new(),
            ok: 0,
            failed: 0,
            decision: None,
            decided_at: None,
        };
        round.restart(op, nodes, ttl, drift, timeout, now);
        round
    }

    /// Starts a new round in place, reusing this one's storage.
    pub fn restart(
        &mut self,
        op: Op,
        nodes: usize,
        ttl: Duration,
        drift: Duration,
        timeout: Duration,
        now: Instant,
    ) {
        self.op = op;
        self.quorum = quorum(nodes);
        self.started = now;
        self.deadline = now.checked_add(timeout).unwrap_or(now);
        self.ttl = ttl;
        self.drift = drift;
        self.nodes.clear();
        self.nodes.resize(nodes, NodeState::Pending);
        self.values.clear();
        self.values.resize(nodes, 0);
        self.clocks.clear();
        self.clocks.resize(nodes, 0);
        self.ok = 0;
        self.failed = 0;
        self.decision = None;
        self.decided_at = None;
        if nodes == 0 {
            self.decide(Decision::NoQuorum, now);
        }
    }

    /// The operation of this round (read by the simulator's client).
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub fn op(&self) -> Op {
        self.op
    }

    /// When the round started (`t0`).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// When nodes that have not answered count as failed.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Until when a lock won in this round is valid: `t0 + ttl - drift`.
    /// Meaningful once the decision is [`Decision::Quorum`].
    pub fn valid_until(&self) -> Instant {
        let keep = self.ttl.saturating_sub(self.drift);
        self.started.checked_add(keep).unwrap_or(self.started)
    }

    /// The decision, once there is one.
    pub fn decision(&self) -> Option<Decision> {
        self.decision
    }

    /// Each node's state so far.
    pub fn nodes(&self) -> &[NodeState] {
        &self.nodes
    }

    /// What node `node` counted ([`Reply::Count`]) or the loss id it
    /// reported ([`Reply::Unsynced`], 0 if none), else 0.
    pub fn value(&self, node: usize) -> u64 {
        self.values.get(node).copied().unwrap_or(0)
    }

    /// The clock node `node` reported with its loss in a fence read
    /// ([`Reply::UnsyncedRead`]), else 0.
    pub fn clock(&self, node: usize) -> u64 {
        self.clocks.get(node).copied().unwrap_or(0)
    }

    /// When the key that made node `node` refuse an acquire that waits
    /// expires there, counted from its reply ([`Reply::Queued`]); `None`
    /// for any other answer, or a key without TTL.
    pub fn expires_in(&self, node: usize) -> Option<Duration> {
        let refused = self.nodes.get(node) == Some(&NodeState::Refused);
        match self.values.get(node) {
            Some(&value) if refused && value > 0 => Some(Duration::from_millis(value - 1)),
            _ => None,
        }
    }

    /// The largest count of the nodes that did what was asked: a fenced
    /// acquire's fence, a fence read's maximum. `None` if none counted.
    pub fn max_count(&self) -> Option<u64> {
        self.nodes
            .iter()
            .zip(&self.values)
            .filter(|(state, value)| **state == NodeState::Ok && **value > 0)
            .map(|(_, value)| *value)
            .max()
    }

    /// The nodes the round's command went out to, bit `i` for node `i`
    /// (nodes past the 64th are left out): all but those that skipped it
    /// for lagging behind ([`NodeError::Lagging`]).
    pub fn reached(&self) -> u64 {
        self.nodes
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, state)| **state != NodeState::Failed(NodeError::Lagging))
            .fold(0, |mask, (i, _)| mask | 1 << i)
    }

    /// The nodes where the round's acquire may have set its key, bit `i`
    /// for node `i` (nodes past the 64th are left out): those it
    /// [`reached`](Self::reached), less those that refused it, which set
    /// nothing. Its release, if it failed, has nothing to do elsewhere.
    pub fn may_have_set(&self) -> u64 {
        self.nodes
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, state)| **state == NodeState::Refused)
            .fold(self.reached(), |mask, (i, _)| mask & !(1 << i))
    }

    /// `true` while some node has not answered, failed or timed out.
    pub fn has_pending(&self) -> bool {
        self.ok + self.failed < self.nodes.len()
    }

    /// A copy of the per-node detail, for an error or a log.
    pub fn report(&self) -> Report {
        let end = self.decided_at.unwrap_or(self.deadline);
        Report {
            op: self.op,
            quorum: self.quorum,
            elapsed: end.saturating_duration_since(self.started),
            nodes: self.nodes.clone(),
            masters: None,
            waited: None,
        }
    }

    /// Node `node` answered.
    pub fn handle_reply(&mut self, node: usize, reply: Reply, now: Instant) {
        let (state, value, clock) = match reply {
            Reply::Ok => (NodeState::Ok, 0, 0),
            Reply::Refused => (NodeState::Refused, 0, 0),
            Reply::Count(count) => (NodeState::Ok, count, 0),
            Reply::Unsynced(lost) => (NodeState::Unsynced, lost, 0),
            Reply::UnsyncedRead { lost, clock } => (NodeState::Unsynced, lost, clock),
            // 0 stands for "no TTL" (see `expires_in`).
            Reply::Queued { expires_in_ms } => (
                NodeState::Refused,
                expires_in_ms.map_or(0, |ms| ms.saturating_add(1)),
                0,
            ),
        };
        if self.nodes.get(node) == Some(&NodeState::Pending) {
            if let Some(slot) = self.values.get_mut(node) {
                *slot = value;
            }
            if let Some(slot) = self.clocks.get_mut(node) {
                *slot = clock;
            }
        }
        self.record(node, state, now);
    }

    /// Node `node` granted, but is quarantined: its grant counts as a
    /// refusal toward the quorum of an acquire or an extend (a release
    /// counts it as done: the key is gone either way).
    pub fn handle_quarantined(&mut self, node: usize, now: Instant) {
        let state = match self.op {
            Op::Release => NodeState::Ok,
            _ => NodeState::Quarantined,
        };
        self.record(node, state, now);
    }

    /// Node `node` failed.
    pub fn handle_failure(&mut self, node: usize, error: NodeError, now: Instant) {
        self.record(node, NodeState::Failed(error), now);
    }

    /// The time is `now`: once the deadline has passed, nodes that have not
    /// answered count as timed out.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.deadline {
            return;
        }
        for node in 0..self.nodes.len() {
            self.record(node, NodeState::TimedOut, now);
        }
    }

    fn record(&mut self, node: usize, state: NodeState, now: Instant) {
        let Some(slot) = self.nodes.get_mut(node) else {
            return;
        };
        if *slot != NodeState::Pending {
            return;
        }
        let ok = state == NodeState::Ok;
        *slot = state;
        if ok {
            self.ok += 1;
        } else {
            self.failed += 1;
        }
        if self.decision.is_some() {
            return;
        }
        let n = self.nodes.len();
        if matches!(self.op, Op::FenceRead | Op::FenceSync) && self.has_pending() {
            // These want every node's answer, not the first quorum's.
            return;
        }
        if self.ok >= self.quorum {
            let decision = match self.op {
                Op::Release | Op::Raise | Op::FenceRead | Op::FenceSync | Op::Leave => {
                    Decision::Quorum {
                        validity: Duration::ZERO,
                    }
                }
                Op::Acquire | Op::Extend => {
                    let elapsed = now.saturating_duration_since(self.started);
                    match validity(self.ttl, elapsed, self.drift) {
                        Some(validity) => Decision::Quorum { validity },
                        None => Decision::TooSlow,
                    }
                }
            };
            self.decide(decision, now);
        } else if self.failed > n - self.quorum {
            self.decide(Decision::NoQuorum, now);
        }
    }

    fn decide(&mut self, decision: Decision, now: Instant) {
        self.decision = Some(decision);
        self.decided_at = Some(now);
    }
}
