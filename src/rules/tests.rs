use super::*;
use std::io;
use std::time::Instant;

const MS: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_millis(50);

fn acquire(n: usize, t0: Instant) -> Round {
    Round::new(Op::Acquire, n, TTL, drift(TTL, 0.01), TIMEOUT, t0)
}

#[test]
fn formulas() {
    assert_eq!(
        (1..=8).map(quorum).collect::<Vec<_>>(),
        [1, 2, 2, 3, 3, 4, 4, 5]
    );
    assert_eq!(drift(TTL, 0.01), 102 * MS);
    assert_eq!(drift(TTL, 0.0), 2 * MS);
    // Out-of-range factors are clamped, never a panic.
    assert_eq!(drift(TTL, -1.0), 2 * MS);
    assert_eq!(drift(TTL, f64::NAN), 2 * MS);
    assert_eq!(drift(TTL, 7.0), TTL + 2 * MS);
    assert_eq!(drift(Duration::MAX, 1.0), Duration::MAX);
    assert_eq!(
        drift(Duration::MAX, 0.5),
        Duration::from_secs(1 << 63) + 2 * MS
    );

    assert_eq!(validity(TTL, 5 * MS, 102 * MS), Some(9_893 * MS));
    assert_eq!(
        validity(TTL, TTL - 102 * MS, 102 * MS),
        None,
        "zero is not valid"
    );
    assert_eq!(validity(TTL, TTL - 103 * MS, 102 * MS), Some(MS));
    assert_eq!(validity(TTL, TTL + MS, 102 * MS), None);
    assert_eq!(validity(MS, Duration::MAX, Duration::MAX), None);
}

#[test]
fn retry_delay_stays_in_its_window() {
    let base = 200 * MS;
    let jitter = 100 * MS;
    assert_eq!(retry_delay(base, jitter, 0.0), 100 * MS);
    assert_eq!(retry_delay(base, jitter, 0.5), 200 * MS);
    assert_eq!(retry_delay(base, jitter, 1.0), 300 * MS);
    assert_eq!(retry_delay(base, jitter, f64::NAN), 200 * MS);
    assert_eq!(retry_delay(base, jitter, 9.0), 300 * MS);
    assert_eq!(retry_delay(base, Duration::ZERO, 0.3), base);
    // Jitter larger than the base floors at zero.
    assert_eq!(retry_delay(10 * MS, 100 * MS, 0.0), Duration::ZERO);
    assert_eq!(retry_delay(Duration::MAX, MS, 1.0), Duration::MAX);
    // Different draws give different delays: contenders desynchronise.
    assert_ne!(
        retry_delay(base, jitter, 0.1),
        retry_delay(base, jitter, 0.9)
    );
}

#[test]
fn exactly_quorum_of_five_decides_early() {
    let t0 = Instant::now();
    let mut round = acquire(5, t0);
    round.handle_reply(4, Reply::Ok, t0 + MS);
    round.handle_reply(2, Reply::Refused, t0 + MS);
    round.handle_reply(1, Reply::Ok, t0 + 2 * MS);
    assert_eq!(round.decision(), None);
    assert!(round.has_pending());
    round.handle_reply(0, Reply::Ok, t0 + 3 * MS);
    let validity = TTL - 3 * MS - 102 * MS;
    assert_eq!(round.decision(), Some(Decision::Quorum { validity }));
    assert!(round.has_pending(), "node 3 never answered, and need not");
    assert_eq!(round.valid_until(), t0 + TTL - 102 * MS);
    assert_eq!(round.report().elapsed(), 3 * MS);
}

#[test]
fn failures_beyond_n_minus_quorum_decide_early() {
    let t0 = Instant::now();
    let mut round = acquire(5, t0);
    round.handle_reply(0, Reply::Refused, t0 + MS);
    round.handle_failure(
        1,
        NodeError::Connect(io::ErrorKind::ConnectionRefused),
        t0 + MS,
    );
    assert_eq!(
        round.decision(),
        None,
        "two failures of five still allow a quorum"
    );
    round.handle_failure(2, NodeError::Closed, t0 + MS);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
}

