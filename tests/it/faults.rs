//! Network faults between the client and five real masters, injected by an
//! in-process TCP proxy in front of each (`crate::support::proxy`): lost replies,
//! stalls, late replies, resets (during the handshake, a round, a release),
//! servers restarted under a held lock, a client paused past its validity,
//! and every byte in its own TCP segment. In each case the lock stays safe
//! and the client stays up.

use std::io::ErrorKind;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::{
    assert_gone, command_stats, eventually, holders, is_unreachable, pttl, reset_stats, tcp_to,
};
use crate::support::clients::client;
use crate::support::cluster::{Cluster, ClusterOptions};
use crate::support::proxy::{Dir, Proxies};
use redlock_mio::{Error, Redlock};
use redlock_mio::{NodeError, NodeState};

const N: usize = 5;
const REQUEST_TIMEOUT: Duration = Duration::from_millis(50);
const TTL: Duration = Duration::from_secs(10);
/// A TTL short enough to wait for its expiry.
const SHORT_TTL: Duration = Duration::from_secs(2);
/// How long the last nodes may take to apply what a round sent them;
/// generous for a loaded machine.
const SETTLE: Duration = Duration::from_secs(5);

fn all() -> Vec<usize> {
    (0..N).collect()
}

/// Acquires a fresh resource until its key lands on all five nodes, then
/// extends and releases it there: the client is fully back. Panics if
/// that does not happen within 10 s.
fn back_on_all(cluster: &Cluster, redlock: &Redlock, key: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut attempts = 0;
    loop {
        attempts += 1;
        if let Ok(mut lock) = redlock.try_lock(key, TTL) {
            let on_all = eventually(Duration::from_millis(300), || {
                holders(cluster, 0..N, key, lock.token()).len() == N
            });
            if on_all {
                redlock
                    .extend(&mut lock, TTL + TTL)
                    .expect("extend with all five up");
                assert!(
                    eventually(SETTLE, || (0..N).all(|i| pttl(cluster, i, key) > 11_000)),
                    "extended on every node"
                );
                redlock.unlock(&mut lock).expect("unlock with all five up");
                assert_gone(cluster, &all(), key, SETTLE);
                return;
            }
            let _ = redlock.unlock(&mut lock);
        }
        assert!(
            Instant::now() < deadline,
            "no round reached all 5 nodes after {attempts} attempts"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The server applies the SET but its reply is lost on 3 of 5 nodes: the
/// attempt fails for want of replies, and the release sent right after it
/// reaches those nodes too, so no key is left (long before the TTL).
#[test]
fn replies_lost_after_the_server_applied_set() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    reset_stats(&cluster);
    for i in 0..3 {
        proxies[i].drop_replies();
    }
    let long_ttl = Duration::from_secs(60);
    let err = redlock.try_lock("res", long_ttl).expect_err("no replies");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    let report = err.report().expect("report");
    assert_eq!(
        &report.nodes()[..3],
        [const { NodeState::TimedOut }; 3],
        "{report}"
    );
    for state in &report.nodes()[3..] {
        // Answered within the request timeout, unless the machine is slow.
        assert!(
            matches!(state, NodeState::Ok | NodeState::TimedOut),
            "{report}"
        );
    }
    // The three servers did apply the SET: their replies were lost.
    assert!(
        eventually(SETTLE, || (0..3)
            .all(|i| command_stats(&cluster, i, "set").0 == 1)),
        "the SET reached nodes 0, 1 and 2"
    );
    // The release followed on all five, also where no reply was heard.
    assert_gone(&cluster, &all(), b"res", SETTLE);
    for i in 0..N {
        assert!(
            command_stats(&cluster, i, "eval").0 >= 1,
            "node {i}: no release"
        );
    }
    for i in 0..3 {
        assert!(
            proxies[i].stats().discarded > 0,
            "proxy {i} dropped nothing"
        );
    }
    proxies.heal_all();
    // The connections to nodes 0-2 now match every reply to the request
    // two before it (see `rounds_resume_after_lost_replies`); they are
    // dropped as stalled only if their oldest request is older than the
    // stall timeout (1 s) when a round starts: so wait that long.
    thread::sleep(Duration::from_millis(1200));
    back_on_all(&cluster, &redlock, b"after");
}

/// Replies lost on a connection that stayed open (a middlebox fault): the
/// driver then matches every later reply to the request two before it
/// (FIFO matching, one reply per request), so those nodes miss every
/// round's deadline although they answer at once; a reply is never counted
/// for a request sent after it, so only availability is at stake. A
/// connection that keeps missing deadlines for longer than the stall
/// timeout is re-made, and the release of the round in which that happens
/// still reaches the node (on the new connection): within a few stall
/// timeouts the client is back on all five.
#[test]

fn rounds_resume_after_lost_replies() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    for i in 0..3 {
        proxies[i].drop_replies();
    }
    let err = redlock.try_lock("res", TTL).expect_err("no replies");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    // Both replies lost: `+OK` to the SET and `:1` to the release.
    assert!(
        eventually(SETTLE, || (0..3).all(
            |i| proxies[i].stats().discarded >= (b"+OK\r\n".len() + b":1\r\n".len()) as u64
        )),
        "the replies to the SET and to the release were dropped"
    );
    proxies.heal_all();
    // Rounds every ~70 ms, as a busy client would run them: within 10 s
    // (ten stall timeouts) the client must be back on all five nodes.
    back_on_all(&cluster, &redlock, b"after");
}

/// One or two masters whose network stalls (bytes accepted, nothing
/// forwarded either way): the lock is won on the other three without
/// waiting for them. Three stalled: `Unavailable` at the request timeout.
/// Once healed, the held-back SET and release reach the stalled nodes in
/// order, and nothing is left.
#[test]
fn stalled_nodes() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    for stalled in [1, 2] {
        let key = format!("res{stalled}");
        // A deadline far away: a round decided by the healthy nodes ends
        // long before it, so the stalled ones are left pending, whatever
        // the load; waiting for them, it would time them out.
        let redlock = client(proxies.urls(), Duration::from_secs(2));
        for i in 0..stalled {
            proxies[i].stall(Dir::Both);
        }
        let mut lock = redlock.try_lock(&key, TTL).expect("a quorum is up");
        assert!(
            eventually(SETTLE, || holders(
                &cluster,
                stalled..N,
                key.as_bytes(),
                lock.token()
            )
            .len()
                >= 3),
            "held on a quorum of the healthy nodes"
        );
        assert!(
            (0..stalled).all(|i| !cluster.exists(i, &key)),
            "a stalled node got the SET"
        );
        redlock
            .unlock(&mut lock)
            .expect("release on the healthy nodes");
        // Both rounds were decided by the healthy nodes, without waiting
        // for the stalled ones to time out.
        let stats = redlock.stats();
        assert!(
            stats.masters[..stalled].iter().all(|m| m.timeouts == 0),
            "{stats:?}"
        );
        assert_gone(
            &cluster,
            &(stalled..N).collect::<Vec<_>>(),
            key.as_bytes(),
            SETTLE,
        );
        proxies.heal_all();
        // The stalled nodes now get the SET, then the release.
        assert_gone(&cluster, &all(), key.as_bytes(), SETTLE);
    }

    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    for i in 0..3 {
        proxies[i].stall(Dir::Both);
    }
    let err = redlock.try_lock("res3", TTL).expect_err("no quorum");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    let report = err.report().expect("report");
    assert_eq!(
        &report.nodes()[..3],
        [const { NodeState::TimedOut }; 3],
        "{report}"
    );
    assert!(report.elapsed() >= REQUEST_TIMEOUT, "{report}");
    assert_gone(&cluster, &[3, 4], b"res3", SETTLE);
    proxies.heal_all();
    assert_gone(&cluster, &all(), b"res3", SETTLE);
    back_on_all(&cluster, &redlock, b"after");
}

