//! The Redis commands the lock sends, and what their replies mean. Pure:
//! encoding into a buffer and classifying decoded tokens.

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
}

impl Command<'_> {
    /// Writes the command into `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
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
        let (verb, body): (&[u8], &[u8]) = if self.eval {
            (b"EVAL", script.as_bytes())
        } else {
            (b"EVALSHA", sha1.as_bytes())
        };
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
}

/// The steps of a connection's handshake, pipelined in one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Auth,
    Select,
    LoadRelease,
    LoadExtend,
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
    encode_command(out, &["SCRIPT".into(), "LOAD".into(), EXTEND_SCRIPT.into()]);
    steps.push(Step::LoadExtend);
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

/// Classifies the (first) token of a reply to `op`.
pub(crate) fn classify(op: Op, token: &Token<'_>) -> Outcome {
    match (op, token) {
        (_, Token::Error(message) | Token::BulkError(message)) => {
            if message.starts_with(b"NOSCRIPT") && op != Op::Acquire {
                Outcome::NoScript
            } else {
                Outcome::Server(ServerError::new(message))
            }
        }
        (Op::Acquire, Token::Simple(b"OK")) => Outcome::Reply(Reply::Ok),
        (Op::Acquire, Token::Null(_)) => Outcome::Reply(Reply::Refused),
        (Op::Extend | Op::Release, Token::Integer(1)) => Outcome::Reply(Reply::Ok),
        (Op::Extend | Op::Release, Token::Integer(0)) => Outcome::Reply(Reply::Refused),
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
        (Step::Identify, Token::Bulk(_)) => Ok(true),
        (Step::Marker, Token::Bulk(_) | Token::Null(_)) => Ok(true),
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::NullKind;

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
    fn replies() {
        use Outcome::*;
        assert_eq!(
            classify(Op::Acquire, &Token::Simple(b"OK")),
            Reply(super::Reply::Ok)
        );
        for null in [NullKind::Null, NullKind::Bulk, NullKind::Array] {
            assert_eq!(
                classify(Op::Acquire, &Token::Null(null)),
                Reply(super::Reply::Refused)
            );
        }
        assert_eq!(
            classify(Op::Release, &Token::Integer(1)),
            Reply(super::Reply::Ok)
        );
        assert_eq!(
            classify(Op::Extend, &Token::Integer(0)),
            Reply(super::Reply::Refused)
        );
        assert_eq!(
            classify(Op::Release, &Token::Error(b"NOSCRIPT No matching script")),
            NoScript
        );
        assert!(matches!(
            classify(Op::Acquire, &Token::Error(b"NOSCRIPT x")),
            Server(_)
        ));
        assert!(
            matches!(classify(Op::Acquire, &Token::Error(b"OOM no")), Server(e) if e.code() == b"OOM")
        );
        assert_eq!(classify(Op::Acquire, &Token::Simple(b"QUEUED")), Unexpected);
        assert_eq!(classify(Op::Acquire, &Token::Integer(1)), Unexpected);
        assert_eq!(classify(Op::Release, &Token::Integer(2)), Unexpected);
        assert_eq!(classify(Op::Release, &Token::Simple(b"OK")), Unexpected);
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
                Step::LoadExtend
            ]
        );
        out.clear();
        encode_handshake(&mut out, None, None, 0, Probe::default(), &mut steps);
        assert_eq!(steps, [Step::LoadRelease, Step::LoadExtend]);
        out.clear();
        let probe = Probe {
            identify: true,
            marker: Some(b"m1"),
        };
        encode_handshake(&mut out, None, None, 0, probe, &mut steps);
        assert_eq!(
            steps,
            [
                Step::LoadRelease,
                Step::LoadExtend,
                Step::Identify,
                Step::Marker
            ]
        );
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
