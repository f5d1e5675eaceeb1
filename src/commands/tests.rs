//! Unit tests of the commands: encodings, replies classified, handshake steps.

use super::*;
use crate::resp::NullKind;

/// A command of `op` (`many`: on several keys; `fenced`: the fenced
/// acquire).
fn sample(op: Op, many: bool, fenced: bool) -> Command<'static> {
    let keys = Keys::new(&b"\0\x01r"[..], many);
    match op {
        Op::Acquire if fenced => Command::fenced_acquire(keys, b"t", 500),
        Op::Acquire => Command::acquire(keys, b"t", 500),
        Op::Extend => Command::extend(keys, b"t", 500),
        Op::Release => Command::release(keys, b"t"),
        Op::Raise => Command::raise(keys, b"t", 42),
        Op::FenceRead => Command::fence_read(),
        Op::FenceSync => Command::fence_sync(b"\0\x0217", SyncMode::Start, 1),
        _ => Command::leave(keys, b"m"),
    }
}

/// How the reply `token` to a command of `op` is classified.
fn classify_as(op: Op, many: bool, fenced: bool, token: &Token<'_>) -> Outcome {
    classify(&sample(op, many, fenced).split().0, token)
}

fn classify_one(op: Op, token: &Token<'_>) -> Outcome {
    classify_as(op, false, false, token)
}

fn encoded(command: Command<'_>) -> String {
    let mut out = Vec::new();
    command.encode(&mut out);
    out.escape_ascii().to_string()
}

#[test]
fn commands_on_the_wire() {
    let (key, token) = (Keys::One(&b"r"[..]), &b"\x00t"[..]);
    let command = Command::acquire(key, token, 30_000);
    assert_eq!(
        encoded(command),
        "*6\\r\\n$3\\r\\nSET\\r\\n$1\\r\\nr\\r\\n$2\\r\\n\\x00t\\r\\n$2\\r\\nNX\\r\\n$2\\r\\nPX\\r\\n$5\\r\\n30000\\r\\n"
    );
    let release = Command::release(key, token);
    assert_eq!(
        encoded(release),
        format!(
            "*5\\r\\n$7\\r\\nEVALSHA\\r\\n$40\\r\\n{RELEASE_SHA1}\\r\\n$1\\r\\n1\\r\\n$1\\r\\nr\\r\\n$2\\r\\n\\x00t\\r\\n"
        )
    );
    let extend = Command::extend(key, token, 30_000).with_script();
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
    let keys = Keys::Packed(&packed[..7]);
    let extend = Command::extend(keys, b"t", 500);
    assert_eq!(
        encoded(extend),
        format!(
            "*7\\r\\n$7\\r\\nEVALSHA\\r\\n$40\\r\\n{EXTEND_MANY_SHA1}\\r\\n$1\\r\\n2\\r\\n$1\\r\\na\\r\\n$2\\r\\nbc\\r\\n$1\\r\\nt\\r\\n$3\\r\\n500\\r\\n"
        )
    );
    let release = Command::release(keys, b"t").with_script();
    let text = encoded(release);
    assert!(text.starts_with("*6\\r\\n$4\\r\\nEVAL\\r\\n"), "{text}");
    assert!(text.ends_with("$1\\r\\nt\\r\\n"), "no TTL: {text}");
    assert_eq!(
        classify_as(Op::Acquire, true, false, &Token::Integer(1)),
        Outcome::Reply(Reply::Ok)
    );
    assert_eq!(
        classify_as(Op::Acquire, true, false, &Token::Simple(b"OK")),
        Outcome::Unexpected
    );
    assert_eq!(
        classify_as(Op::Acquire, true, false, &Token::Error(b"NOSCRIPT x")),
        Outcome::NoScript
    );
}

