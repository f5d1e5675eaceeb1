//! The lock when masters fail: a minority down or paused is tolerated, a
//! majority down or paused makes the lock unavailable quickly, failed
//! attempts leave no keys behind, and the client reconnects (and reloads
//! its scripts) after nodes restart or flush their script cache.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::{
    assert_gone, command_stats, drift, eventually, holders, is_unreachable, pttl, reset_stats,
};
use crate::support::clients::{client, one_try};
use crate::support::cluster::Cluster;
use redlock_mio::scripts::RELEASE_SHA1;
use redlock_mio::{Error, Lock, Redlock};
use redlock_mio::{NodeError, NodeState};

const N: usize = 5;
const REQUEST_TIMEOUT: Duration = Duration::from_millis(50);
const TTL: Duration = Duration::from_secs(10);
/// A TTL short enough to wait for its expiry.
const SHORT_TTL: Duration = Duration::from_secs(2);
/// How long the last nodes may take to apply a round that returned at
/// quorum; generous for a loaded machine.
const SETTLE: Duration = Duration::from_secs(5);
/// What a round may take beyond the request timeout on a loaded machine
/// and still count as bounded rather than hanging.
const MARGIN: Duration = Duration::from_secs(1);

/// `SCRIPT EXISTS <release sha1>` on node `i`.
fn release_script_cached(cluster: &Cluster, i: usize) -> bool {
    let reply = cluster.command(i, &[b"SCRIPT", b"EXISTS", RELEASE_SHA1.as_bytes()]);
    match reply.as_slice() {
        b"*1\r\n:1\r\n" => true,
        b"*1\r\n:0\r\n" => false,
        other => panic!("SCRIPT EXISTS: {:?}", other.escape_ascii().to_string()),
    }
}

/// The lock's validity is what the algorithm says: `t0 + ttl - drift`,
/// with `t0` the start of the round, which began after `before`.
fn assert_valid_for(lock: &Lock, ttl: Duration, before: Instant) {
    let keep = ttl - drift(ttl, 0.01);
    assert!(
        lock.valid_until() >= before + keep,
        "valid until {:?} after the call started, expected at least {keep:?}",
        lock.valid_until() - before
    );
    assert!(
        lock.valid_until() <= Instant::now() + keep,
        "validity beyond the TTL"
    );
}

/// Two masters down: the lock still works on the other three.
#[test]
fn minority_down() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let other = client(cluster.urls(), REQUEST_TIMEOUT);
    cluster.kill(3);
    cluster.kill(4);

    let before = Instant::now();
    let mut lock = redlock.try_lock("res", TTL).expect("acquire with 3 of 5");
    assert_valid_for(&lock, TTL, before);
    assert_eq!(holders(&cluster, 0..3, b"res", lock.token()), [0, 1, 2]);

    // A contender is told the resource is held, not that the cluster is
    // down: two unreachable nodes alone would not prevent a quorum.
    let err = other.try_lock("res", TTL).expect_err("held");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    let report = err.report().expect("report");
    assert_eq!(report.nodes().len(), N);
    assert_eq!(report.quorum(), 3);
    assert!(report.unreachable() <= 2, "{report}");
    assert_eq!(report.ok(), 0, "{report}");
    for (i, state) in report.nodes().iter().enumerate().skip(3) {
        assert!(
            is_unreachable(state) || *state == NodeState::Pending,
            "killed node {i} is {state:?}"
        );
    }
    assert_eq!(holders(&cluster, 0..3, b"res", lock.token()), [0, 1, 2]);

    redlock.unlock(&mut lock).expect("release with 3 of 5");
    assert_gone(&cluster, &[0, 1, 2], b"res", SETTLE);
    let mut again = other.try_lock("res", TTL).expect("free again");
    other.unlock(&mut again).expect("release");
}