#[test]
fn even_n_needs_more_than_half() {
    let t0 = Instant::now();
    let mut round = acquire(4, t0);
    round.handle_reply(0, Reply::Ok, t0 + MS);
    round.handle_reply(1, Reply::Ok, t0 + MS);
    assert_eq!(round.decision(), None, "2 of 4 is not a quorum");
    round.handle_reply(2, Reply::Refused, t0 + MS);
    round.handle_reply(3, Reply::Refused, t0 + MS);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));

    let mut round = acquire(4, t0);
    round.handle_reply(0, Reply::Refused, t0 + MS);
    assert_eq!(round.decision(), None);
    round.handle_reply(1, Reply::Refused, t0 + MS);
    assert_eq!(
        round.decision(),
        Some(Decision::NoQuorum),
        "3 of 4 is now impossible"
    );
}

#[test]
fn single_node() {
    let t0 = Instant::now();
    let mut round = acquire(1, t0);
    round.handle_reply(0, Reply::Ok, t0 + MS);
    assert!(matches!(round.decision(), Some(Decision::Quorum { .. })));
    let mut round = acquire(1, t0);
    round.handle_reply(0, Reply::Refused, t0 + MS);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
}

#[test]
fn zero_nodes_is_no_quorum_at_once() {
    let round = acquire(0, Instant::now());
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
}

#[test]
fn all_fail() {
    let t0 = Instant::now();
    let mut round = acquire(3, t0);
    for node in 0..3 {
        round.handle_failure(node, NodeError::Io(io::ErrorKind::BrokenPipe), t0 + MS);
    }
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    let report = round.report();
    assert_eq!(
        (report.ok(), report.refused(), report.unreachable()),
        (0, 0, 3)
    );
    assert!(
        report.to_string().contains("#2 I/O error: broken pipe"),
        "{report}"
    );
}

/// A round decided at its start (connections already down) says so, and
/// the masters it did not wait for are not called "pending in 0ns".
#[test]
fn a_report_decided_before_any_answer_says_so() {
    let t0 = Instant::now();
    let mut round = acquire(5, t0);
    for node in [0, 3, 4] {
        round.handle_failure(node, NodeError::Disconnected, t0);
    }
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    let text = round.report().to_string();
    assert!(text.contains("decided before any answer:"), "{text}");
    assert!(
        text.contains("#1 answer not needed (decided without it), #2 answer not needed"),
        "{text}"
    );
    assert!(!text.contains("0ns") && !text.contains("pending"), "{text}");
    // Decided later: the time it took.
    let mut round = acquire(3, t0);
    round.handle_failure(0, NodeError::Disconnected, t0 + MS);
    round.handle_failure(1, NodeError::Disconnected, t0 + MS);
    let text = round.report().to_string();
    assert!(text.contains("in 1ms:"), "{text}");
    assert!(text.contains("#2 answer not needed"), "{text}");
}

#[test]
fn deadline_times_out_silent_nodes() {
    let t0 = Instant::now();
    let mut round = acquire(5, t0);
    round.handle_reply(0, Reply::Ok, t0 + MS);
    round.handle_reply(1, Reply::Ok, t0 + MS);
    round.handle_timeout(t0 + TIMEOUT - MS);
    assert_eq!(round.decision(), None, "not yet the deadline");
    round.handle_timeout(t0 + TIMEOUT);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    assert_eq!(
        round.nodes(),
        [
            NodeState::Ok,
            NodeState::Ok,
            NodeState::TimedOut,
            NodeState::TimedOut,
            NodeState::TimedOut
        ]
    );
    assert!(!round.has_pending());
    assert_eq!(round.report().elapsed(), TIMEOUT);
}