/// Three stalled nodes, one of which heals while a round of 200 ms is
/// under way: its reply arrives within the round and makes the quorum.
#[test]
fn stalled_node_heals_mid_round() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let request_timeout = Duration::from_millis(200);
    let redlock = client(proxies.urls(), request_timeout);
    for i in 0..3 {
        proxies[i].stall(Dir::Both);
    }
    // Node 0 is healed once the round is under way (its SETs reached
    // nodes 3 and 4): only node 0's reply, sent after that, can make the
    // quorum.
    let (lock, sent) = thread::scope(|s| {
        let healer = s.spawn(|| {
            let sent = eventually(request_timeout, || {
                cluster.exists(3, "res") && cluster.exists(4, "res")
            });
            proxies[0].heal();
            sent
        });
        let lock = redlock.try_lock("res", TTL);
        (lock, healer.join().expect("the healer"))
    });
    assert!(sent, "the round's SETs went out");
    let mut lock = lock.expect("node 0's late reply makes the quorum");
    assert!(
        eventually(SETTLE, || holders(
            &cluster,
            [0, 3, 4],
            b"res",
            lock.token()
        )
        .len()
            == 3),
        "held on nodes 0, 3 and 4"
    );
    redlock.unlock(&mut lock).expect("release on 0, 3 and 4");
    assert_gone(&cluster, &[0, 3, 4], b"res", SETTLE);
    proxies.heal_all();
    assert_gone(&cluster, &all(), b"res", SETTLE);
}