/// Two masters frozen (SIGSTOP): the round does not wait for them, and
/// what they are sent meanwhile is cleaned up once they run again.
#[test]
fn minority_paused() {
    let cluster = Cluster::start(N);
    // A deadline far away: a round decided by the running masters ends
    // long before it, so the paused ones are left pending, whatever the
    // load; waiting for them, it would time them out.
    let redlock = client(cluster.urls(), Duration::from_secs(1));
    cluster.pause(3);
    cluster.pause(4);

    let started = Instant::now();
    let mut lock = redlock
        .try_lock("res", SHORT_TTL)
        .expect("acquire with 3 of 5");
    assert_valid_for(&lock, SHORT_TTL, started);
    assert_eq!(holders(&cluster, 0..3, b"res", lock.token()), [0, 1, 2]);
    redlock.unlock(&mut lock).expect("release with 3 of 5");
    // Both rounds were decided by the three running masters: the paused
    // ones were left pending, not waited for until they timed out.
    let stats = redlock.stats();
    assert!(
        stats.masters[3..].iter().all(|m| m.timeouts == 0),
        "{stats:?}"
    );
    assert_gone(&cluster, &[0, 1, 2], b"res", SETTLE);

    // Resumed, the nodes apply the SET and then the release they were
    // sent; the TTL would clean up anyway.
    cluster.resume(3);
    cluster.resume(4);
    assert_gone(&cluster, &[3, 4], b"res", SHORT_TTL + SETTLE);
    let mut again = redlock.try_lock("res", TTL).expect("all nodes free");
    assert!(
        eventually(SETTLE, || holders(&cluster, 0..N, b"res", again.token())
            .len()
            == N),
        "held on all five again"
    );
    redlock.unlock(&mut again).expect("release");
}

/// Three masters down: `Unavailable`, quickly, and nothing left on the
/// two live ones.
#[test]
fn majority_down() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    // A client connected before the failure and one built after it.
    for i in 0..3 {
        cluster.kill(i);
    }
    let late = client(cluster.urls(), REQUEST_TIMEOUT);
    for redlock in [&redlock, &late] {
        let started = Instant::now();
        let err = redlock.try_lock("res", TTL).expect_err("no quorum");
        assert!(
            started.elapsed() < REQUEST_TIMEOUT + MARGIN,
            "took {:?}",
            started.elapsed()
        );
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
        assert!(err.is_retryable());
        let report = err.report().expect("report");
        assert!(report.unreachable() >= 3, "{report}");
        for (i, state) in report.nodes().iter().enumerate().take(3) {
            assert!(
                is_unreachable(state) || *state == NodeState::Pending,
                "killed node {i} is {state:?}"
            );
        }
        assert_gone(&cluster, &[3, 4], b"res", SETTLE);
    }
}

/// Three masters frozen: `Unavailable` at the request timeout, not later;
/// nothing is left anywhere once they run again.
#[test]
fn majority_paused() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    for i in 0..3 {
        cluster.pause(i);
    }
    let err = redlock.try_lock("res", SHORT_TTL).expect_err("no quorum");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    let report = err.report().expect("report");
    assert_eq!(
        &report.nodes()[..3],
        [const { NodeState::TimedOut }; 3],
        "{report}"
    );
    assert!(report.elapsed() >= REQUEST_TIMEOUT, "{report}");
    assert_gone(&cluster, &[3, 4], b"res", SETTLE);

    for i in 0..3 {
        cluster.resume(i);
    }
    assert_gone(&cluster, &[0, 1, 2, 3, 4], b"res", SHORT_TTL + SETTLE);
    let mut lock = redlock.try_lock("res", TTL).expect("all back");
    redlock.unlock(&mut lock).expect("release");
}

/// An attempt that loses releases what it did win: the two nodes where
/// the SET succeeded do not keep the loser's token.
#[test]
fn failed_acquire_leaves_no_key() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    for i in 0..3 {
        cluster.set(i, "res", "someone else");
    }
    for i in 0..N {
        cluster.command(i, &[b"CONFIG", b"RESETSTAT"]);
    }
    let err = redlock.try_lock("res", TTL).expect_err("held on 3 of 5");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    let report = err.report().expect("report");
    assert!(report.refused() >= 3, "{report}");
    // The SET went to every node, and the release followed it there.
    assert!(
        eventually(SETTLE, || (3..N)
            .all(|i| command_stats(&cluster, i, "set").0 == 1)),
        "every free node got the SET"
    );
    assert_gone(&cluster, &[3, 4], b"res", SETTLE);
    for i in 0..3 {
        assert_eq!(
            cluster.get(i, "res").as_deref(),
            Some(&b"someone else"[..]),
            "node {i}: the other owner's key was touched"
        );
    }
}