#[test]
fn validity_exhausted_by_a_slow_round() {
    let t0 = Instant::now();
    let ttl = 100 * MS;
    let d = drift(ttl, 0.01); // 3 ms
    // A round whose deadline is past the TTL: a quorum arrives too late.
    let mut round = Round::new(Op::Acquire, 3, ttl, d, Duration::from_secs(1), t0);
    round.handle_reply(0, Reply::Ok, t0 + 10 * MS);
    round.handle_reply(1, Reply::Ok, t0 + 97 * MS);
    assert_eq!(round.decision(), Some(Decision::TooSlow));
    // One millisecond earlier, one millisecond is left.
    let mut round = Round::new(Op::Acquire, 3, ttl, d, Duration::from_secs(1), t0);
    round.handle_reply(0, Reply::Ok, t0 + 10 * MS);
    round.handle_reply(1, Reply::Ok, t0 + 96 * MS);
    assert_eq!(round.decision(), Some(Decision::Quorum { validity: MS }));
}

#[test]
fn late_replies_update_the_report_not_the_decision() {
    let t0 = Instant::now();
    let mut round = acquire(3, t0);
    round.handle_reply(0, Reply::Refused, t0 + MS);
    round.handle_reply(1, Reply::Refused, t0 + MS);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    round.handle_reply(2, Reply::Ok, t0 + 2 * MS);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    assert_eq!(round.nodes()[2], NodeState::Ok);
    assert_eq!(
        round.report().elapsed(),
        MS,
        "elapsed stops at the decision"
    );
    // After the deadline, even a late success cannot turn it around.
    let mut round = acquire(3, t0);
    round.handle_reply(0, Reply::Ok, t0 + MS);
    round.handle_timeout(t0 + TIMEOUT);
    round.handle_reply(1, Reply::Ok, t0 + TIMEOUT + MS);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    assert_eq!(round.nodes()[1], NodeState::TimedOut);
}

#[test]
fn duplicate_and_unknown_nodes_are_ignored() {
    let t0 = Instant::now();
    let mut round = acquire(3, t0);
    round.handle_reply(0, Reply::Ok, t0 + MS);
    round.handle_reply(0, Reply::Ok, t0 + MS);
    round.handle_reply(7, Reply::Ok, t0 + MS);
    round.handle_failure(usize::MAX, NodeError::Closed, t0 + MS);
    assert_eq!(round.decision(), None, "one node counted once");
    round.handle_failure(0, NodeError::Closed, t0 + MS);
    assert_eq!(round.nodes()[0], NodeState::Ok, "a final state stays");
}

#[test]
fn release_and_extend() {
    let t0 = Instant::now();
    let mut round = Round::new(Op::Release, 5, TTL, drift(TTL, 0.01), TIMEOUT, t0);
    for node in 0..3 {
        round.handle_reply(node, Reply::Ok, t0 + TTL * 2);
    }
    // A release has no validity to run out of.
    assert_eq!(
        round.decision(),
        Some(Decision::Quorum {
            validity: Duration::ZERO
        })
    );
    let mut round = Round::new(Op::Extend, 5, TTL, drift(TTL, 0.01), TIMEOUT, t0);
    for node in 0..3 {
        round.handle_reply(node, Reply::Refused, t0 + MS);
    }
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    assert!(round.report().to_string().contains("#0 not held"));
}

#[test]
fn restart_reuses_the_round() {
    let t0 = Instant::now();
    let mut round = acquire(5, t0);
    for node in 0..5 {
        round.handle_reply(node, Reply::Refused, t0 + MS);
    }
    let t1 = t0 + Duration::from_secs(1);
    round.restart(Op::Release, 3, TTL, 2 * MS, TIMEOUT, t1);
    assert_eq!(round.decision(), None);
    assert_eq!(round.nodes(), [const { NodeState::Pending }; 3]);
    assert_eq!(round.started(), t1);
    assert_eq!(round.deadline(), t1 + TIMEOUT);
}

