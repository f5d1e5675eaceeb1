//! The Redis commands the lock sends, and what their replies mean. Pure:
//! encoding into a buffer and classifying decoded tokens.

use smallvec::SmallVec;

use crate::resp::{Arg, Token, encode_command};
use crate::rules::identity::MARKER_KEY;
use crate::rules::{Op, Reply, ServerError};

/// Compare-and-delete: deletes the key only if it still holds our token.
pub const RELEASE_SCRIPT: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

/// SHA1 of [`RELEASE_SCRIPT`], as `SCRIPT LOAD` returns it.
pub const RELEASE_SHA1: &str = "b70c2384248f88e6b75b9f89241a180f856ad852";

/// Compare-and-`PEXPIRE`: extends the key only if it still holds our token.
pub const EXTEND_SCRIPT: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end"#;

/// SHA1 of [`EXTEND_SCRIPT`], as `SCRIPT LOAD` returns it.
pub const EXTEND_SHA1: &str = "36e94d1c6e02fcefaa7ee5d79eee614dbac55f10";

/// All or nothing over several keys: sets every key (`PX ARGV[2]`) to the
/// token `ARGV[1]` if none of them exists, else none.
pub const ACQUIRE_MANY_SCRIPT: &str = r#"for i=1,#KEYS do if redis.call("get",KEYS[i]) then return 0 end end for i=1,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) end return 1"#;
/// SHA1 of [`ACQUIRE_MANY_SCRIPT`].
pub const ACQUIRE_MANY_SHA1: &str = "fc228ec235ee22e803a6b572f5526aaf36477068";

/// Deletes every key that still holds the token `ARGV[1]`; `1` if any did.
pub const RELEASE_MANY_SCRIPT: &str = r#"local n=0 for i=1,#KEYS do if redis.call("get",KEYS[i])==ARGV[1] then n=n+redis.call("del",KEYS[i]) end end if n>0 then return 1 else return 0 end"#;
/// SHA1 of [`RELEASE_MANY_SCRIPT`].
pub const RELEASE_MANY_SHA1: &str = "223e5508dbb3824a8b008627fa9b62603a25f294";

/// Extends every key to `ARGV[2]` ms if all still hold the token `ARGV[1]`,
/// else none.
pub const EXTEND_MANY_SCRIPT: &str = r#"for i=1,#KEYS do if redis.call("get",KEYS[i])~=ARGV[1] then return 0 end end for i=1,#KEYS do redis.call("pexpire",KEYS[i],ARGV[2]) end return 1"#;
/// SHA1 of [`EXTEND_MANY_SCRIPT`].
pub const EXTEND_MANY_SHA1: &str = "625585dd655db49164a0d3f383c152341a6e2375";

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

/// The keys of a list packed by [`pack_key`]; a truncated tail is dropped.
pub(crate) fn unpack_keys(mut packed: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (len, rest) = packed.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        let key = rest.get(..len)?;
        packed = &rest[len..];
        Some(key)
    })
}

/// One lock command, borrowed from the caller's lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Command<'a> {
    pub(crate) op: Op,
    pub(crate) resource: &'a [u8],
    pub(crate) token: &'a [u8],
    pub(crate) ttl_ms: u64,
    /// Send scripts as `EVAL` with their text instead of `EVALSHA`, which
    /// cannot fail with `NOSCRIPT`.
    pub(crate) eval: bool,
    /// `resource` is a list of keys packed by [`pack_key`]: the command is
    /// the all-or-nothing script for several resources.
    pub(crate) many: bool,
}