/// One acquire/extend/release cycle that must reach every node: the token
/// on all five, the extension on all five, the release on all five.
/// Returns `false` (after cleaning up) if some node was not reached.
fn cycle_on_all(cluster: &Cluster, redlock: &Redlock, key: &[u8]) -> bool {
    let Ok(mut lock) = redlock.try_lock(key, TTL) else {
        return false;
    };
    // The round returns at quorum: give the others a moment, as a reply
    // only arrives after the reconnect.
    let all = eventually(Duration::from_millis(500), || {
        holders(cluster, 0..N, key, lock.token()).len() == N
    });
    if !all {
        let _ = redlock.unlock(&mut lock);
        assert_gone(cluster, &(0..N).collect::<Vec<_>>(), key, SETTLE);
        return false;
    }
    // Every node was reached after its restart, so the handshake has
    // loaded the scripts before the SET: no NOSCRIPT is needed.
    for i in 0..N {
        assert!(release_script_cached(cluster, i), "node {i}: no script");
    }
    redlock.extend(&mut lock, TTL + TTL).expect("extend on all");
    let extended = eventually(SETTLE, || (0..N).all(|i| pttl(cluster, i, key) > 11_000));
    assert!(extended, "extended on every node");
    redlock.unlock(&mut lock).expect("unlock on all");
    assert_gone(cluster, &(0..N).collect::<Vec<_>>(), key, SETTLE);
    true
}

/// Every node restarts empty (no persistence), one at a time, under a
/// client that stays up: its connections break, it reconnects after its
/// back-off, and the handshake loads the scripts again.
#[test]
fn nodes_restarted_empty() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    assert!(cycle_on_all(&cluster, &redlock, b"res"));
    for i in 0..N {
        cluster.restart(i);
        assert!(
            !release_script_cached(&cluster, i),
            "node {i} restarted empty"
        );
        // The lock keeps working with one node restarting: the others are
        // a quorum.
        let mut lock = redlock
            .try_lock("during", TTL)
            .expect("four of five are a quorum");
        redlock.unlock(&mut lock).expect("unlock");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut attempts = 0;
    while !cycle_on_all(&cluster, &redlock, b"res") {
        attempts += 1;
        assert!(
            Instant::now() < deadline,
            "no full cycle on all 5 nodes after {attempts} attempts"
        );
        thread::sleep(Duration::from_millis(20));
    }
    for i in 0..N {
        let (_, failed) = command_stats(&cluster, i, "evalsha");
        assert_eq!(failed, 0, "node {i}: an EVALSHA failed (NOSCRIPT?)");
    }
}

/// With the script cache flushed under a connected client, `EVALSHA`
/// meets `NOSCRIPT`; extend and unlock fall back to `EVAL` within the
/// round and succeed, after which the cached scripts serve again.
#[test]
fn script_flush() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("res", TTL).expect("acquire");
    let flush_all = || {
        for i in 0..N {
            assert_eq!(cluster.command(i, &[b"SCRIPT", b"FLUSH"]), b"+OK\r\n");
            assert!(!release_script_cached(&cluster, i));
        }
        reset_stats(&cluster);
    };

    flush_all();
    redlock
        .extend(&mut lock, TTL + TTL)
        .expect("extend after a flush");
    // The round returned once three nodes had answered the EVAL that
    // followed their NOSCRIPT; those are extended. (Whether the other two
    // are is `late_noscript_on_release`'s subject.)
    let fell_back = |script_ran: &dyn Fn(usize) -> bool| -> Vec<usize> {
        (0..N)
            .filter(|&i| {
                let (_, noscript) = command_stats(&cluster, i, "evalsha");
                let (eval, _) = command_stats(&cluster, i, "eval");
                noscript >= 1 && eval >= 1 && script_ran(i)
            })
            .collect()
    };
    let extended = fell_back(&|i| pttl(&cluster, i, b"res") > 11_000);
    assert!(
        extended.len() >= 3,
        "NOSCRIPT, then EVAL extended the key, on {extended:?} only"
    );

    flush_all();
    redlock.unlock(&mut lock).expect("unlock after a flush");
    let released = fell_back(&|i| !cluster.exists(i, b"res"));
    assert!(
        released.len() >= 3,
        "NOSCRIPT, then EVAL released the key, on {released:?} only"
    );

    // EVAL cached the release script again: the next release uses EVALSHA
    // only, and it succeeds.
    let mut lock = redlock.try_lock("res", TTL).expect("acquire again");
    let cached: Vec<usize> = (0..N)
        .filter(|&i| release_script_cached(&cluster, i))
        .collect();
    assert!(cached.len() >= 3, "release script cached on {cached:?}");
    reset_stats(&cluster);
    redlock
        .unlock(&mut lock)
        .expect("unlock with cached scripts");
    assert_gone(&cluster, &cached, b"res", SETTLE);
    for &i in &cached {
        let (calls, failed) = command_stats(&cluster, i, "evalsha");
        let (eval, _) = command_stats(&cluster, i, "eval");
        assert_eq!((calls, failed, eval), (1, 0, 0), "node {i}");
    }
}