#[test]
fn server_error_keeps_the_whole_message() {
    let error = ServerError::new(b"NOSCRIPT No matching script. Please use EVAL.");
    assert_eq!(error.code(), b"NOSCRIPT");
    assert!(!error.is_configuration());
    let long = vec![b'x'; 1000];
    let error = ServerError::new(&long);
    assert_eq!(error.message(), &long[..]);
    assert_eq!(ServerError::new(b"").code(), b"");
    // Shown as text, quotes as they are, control characters escaped.
    let error = ServerError::new(
        b"NOPERM User alice has no permissions to run the 'script|load' command\x01",
    );
    assert_eq!(
        error.to_string(),
        "NOPERM User alice has no permissions to run the 'script|load' command\\u{1}"
    );
}

#[test]
fn configuration_errors() {
    for message in [
        &b"WRONGPASS invalid username-password pair or user is disabled."[..],
        b"NOAUTH Authentication required.",
        b"NOPERM User u has no permissions to run the 'set' command",
        b"READONLY You can't write against a read only replica.",
        b"CLUSTERDOWN The cluster is down",
        b"MOVED 3999 127.0.0.1:6381",
        b"ERR SELECT is not allowed in cluster mode",
    ] {
        assert!(ServerError::new(message).is_configuration(), "{message:?}");
    }
    for message in [
        &b"OOM command not allowed when used memory > 'maxmemory'."[..],
        b"LOADING Redis is loading the dataset in memory",
        b"BUSY Redis is busy running a script.",
        b"ERR unknown command",
    ] {
        assert!(!ServerError::new(message).is_configuration(), "{message:?}");
    }
}

#[test]
fn a_quarantined_grant_counts_against_the_quorum() {
    let t0 = Instant::now();
    let mut round = acquire(5, t0);
    round.handle_reply(0, Reply::Ok, t0);
    round.handle_reply(1, Reply::Ok, t0);
    round.handle_quarantined(2, t0);
    round.handle_reply(3, Reply::Refused, t0);
    assert_eq!(round.decision(), None, "two grants, two more may come");
    round.handle_quarantined(4, t0 + MS);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    let report = round.report();
    assert_eq!(report.nodes()[2], NodeState::Quarantined);
    assert_eq!(report.ok(), 2);
    assert!(
        report
            .to_string()
            .contains("#2 acquired, but not counted: restarted"),
        "{report}"
    );
    // A release counts it: the key is gone either way.
    let mut release = Round::new(Op::Release, 3, TTL, drift(TTL, 0.01), TIMEOUT, t0);
    release.handle_quarantined(0, t0);
    release.handle_reply(1, Reply::Ok, t0);
    assert!(matches!(release.decision(), Some(Decision::Quorum { .. })));
}

#[test]
fn a_fenced_acquire_counts_only_grants_in_sync_and_keeps_their_counts() {
    let t0 = Instant::now();
    let mut round = acquire(5, t0);
    round.handle_reply(0, Reply::Count(41), t0);
    round.handle_reply(1, Reply::Unsynced(77), t0);
    round.handle_reply(2, Reply::Count(9), t0);
    assert_eq!(round.decision(), None, "an unsynced grant does not count");
    assert_eq!(round.max_count(), Some(41));
    assert_eq!(round.value(1), 77, "the loss id");
    round.handle_reply(3, Reply::Unsynced(5), t0);
    assert_eq!(round.decision(), None);
    round.handle_reply(4, Reply::Count(12), t0 + MS);
    assert!(matches!(round.decision(), Some(Decision::Quorum { .. })));
    let report = round.report();
    assert_eq!((report.ok(), report.unsynced()), (3, 2));
    assert!(
        report.to_string().contains("#1 fence counter missing"),
        "{report}"
    );
    // A second reply for a node already recorded changes neither state nor value.
    round.handle_reply(0, Reply::Count(1000), t0 + MS);
    assert_eq!(round.max_count(), Some(41));
    // Unsynced grants beyond N - quorum decide early: no quorum.
    let mut round = acquire(3, t0);
    round.handle_reply(0, Reply::Unsynced(1), t0);
    round.handle_reply(1, Reply::Unsynced(1), t0);
    assert_eq!(round.decision(), Some(Decision::NoQuorum));
    assert_eq!(round.max_count(), None);
}