/// Replies that come after their round's deadline are never counted in a
/// later round. Nodes 3 and 4 answer 300 ms late (request timeout 100
/// ms): round A is won on nodes 0-2; round B starts while A's `+OK`s from
/// nodes 3 and 4 are on their way, and needs them to win (B is held by
/// someone else on nodes 1 and 2). B must report nodes 3 and 4 as timed
/// out, not as acquired.
#[test]
fn replies_after_the_deadline_are_not_counted_later() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let request_timeout = Duration::from_millis(100);
    let latency = Duration::from_millis(300);
    let redlock = client(proxies.urls(), request_timeout);
    for i in [3, 4] {
        proxies[i].latency(Dir::ToClient, latency);
    }
    // The timing can be missed on a loaded machine; then try again.
    let mut premise_met = false;
    for attempt in 0..3 {
        let (a, b) = (format!("a{attempt}"), format!("b{attempt}"));
        for i in [1, 2] {
            cluster.set(i, &b, "someone else");
        }
        let started_a = Instant::now();
        let mut lock_a = redlock.try_lock(&a, TTL).expect("a on nodes 0, 1 and 2");
        // A's replies from nodes 3 and 4 arrive at started_a + 300 ms,
        // halfway through B's round.
        thread::sleep(
            (started_a + Duration::from_millis(250)).saturating_duration_since(Instant::now()),
        );
        let started_b = Instant::now();
        let result = redlock.try_lock(&b, TTL);
        let ended_b = Instant::now();
        let err = match result {
            Ok(lock) => {
                panic!("b was acquired ({lock:?}): late replies to a's round counted for b's")
            }
            Err(err) => err,
        };
        assert!(matches!(err, Error::Contended(_)), "{err}");
        let report = err.report().expect("report");
        assert!(
            matches!(report.nodes()[0], NodeState::Ok | NodeState::TimedOut),
            "{report}"
        );
        assert_eq!(
            &report.nodes()[1..3],
            [const { NodeState::Refused }; 2],
            "{report}"
        );
        for i in [3, 4] {
            assert!(
                matches!(report.nodes()[i], NodeState::TimedOut | NodeState::Pending),
                "node {i} in b's round: {report}"
            );
        }
        // Did a late reply reach the client while B's round ran?
        let b_deadline = started_b + request_timeout;
        premise_met = [3, 4].iter().all(|&i| {
            proxies[i].deliveries().iter().any(|&(at, dir, _)| {
                dir == Dir::ToClient && at >= started_b && at < b_deadline.min(ended_b)
            })
        });
        redlock.unlock(&mut lock_a).expect("unlock a");
        assert_gone(&cluster, &all(), a.as_bytes(), SETTLE);
        assert_gone(&cluster, &[0, 3, 4], b.as_bytes(), SETTLE);
        for i in [1, 2] {
            assert_eq!(
                cluster.get(i, &b).as_deref(),
                Some(&b"someone else"[..]),
                "node {i}: the other owner's key was touched"
            );
        }
        if premise_met {
            break;
        }
    }
    assert!(
        premise_met,
        "in 3 attempts, the late replies never reached the client during the next round"
    );
    proxies.heal_all();
    back_on_all(&cluster, &redlock, b"after");
}

/// Takes `probe`, held by someone else on nodes 3 and 4: nodes 1 and 2
/// acquire, so node 0 decides. Returns node 0's state when the attempt
/// fails (or `Ok` if it was won: then node 0 acquired).
fn probe_node_0(cluster: &Cluster, redlock: &Redlock) -> NodeState {
    for i in [3, 4] {
        cluster.set(i, "probe", "someone else");
    }
    match redlock.try_lock("probe", TTL) {
        Ok(mut lock) => {
            redlock.unlock(&mut lock).expect("unlock the probe");
            NodeState::Ok
        }
        Err(err) => {
            assert!(matches!(err, Error::Contended(_)), "{err}");
            let report = err.report().expect("report");
            // Decided at the third failure: nodes 1 and 2 may not have
            // answered yet.
            for state in &report.nodes()[1..3] {
                assert!(
                    matches!(state, NodeState::Ok | NodeState::Pending),
                    "{report}"
                );
            }
            assert_eq!(
                &report.nodes()[3..],
                [const { NodeState::Refused }; 2],
                "{report}"
            );
            report.nodes()[0].clone()
        }
    }
}

