//! The protocol session with a fake clock and no socket: bytes in, bytes
//! out, outcomes and timers.

#![allow(clippy::unwrap_used, reason = "a test fails loudly")]

use std::time::{Duration, Instant};

use super::limits::{MAX_UNANSWERED, RELEASE_HEADROOM, UNSOLICITED_BUDGET};
use super::{Link, LinkConfig, encoded};
use crate::commands::{Command, Keys, Outcome};
use crate::rules::{NodeError, Op, Reply};
use crate::scripts::{EXTEND_SCRIPT, EXTEND_SHA1, RELEASE_SCRIPT, RELEASE_SHA1};

mod dropped;
mod limits;
mod wake;
mod watch;

const MS: Duration = Duration::from_millis(1);

fn config() -> LinkConfig {
    LinkConfig {
        request_timeout: 50 * MS,
        connect_timeout: 1000 * MS,
        stall_timeout: 500 * MS,
        backoff_min: 10 * MS,
        backoff_max: 80 * MS,
        identify: false,
        fencing: false,
        in_flight: 1,
        guard: None,
        longest_ttl: None,
        wake: None,
    }
}

/// `INFO` text of a server.
fn info(run_id: char, role: &str, cluster: u8, uptime: u64) -> String {
    let run_id: String = std::iter::repeat_n(run_id, 40).collect();
    bulk(&format!(
        "# Server\r\nrun_id:{run_id}\r\nuptime_in_seconds:{uptime}\r\n\r\n# Replication\r\nrole:{role}\r\n\r\n# Cluster\r\ncluster_enabled:{cluster}\r\n"
    ))
}

/// A link with identification and a 10 s restart guard, through connect
/// and a handshake whose `INFO` and marker replies are `info` and `marker`.
fn guarded(link: &mut Link, t: Instant, info: &str, marker: &str) -> Result<(), NodeError> {
    link.start(None, None, 0, t);
    link.connected(t);
    let handshake = take(link);
    assert!(
        handshake.contains("INFO") && handshake.contains("redlock-mio:marker"),
        "{handshake}"
    );
    let replies = scripts() + info + marker;
    feed(link, replies.as_bytes(), t, 0).map(|_| ())
}

/// A guarded link at first sight of a server up for an hour, its marker
/// present: trusted.
fn trusted(t0: Instant) -> Link {
    let mut link = Link::new(guarded_config(), t0);
    guarded(
        &mut link,
        t0,
        &info('a', "master", 0, 3600),
        &bulk("theirs"),
    )
    .unwrap();
    link
}

fn guarded_config() -> LinkConfig {
    LinkConfig {
        identify: true,
        guard: Some((10_000 * MS, [b'm'; 31])),
        ..config()
    }
}

fn command(op: Op, ttl_ms: u64) -> Command<'static> {
    command_on(op, b"res", b"tok", ttl_ms)
}

/// A command of `op` on `resource` with `token` (`ttl_ms`: the TTL of an
/// acquire or an extend).
fn command_on<'a>(op: Op, resource: &'a [u8], token: &'a [u8], ttl_ms: u64) -> Command<'a> {
    let keys = Keys::One(resource);
    match op {
        Op::Acquire => Command::acquire(keys, token, ttl_ms),
        Op::Extend => Command::extend(keys, token, ttl_ms),
        Op::Release => Command::release(keys, token),
        Op::Raise => Command::raise(keys, token, ttl_ms),
        Op::FenceRead => Command::fence_read(),
        Op::FenceSync => Command::fence_sync(b"", crate::commands::SyncMode::Repair, ttl_ms),
        _ => Command::leave(keys, token),
    }
}

/// Queues `command` for `round`, encoded as the driver encodes it.
fn queue(link: &mut Link, command: Command<'_>, round: u64, now: Instant) -> Result<(), NodeError> {
    link.queue(
        &command,
        &encoded(&command),
        crate::ids::RoundId::from_raw(round),
        command.must_reach(0),
        now,
    )
}