#[test]
fn fence_reads_and_syncs_wait_for_every_node() {
    let t0 = Instant::now();
    let mut read = Round::new(
        Op::FenceRead,
        3,
        Duration::ZERO,
        Duration::ZERO,
        TIMEOUT,
        t0,
    );
    read.handle_reply(0, Reply::Count(5), t0);
    read.handle_reply(1, Reply::Count(8), t0);
    assert_eq!(read.decision(), None, "a quorum answered, one may say more");
    read.handle_reply(2, Reply::Unsynced(3), t0);
    assert_eq!(
        read.decision(),
        Some(Decision::Quorum {
            validity: Duration::ZERO
        })
    );
    assert_eq!(read.max_count(), Some(8));
    // The deadline records the rest as timed out.
    let mut sync = Round::new(
        Op::FenceSync,
        3,
        Duration::ZERO,
        Duration::ZERO,
        TIMEOUT,
        t0,
    );
    sync.handle_reply(0, Reply::Ok, t0);
    sync.handle_timeout(t0 + TIMEOUT);
    assert_eq!(sync.decision(), Some(Decision::NoQuorum));
    // A raise decides at quorum, like a release.
    let mut raise = Round::new(Op::Raise, 3, Duration::ZERO, Duration::ZERO, TIMEOUT, t0);
    raise.handle_reply(0, Reply::Ok, t0);
    raise.handle_reply(1, Reply::Ok, t0);
    assert!(matches!(raise.decision(), Some(Decision::Quorum { .. })));
}

#[test]
fn a_round_reached_every_node_but_those_that_skipped_it_as_lagging() {
    let t0 = Instant::now();
    let mut round = acquire(5, t0);
    assert_eq!(
        round.reached(),
        0b11111,
        "sent everywhere until told otherwise"
    );
    round.handle_failure(1, NodeError::Lagging, t0);
    round.handle_failure(3, NodeError::Closed, t0);
    round.handle_reply(0, Reply::Ok, t0);
    round.handle_reply(4, Reply::Refused, t0);
    // Node 3 failed after its command may have gone out: it stays in.
    assert_eq!(round.reached(), 0b11101);
}

#[test]
fn each_op_names_itself_and_heads_its_report() {
    let names = [
        (Op::Acquire, "acquire"),
        (Op::Extend, "extend"),
        (Op::Release, "release"),
        (Op::Raise, "raise"),
        (Op::FenceRead, "fence read"),
        (Op::FenceSync, "fence sync"),
        (Op::Leave, "leave"),
    ];
    let t0 = Instant::now();
    for (op, name) in names {
        assert_eq!(op.name(), name);
        let round = Round::new(op, 3, TTL, drift(TTL, 0.01), TIMEOUT, t0);
        let text = round.report().to_string();
        assert!(text.starts_with(&format!("{name} on 3 masters")), "{text}");
    }
}