#[test]
fn fence_commands_on_the_wire() {
    let acquire = Command::fenced_acquire(Keys::One(b"r"), b"t", 500);
    assert_eq!(
        encoded(acquire),
        format!(
            "*8\\r\\n$7\\r\\nEVALSHA\\r\\n$40\\r\\n{FENCED_ACQUIRE_SHA1}\\r\\n$1\\r\\n3\\r\\n$17\\r\\nredlock-mio:fence\\r\\n$22\\r\\nredlock-mio:fence-lost\\r\\n$1\\r\\nr\\r\\n$1\\r\\nt\\r\\n$3\\r\\n500\\r\\n"
        )
    );
    let mut packed = Vec::new();
    pack_key(&mut packed, b"a");
    pack_key(&mut packed, b"b");
    let raise = Command::raise(Keys::Packed(&packed), b"t", 42);
    assert_eq!(
        encoded(raise),
        format!(
            "*9\\r\\n$7\\r\\nEVALSHA\\r\\n$40\\r\\n{RAISE_SHA1}\\r\\n$1\\r\\n4\\r\\n$17\\r\\nredlock-mio:fence\\r\\n$22\\r\\nredlock-mio:fence-lost\\r\\n$1\\r\\na\\r\\n$1\\r\\nb\\r\\n$1\\r\\nt\\r\\n$2\\r\\n42\\r\\n"
        )
    );
    let mut ids = Vec::new();
    pack_key(&mut ids, b"17");
    let sync = Command::fence_sync(&ids, SyncMode::Start, 1_795_000_000_000_000).with_script();
    let text = encoded(sync);
    assert!(text.starts_with("*8\\r\\n$4\\r\\nEVAL\\r\\n"), "{text}");
    assert!(
        text.ends_with("$1\\r\\n2\\r\\n$17\\r\\nredlock-mio:fence\\r\\n$22\\r\\nredlock-mio:fence-lost\\r\\n$16\\r\\n1795000000000000\\r\\n$5\\r\\nstart\\r\\n$2\\r\\n17\\r\\n"),
        "{text}"
    );
    let read = Command::fence_read();
    assert_eq!(
        encoded(read),
        format!(
            "*5\\r\\n$7\\r\\nEVALSHA\\r\\n$40\\r\\n{FENCE_READ_SHA1}\\r\\n$1\\r\\n2\\r\\n$17\\r\\nredlock-mio:fence\\r\\n$22\\r\\nredlock-mio:fence-lost\\r\\n"
        )
    );
}

#[test]
fn fence_replies() {
    use Outcome::*;
    let fenced = |token: &Token<'_>| classify_as(Op::Acquire, false, true, token);
    assert_eq!(fenced(&Token::Integer(7)), Reply(super::Reply::Count(7)));
    assert_eq!(
        fenced(&Token::Integer(-1_795_000_000_000_000)),
        Reply(super::Reply::Unsynced(1_795_000_000_000_000))
    );
    assert_eq!(fenced(&Token::Integer(0)), Unexpected);
    assert_eq!(
        fenced(&Token::Null(NullKind::Bulk)),
        Reply(super::Reply::Refused)
    );
    assert_eq!(fenced(&Token::Simple(b"OK")), Unexpected);
    assert_eq!(fenced(&Token::Error(b"NOSCRIPT x")), NoScript);
    assert_eq!(
        classify_as(Op::Acquire, true, true, &Token::Integer(3)),
        Reply(super::Reply::Count(3))
    );
    let raise = |token: &Token<'_>| classify_as(Op::Raise, false, false, token);
    assert_eq!(raise(&Token::Integer(1)), Reply(super::Reply::Ok));
    assert_eq!(raise(&Token::Integer(0)), Reply(super::Reply::Refused));
    assert_eq!(raise(&Token::Integer(-1)), Reply(super::Reply::Unsynced(0)));
    assert_eq!(raise(&Token::Integer(2)), Unexpected);
    let read = |token: &Token<'_>| classify_as(Op::FenceRead, false, false, token);
    assert_eq!(read(&Token::Integer(9)), Reply(super::Reply::Count(9)));
    assert_eq!(read(&Token::Integer(-4)), Reply(super::Reply::Unsynced(4)));
    assert_eq!(read(&Token::Null(NullKind::Null)), Unexpected);
    // Out of sync: the loss id, and the larger of the clock and a counter.
    for (text, clock) in [(&b"4 100 0"[..], 100), (b"4 100 250", 250)] {
        assert_eq!(
            read(&Token::Bulk(text)),
            Reply(super::Reply::UnsyncedRead { lost: 4, clock })
        );
    }
    for bad in [
        &b"4 100"[..],
        b"4 100 0 1",
        b"0 100 0",
        b"4 0 7",
        b"4 x 0",
        b"4  100 0",
        b"",
    ] {
        assert_eq!(read(&Token::Bulk(bad)), Unexpected, "{bad:?}");
    }
    // A key of the reserved space that holds something foreign: that
    // master fails, typed, and its connection stays (no `Unexpected`).
    for (op, fenced) in [
        (Op::Acquire, true),
        (Op::Raise, false),
        (Op::FenceRead, false),
        (Op::FenceSync, false),
    ] {
        for (message, key) in [
            (&b"FOREIGNKEY redlock-mio:fence"[..], FENCE_KEY),
            (b"FOREIGNKEY redlock-mio:fence-lost", FENCE_LOST_KEY),
            (b"FOREIGNKEY other", RESERVED_PREFIX),
        ] {
            assert_eq!(
                classify_as(op, false, fenced, &Token::Error(message)),
                Failed(crate::rules::NodeError::ForeignKey(key))
            );
        }
    }
    // Not from a fence script: a server error like any other.
    assert!(matches!(
        classify_as(Op::Release, false, false, &Token::Error(b"FOREIGNKEY x")),
        Server(_)
    ));
    let sync = |token: &Token<'_>| classify_as(Op::FenceSync, false, false, token);
    assert_eq!(sync(&Token::Integer(1)), Reply(super::Reply::Ok));
    assert_eq!(sync(&Token::Integer(0)), Reply(super::Reply::Refused));
}