/// What the link wants written, as text; marks it written.
fn take(link: &mut Link) -> String {
    let text = String::from_utf8_lossy(link.transmit()).into_owned();
    let n = link.transmit().len();
    link.advance(n);
    text
}

/// Feeds `bytes` as read at `now`, with `current` the round in progress;
/// returns the outcomes passed on.
fn feed(
    link: &mut Link,
    bytes: &[u8],
    now: Instant,
    current: u64,
) -> Result<Vec<(Op, Outcome)>, NodeError> {
    let mut outcomes = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let buf = link.read_buf()?;
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
        link.handle_read(
            n,
            now,
            &mut (current..current + 1, |round, op, outcome, _| {
                assert_eq!(round, current, "only the live round's outcomes");
                outcomes.push((op, outcome))
            }),
        )?;
    }
    Ok(outcomes)
}

fn bulk(text: &str) -> String {
    format!("${}\r\n{text}\r\n", text.len())
}

/// The replies to the handshake's `SCRIPT LOAD`s, in order.
fn scripts() -> String {
    [
        RELEASE_SHA1,
        EXTEND_SHA1,
        crate::scripts::ACQUIRE_MANY_SHA1,
        crate::scripts::RELEASE_MANY_SHA1,
        crate::scripts::EXTEND_MANY_SHA1,
    ]
    .map(bulk)
    .concat()
}

/// A link through connect and handshake at `t0`.
fn ready(t0: Instant) -> Link {
    ready_with(config(), t0)
}

/// A link of `config` through connect and handshake at `t0`.
fn ready_with(config: LinkConfig, t0: Instant) -> Link {
    let mut link = Link::new(config, t0);
    link.start(None, None, 0, t0);
    link.connected(t0);
    let handshake = take(&mut link);
    assert!(
        handshake.contains("SCRIPT") && handshake.contains("LOAD"),
        "{handshake}"
    );
    let replies = scripts();
    assert_eq!(feed(&mut link, replies.as_bytes(), t0, 0), Ok(vec![]));
    assert!(link.is_ready());
    link
}

#[test]
fn replies_match_requests_in_order() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    queue(&mut link, command(Op::Release, 0), 1, t0).unwrap();
    let sent = take(&mut link);
    assert!(sent.starts_with("*6\r\n$3\r\nSET\r\n"), "{sent}");
    assert!(
        sent.contains("EVALSHA") && sent.contains(RELEASE_SHA1),
        "{sent}"
    );
    let outcomes = feed(&mut link, b"+OK\r\n:0\r\n", t0 + MS, 1).unwrap();
    assert_eq!(
        outcomes,
        [
            (Op::Acquire, Outcome::Reply(Reply::Ok)),
            (Op::Release, Outcome::Reply(Reply::Refused))
        ]
    );
    assert!(!link.has_request_for(1));
}

#[test]
fn replies_of_other_rounds_are_matched_and_dropped() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    queue(&mut link, command(Op::Acquire, 30_000), 2, t0).unwrap();
    let outcomes = feed(&mut link, b"$-1\r\n+OK\r\n", t0 + MS, 2).unwrap();
    assert_eq!(outcomes, [(Op::Acquire, Outcome::Reply(Reply::Ok))]);
}

/// Several rounds in flight on one connection (a batch): each reply goes to
/// exactly the round of the request it answers, in the connection's order,
/// also when they arrive in pieces; a round outside the live ones gets
/// nothing.
#[test]
fn each_live_round_gets_exactly_its_replies() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    for round in [7, 8, 9, 10] {
        queue(&mut link, command(Op::Acquire, 30_000), round, t0).unwrap();
    }
    let sent = take(&mut link);
    assert_eq!(sent.matches("SET").count(), 4, "one write: {sent}");
    let replies = b"+OK\r\n$-1\r\n+OK\r\n-ERR x\r\n";
    let mut got = Vec::new();
    // Byte by byte: a reply split across reads still has one owner.
    for byte in replies.chunks(1) {
        let buf = link.read_buf().unwrap();
        buf[0] = byte[0];
        link.handle_read(
            1,
            t0 + MS,
            &mut (8..11, |round, _, outcome, _| {
                got.push((round, outcome));
            }),
        )
        .unwrap();
    }
    assert_eq!(
        got,
        [
            (8, Outcome::Reply(Reply::Refused)),
            (9, Outcome::Reply(Reply::Ok)),
            (
                10,
                Outcome::Server(crate::rules::ServerError::new(b"ERR x"))
            ),
        ],
        "round 7 is not live: its +OK is matched and dropped"
    );
    for round in 7..=10 {
        assert!(!link.has_request_for(round));
    }
}

