//! The Redis commands the lock sends, and what their replies mean. Pure:
//! encoding into a buffer and classifying decoded tokens.

use crate::resp::{Arg, Token, encode_command};
use crate::rules::{NodeError, Op, Reply, ServerError};
use crate::scripts::*;

mod command;

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub use command::{Command, Keys};
pub(crate) use command::{Shape, SyncMode};

/// Bytes of a lock token.
pub const TOKEN_LEN: usize = 20;

/// Where every key the crate keeps on the masters for itself lives
/// ([`FENCE_KEY`], [`FENCE_LOST_KEY`], [`MARKER_KEY`], [`LONGEST_TTL_KEY`]):
/// a resource whose name starts with it is refused with
/// [`Error::ReservedResource`](crate::Error::ReservedResource), so that no
/// lock can take the place of one of them, or be deleted by a script that
/// keeps them.
pub const RESERVED_PREFIX: &str = "redlock-mio:";

/// The restart guard's marker ([`Builder::restart_guard`](crate::Builder::restart_guard)):
/// set once, without TTL, so that a master found without it has lost its
/// data. Clients write values that start with `client:`; any other value
/// was provisioned by an operator (`SET redlock-mio:marker 1`), which
/// spares a master seen for the first time the quarantine of a recent
/// start (see the guard's docs for when that is sound).
pub const MARKER_KEY: &str = "redlock-mio:marker";

/// The deployment's longest TTL in milliseconds, kept on every master by
/// the first client with the restart guard or fencing that meets it
/// (`SET NX`, no TTL), or provisioned by an operator. A client whose
/// longest TTL differs is refused by that master
/// ([`NodeError::LongestTtl`](crate::NodeError::LongestTtl)), so
/// that clients configured differently cannot void the guarantees that
/// rest on it. To change it, set it on every master and restart every
/// client with the new value.
pub const LONGEST_TTL_KEY: &str = "redlock-mio:longest-ttl";

/// The per-master fence counter: a positive integer below 2^53, no TTL,
/// shared by every resource. Present means "in sync" for acquires; a read
/// also wants no [`FENCE_LOST_KEY`] beside it (see [`crate::fencing`]).
///
/// Every fence script checks this key and [`FENCE_LOST_KEY`] before it
/// uses them: a key of another type, or a value that is not such an
/// integer (written by someone else), makes it change nothing and reply
/// with the error `FOREIGNKEY <key>`, which the client counts as a failure
/// of that master alone
/// ([`NodeError::ForeignKey`](crate::NodeError::ForeignKey)).
pub const FENCE_KEY: &str = "redlock-mio:fence";

/// Set on a master found without [`FENCE_KEY`]: the server's time in
/// microseconds when that was first seen, which names this loss. Kept
/// beside the counter when the counter was started from the server's clock
/// (a new deployment, or every master lost), until the master raises a
/// fence ([`RAISE_SCRIPT`]): until then a read counts the master as out of
/// sync, so that a first sync cut short can be finished.
pub const FENCE_LOST_KEY: &str = "redlock-mio:fence-lost";

/// Where the channels live on which releases tell a client's waiters that
/// a lock was handed to them: one channel per client, named by a random id
/// (see [`WakeChannel`]).
pub(crate) const WAKE_PREFIX: &str = "redlock-mio:wake:";

/// A client's wake channel: `WAKE_PREFIX` and 16 hexadecimal digits.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub type WakeChannel = [u8; WAKE_PREFIX.len() + 16];

/// A wake channel named by `id`.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn wake_channel(id: u64) -> WakeChannel {
    let mut channel = [0; WAKE_PREFIX.len() + 16];
    channel[..WAKE_PREFIX.len()].copy_from_slice(WAKE_PREFIX.as_bytes());
    for (i, byte) in channel[WAKE_PREFIX.len()..].iter_mut().enumerate() {
        let nibble = (id >> (60 - 4 * i)) & 0xf;
        *byte = b"0123456789abcdef"[nibble as usize];
    }
    channel
}

/// The error code with which the fence scripts refuse a key of the
/// reserved space that holds what this crate never writes there.
const FOREIGN: &[u8] = b"FOREIGNKEY ";

/// The most resources one lock may cover.
pub(crate) const MAX_KEYS: usize = 64;

/// Appends `key` to a packed key list: its length (2 bytes, big-endian;
/// keys are at most [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN) bytes),
/// then its bytes.
pub(crate) fn pack_key(out: &mut impl Extend<u8>, key: &[u8]) {
    let len = u16::try_from(key.len()).unwrap_or(u16::MAX);
    out.extend(len.to_be_bytes());
    out.extend(key[..usize::from(len)].iter().copied());
}