#[test]
fn fence_scripts_are_loaded_only_when_fencing() {
    let mut out = Vec::new();
    let mut steps = Vec::new();
    let probe = Probe {
        fencing: true,
        ..Probe::default()
    };
    encode_handshake(&mut out, None, None, 0, probe, &mut steps);
    assert_eq!(
        steps[5..],
        [
            HandshakeStep::LoadFencedAcquire,
            HandshakeStep::LoadRaise,
            HandshakeStep::LoadFenceRead,
            HandshakeStep::LoadFenceSync
        ]
    );
    for (step, (_, sha1)) in steps[5..].iter().zip([
        (FENCED_ACQUIRE_SCRIPT, FENCED_ACQUIRE_SHA1),
        (RAISE_SCRIPT, RAISE_SHA1),
        (FENCE_READ_SCRIPT, FENCE_READ_SHA1),
        (FENCE_SYNC_SCRIPT, FENCE_SYNC_SHA1),
    ]) {
        assert_eq!(handshake_ok(*step, &Token::Bulk(sha1.as_bytes())), Ok(true));
        assert_eq!(
            handshake_ok(*step, &Token::Bulk(RELEASE_SHA1.as_bytes())),
            Ok(false)
        );
    }
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
            HandshakeStep::Auth,
            HandshakeStep::Select,
            HandshakeStep::LoadRelease,
            HandshakeStep::LoadExtend,
            HandshakeStep::LoadAcquireMany,
            HandshakeStep::LoadReleaseMany,
            HandshakeStep::LoadExtendMany
        ]
    );
    out.clear();
    encode_handshake(&mut out, None, None, 0, Probe::default(), &mut steps);
    assert_eq!(steps.len(), 5);
    out.clear();
    let probe = Probe {
        identify: true,
        marker: Some(b"m1"),
        fencing: false,
        longest_ttl: Some(30_000),
        wake: None,
    };
    encode_handshake(&mut out, None, None, 0, probe, &mut steps);
    assert_eq!(
        steps[5..],
        [
            HandshakeStep::Identify,
            HandshakeStep::Marker,
            HandshakeStep::LongestTtl
        ]
    );
    let text = out.escape_ascii().to_string();
    assert!(
        text.ends_with("*4\\r\\n$4\\r\\nINFO\\r\\n$6\\r\\nserver\\r\\n$11\\r\\nreplication\\r\\n$7\\r\\ncluster\\r\\n*5\\r\\n$3\\r\\nSET\\r\\n$18\\r\\nredlock-mio:marker\\r\\n$2\\r\\nm1\\r\\n$2\\r\\nNX\\r\\n$3\\r\\nGET\\r\\n*5\\r\\n$3\\r\\nSET\\r\\n$23\\r\\nredlock-mio:longest-ttl\\r\\n$5\\r\\n30000\\r\\n$2\\r\\nNX\\r\\n$3\\r\\nGET\\r\\n"),
        "{text}"
    );
    // A key of another type is something to report, not a failed handshake.
    for step in [HandshakeStep::Marker, HandshakeStep::LongestTtl] {
        assert_eq!(handshake_ok(step, &Token::Error(b"WRONGTYPE x")), Ok(true));
        assert!(handshake_ok(step, &Token::Error(b"NOPERM x")).is_err());
    }
    assert_eq!(
        handshake_ok(HandshakeStep::Marker, &Token::Null(NullKind::Null)),
        Ok(true)
    );
    assert_eq!(
        handshake_ok(HandshakeStep::Identify, &Token::Integer(1)),
        Ok(false)
    );
    assert_eq!(
        handshake_ok(
            HandshakeStep::LoadRelease,
            &Token::Bulk(RELEASE_SHA1.as_bytes())
        ),
        Ok(true)
    );
    assert_eq!(
        handshake_ok(
            HandshakeStep::LoadRelease,
            &Token::Bulk(EXTEND_SHA1.as_bytes())
        ),
        Ok(false)
    );
    assert_eq!(
        handshake_ok(HandshakeStep::Auth, &Token::Integer(1)),
        Ok(false)
    );
    assert!(handshake_ok(HandshakeStep::Auth, &Token::Error(b"WRONGPASS")).is_err());
}