#[test]
fn a_reply_to_nothing_fails_the_link() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    assert_eq!(
        feed(&mut link, b"+OK\r\n", t0, 1),
        Err(NodeError::UnexpectedReply)
    );
}

#[test]
fn commands_wait_for_the_handshake() {
    let t0 = Instant::now();
    let mut link = Link::new(config(), t0);
    link.start(Some("alice"), Some("pw"), 3, t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    assert_eq!(take(&mut link), "", "nothing is written before the connect");
    link.connected(t0);
    let handshake = take(&mut link);
    assert!(handshake.contains("AUTH") && handshake.contains("SELECT"));
    assert!(!handshake.contains("SET\r\n"), "held back: {handshake}");
    let replies = "+OK\r\n+OK\r\n".to_owned() + &scripts();
    feed(&mut link, replies.as_bytes(), t0, 1).unwrap();
    assert!(take(&mut link).contains("SET"), "written once logged in");
}

#[test]
fn a_refused_login_writes_nothing_held() {
    let t0 = Instant::now();
    let mut link = Link::new(config(), t0);
    link.start(None, Some("wrong"), 0, t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    link.connected(t0);
    take(&mut link);
    let err = feed(&mut link, b"-WRONGPASS invalid password\r\n", t0, 1).unwrap_err();
    assert!(
        matches!(&err, NodeError::Handshake(e) if e.code() == b"WRONGPASS"),
        "{err:?}"
    );
    assert!(err.is_configuration());
    assert_eq!(take(&mut link), "", "the SET never leaves");
}

#[test]
fn noscript_replays_the_current_rounds_extend() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    queue(&mut link, command(Op::Extend, 9_000), 1, t0).unwrap();
    take(&mut link);
    let outcomes = feed(&mut link, b"-NOSCRIPT No matching script\r\n", t0, 1).unwrap();
    assert_eq!(outcomes, []);
    let resent = take(&mut link);
    assert!(
        resent.contains("EVAL\r\n") && resent.contains(EXTEND_SCRIPT),
        "{resent}"
    );
    assert!(resent.contains("9000"), "the same TTL: {resent}");
    let outcomes = feed(&mut link, b":1\r\n", t0, 1).unwrap();
    assert_eq!(outcomes, [(Op::Extend, Outcome::Reply(Reply::Ok))]);
}

#[test]
fn noscript_never_replays_a_finished_rounds_extend() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    queue(&mut link, command(Op::Extend, 2_000), 1, t0).unwrap();
    queue(&mut link, command(Op::Extend, 30_000), 2, t0).unwrap();
    take(&mut link);
    // Round 2 is current: round 1's late NOSCRIPT must not send the 2 s
    // extend after the 30 s one.
    let outcomes = feed(&mut link, b"-NOSCRIPT x\r\n:1\r\n", t0, 2).unwrap();
    assert_eq!(outcomes, [(Op::Extend, Outcome::Reply(Reply::Ok))]);
    assert_eq!(take(&mut link), "");
    assert!(!link.has_request_for(1));
}

#[test]
fn noscript_replays_a_finished_rounds_release() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    queue(&mut link, command(Op::Release, 0), 1, t0).unwrap();
    take(&mut link);
    assert_eq!(feed(&mut link, b"-NOSCRIPT x\r\n", t0, 2), Ok(vec![]));
    let resent = take(&mut link);
    assert!(
        resent.contains(RELEASE_SCRIPT),
        "a release still frees its key: {resent}"
    );
}