/// Replies that arrive after their round was decided are matched to their
/// own requests: a late `+OK` for one resource never counts for the next
/// round's resource.
#[test]
fn late_replies_do_not_confuse_the_next_round() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    // "b" is held by someone else on nodes 2, 3 and 4.
    for i in 2..N {
        cluster.set(i, "b", "someone else");
    }
    cluster.pause(3);
    cluster.pause(4);
    let mut a = redlock.try_lock("a", TTL).expect("a on 0, 1 and 2");
    cluster.resume(3);
    cluster.resume(4);
    // Nodes 3 and 4 now answer `+OK` to the SET of "a", then `$-1` to the
    // SET of "b": the first must not be taken for the second.
    let err = redlock.try_lock("b", TTL).expect_err("b is held on 3 of 5");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    for i in 2..N {
        assert_eq!(
            cluster.get(i, "b").as_deref(),
            Some(&b"someone else"[..]),
            "node {i}"
        );
    }
    assert_gone(&cluster, &[0, 1], b"b", SETTLE);
    // The late SETs of "a" did land, and the release reaches all five.
    assert!(
        eventually(SETTLE, || holders(&cluster, 0..N, b"a", a.token()).len()
            == N),
        "the late SETs of \"a\" landed"
    );
    redlock.unlock(&mut a).expect("unlock");
    assert_gone(&cluster, &(0..N).collect::<Vec<_>>(), b"a", SETTLE);
}

/// A `NOSCRIPT` that arrives after the release round was decided (from a
/// node that was slow) must still lead to the release on that node.
#[test]
fn late_noscript_on_release() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("res", TTL).expect("acquire");
    for i in 0..N {
        // "other" is held elsewhere: trying it below runs a round that
        // uses no EVALSHA.
        cluster.set(i, "other", "someone else");
        cluster.command(i, &[b"SCRIPT", b"FLUSH"]);
    }
    reset_stats(&cluster);
    cluster.pause(3);
    cluster.pause(4);
    redlock.unlock(&mut lock).expect("released on 3 of 5");
    assert_gone(&cluster, &[0, 1, 2], b"res", SETTLE);
    cluster.resume(3);
    cluster.resume(4);
    // Drive the client's event loop, so that it reads the late replies.
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && (3..N).any(|i| cluster.exists(i, b"res")) {
        let err = redlock.try_lock("other", TTL).expect_err("held elsewhere");
        assert!(matches!(err, Error::Contended(_)), "{err}");
        thread::sleep(Duration::from_millis(20));
    }
    // The TTL (10 s) has not run out: only a release removes the key.
    let stats: Vec<String> = (3..N)
        .map(|i| {
            let (evalsha, noscript) = command_stats(&cluster, i, "evalsha");
            let (eval, _) = command_stats(&cluster, i, "eval");
            format!("node {i}: {evalsha} EVALSHA ({noscript} failed), {eval} EVAL")
        })
        .collect();
    let left: Vec<usize> = (3..N).filter(|&i| cluster.exists(i, b"res")).collect();
    assert!(
        left.is_empty(),
        "the late NOSCRIPT was not followed by EVAL: key still on nodes {left:?}; \
         {stats:?} (the EVALs are the cleanups of the attempts on \"other\")"
    );
}