/// Whether node 0 failed because its connection was reset (RST): the
/// client reads `ECONNRESET`, or `EPIPE` if it was writing.
fn is_reset(state: &NodeState) -> bool {
    matches!(
        state,
        NodeState::Failed(NodeError::Io(kind) | NodeError::Connect(kind))
            if matches!(kind, ErrorKind::ConnectionReset | ErrorKind::BrokenPipe)
    )
}

/// Node 0's connection is reset as soon as it is accepted, twice: once
/// while the client is built, once when it reconnects in a round. That
/// round reports node 0 as failed; the client reconnects and carries on.
#[test]
fn reset_during_handshake() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    proxies[0].reset_next_connections(2);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    assert!(
        eventually(SETTLE, || proxies[0].stats().resets == 1),
        "the first connection was reset"
    );
    // Let the reconnect back-off (10 ms) expire: the round reconnects, and
    // that handshake is reset too.
    thread::sleep(Duration::from_millis(50));
    let state = probe_node_0(&cluster, &redlock);
    assert!(is_reset(&state), "node 0 in the round: {state:?}");
    assert_eq!(proxies[0].stats().resets, 2);
    assert!(!cluster.exists(0, "probe"), "a reset handshake wrote");
    back_on_all(&cluster, &redlock, b"after");
    assert_eq!(proxies[0].stats().resets, 2);
}

/// Node 0's connection is reset while the SET is in flight (it never
/// reaches the server): the round counts node 0 as failed; the client
/// reconnects and carries on.
#[test]
fn reset_during_round() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    proxies[0].reset_on_next_request(1);
    let state = probe_node_0(&cluster, &redlock);
    assert!(is_reset(&state), "node 0 in the round: {state:?}");
    assert_eq!(proxies[0].stats().resets, 1);
    assert!(!cluster.exists(0, "probe"));
    back_on_all(&cluster, &redlock, b"after");
}

/// Node 0's connection is reset while the release is in flight, and nodes
/// 3 and 4 have lost the key: the release has no quorum (`NotHeld`, node 0
/// failed); node 0 keeps the key until its TTL; the client carries on.
#[test]
fn reset_during_release() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("res", SHORT_TTL).expect("acquire");
    assert!(
        eventually(SETTLE, || holders(&cluster, 0..N, b"res", lock.token())
            .len()
            == N),
        "held on all five"
    );
    for i in [3, 4] {
        cluster.command(i, &[b"DEL", b"res"]);
    }
    proxies[0].reset_on_next_request(1);
    let err = redlock.unlock(&mut lock).expect_err("no quorum released");
    assert!(matches!(err, Error::NotHeld(_)), "{err}");
    let report = err.report().expect("report");
    assert!(is_reset(&report.nodes()[0]), "{report}");
    // Decided at the third failure: nodes 1 and 2 may not have answered.
    for state in &report.nodes()[1..3] {
        assert!(
            matches!(state, NodeState::Ok | NodeState::Pending),
            "{report}"
        );
    }
    assert_eq!(
        &report.nodes()[3..],
        [const { NodeState::Refused }; 2],
        "{report}"
    );
    assert_eq!(proxies[0].stats().resets, 1);
    // The release never reached node 0: only the TTL removes the key.
    assert_eq!(cluster.get(0, "res").as_deref(), Some(&lock.token()[..]));
    assert_gone(&cluster, &all(), b"res", SHORT_TTL + SETTLE);
    back_on_all(&cluster, &redlock, b"after");
}

/// The local addresses of the established TCP connections to 127.0.0.1
/// at one of `ports`: a client's side of one leaves that state when the
/// peer's FIN arrives.
fn established_to(ports: &[u16]) -> Vec<String> {
    ports
        .iter()
        .flat_map(|&port| tcp_to(port))
        .filter(|c| c.state == "01")
        .map(|c| c.local)
        .collect()
}