/// A command taken apart and put back together is the same command, on the
/// wire too; bytes of another length are refused.
#[test]
fn a_command_split_and_joined_is_the_same_command() {
    let mut packed = Vec::new();
    pack_key(&mut packed, b"a");
    pack_key(&mut packed, b"bc");
    let (one, many) = (Keys::One(&b"res"[..]), Keys::Packed(&packed[..]));
    for command in [
        Command::acquire(one, b"tok", 500),
        Command::acquire(many, b"tok", 500),
        Command::fenced_acquire(many, b"tok", 500),
        Command::extend(one, b"tok", 500).with_script(),
        Command::release(many, b"tok").reaching(0b101),
        Command::raise(one, b"tok", 42),
        Command::fence_read(),
        Command::fence_sync(&packed, SyncMode::Repair, 7),
    ] {
        let (shape, args) = command.split();
        let bytes = args.concat();
        assert_eq!(shape.args_len(), bytes.len());
        let joined = Command::join(shape, &bytes);
        assert_eq!(joined, Some(command));
        assert_eq!(joined.map(encoded), Some(encoded(command)));
        assert_eq!(
            Command::join(shape, &[bytes.as_slice(), b"x"].concat()),
            None
        );
    }
}

#[test]
fn replies_to_several_keys_and_to_a_leave() {
    use Outcome::*;
    let many = |token: &Token<'_>| classify_as(Op::Acquire, true, false, token);
    assert_eq!(many(&Token::Integer(1)), Reply(super::Reply::Ok));
    assert_eq!(many(&Token::Integer(0)), Reply(super::Reply::Refused));
    assert_eq!(many(&Token::Null(NullKind::Bulk)), Unexpected);
    assert_eq!(many(&Token::Simple(b"OK")), Unexpected);
    assert_eq!(classify_one(Op::Acquire, &Token::Integer(0)), Unexpected);
    let leave = |token: &Token<'_>| classify_as(Op::Leave, false, false, token);
    assert_eq!(leave(&Token::Integer(1)), Reply(super::Reply::Ok));
    assert_eq!(leave(&Token::Integer(0)), Unexpected);
}

