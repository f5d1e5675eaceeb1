//! The decoder against what a real `redis-server` sends: every reply type
//! of `DEBUG PROTOCOL <type>`, in RESP2 and after `HELLO 3`, the replies a
//! lock round sees, and replies larger than one socket read.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::cluster::Cluster;
use redlock_mio::resp::{Arg, Decoder, Status, encode_command};

/// A raw connection that decodes replies with the crate's decoder.
struct Client {
    stream: TcpStream,
    decoder: Decoder,
    buf: Vec<u8>,
    /// Every byte received, to replay one byte at a time.
    wire: Vec<u8>,
}

impl Client {
    fn connect(cluster: &Cluster) -> Client {
        let addr = cluster.node(0).addr().socket_addr().expect("a TCP node");
        let stream = TcpStream::connect(addr).expect("connect to redis-server");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("set a read timeout");
        Client {
            stream,
            decoder: Decoder::new(),
            buf: Vec::new(),
            wire: Vec::new(),
        }
    }

    /// Sends a command and returns its reply's tokens as `Debug` text.
    fn call(&mut self, args: &[Arg<'_>]) -> Vec<String> {
        let mut out = Vec::new();
        encode_command(&mut out, args);
        self.stream.write_all(&out).expect("write a command");
        self.reply()
    }

    /// Reads one whole reply (up to its frame end).
    fn reply(&mut self) -> Vec<String> {
        let mut tokens = Vec::new();
        loop {
            match self.decoder.decode(&self.buf).expect("a valid reply") {
                Status::Complete(item) => {
                    tokens.push(format!("{:?}", item.token));
                    let (len, frame_end) = (item.len, item.frame_end);
                    self.buf.drain(..len);
                    if frame_end {
                        assert!(self.decoder.is_idle());
                        return tokens;
                    }
                }
                Status::Partial => {
                    let mut chunk = [0u8; 4096];
                    let n = self.stream.read(&mut chunk).expect("read a reply");
                    assert!(n > 0, "server closed the connection");
                    self.buf.extend_from_slice(&chunk[..n]);
                    self.wire.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }

    /// Decodes everything received so far again, one byte at a time, and
    /// returns the tokens.
    fn replay_bytewise(&self) -> Vec<String> {
        let mut decoder = Decoder::new();
        let mut buf = Vec::new();
        let mut tokens = Vec::new();
        for &b in &self.wire {
            buf.push(b);
            while let Status::Complete(item) = decoder.decode(&buf).expect("a valid reply") {
                tokens.push(format!("{:?}", item.token));
                buf.drain(..item.len);
            }
        }
        assert!(buf.is_empty() && decoder.is_idle());
        tokens
    }
}

fn debug_protocol(client: &mut Client, kind: &str) -> Vec<String> {
    client.call(&["DEBUG".into(), "PROTOCOL".into(), kind.into()])
}

/// Every `DEBUG PROTOCOL` type, with the tokens expected in RESP2 and RESP3.
const TYPES: &[(&str, &[&str], &[&str])] = &[
    (
        "string",
        &["Bulk(b\"Hello World\")"],
        &["Bulk(b\"Hello World\")"],
    ),
    ("integer", &["Integer(12345)"], &["Integer(12345)"]),
    ("double", &["Bulk(b\"3.141\")"], &["Double(3.141)"]),
    (
        "bignum",
        &["Bulk(b\"1234567999999999999999999999999999999\")"],
        &["BigNumber(b\"1234567999999999999999999999999999999\")"],
    ),
    ("null", &["Null(Bulk)"], &["Null(Null)"]),
    (
        "array",
        &["Array(3)", "Integer(0)", "Integer(1)", "Integer(2)"],
        &["Array(3)", "Integer(0)", "Integer(1)", "Integer(2)"],
    ),
    (
        "set",
        &["Array(3)", "Integer(0)", "Integer(1)", "Integer(2)"],
        &["Set(3)", "Integer(0)", "Integer(1)", "Integer(2)"],
    ),
    (
        "map",
        &[
            "Array(6)",
            "Integer(0)",
            "Integer(0)",
            "Integer(1)",
            "Integer(1)",
            "Integer(2)",
            "Integer(0)",
        ],
        &[
            "Map(3)",
            "Integer(0)",
            "Boolean(false)",
            "Integer(1)",
            "Boolean(true)",
            "Integer(2)",
            "Boolean(false)",
        ],
    ),
    (
        "attrib",
        &["Bulk(b\"Some real reply following the attribute\")"],
        &[
            "Attribute(1)",
            "Bulk(b\"key-popularity\")",
            "Array(2)",
            "Bulk(b\"key:123\")",
            "Integer(90)",
            "Bulk(b\"Some real reply following the attribute\")",
        ],
    ),
    (
        "verbatim",
        &["Bulk(b\"This is a verbatim\\nstring\")"],
        &["Verbatim { format: b\"txt\", text: b\"This is a verbatim\\nstring\" }"],
    ),
    ("true", &["Integer(1)"], &["Boolean(true)"]),
    ("false", &["Integer(0)"], &["Boolean(false)"]),
];

#[test]
fn debug_protocol_resp2() {
    let cluster = Cluster::start(1);
    let mut client = Client::connect(&cluster);
    let mut all = Vec::new();
    for (kind, resp2, _) in TYPES {
        let tokens = debug_protocol(&mut client, kind);
        assert_eq!(tokens, *resp2, "DEBUG PROTOCOL {kind} in RESP2");
        all.extend(tokens);
    }
    let push = debug_protocol(&mut client, "push");
    assert_eq!(push.len(), 1);
    assert!(push[0].starts_with("Error(b\"ERR"), "{push:?}");
    all.extend(push);
    assert_eq!(client.replay_bytewise(), all);
}

#[test]
fn debug_protocol_resp3() {
    let cluster = Cluster::start(1);
    let mut client = Client::connect(&cluster);
    let hello = client.call(&["HELLO".into(), "3".into()]);
    assert!(hello[0].starts_with("Map("), "{hello:?}");
    let keys: Vec<&str> = hello[1..].iter().step_by(2).map(String::as_str).collect();
    for key in [
        "server", "version", "proto", "id", "mode", "role", "modules",
    ] {
        let key = format!("Bulk(b\"{key}\")");
        assert!(
            keys.contains(&key.as_str()),
            "HELLO 3 reply lacks {key}: {hello:?}"
        );
    }
    let mut all = hello;
    for (kind, _, resp3) in TYPES {
        let tokens = debug_protocol(&mut client, kind);
        assert_eq!(tokens, *resp3, "DEBUG PROTOCOL {kind} in RESP3");
        all.extend(tokens);
    }
    // A push and the command's ordinary reply come as two frames, each
    // decoded whole; the server picks their order (Redis sends the push
    // first, Valkey the reply).
    let first = debug_protocol(&mut client, "push");
    let second = client.reply();
    all.extend(first.iter().chain(&second).cloned());
    let (push, reply) = if first[0].starts_with("Push(") {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(push.len(), 3, "a push of two elements: {push:?}");
    assert_eq!(push[0], "Push(2)", "{push:?}");
    assert!(
        push[1..].iter().all(|t| !t.starts_with("Push(")),
        "{push:?}"
    );
    assert_eq!(reply.len(), 1, "one ordinary reply: {reply:?}");
    assert!(reply[0].starts_with("Bulk("), "{reply:?}");
    assert_eq!(client.replay_bytewise(), all);
}

#[test]
fn lock_round_replies_in_both_protocols() {
    let cluster = Cluster::start(1);
    for resp3 in [false, true] {
        let mut client = Client::connect(&cluster);
        if resp3 {
            client.call(&["HELLO".into(), "3".into()]);
        }
        let key: &[u8] = if resp3 {
            b"lock\x00\xff3"
        } else {
            b"lock\x00\xff2"
        };
        let set: [Arg<'_>; 6] = [
            "SET".into(),
            key.into(),
            b"token-1".into(),
            "NX".into(),
            "PX".into(),
            30_000u64.into(),
        ];
        assert_eq!(client.call(&set), ["Simple(b\"OK\")"]);
        let held = if resp3 { "Null(Null)" } else { "Null(Bulk)" };
        assert_eq!(client.call(&set), [held]);
        let missing = client.call(&[
            "EVALSHA".into(),
            "ffffffffffffffffffffffffffffffffffffffff".into(),
            1u64.into(),
            key.into(),
        ]);
        assert_eq!(missing.len(), 1);
        assert!(missing[0].starts_with("Error(b\"NOSCRIPT"), "{missing:?}");
        let script = "return redis.call('pexpire', KEYS[1], ARGV[1])";
        let sha = client.call(&["SCRIPT".into(), "LOAD".into(), script.into()]);
        assert_eq!(sha.len(), 1);
        assert_eq!(sha[0].len(), "Bulk(b\"\")".len() + 40, "{sha:?}");
        assert_eq!(client.call(&["PTTL".into(), key.into()]).len(), 1);
        assert_eq!(client.call(&["DEL".into(), key.into()]), ["Integer(1)"]);
    }
}

#[test]
fn replies_larger_than_one_read() {
    let cluster = Cluster::start(1);
    let mut client = Client::connect(&cluster);
    let big: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    assert_eq!(
        client.call(&["SET".into(), "big".into(), big.as_slice().into()]),
        ["Simple(b\"OK\")"]
    );
    let got = client.call(&["GET".into(), "big".into()]);
    assert_eq!(got, [format!("Bulk(b\"{}\")", big.escape_ascii())]);

    let mut push: Vec<Arg<'_>> = vec!["RPUSH".into(), "list".into()];
    let items: Vec<String> = (0..1000).map(|i| format!("item-{i}")).collect();
    push.extend(items.iter().map(|s| Arg::from(s.as_str())));
    assert_eq!(client.call(&push), ["Integer(1000)"]);
    let range = client.call(&["LRANGE".into(), "list".into(), 0i64.into(), (-1i64).into()]);
    assert_eq!(range.len(), 1001);
    assert_eq!(range[0], "Array(1000)");
    assert_eq!(range[1000], "Bulk(b\"item-999\")");
    assert_eq!(client.replay_bytewise().len(), 1 + 1 + 1 + 1001);
}