#[test]
fn a_server_error_debugs_as_its_escaped_text() {
    let error = ServerError::new(b"ERR bad\r\n\"x\"");
    assert_eq!(format!("{error:?}"), r#"ServerError("ERR bad\r\n"x"")"#);
    assert_eq!(format!("{error}"), "ERR bad\\r\\n\"x\"");
}

/// Which node errors say the setup is wrong: a lock command refused for
/// the configuration, any handshake refused with `ERR` or a configuration
/// error, never a master that is merely busy or gone.
#[test]
fn node_errors_that_are_configuration_errors() {
    let server = |message: &[u8]| NodeError::Server(ServerError::new(message));
    let handshake = |message: &[u8]| NodeError::Handshake(ServerError::new(message));
    for error in [
        server(b"NOPERM User u has no permissions to run the 'evalsha' command"),
        server(b"READONLY You can't write against a read only replica."),
        handshake(b"ERR DB index is out of range"),
        handshake(b"WRONGPASS invalid username-password pair"),
        NodeError::Replica,
        NodeError::ClusterMode,
        NodeError::ForeignKey("redlock-mio:fence"),
        NodeError::Tls("unknown issuer".into()),
    ] {
        assert!(error.is_configuration(), "{error}");
    }
    for error in [
        server(b"ERR unknown command"),
        server(b"LOADING Redis is loading the dataset in memory"),
        handshake(b"LOADING Redis is loading the dataset in memory"),
        handshake(b"BUSY Redis is busy running a script."),
        NodeError::Closed,
        NodeError::Stalled,
        NodeError::Io(io::ErrorKind::BrokenPipe),
    ] {
        assert!(!error.is_configuration(), "{error}");
    }
}

#[test]
fn a_report_names_its_masters_and_counts_the_misconfigured() {
    let t0 = Instant::now();
    let mut round = acquire(4, t0);
    round.handle_failure(
        0,
        NodeError::Server(ServerError::new(b"NOPERM no permissions")),
        t0 + MS,
    );
    round.handle_failure(1, NodeError::Replica, t0 + MS);
    round.handle_failure(2, NodeError::Closed, t0 + MS);
    let report = round.report();
    assert_eq!(report.misconfigured(), 2);
    assert_eq!(report.masters(), None);
    assert_eq!(acquire(4, t0).report().misconfigured(), 0);
    let names: Vec<String> = ["a:1", "b:2", "c:3", "d:4"].map(String::from).into();
    let named = report.clone().with_masters(names.clone().into());
    assert_eq!(named.masters(), Some(&names[..]));
    let text = named.to_string();
    assert!(text.contains("a:1: server error: NOPERM"), "{text}");
    assert!(text.contains("d:4: answer not needed"), "{text}");
    // Names are used only if there is one per node.
    let short = report.with_masters(names[..3].to_vec().into());
    assert_eq!(short.masters(), None);
    assert!(
        short.to_string().contains("#3 answer not needed"),
        "{short}"
    );
}

/// A refused acquire that waits keeps when the key that blocked it
/// expires, to the millisecond; any other answer keeps none.
#[test]
fn a_queued_refusal_keeps_when_its_blocking_key_expires() {
    let t0 = Instant::now();
    let mut round = acquire(7, t0);
    round.handle_reply(
        0,
        Reply::Queued {
            expires_in_ms: Some(900),
        },
        t0,
    );
    round.handle_reply(
        1,
        Reply::Queued {
            expires_in_ms: None,
        },
        t0,
    );
    round.handle_reply(2, Reply::Refused, t0);
    round.handle_reply(
        3,
        Reply::Queued {
            expires_in_ms: Some(0),
        },
        t0,
    );
    round.handle_reply(4, Reply::Count(5), t0);
    round.handle_reply(5, Reply::Unsynced(8), t0);
    assert_eq!(round.nodes()[0], NodeState::Refused);
    assert_eq!(round.expires_in(0), Some(900 * MS));
    assert_eq!(round.expires_in(1), None, "a key without TTL");
    assert_eq!(round.expires_in(2), None, "a refusal that does not tell");
    assert_eq!(round.expires_in(3), Some(Duration::ZERO));
    assert_eq!(round.expires_in(4), None, "a count is no expiry");
    assert_eq!(round.expires_in(5), None, "a loss id is no expiry");
    assert_eq!(round.expires_in(6), None, "no answer yet");
    assert_eq!(round.expires_in(99), None);
}

#[test]
fn plain_grants_carry_no_count() {
    let t0 = Instant::now();
    let mut round = acquire(3, t0);
    round.handle_reply(0, Reply::Ok, t0);
    round.handle_reply(1, Reply::Ok, t0);
    assert!(matches!(round.decision(), Some(Decision::Quorum { .. })));
    assert_eq!(round.max_count(), None);
    round.handle_reply(2, Reply::Count(7), t0);
    assert_eq!(round.max_count(), Some(7), "counted after the decision");
}

/// How many times a master was found suspect: once per handshake that
/// found it so, none for one that found nothing.
#[test]
fn a_sighting_counts_its_suspicions() {
    use super::identity::{Info, Sighting};
    let t0 = Instant::now();
    let guard = Some(TTL);
    let info = |c: u8| Info {
        run_id: Some([c; 40]),
        uptime: Some(Duration::from_secs(3600)),
        ..Info::default()
    };
    let mut sighting = Sighting::default();
    sighting.handle_handshake(Some(&info(b'a')), None, b"m", None, guard, t0);
    sighting.handle_handshake(Some(&info(b'a')), None, b"m", None, guard, t0);
    assert_eq!(sighting.suspicions(), 0);
    sighting.handle_handshake(Some(&info(b'b')), None, b"m", None, guard, t0);
    sighting.handle_handshake(Some(&info(b'c')), None, b"m", None, guard, t0);
    assert_eq!(sighting.suspicions(), 2);
}

/// The examples the public docs showed while `Round` was public: an early
/// quorum's validity, a report's states and its text.
#[test]
fn a_round_decides_early_and_reports_each_master() {
    let t0 = Instant::now();
    let mut round = Round::new(Op::Acquire, 5, TTL, drift(TTL, 0.01), TIMEOUT, t0);
    round.handle_reply(0, Reply::Ok, t0 + MS);
    round.handle_reply(3, Reply::Ok, t0 + MS);
    assert_eq!(round.decision(), None);
    round.handle_reply(4, Reply::Ok, t0 + 2 * MS);
    // ttl - elapsed - (ttl * 0.01 + 2 ms)
    assert_eq!(
        round.decision(),
        Some(Decision::Quorum {
            validity: 9_896 * MS
        })
    );

    let mut round = acquire(3, t0);
    round.handle_reply(0, Reply::Ok, t0);
    round.handle_failure(1, NodeError::Connect(io::ErrorKind::ConnectionRefused), t0);
    round.handle_timeout(t0 + TIMEOUT);
    assert_eq!(round.report().nodes()[2], NodeState::TimedOut);

    let mut round = acquire(3, t0);
    round.handle_reply(0, Reply::Refused, t0 + MS);
    round.handle_reply(1, Reply::Refused, t0 + MS);
    let masters = ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"].map(String::from);
    let report = round.report().with_masters(masters.into());
    assert_eq!(
        (report.refused(), report.quorum(), report.unreachable()),
        (2, 2, 0)
    );
    assert_eq!(report.nodes()[2], NodeState::Pending);
    assert_eq!(
        report.to_string(),
        "acquire on 3 masters (quorum 2) in 1ms: 10.0.0.1:6379: held by another, \
         10.0.0.2:6379: held by another, 10.0.0.3:6379: answer not needed (decided without it)"
    );
}

/// The report of a call that waited says how long, before its last
/// attempt's own time, once the wait outlasts that attempt by a
/// millisecond: whole milliseconds from 10 ms up, finer below. A call of
/// one round (or whose wait was its one attempt) says nothing of it.
#[test]
fn a_report_gives_the_calls_wait_once_it_outlasts_the_last_attempt() {
    let t0 = Instant::now();
    let mut round = acquire(3, t0);
    round.handle_reply(0, Reply::Refused, t0 + 2 * MS);
    round.handle_reply(1, Reply::Refused, t0 + 2 * MS);
    let mut report = round.report();
    assert_eq!(report.waited(), None);
    assert!(!report.to_string().contains("after waiting"), "{report}");
    // The wait was the attempt itself.
    report.set_waited(2 * MS + MS / 2);
    assert_eq!(report.waited(), Some(2 * MS + MS / 2));
    assert!(!report.to_string().contains("after waiting"), "{report}");
    for (waited, text) in [
        (3 * MS, "after waiting 3ms, the last attempt in 2ms:"),
        (10 * MS, "after waiting 10 ms, the last attempt in 2ms:"),
        (
            Duration::from_micros(250_700),
            "after waiting 250 ms, the last attempt in 2ms:",
        ),
    ] {
        report.set_waited(waited);
        assert_eq!(report.waited(), Some(waited));
        assert!(report.to_string().contains(text), "{report}");
    }
}

/// An acquire's grant short of a quorum is released again by the client,
/// and its report says so; a grant within a quorum, or another
/// operation's success short of one, is reported as done.
#[test]
fn a_report_says_an_acquires_grant_short_of_a_quorum_is_released_again() {
    let t0 = Instant::now();
    let outcome = |op: Op, replies: &[Reply]| {
        let mut round = Round::new(op, 3, TTL, drift(TTL, 0.01), TIMEOUT, t0);
        for (node, reply) in replies.iter().enumerate() {
            round.handle_reply(node, *reply, t0 + MS);
        }
        round.report().to_string()
    };
    let short = outcome(Op::Acquire, &[Reply::Ok, Reply::Refused, Reply::Refused]);
    assert!(
        short.contains("#0 acquired (released again: no quorum), #1 held by another"),
        "{short}"
    );
    // Exactly a quorum.
    let won = outcome(Op::Acquire, &[Reply::Ok, Reply::Ok]);
    assert!(
        won.contains("#0 acquired, #1 acquired, #2 answer not needed"),
        "{won}"
    );
    let extend = outcome(Op::Extend, &[Reply::Ok, Reply::Refused, Reply::Refused]);
    assert!(extend.contains("#0 extended, #1 not held"), "{extend}");
}

/// A failed connect says what to check, by its cause.
#[test]
fn a_failed_connect_says_what_to_check() {
    let text = |kind| NodeError::Connect(kind).to_string();
    for (kind, says) in [
        (
            io::ErrorKind::ConnectionRefused,
            "connection refused: no server listens there",
        ),
        (
            io::ErrorKind::TimedOut,
            "connect timed out: no answer within the connect timeout",
        ),
        (io::ErrorKind::NotFound, "no such socket file"),
        (
            io::ErrorKind::PermissionDenied,
            "cannot connect: permission denied",
        ),
    ] {
        assert!(text(kind).contains(says), "{kind:?}: {}", text(kind));
    }
    // Another cause is named as the system names it.
    let other = io::ErrorKind::AddrNotAvailable;
    assert_eq!(text(other), format!("cannot connect: {other}"));
}

/// A peer whose first byte begins no RESP reply is named as no Redis
/// server, with the byte and a guess at what it is by that byte.
#[test]
fn a_peer_that_is_no_redis_server_is_named_by_its_first_byte() {
    let text = |byte| NodeError::Protocol(crate::resp::Error::UnknownType(byte)).to_string();
    for (byte, says) in [
        (b'H', "answered 'H' (0x48), as an HTTP server does"),
        (b'<', "answered '<' (0x3c), as a web page does"),
        (b'S', "answered 'S' (0x53), as an SSH server does"),
        (
            0x15,
            "answered byte 0x15, as a TLS server does (use a rediss:// address)",
        ),
        (
            0x16,
            "answered byte 0x16, as a TLS server does (use a rediss:// address)",
        ),
        (
            b'x',
            "answered 'x' (0x78), where a Redis or Valkey master answers",
        ),
    ] {
        assert!(
            text(byte).starts_with("not a Redis server: "),
            "{}",
            text(byte)
        );
        assert!(text(byte).contains(says), "{}", text(byte));
    }
}

/// A TLS failure on bytes that are no TLS record (rustls says either of
/// two things) suggests a plain Redis port; other TLS failures do not.
#[test]
fn a_tls_failure_on_a_plain_port_suggests_redis_addresses() {
    let hint = "(not a TLS server: for a plain Redis port use redis://)";
    for message in [
        "received corrupt message of type InvalidContentType",
        "InvalidContentType",
        "received corrupt message",
    ] {
        let text = NodeError::Tls(message.into()).to_string();
        assert!(text.ends_with(hint), "{text}");
    }
    let text = NodeError::Tls("invalid peer certificate: UnknownIssuer".into()).to_string();
    assert!(!text.contains(hint), "{text}");
}