/// An acquire that waits answers `+OK`, or `+WAIT <ms>` with the blocking
/// key's `PTTL` (`-1`: none); the fenced one counts instead of `+OK`.
#[test]
fn replies_to_an_acquire_that_waits() {
    use Outcome::*;
    let queue = (&b"50|1|redlock-mio:wake:00000000000000aa"[..], 7, 900);
    let plain = Command::wait_acquire(Keys::One(b"r"), b"t", 500, queue);
    let fenced = Command::fenced_wait_acquire(Keys::One(b"r"), b"t", 500, queue);
    let queued = |ms| Reply(super::Reply::Queued { expires_in_ms: ms });
    for command in [plain, fenced] {
        let reply = |token: &Token<'_>| classify(&command.split().0, token);
        assert_eq!(reply(&Token::Simple(b"WAIT 250")), queued(Some(250)));
        assert_eq!(reply(&Token::Simple(b"WAIT 0")), queued(Some(0)));
        assert_eq!(reply(&Token::Simple(b"WAIT -1")), queued(None));
        for odd in [
            &b"WAIT x"[..],
            b"WAIT ",
            b"WAIT -2",
            b"OKAY",
            b"QUEUED",
            b"",
        ] {
            assert_eq!(reply(&Token::Simple(odd)), Unexpected, "{odd:?}");
        }
        assert_eq!(reply(&Token::Error(b"NOSCRIPT x")), NoScript);
    }
    let plain = |token: &Token<'_>| classify(&plain.split().0, token);
    assert_eq!(plain(&Token::Simple(b"OK")), Reply(super::Reply::Ok));
    assert_eq!(plain(&Token::Integer(3)), Unexpected);
    let fenced = |token: &Token<'_>| classify(&fenced.split().0, token);
    assert_eq!(fenced(&Token::Integer(3)), Reply(super::Reply::Count(3)));
    assert_eq!(
        fenced(&Token::Integer(-9)),
        Reply(super::Reply::Unsynced(9))
    );
}

#[test]
fn a_wake_channel_names_its_id_in_hex() {
    assert_eq!(
        &wake_channel(0x0123_4567_89ab_cdef),
        b"redlock-mio:wake:0123456789abcdef"
    );
    assert_eq!(&wake_channel(0xa), b"redlock-mio:wake:000000000000000a");
}

#[test]
fn hello_is_answered_by_a_map() {
    assert_eq!(handshake_ok(HandshakeStep::Hello, &Token::Map(3)), Ok(true));
    assert_eq!(
        handshake_ok(HandshakeStep::Hello, &Token::Simple(b"OK")),
        Ok(false)
    );
    assert_eq!(handshake_ok(HandshakeStep::Auth, &Token::Map(3)), Ok(false));
}

/// What the driver asks of a command: which masters a release must reach,
/// the bytes of its keys, how long it grants, how to undo it, and whether
/// it goes out as `EVAL`.
#[test]
fn what_a_command_tells_the_driver() {
    let keys = Keys::One(&b"abc"[..]);
    let release = Command::release(keys, b"t").reaching(0b1010);
    let reached: Vec<usize> = (0..70).filter(|&n| release.must_reach(n)).collect();
    assert_eq!(reached, [1, 3]);
    let everywhere = Command::release(keys, b"t").reaching(u64::MAX);
    assert!(everywhere.must_reach(63) && !everywhere.must_reach(64));
    assert!(!Command::acquire(keys, b"t", 500).must_reach(0));

    let queue = (&b"m"[..], 1, 2);
    let packed = Keys::Packed(&b"\0\x01a\0\x02bc"[..]);
    for (command, len, ttl) in [
        (Command::acquire(keys, b"t", 500), 3, Some(500)),
        (Command::extend(keys, b"t", 600), 3, Some(600)),
        (Command::wait_acquire(keys, b"t", 700, queue), 3, Some(700)),
        (Command::acquire(packed, b"t", 800), 7, Some(800)),
        (Command::release(keys, b"t"), 3, None),
        (Command::raise(keys, b"t", 9), 3, None),
        (Command::leave(keys, b"m"), 3, None),
        (Command::fence_read(), 0, None),
    ] {
        assert_eq!(command.resource_len(), len, "{command:?}");
        assert_eq!(command.grant_ttl_ms(), ttl, "{command:?}");
    }

    for acquire in [
        Command::acquire(keys, b"t", 500),
        Command::wait_acquire(keys, b"t", 500, queue),
    ] {
        assert_eq!(
            acquire.undo(),
            Some(Command::release(keys, b"t").with_script())
        );
    }
    assert_eq!(Command::release(keys, b"t").undo(), None);
    assert_eq!(Command::extend(keys, b"t", 500).undo(), None);

    let release = Command::release(keys, b"t");
    assert!(!release.split().0.is_eval());
    assert!(release.with_script().split().0.is_eval());
    assert!(release.split().0.with_script().is_eval());
}