/// The keys of a list packed by `pack_key`; a truncated tail is dropped.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn unpack_keys(mut packed: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (len, rest) = packed.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        let key = rest.get(..len)?;
        packed = &rest[len..];
        Some(key)
    })
}

/// The steps of a connection's handshake, pipelined in one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandshakeStep {
    Auth,
    /// `HELLO 3`: RESP3, so that wake-ups arrive as pushes on the same
    /// connection as the replies.
    Hello,
    Select,
    LoadRelease,
    LoadExtend,
    LoadAcquireMany,
    LoadReleaseMany,
    LoadExtendMany,
    LoadFencedAcquire,
    LoadRaise,
    LoadFenceRead,
    LoadFenceSync,
    LoadWaitAcquire,
    LoadLeave,
    LoadFencedWaitAcquire,
    /// `INFO server replication cluster`: who the server is.
    Identify,
    /// `SET <marker key> <value> NX GET`: whether the data set survived.
    Marker,
    /// `SET <longest TTL key> <ms> NX GET`: the deployment's longest TTL.
    LongestTtl,
    /// `SUBSCRIBE <the client's wake channel>`, confirmed by a push; sent
    /// once `HELLO` has succeeded.
    Subscribe,
    /// `CLIENT TRACKING ON OPTIN NOLOOP`: the server tells this connection
    /// when a key it read after `CLIENT CACHING YES` changes (see
    /// [`crate::flights::Watches`]); sent once `HELLO` has succeeded.
    Tracking,
}

/// What a connection's handshake asks beyond logging in and loading the
/// scripts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Probe<'a> {
    /// Send `INFO` (refuse replicas, cluster nodes, duplicates; see
    /// [`crate::rules::identity`]).
    pub(crate) identify: bool,
    /// Set the marker key to this value unless it exists, and read it.
    pub(crate) marker: Option<&'a [u8]>,
    /// Load the fence scripts too.
    pub(crate) fencing: bool,
    /// Set [`LONGEST_TTL_KEY`] to this many milliseconds unless it exists,
    /// and read it.
    pub(crate) longest_ttl: Option<u64>,
    /// Speak RESP3 and load the scripts of callers that wait (the link
    /// then subscribes to this channel, on which releases tell this
    /// client's waiters).
    pub(crate) wake: Option<&'a [u8]>,
}

impl HandshakeStep {
    /// The script a `SCRIPT LOAD` step loads.
    pub(crate) fn script(self) -> Option<Script> {
        Some(match self {
            HandshakeStep::LoadRelease => Script::Release,
            HandshakeStep::LoadExtend => Script::Extend,
            HandshakeStep::LoadAcquireMany => Script::AcquireMany,
            HandshakeStep::LoadReleaseMany => Script::ReleaseMany,
            HandshakeStep::LoadExtendMany => Script::ExtendMany,
            HandshakeStep::LoadFencedAcquire => Script::FencedAcquire,
            HandshakeStep::LoadRaise => Script::Raise,
            HandshakeStep::LoadFenceRead => Script::FenceRead,
            HandshakeStep::LoadFenceSync => Script::FenceSync,
            HandshakeStep::LoadWaitAcquire => Script::WaitAcquire,
            HandshakeStep::LoadLeave => Script::Leave,
            HandshakeStep::LoadFencedWaitAcquire => Script::FencedWaitAcquire,
            HandshakeStep::Auth
            | HandshakeStep::Hello
            | HandshakeStep::Select
            | HandshakeStep::Identify
            | HandshakeStep::Marker
            | HandshakeStep::LongestTtl
            | HandshakeStep::Subscribe
            | HandshakeStep::Tracking => {
                return None;
            }
        })
    }
}