/// A `NOSCRIPT` reply to the first of as many requests as a link holds, on
/// the longest inline resource names: the request sent again fits in the
/// room allocated at build (the queue and the argument arena do not grow),
/// and every request keeps its own arguments.
#[test]
fn noscript_on_a_full_link_grows_nothing() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    let names: Vec<String> = (0..64).map(|i| format!("{i:0>64}")).collect();
    let mut queued = 0;
    for (i, name) in names.iter().enumerate() {
        // Releases are sent again even for a round that is over.
        let op = if (2..34).contains(&i) {
            Op::Extend
        } else {
            Op::Release
        };
        let command = command_on(op, name.as_bytes(), b"the-20-byte-token-01", 5_000);
        if queue(&mut link, command, i as u64 + 1, t0).is_ok() {
            queued += 1;
        }
    }
    assert_eq!(queued, link.config.max_requests(), "the link is full");
    let capacities = (link.requests.capacity(), link.replay.capacity());
    take(&mut link);
    let replies = "-NOSCRIPT x\r\n".repeat(2) + &":1\r\n".repeat(queued - 2);
    feed(&mut link, replies.as_bytes(), t0, 1).unwrap();
    assert_eq!(
        (link.requests.capacity(), link.replay.capacity()),
        capacities
    );
    // The two requests sent again, last in the queue, with their own
    // resources.
    let resent = take(&mut link);
    let first = resent.find(&names[0]).unwrap();
    let second = resent.find(&names[1]).unwrap();
    assert!(
        first < second && resent.contains(RELEASE_SCRIPT),
        "{resent}"
    );
    feed(&mut link, b":1\r\n:1\r\n", t0, 1).unwrap();
    assert!(link.requests.is_empty() && link.replay.is_empty());
}

/// A master that answers nothing: acquires stop at the limit less the
/// release headroom, other releases at the limit, and releases that must
/// reach the master use the reserve, then are refused too. On the longest
/// inline names, nothing the link allocated at build grows.
#[test]
fn releases_that_must_reach_a_master_stop_at_the_reserve() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    let capacities = (
        link.requests.capacity(),
        link.replay.capacity(),
        link.out.capacity(),
    );
    let name = "r".repeat(64);
    let mut round = 0;
    let mut fill = |link: &mut Link, op: Op, reach: u64| {
        let mut queued = 0;
        loop {
            let command =
                command_on(op, name.as_bytes(), b"the-20-byte-token-01", 5_000).reaching(reach);
            round += 1;
            match queue(link, command, round, t0) {
                Ok(()) => queued += 1,
                Err(NodeError::Lagging) => return queued,
                Err(other) => panic!("{other:?}"),
            }
        }
    };
    let config = link.config;
    let acquires = fill(&mut link, Op::Extend, 0);
    assert_eq!(acquires, config.max_requests() - RELEASE_HEADROOM);
    assert_eq!(fill(&mut link, Op::Release, 0), RELEASE_HEADROOM);
    let reserved = fill(&mut link, Op::Release, 1);
    assert_eq!(reserved, config.capacity() - config.max_requests());
    assert!(reserved >= MAX_UNANSWERED, "{reserved}");
    assert_eq!(link.requests.len(), config.capacity());
    assert_eq!(
        (
            link.requests.capacity(),
            link.replay.capacity(),
            link.out.capacity()
        ),
        capacities,
        "a buffer grew"
    );
}