impl Command<'_> {
    /// Writes the command into `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        if self.many {
            self.encode_many(out);
            return;
        }
        let (script, sha1) = match self.op {
            Op::Acquire => {
                encode_command(
                    out,
                    &[
                        Arg::Bytes(b"SET"),
                        Arg::Bytes(self.resource),
                        Arg::Bytes(self.token),
                        Arg::Bytes(b"NX"),
                        Arg::Bytes(b"PX"),
                        Arg::Uint(self.ttl_ms),
                    ],
                );
                return;
            }
            Op::Release => (RELEASE_SCRIPT, RELEASE_SHA1),
            Op::Extend => (EXTEND_SCRIPT, EXTEND_SHA1),
        };
        let (verb, body) = self.script_call(script, sha1);
        let head = [
            Arg::Bytes(verb),
            Arg::Bytes(body),
            Arg::Uint(1),
            Arg::Bytes(self.resource),
            Arg::Bytes(self.token),
            Arg::Uint(self.ttl_ms),
        ];
        // Release takes no TTL argument.
        let args = if self.op == Op::Release {
            &head[..5]
        } else {
            &head[..]
        };
        encode_command(out, args);
    }

    /// `EVAL script` or `EVALSHA sha1`: the verb and its first argument.
    fn script_call<'s>(&self, script: &'s str, sha1: &'s str) -> (&'static [u8], &'s [u8]) {
        if self.eval {
            (b"EVAL", script.as_bytes())
        } else {
            (b"EVALSHA", sha1.as_bytes())
        }
    }

    /// `EVALSHA sha numkeys key... token [ttl]` of the script for several
    /// keys (the argument list spills to the heap beyond 16 keys).
    fn encode_many(&self, out: &mut Vec<u8>) {
        let (script, sha1) = match self.op {
            Op::Acquire => (ACQUIRE_MANY_SCRIPT, ACQUIRE_MANY_SHA1),
            Op::Release => (RELEASE_MANY_SCRIPT, RELEASE_MANY_SHA1),
            Op::Extend => (EXTEND_MANY_SCRIPT, EXTEND_MANY_SHA1),
        };
        let (verb, body) = self.script_call(script, sha1);
        let keys = unpack_keys(self.resource);
        let mut args: SmallVec<[Arg<'_>; 22]> = SmallVec::new();
        args.extend([Arg::Bytes(verb), Arg::Bytes(body), Arg::Uint(0)]);
        args.extend(keys.map(Arg::Bytes));
        args[2] = Arg::Uint((args.len() - 3) as u64);
        args.push(Arg::Bytes(self.token));
        if self.op != Op::Release {
            args.push(Arg::Uint(self.ttl_ms));
        }
        encode_command(out, &args);
    }
}

/// The steps of a connection's handshake, pipelined in one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Auth,
    Select,
    LoadRelease,
    LoadExtend,
    LoadAcquireMany,
    LoadReleaseMany,
    LoadExtendMany,
    /// `INFO server replication cluster`: who the server is.
    Identify,
    /// `SET <marker key> <value> NX GET`: whether the data set survived.
    Marker,
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
}

/// Writes the handshake into `out` and returns its steps, in order.
pub(crate) fn encode_handshake(
    out: &mut Vec<u8>,
    user: Option<&str>,
    password: Option<&str>,
    db: u32,
    probe: Probe<'_>,
    steps: &mut Vec<Step>,
) {
    steps.clear();
    if let Some(password) = password {
        match user {
            Some(user) => encode_command(out, &["AUTH".into(), user.into(), password.into()]),
            None => encode_command(out, &["AUTH".into(), password.into()]),
        }
        steps.push(Step::Auth);
    }
    if db != 0 {
        encode_command(out, &["SELECT".into(), db.into()]);
        steps.push(Step::Select);
    }
    encode_command(
        out,
        &["SCRIPT".into(), "LOAD".into(), RELEASE_SCRIPT.into()],
    );
    steps.push(Step::LoadRelease);
    for (script, step) in [
        (EXTEND_SCRIPT, Step::LoadExtend),
        (ACQUIRE_MANY_SCRIPT, Step::LoadAcquireMany),
        (RELEASE_MANY_SCRIPT, Step::LoadReleaseMany),
        (EXTEND_MANY_SCRIPT, Step::LoadExtendMany),
    ] {
        encode_command(out, &["SCRIPT".into(), "LOAD".into(), script.into()]);
        steps.push(step);
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
        steps.push(Step::Identify);
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
        steps.push(Step::Marker);
    }
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
}

/// Classifies the (first) token of a reply to `op` (`many`: the script for
/// several keys).
pub(crate) fn classify(op: Op, many: bool, token: &Token<'_>) -> Outcome {
    match (op, token) {
        (_, Token::Error(message) | Token::BulkError(message)) => {
            if message.starts_with(b"NOSCRIPT") && (op != Op::Acquire || many) {
                Outcome::NoScript
            } else {
                Outcome::Server(ServerError::new(message))
            }
        }
        (Op::Acquire, Token::Simple(b"OK")) if !many => Outcome::Reply(Reply::Ok),
        (Op::Acquire, Token::Null(_)) if !many => Outcome::Reply(Reply::Refused),
        (Op::Extend | Op::Release, Token::Integer(1)) => Outcome::Reply(Reply::Ok),
        (Op::Extend | Op::Release, Token::Integer(0)) => Outcome::Reply(Reply::Refused),
        (Op::Acquire, Token::Integer(1)) if many => Outcome::Reply(Reply::Ok),
        (Op::Acquire, Token::Integer(0)) if many => Outcome::Reply(Reply::Refused),
        _ => Outcome::Unexpected,
    }
}