/// Writes the handshake into `out` and returns its steps, in order.
pub(crate) fn encode_handshake(
    out: &mut Vec<u8>,
    user: Option<&str>,
    password: Option<&str>,
    db: u32,
    probe: Probe<'_>,
    steps: &mut Vec<HandshakeStep>,
) {
    steps.clear();
    if let Some(password) = password {
        match user {
            Some(user) => encode_command(out, &["AUTH".into(), user.into(), password.into()]),
            None => encode_command(out, &["AUTH".into(), password.into()]),
        }
        steps.push(HandshakeStep::Auth);
    }
    if probe.wake.is_some() {
        encode_command(out, &["HELLO".into(), "3".into()]);
        steps.push(HandshakeStep::Hello);
    }
    if db != 0 {
        encode_command(out, &["SELECT".into(), db.into()]);
        steps.push(HandshakeStep::Select);
    }
    let fence_steps: &[HandshakeStep] = if probe.fencing {
        &[
            HandshakeStep::LoadFencedAcquire,
            HandshakeStep::LoadRaise,
            HandshakeStep::LoadFenceRead,
            HandshakeStep::LoadFenceSync,
        ]
    } else {
        &[]
    };
    let wake_steps: &[HandshakeStep] = match (probe.wake.is_some(), probe.fencing) {
        (true, true) => &[
            HandshakeStep::LoadWaitAcquire,
            HandshakeStep::LoadLeave,
            HandshakeStep::LoadFencedWaitAcquire,
        ],
        (true, false) => &[HandshakeStep::LoadWaitAcquire, HandshakeStep::LoadLeave],
        (false, _) => &[],
    };
    for &step in [
        HandshakeStep::LoadRelease,
        HandshakeStep::LoadExtend,
        HandshakeStep::LoadAcquireMany,
        HandshakeStep::LoadReleaseMany,
        HandshakeStep::LoadExtendMany,
    ]
    .iter()
    .chain(fence_steps)
    .chain(wake_steps)
    {
        if let Some(script) = step.script() {
            encode_command(out, &["SCRIPT".into(), "LOAD".into(), script.text().into()]);
            steps.push(step);
        }
    }
    if probe.identify {
        encode_command(
            out,
            &[
                "INFO".into(),
                "server".into(),
                "replication".into(),
                "cluster".into(),
            ],
        );
        steps.push(HandshakeStep::Identify);
    }
    if let Some(value) = probe.marker {
        encode_command(
            out,
            &[
                "SET".into(),
                MARKER_KEY.into(),
                Arg::Bytes(value),
                "NX".into(),
                "GET".into(),
            ],
        );
        steps.push(HandshakeStep::Marker);
    }
    if let Some(ms) = probe.longest_ttl {
        encode_command(
            out,
            &[
                "SET".into(),
                LONGEST_TTL_KEY.into(),
                Arg::Uint(ms),
                "NX".into(),
                "GET".into(),
            ],
        );
        steps.push(HandshakeStep::LongestTtl);
    }
    // `SUBSCRIBE` follows once `HELLO` has succeeded (see `Link`).
}

/// What a reply to a lock command means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A definite answer.
    Reply(Reply),
    /// `-NOSCRIPT`: the script cache is empty; send it again as `EVAL`.
    NoScript,
    /// An error reply.
    Server(ServerError),
    /// A reply of a type the command never returns.
    Unexpected,
    /// A grant from a quarantined master: it does not count.
    Quarantined,
    /// The master failed for a reason of its own that leaves the
    /// connection as it is: a key of the reserved space holds what this
    /// crate never writes there, or the master refuses this client's
    /// configuration.
    Failed(NodeError),
}

/// Classifies the (first) token of a reply to the command `shape` was
/// split from.
pub(crate) fn classify(shape: &Shape, token: &Token<'_>) -> Outcome {
    let (op, many, fenced) = (shape.op(), shape.packed(), shape.fenced());
    let scripted = shape.is_script();
    if let (true, Token::Simple(text)) = (shape.waits(), token) {
        return classify_wait(text);
    }
    match (op, token) {
        (_, Token::Error(message) | Token::BulkError(message)) => {
            if message.starts_with(b"NOSCRIPT") && scripted {
                Outcome::NoScript
            } else if message.starts_with(FOREIGN)
                && (fenced || matches!(op, Op::Raise | Op::FenceRead | Op::FenceSync))
            {
                Outcome::Failed(NodeError::ForeignKey(foreign_key(
                    &message[FOREIGN.len()..],
                )))
            } else {
                Outcome::Server(ServerError::new(message))
            }
        }
        (Op::Acquire, Token::Null(_)) if !many || fenced => Outcome::Reply(Reply::Refused),
        (Op::Acquire | Op::FenceRead, &Token::Integer(n)) if fenced || op == Op::FenceRead => {
            counted(n)
        }
        (Op::Acquire, Token::Simple(b"OK")) if !many && !fenced => Outcome::Reply(Reply::Ok),
        (Op::FenceRead, Token::Bulk(text)) => read_unsynced(text),
        (Op::Raise, Token::Integer(-1)) => Outcome::Reply(Reply::Unsynced(0)),
        (Op::Extend | Op::Release | Op::Raise | Op::FenceSync, Token::Integer(1)) => {
            Outcome::Reply(Reply::Ok)
        }
        (Op::Extend | Op::Release | Op::Raise | Op::FenceSync, Token::Integer(0)) => {
            Outcome::Reply(Reply::Refused)
        }
        (Op::Acquire, Token::Integer(1)) if many => Outcome::Reply(Reply::Ok),
        (Op::Leave, Token::Integer(1)) => Outcome::Reply(Reply::Ok),
        (Op::Acquire, Token::Integer(0)) if many => Outcome::Reply(Reply::Refused),
        _ => Outcome::Unexpected,
    }
}