#[test]
fn unsolicited_frames_have_a_budget() {
    let t0 = Instant::now();
    let push = b">2\r\n+flood\r\n:1\r\n";
    // Within the budget, pushes are skipped and the reply still counts.
    let mut link = ready(t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    let mut bytes = push.repeat(UNSOLICITED_BUDGET / push.len() - 1);
    bytes.extend_from_slice(b"+OK\r\n");
    let outcomes = feed(&mut link, &bytes, t0, 1).unwrap();
    assert_eq!(outcomes, [(Op::Acquire, Outcome::Reply(Reply::Ok))]);
    // Past it, the link fails.
    let mut link = ready(t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    let bytes = push.repeat(UNSOLICITED_BUDGET / push.len() + 2);
    assert_eq!(feed(&mut link, &bytes, t0, 1), Err(NodeError::Unsolicited));
}

#[test]
fn timers_on_a_fake_clock() {
    let t0 = Instant::now();
    let mut link = Link::new(config(), t0);
    link.start(None, None, 0, t0);
    assert_eq!(
        link.next_timer(),
        Some(t0 + 500 * MS),
        "the stall of the handshake"
    );
    assert_eq!(link.check_timers(t0 + 499 * MS), Ok(()));
    assert_eq!(link.check_timers(t0 + 501 * MS), Err(NodeError::Stalled));

    let mut link = ready(t0);
    assert_eq!(link.next_timer(), None, "idle: no timer");
    let t1 = t0 + 100 * MS;
    queue(&mut link, command(Op::Acquire, 30_000), 1, t1).unwrap();
    assert_eq!(link.next_timer(), Some(t1 + 500 * MS));
    assert_eq!(link.check_timers(t1 + 500 * MS), Ok(()));
    assert_eq!(link.check_timers(t1 + 501 * MS), Err(NodeError::Stalled));
}

#[test]
fn a_link_that_keeps_missing_deadlines_stalls() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    link.note_late(t0);
    // Replies keep arriving, but each too late to count.
    for i in 1..=5u32 {
        let at = t0 + i * 100 * MS;
        queue(&mut link, command(Op::Acquire, 30_000), u64::from(i), at).unwrap();
        feed(&mut link, b"+OK\r\n", at + 60 * MS, u64::from(i)).unwrap();
    }
    let at = t0 + 600 * MS;
    assert_eq!(
        queue(&mut link, command(Op::Acquire, 30_000), 9, at),
        Err(NodeError::Stalled)
    );
}

#[test]
fn back_off_doubles_and_a_healthy_link_reconnects_at_once() {
    let t0 = Instant::now();
    let mut link = Link::new(config(), t0);
    assert!(link.may_send(t0));
    link.start(None, None, 0, t0);
    link.close(
        NodeError::Connect(std::io::ErrorKind::ConnectionRefused),
        t0,
    );
    assert!(!link.may_send(t0 + 9 * MS));
    assert!(link.may_send(t0 + 10 * MS));
    link.start(None, None, 0, t0);
    link.close(NodeError::Closed, t0);
    assert!(!link.may_send(t0 + 19 * MS), "doubled");
    assert!(link.may_send(t0 + 20 * MS));
    assert_eq!(
        link.down_reason(),
        NodeError::Closed,
        "why it is down is kept"
    );

    let mut link = ready(t0);
    link.close(NodeError::Closed, t0);
    assert!(
        link.may_send(t0),
        "a ready link that was closed reconnects at once"
    );
    assert!(link.is_down());
}

#[test]
fn a_time_read_before_the_close_counts_as_the_close() {
    // A front end reads the clock, then takes the engine, which closed the
    // link in between: a link that reconnects at once still takes the
    // command, and one that backs off still waits its back-off.
    let t0 = Instant::now();
    let mut link = ready(t0);
    link.close(NodeError::Closed, t0 + 5 * MS);
    assert!(
        link.may_send(t0),
        "a healthy link that dropped reconnects at once"
    );
    let mut link = Link::new(config(), t0);
    link.start(None, None, 0, t0);
    link.close(
        NodeError::Connect(std::io::ErrorKind::ConnectionRefused),
        t0 + 5 * MS,
    );
    assert!(!link.may_send(t0));
    assert!(!link.may_send(t0 + 14 * MS));
    assert!(link.may_send(t0 + 15 * MS));
}

#[test]
fn replicas_and_cluster_nodes_are_refused_at_the_handshake() {
    let t0 = Instant::now();
    let mut link = Link::new(guarded_config(), t0);
    let replica = guarded(&mut link, t0, &info('a', "slave", 0, 99), "$-1\r\n");
    assert_eq!(replica, Err(NodeError::Replica));
    assert!(replica.unwrap_err().is_configuration());
    let mut link = Link::new(guarded_config(), t0);
    let cluster = guarded(&mut link, t0, &info('a', "master", 1, 99), "$-1\r\n");
    assert_eq!(cluster, Err(NodeError::ClusterMode));
    // INFO refused by the ACL: a configuration error of the handshake.
    let mut link = Link::new(guarded_config(), t0);
    let denied = guarded(&mut link, t0, "-NOPERM no INFO for you\r\n", "$-1\r\n");
    assert!(denied.unwrap_err().is_configuration());
}

#[test]
fn a_quarantined_masters_grants_do_not_count() {
    let t0 = Instant::now();
    let mut link = trusted(t0);
    assert!(link.is_ready());
    assert_eq!(link.take_fresh_run_id(), Some([b'a'; 40]));
    assert_eq!(link.take_fresh_run_id(), None, "taken once");
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    let outcomes = feed(&mut link, b"+OK\r\n", t0, 1).unwrap();
    assert_eq!(outcomes, [(Op::Acquire, Outcome::Reply(Reply::Ok))]);

    // It restarted: a new run_id at the reconnect.
    let t1 = t0 + 1000 * MS;
    link.close(NodeError::Closed, t1);
    guarded(&mut link, t1, &info('b', "master", 0, 0), &bulk("theirs")).unwrap();
    assert_eq!(
        link.take_suspicion(),
        Some(crate::rules::identity::Suspicion::Restarted)
    );
    for (op, reply, expect) in [
        (Op::Acquire, "+OK\r\n", Outcome::Quarantined),
        (Op::Extend, ":1\r\n", Outcome::Quarantined),
        (Op::Acquire, "$-1\r\n", Outcome::Reply(Reply::Refused)),
        (Op::Release, ":1\r\n", Outcome::Reply(Reply::Ok)),
    ] {
        queue(&mut link, command(op, 30_000), 2, t1).unwrap();
        take(&mut link);
        let outcomes = feed(&mut link, reply.as_bytes(), t1, 2).unwrap();
        assert_eq!(outcomes, [(op, expect)], "{op:?} {reply:?}");
    }
    // For the guard, and no longer.
    let t2 = t1 + 10_000 * MS;
    queue(&mut link, command(Op::Acquire, 30_000), 3, t2).unwrap();
    let outcomes = feed(&mut link, b"+OK\r\n", t2, 3).unwrap();
    assert_eq!(outcomes, [(Op::Acquire, Outcome::Reply(Reply::Ok))]);
    assert_eq!(link.sighting().suspicions(), 1);
}

#[test]
fn a_flushed_master_is_quarantined_at_its_next_handshake() {
    let t0 = Instant::now();
    let mut link = trusted(t0);
    link.close(NodeError::Closed, t0);
    // Same run_id, but the marker is gone: SET NX GET answered nil.
    guarded(&mut link, t0, &info('a', "master", 0, 3600), "$-1\r\n").unwrap();
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    let outcomes = feed(&mut link, b"+OK\r\n", t0, 1).unwrap();
    assert_eq!(outcomes, [(Op::Acquire, Outcome::Quarantined)]);
}

/// A guarded link whose handshake also sets the deployment's longest TTL
/// (10 s), through a handshake whose marker and longest TTL replies are
/// `marker` and `longest`.
fn deployed(t: Instant, marker: &str, longest: &str) -> Link {
    let config = LinkConfig {
        longest_ttl: Some(10_000),
        ..guarded_config()
    };
    let mut link = Link::new(config, t);
    link.start(None, None, 0, t);
    link.connected(t);
    let handshake = take(&mut link);
    assert!(
        handshake.ends_with(
            "$23\r\nredlock-mio:longest-ttl\r\n$5\r\n10000\r\n$2\r\nNX\r\n$3\r\nGET\r\n"
        ),
        "{handshake}"
    );
    let replies = scripts() + &info('a', "master", 0, 3600) + marker + longest;
    feed(&mut link, replies.as_bytes(), t, 0).unwrap();
    link
}

#[test]
fn a_master_with_a_foreign_marker_or_another_longest_ttl_refuses_all_but_releases() {
    let t0 = Instant::now();
    let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    for (marker, longest, refusal) in [
        (
            bulk("1"),
            bulk("20000"),
            Some(NodeError::LongestTtl {
                deployed: 20_000 * MS,
                configured: 10_000 * MS,
            }),
        ),
        (
            wrongtype.to_owned(),
            "$-1\r\n".to_owned(),
            Some(NodeError::ForeignKey(crate::MARKER_KEY)),
        ),
        (
            bulk("1"),
            wrongtype.to_owned(),
            Some(NodeError::ForeignKey(crate::LONGEST_TTL_KEY)),
        ),
        (bulk("1"), bulk("10000"), None),
    ] {
        let mut link = deployed(t0, &marker, &longest);
        assert!(link.is_ready(), "the connection stays: {refusal:?}");
        assert_eq!(link.failure(), refusal);
        for (op, reply) in [
            (Op::Acquire, "+OK\r\n"),
            (Op::Extend, ":1\r\n"),
            (Op::Release, ":1\r\n"),
        ] {
            queue(&mut link, command(op, 30_000), 1, t0).unwrap();
            take(&mut link);
            let outcomes = feed(&mut link, reply.as_bytes(), t0, 1).unwrap();
            let expect = match &refusal {
                Some(error) if op != Op::Release => Outcome::Failed(error.clone()),
                _ => Outcome::Reply(Reply::Ok),
            };
            assert_eq!(outcomes, [(op, expect)], "{refusal:?}");
        }
    }
}

#[test]
fn a_lagging_link_refuses_new_requests_and_stays() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    // One round in flight allowed: 32 + 2 unanswered requests at most
    // (MAX_UNANSWERED + 2 x in_flight), 8 more for releases.
    let mut queued = 0u64;
    while queue(&mut link, command(Op::Acquire, 30_000), queued + 1, t0).is_ok() {
        queued += 1;
        assert!(queued < 1000, "no limit");
    }
    assert_eq!(queued, 34);
    assert_eq!(
        queue(&mut link, command(Op::Acquire, 30_000), 99, t0),
        Err(NodeError::Lagging)
    );
    assert_eq!(
        queue(&mut link, command(Op::Extend, 30_000), 99, t0),
        Err(NodeError::Lagging)
    );
    // Releases have headroom.
    for i in 0..8 {
        queue(&mut link, command(Op::Release, 0), 100 + i, t0).unwrap();
    }
    assert_eq!(
        queue(&mut link, command(Op::Release, 0), 200, t0),
        Err(NodeError::Lagging)
    );
    // Not a release whose lock's acquire went out to this master: the key
    // may be there; it has a reserve of its own (32 here). Nor a release
    // whose reach names another master only.
    let must = command(Op::Release, 0).reaching(0b110);
    assert_eq!(queue(&mut link, must, 400, t0), Err(NodeError::Lagging));
    let must = must.reaching(0b101);
    for i in 0..32 {
        queue(&mut link, must, 300 + i, t0).unwrap();
    }
    assert_eq!(queue(&mut link, must, 400, t0), Err(NodeError::Lagging));
    // Lagging is not stalled: the link is up, its timers fine.
    assert!(link.is_ready());
    assert_eq!(link.check_timers(t0 + 100 * MS), Ok(()));
    // Once the master answers (below the limit, releases included),
    // requests are taken again.
    take(&mut link);
    let replies = "+OK\r\n".repeat(34) + &":1\r\n".repeat(8);
    feed(&mut link, replies.as_bytes(), t0 + 100 * MS, 1).unwrap();
    queue(&mut link, command(Op::Acquire, 30_000), 300, t0 + 100 * MS).unwrap();
    // Stalled is still about time: the oldest request unanswered past the
    // stall timeout.
    assert_eq!(link.check_timers(t0 + 501 * MS), Err(NodeError::Stalled));
}