/// Whether a handshake reply is the one `step` expects. `Err` carries the
/// server's error, `Ok(false)` a reply of the wrong kind.
pub(crate) fn handshake_ok(step: Step, token: &Token<'_>) -> Result<bool, ServerError> {
    match (step, token) {
        (_, Token::Error(message) | Token::BulkError(message)) => Err(ServerError::new(message)),
        (Step::Auth | Step::Select, Token::Simple(b"OK")) => Ok(true),
        (Step::LoadRelease, Token::Bulk(sha1)) => {
            Ok(sha1.eq_ignore_ascii_case(RELEASE_SHA1.as_bytes()))
        }
        (Step::LoadExtend, Token::Bulk(sha1)) => {
            Ok(sha1.eq_ignore_ascii_case(EXTEND_SHA1.as_bytes()))
        }
        (Step::LoadAcquireMany, Token::Bulk(sha1)) => {
            Ok(sha1.eq_ignore_ascii_case(ACQUIRE_MANY_SHA1.as_bytes()))
        }
        (Step::LoadReleaseMany, Token::Bulk(sha1)) => {
            Ok(sha1.eq_ignore_ascii_case(RELEASE_MANY_SHA1.as_bytes()))
        }
        (Step::LoadExtendMany, Token::Bulk(sha1)) => {
            Ok(sha1.eq_ignore_ascii_case(EXTEND_MANY_SHA1.as_bytes()))
        }
        (Step::Identify, Token::Bulk(_)) => Ok(true),
        (Step::Marker, Token::Bulk(_) | Token::Null(_)) => Ok(true),
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::NullKind;

    fn classify_one(op: Op, token: &Token<'_>) -> Outcome {
        classify(op, false, token)
    }

    fn encoded(command: Command<'_>) -> String {
        let mut out = Vec::new();
        command.encode(&mut out);
        out.escape_ascii().to_string()
    }

    #[test]
    fn commands_on_the_wire() {
        let command = Command {
            op: Op::Acquire,
            resource: b"r",
            token: b"\x00t",
            ttl_ms: 30_000,
            eval: false,
            many: false,
        };
        assert_eq!(
            encoded(command),
            "*6\\r\\n$3\\r\\nSET\\r\\n$1\\r\\nr\\r\\n$2\\r\\n\\x00t\\r\\n$2\\r\\nNX\\r\\n$2\\r\\nPX\\r\\n$5\\r\\n30000\\r\\n"
        );
        let release = Command {
            op: Op::Release,
            ..command
        };
        assert_eq!(
            encoded(release),
            format!(
                "*5\\r\\n$7\\r\\nEVALSHA\\r\\n$40\\r\\n{RELEASE_SHA1}\\r\\n$1\\r\\n1\\r\\n$1\\r\\nr\\r\\n$2\\r\\n\\x00t\\r\\n"
            )
        );
        let extend = Command {
            op: Op::Extend,
            eval: true,
            ..command
        };
        let text = encoded(extend);
        assert!(text.starts_with("*6\\r\\n$4\\r\\nEVAL\\r\\n"), "{text}");
        assert!(text.ends_with("$5\\r\\n30000\\r\\n"), "{text}");
    }

    #[test]
    fn several_keys_on_the_wire() {
        let mut packed = Vec::new();
        for key in [&b"a"[..], b"bc", b""] {
            pack_key(&mut packed, key);
        }
        assert_eq!(packed, b"\0\x01a\0\x02bc\0\0");
        let keys: Vec<&[u8]> = unpack_keys(&packed).collect();
        assert_eq!(keys, [&b"a"[..], b"bc", b""]);
        // A truncated tail is dropped, never read past.
        assert_eq!(unpack_keys(&packed[..4]).count(), 1);
        let extend = Command {
            op: Op::Extend,
            resource: &packed[..7],
            token: b"t",
            ttl_ms: 500,
            eval: false,
            many: true,
        };
        assert_eq!(
            encoded(extend),
            format!(
                "*7\\r\\n$7\\r\\nEVALSHA\\r\\n$40\\r\\n{EXTEND_MANY_SHA1}\\r\\n$1\\r\\n2\\r\\n$1\\r\\na\\r\\n$2\\r\\nbc\\r\\n$1\\r\\nt\\r\\n$3\\r\\n500\\r\\n"
            )
        );
        let release = Command {
            op: Op::Release,
            eval: true,
            ..extend
        };
        let text = encoded(release);
        assert!(text.starts_with("*6\\r\\n$4\\r\\nEVAL\\r\\n"), "{text}");
        assert!(text.ends_with("$1\\r\\nt\\r\\n"), "no TTL: {text}");
        assert_eq!(
            classify(Op::Acquire, true, &Token::Integer(1)),
            Outcome::Reply(Reply::Ok)
        );
        assert_eq!(
            classify(Op::Acquire, true, &Token::Simple(b"OK")),
            Outcome::Unexpected
        );
        assert_eq!(
            classify(Op::Acquire, true, &Token::Error(b"NOSCRIPT x")),
            Outcome::NoScript
        );
    }

    #[test]
    fn replies() {
        use Outcome::*;
        assert_eq!(
            classify_one(Op::Acquire, &Token::Simple(b"OK")),
            Reply(super::Reply::Ok)
        );
        for null in [NullKind::Null, NullKind::Bulk, NullKind::Array] {
            assert_eq!(
                classify_one(Op::Acquire, &Token::Null(null)),
                Reply(super::Reply::Refused)
            );
        }
        assert_eq!(
            classify_one(Op::Release, &Token::Integer(1)),
            Reply(super::Reply::Ok)
        );
        assert_eq!(
            classify_one(Op::Extend, &Token::Integer(0)),
            Reply(super::Reply::Refused)
        );
        assert_eq!(
            classify_one(Op::Release, &Token::Error(b"NOSCRIPT No matching script")),
            NoScript
        );
        assert!(matches!(
            classify_one(Op::Acquire, &Token::Error(b"NOSCRIPT x")),
            Server(_)
        ));
        assert!(
            matches!(classify_one(Op::Acquire, &Token::Error(b"OOM no")), Server(e) if e.code() == b"OOM")
        );
        assert_eq!(
            classify_one(Op::Acquire, &Token::Simple(b"QUEUED")),
            Unexpected
        );
        assert_eq!(classify_one(Op::Acquire, &Token::Integer(1)), Unexpected);
        assert_eq!(classify_one(Op::Release, &Token::Integer(2)), Unexpected);
        assert_eq!(classify_one(Op::Release, &Token::Simple(b"OK")), Unexpected);
    }

    #[test]
    fn handshake() {
        let mut out = Vec::new();
        let mut steps = Vec::new();
        encode_handshake(
            &mut out,
            Some("u"),
            Some("p"),
            3,
            Probe::default(),
            &mut steps,
        );
        assert_eq!(
            steps,
            [
                Step::Auth,
                Step::Select,
                Step::LoadRelease,
                Step::LoadExtend,
                Step::LoadAcquireMany,
                Step::LoadReleaseMany,
                Step::LoadExtendMany
            ]
        );
        out.clear();
        encode_handshake(&mut out, None, None, 0, Probe::default(), &mut steps);
        assert_eq!(steps.len(), 5);
        out.clear();
        let probe = Probe {
            identify: true,
            marker: Some(b"m1"),
        };
        encode_handshake(&mut out, None, None, 0, probe, &mut steps);
        assert_eq!(steps[5..], [Step::Identify, Step::Marker]);
        let text = out.escape_ascii().to_string();
        assert!(
            text.ends_with("*4\\r\\n$4\\r\\nINFO\\r\\n$6\\r\\nserver\\r\\n$11\\r\\nreplication\\r\\n$7\\r\\ncluster\\r\\n*5\\r\\n$3\\r\\nSET\\r\\n$18\\r\\nredlock-mio:marker\\r\\n$2\\r\\nm1\\r\\n$2\\r\\nNX\\r\\n$3\\r\\nGET\\r\\n"),
            "{text}"
        );
        assert_eq!(
            handshake_ok(Step::Marker, &Token::Null(NullKind::Null)),
            Ok(true)
        );
        assert_eq!(handshake_ok(Step::Identify, &Token::Integer(1)), Ok(false));
        assert_eq!(
            handshake_ok(Step::LoadRelease, &Token::Bulk(RELEASE_SHA1.as_bytes())),
            Ok(true)
        );
        assert_eq!(
            handshake_ok(Step::LoadRelease, &Token::Bulk(EXTEND_SHA1.as_bytes())),
            Ok(false)
        );
        assert_eq!(handshake_ok(Step::Auth, &Token::Integer(1)), Ok(false));
        assert!(handshake_ok(Step::Auth, &Token::Error(b"WRONGPASS")).is_err());
    }
}