/// A status reply to an acquire that waits: `+OK` (granted, unless the
/// acquire counts a fence: it then answers with the count), or `+WAIT
/// <ms>` with the blocking key's `PTTL` (`-1`: it has no TTL).
fn classify_wait(text: &[u8]) -> Outcome {
    match text.strip_prefix(b"WAIT ") {
        None if text == b"OK" => Outcome::Reply(Reply::Ok),
        Some(b"-1") => Outcome::Reply(Reply::Queued {
            expires_in_ms: None,
        }),
        Some(ms) => match std::str::from_utf8(ms).ok().and_then(|ms| ms.parse().ok()) {
            Some(ms) => Outcome::Reply(Reply::Queued {
                expires_in_ms: Some(ms),
            }),
            None => Outcome::Unexpected,
        },
        None => Outcome::Unexpected,
    }
}

/// A fence counter read (`n > 0`) or, for a master whose counter is
/// missing, minus its loss id.
fn counted(n: i64) -> Outcome {
    match u64::try_from(n) {
        Ok(0) => Outcome::Unexpected,
        Ok(count) => Outcome::Reply(Reply::Count(count)),
        Err(_) => Outcome::Reply(Reply::Unsynced(n.unsigned_abs())),
    }
}

/// A fence read's answer from a master out of sync: `"<loss id> <server
/// time in µs> <counter, or 0>"`.
fn read_unsynced(text: &[u8]) -> Outcome {
    let mut numbers = text.split(|&b| b == b' ').map(|field| {
        std::str::from_utf8(field)
            .ok()
            .and_then(|f| f.parse::<u64>().ok())
    });
    match (
        numbers.next(),
        numbers.next(),
        numbers.next(),
        numbers.next(),
    ) {
        (Some(Some(lost)), Some(Some(time)), Some(Some(counter)), None) if lost > 0 && time > 0 => {
            Outcome::Reply(Reply::UnsyncedRead {
                lost,
                clock: time.max(counter),
            })
        }
        _ => Outcome::Unexpected,
    }
}

/// The key a `FOREIGNKEY` error names, as one of the crate's constants
/// (the reserved prefix if it is none of them).
fn foreign_key(named: &[u8]) -> &'static str {
    let named = named.split(|&b| b == b' ').next().unwrap_or_default();
    [FENCE_KEY, FENCE_LOST_KEY, MARKER_KEY, LONGEST_TTL_KEY]
        .into_iter()
        .find(|key| key.as_bytes() == named)
        .unwrap_or(RESERVED_PREFIX)
}

/// Whether a handshake reply is the one `step` expects. `Err` carries the
/// server's error, `Ok(false)` a reply of the wrong kind. A `WRONGTYPE`
/// error to the marker or the longest TTL is a reply (the key holds
/// something foreign, which [`crate::rules::identity`] turns into a
/// refusal), not a failed handshake.
pub(crate) fn handshake_ok(step: HandshakeStep, token: &Token<'_>) -> Result<bool, ServerError> {
    match (step, token) {
        (
            HandshakeStep::Marker | HandshakeStep::LongestTtl,
            Token::Error(message) | Token::BulkError(message),
        ) if message.starts_with(b"WRONGTYPE") => Ok(true),
        (_, Token::Error(message) | Token::BulkError(message)) => Err(ServerError::new(message)),
        (HandshakeStep::Auth | HandshakeStep::Select, Token::Simple(b"OK")) => Ok(true),
        (step, Token::Bulk(sha1)) if step.script().is_some() => Ok(step
            .script()
            .is_some_and(|script| sha1.eq_ignore_ascii_case(script.sha1().as_bytes()))),
        (HandshakeStep::Identify, Token::Bulk(_) | Token::Verbatim { .. }) => Ok(true),
        // The whole map was read (see `Link`); an error is caught above.
        (HandshakeStep::Hello, Token::Map(_)) => Ok(true),
        (HandshakeStep::Marker | HandshakeStep::LongestTtl, Token::Bulk(_) | Token::Null(_)) => {
            Ok(true)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests;