/// Runs `op` until it succeeds or 10 s have passed; every failure must be
/// one a restart explains (nodes unreachable, or not holding the key).
fn until_ok(what: &str, mut op: impl FnMut() -> Result<(), Error>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match op() {
            Ok(()) => return,
            Err(err @ (Error::Unavailable(_) | Error::NotHeld(_))) => {
                let report = err.report().expect("report");
                assert!(report.unreachable() > 0, "{what}: {err}");
                assert!(Instant::now() < deadline, "{what} never succeeded: {err}");
                thread::sleep(Duration::from_millis(20));
            }
            Err(err) => panic!("{what}: {err}"),
        }
    }
}

/// Every master restarts (with `appendfsync always`) under a held lock: the
/// client reconnects through the proxies, the handshake loads the scripts
/// again, and the lock, which survived on disk, is extended and released
/// on all five.
#[test]
fn servers_restarted_with_persistence() {
    let cluster = ClusterOptions::new(N).persistence(true).start();
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("res", TTL).expect("acquire");
    assert!(
        eventually(SETTLE, || holders(&cluster, 0..N, b"res", lock.token())
            .len()
            == N),
        "held on all five"
    );
    for i in 0..N {
        cluster.restart(i);
    }
    assert_eq!(
        holders(&cluster, 0..N, b"res", lock.token()).len(),
        N,
        "the key survived the restarts"
    );
    // An extend returns at quorum: a node still reconnecting may miss it,
    // so extend until all five have the new TTL.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut extends = Vec::new();
    loop {
        until_ok("extend", || redlock.extend(&mut lock, TTL + TTL));
        let ttls: Vec<i64> = (0..N).map(|i| pttl(&cluster, i, b"res")).collect();
        extends.push(ttls);
        let on_all = eventually(Duration::from_millis(500), || {
            (0..N).all(|i| pttl(&cluster, i, b"res") > 11_000)
        });
        if on_all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never extended on all five; PTTLs after each extend: {extends:?}"
        );
    }
    for i in 0..N {
        let (_, failed) = command_stats(&cluster, i, "evalsha");
        assert_eq!(failed, 0, "node {i}: an EVALSHA failed (NOSCRIPT?)");
    }
    redlock.unlock(&mut lock).expect("unlock");
    assert_gone(&cluster, &all(), b"res", SETTLE);
    back_on_all(&cluster, &redlock, b"after");
}

/// Two masters restart empty under a held lock: the lock is extended on
/// the three that kept it (the restarted ones refuse: they lost the key),
/// then released; the client reconnects and carries on on all five.
#[test]
fn servers_restarted_empty() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("res", TTL).expect("acquire");
    assert!(
        eventually(SETTLE, || holders(&cluster, 0..N, b"res", lock.token())
            .len()
            == N),
        "held on all five"
    );
    cluster.restart(3);
    cluster.restart(4);
    assert!(!cluster.exists(3, "res") && !cluster.exists(4, "res"));
    until_ok("extend", || redlock.extend(&mut lock, TTL + TTL));
    assert!(
        eventually(SETTLE, || (0..3)
            .all(|i| pttl(&cluster, i, b"res") > 11_000)),
        "extended on the three that kept the key"
    );
    assert!(
        (3..N).all(|i| !cluster.exists(i, "res")),
        "an extend recreated the key"
    );
    redlock.unlock(&mut lock).expect("unlock");
    assert_gone(&cluster, &all(), b"res", SETTLE);
    back_on_all(&cluster, &redlock, b"after");
    for i in 0..N {
        let (_, failed) = command_stats(&cluster, i, "evalsha");
        assert_eq!(failed, 0, "node {i}: an EVALSHA failed (NOSCRIPT?)");
    }
}

/// The holder is paused (here: sleeps) for longer than its validity: the
/// lock says it expired, another client takes the resource, and the old
/// holder can neither extend (`Expired`, servers not asked) nor release
/// (`NotHeld`), and does not touch the new owner's key.
#[test]
fn client_paused_past_validity() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    let other = client(proxies.urls(), REQUEST_TIMEOUT);
    let ttl = Duration::from_millis(300);
    let mut lock = redlock.try_lock("res", ttl).expect("acquire");
    assert!(!lock.is_expired());
    thread::sleep(Duration::from_millis(500));
    assert!(lock.is_expired());
    assert_eq!(lock.validity(), Duration::ZERO);

    let mut taken = other.try_lock("res", TTL).expect("expired on the servers");
    assert_eq!(
        redlock.extend(&mut lock, TTL).expect_err("expired"),
        Error::Expired
    );
    let err = redlock.unlock(&mut lock).expect_err("not held");
    assert!(matches!(err, Error::NotHeld(_)), "{err}");
    assert!(
        eventually(SETTLE, || holders(&cluster, 0..N, b"res", taken.token())
            .len()
            == N),
        "the new owner's key stays on all five"
    );
    other.unlock(&mut taken).expect("the new owner releases");
    assert_gone(&cluster, &all(), b"res", SETTLE);
}