/// Two masters frozen for longer than the stall timeout while the client
/// keeps locking: their connections are dropped as stalled, the lock keeps
/// working on the other three, and once they run again they are
/// reconnected and nothing is left on them.
#[test]
fn long_pause_then_reconnect() {
    let cluster = Cluster::start(N);
    let stall = Duration::from_millis(200);
    let redlock = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .stall_timeout(stall)
        .connect_timeout(Duration::from_millis(200))
        .max_backoff(Duration::from_millis(100))
        .build()
        .expect("build");
    cluster.pause(3);
    cluster.pause(4);
    let paused_until = Instant::now() + stall * 4;
    let mut rounds = 0;
    let mut seen_stalled = false;
    while Instant::now() < paused_until || !seen_stalled {
        let mut lock = redlock.try_lock("res", SHORT_TTL).expect("three of five");
        // A second attempt shows what the paused nodes are doing.
        let err = redlock.try_lock("res", SHORT_TTL).expect_err("held");
        let report = err.report().expect("report");
        for state in &report.nodes()[3..] {
            assert!(
                matches!(
                    state,
                    NodeState::Pending | NodeState::TimedOut | NodeState::Failed(_)
                ),
                "{report}"
            );
            // Dropped as stalled, or already reconnecting: a connect that
            // times out is a new connection, so the old one was dropped (a
            // stalled connection that was healthy is re-made at once).
            seen_stalled |= matches!(
                state,
                NodeState::Failed(
                    NodeError::Stalled | NodeError::Connect(std::io::ErrorKind::TimedOut)
                )
            );
        }
        redlock.unlock(&mut lock).expect("unlock on three");
        rounds += 1;
        assert!(
            Instant::now() < paused_until + Duration::from_secs(10),
            "no connection was ever dropped as stalled after {rounds} rounds"
        );
    }
    assert_gone(&cluster, &[0, 1, 2], b"res", SETTLE);
    cluster.resume(3);
    cluster.resume(4);
    // A SET whose connection was dropped as stalled before the release
    // round could queue the release runs when the node resumes, and only
    // its TTL removes it.
    assert_gone(&cluster, &[3, 4], b"res", SHORT_TTL + SETTLE);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut lock = redlock.try_lock("res", TTL).expect("all up");
        let on_all = eventually(Duration::from_millis(200), || {
            holders(&cluster, 0..N, b"res", lock.token()).len() == N
        });
        redlock.unlock(&mut lock).expect("unlock");
        if on_all {
            break;
        }
        assert!(Instant::now() < deadline, "nodes 3 and 4 never came back");
        thread::sleep(Duration::from_millis(20));
    }
    assert_gone(&cluster, &(0..N).collect::<Vec<_>>(), b"res", SETTLE);
}

/// A killed node that comes back (empty) is reconnected: eventually the
/// next lock's key is on all five nodes again.
#[test]
fn killed_node_reconnects() {
    let cluster = Cluster::start(N);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    cluster.kill(2);
    let mut lock = redlock.try_lock("res", TTL).expect("four of five");
    assert!(
        eventually(SETTLE, || holders(
            &cluster,
            [0, 1, 3, 4],
            b"res",
            lock.token()
        )
        .len()
            == 4),
        "held on the four live nodes"
    );
    redlock.unlock(&mut lock).expect("unlock");
    // Down for a while: several rounds fail on it, so its back-off grows.
    for _ in 0..5 {
        let mut lock = redlock.try_lock("res", TTL).expect("four of five");
        let err = redlock.try_lock("res", TTL).expect_err("held");
        let report = err.report().expect("report");
        assert!(
            matches!(
                report.nodes()[2],
                // While it is down, the node reports why it went down.
                NodeState::Failed(
                    NodeError::Connect(_)
                        | NodeError::Disconnected
                        | NodeError::Closed
                        | NodeError::Io(_)
                ) | NodeState::Pending
            ),
            "{report}"
        );
        redlock.unlock(&mut lock).expect("unlock");
    }
    cluster.restart(2);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut lock = redlock.try_lock("res", TTL).expect("a quorum is up");
        let on_all = eventually(Duration::from_millis(200), || {
            holders(&cluster, 0..N, b"res", lock.token()).len() == N
        });
        redlock.unlock(&mut lock).expect("unlock");
        if on_all {
            break;
        }
        assert!(Instant::now() < deadline, "node 2 never got a lock again");
        thread::sleep(Duration::from_millis(20));
    }
    assert_gone(&cluster, &(0..N).collect::<Vec<_>>(), b"res", SETTLE);
}