/// Every byte, both ways, in its own TCP segment (handshake included):
/// acquire, contend, extend and release work as on a healthy network.
#[test]
fn one_byte_segments() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    for i in 0..N {
        proxies[i].slice(Dir::Both);
    }
    // Slicing costs tens of microseconds per byte: a roomier timeout, and
    // the handshakes (a few KiB of scripts) done before the first round.
    // The release that follows a refused acquire goes as `EVAL` with its
    // script's text (about 4 KiB), ahead of the next round on every
    // connection.
    let request_timeout = Duration::from_secs(2);
    let sliced = || {
        Redlock::builder(proxies.urls())
            .request_timeout(request_timeout)
            .retry_count(0)
            .connect_timeout(Duration::from_secs(30))
            .stall_timeout(Duration::from_secs(30))
            .require_handshakes(redlock_mio::Require::All)
            .build()
            .expect("build a client")
    };
    let redlock = sliced();
    let other = sliced();

    let mut lock = redlock.try_lock("res", TTL).expect("acquire");
    assert!(
        eventually(SETTLE, || holders(&cluster, 0..N, b"res", lock.token())
            .len()
            == N),
        "held on all five"
    );
    let err = other.try_lock("res", TTL).expect_err("held");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    let report = err.report().expect("report");
    assert!(report.refused() >= 3, "{report}");
    assert!(!report.nodes().iter().any(is_unreachable), "{report}");

    redlock.extend(&mut lock, TTL + TTL).expect("extend");
    assert!(
        eventually(SETTLE, || (0..N)
            .all(|i| pttl(&cluster, i, b"res") > 11_000)),
        "extended on all five"
    );
    redlock.unlock(&mut lock).expect("release");
    assert_gone(&cluster, &all(), b"res", SETTLE);
    let mut again = other.try_lock("res", TTL).expect("free again");
    other.unlock(&mut again).expect("release");
    assert_gone(&cluster, &all(), b"res", SETTLE);
    for i in 0..N {
        let stats = proxies[i].stats();
        assert!(
            stats.to_server > 0 && stats.to_client > 0,
            "proxy {i}: {stats:?}"
        );
        assert_eq!(stats.resets + stats.drops, 0, "proxy {i}: {stats:?}");
    }
}

/// Closing connections under an idle client: the next rounds may fail on
/// those nodes, but the client reconnects and carries on.
#[test]
fn connections_dropped() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    back_on_all(&cluster, &redlock, b"before");
    for i in 0..N {
        assert_eq!(proxies[i].drop_connections(), 1, "proxy {i}");
    }
    back_on_all(&cluster, &redlock, b"after");
    for i in 0..N {
        assert!(proxies[i].stats().accepted >= 2, "proxy {i}: no reconnect");
    }
}

/// The connections of an idle client are closed from the servers' side
/// (all five restarted, or a proxy or load balancer closed them). The next
/// round reads that before it writes anything, reconnects at once (a
/// healthy connection's first failure has no back-off) and sends the
/// command after the handshake: an `extend` of a lock that every master
/// still holds succeeds.
#[test]
fn first_round_after_idle_connections_were_closed() {
    let cluster = Cluster::start(N);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("res", TTL).expect("acquire");
    let ports: Vec<u16> = (0..N).map(|i| proxies[i].addr().port()).collect();
    let open = established_to(&ports);
    assert_eq!(open.len(), N, "one connection per master");
    for i in 0..N {
        assert_eq!(proxies[i].drop_connections(), 1, "proxy {i}");
    }
    // Every FIN has arrived: none of the client's connections that were
    // open is established any more.
    assert!(
        eventually(SETTLE, || established_to(&ports)
            .iter()
            .all(|local| !open.contains(local))),
        "the client's connections saw their FIN"
    );
    redlock
        .extend(&mut lock, TTL)
        .expect("every master still holds the lock");
    redlock.unlock(&mut lock).expect("unlock");
}
