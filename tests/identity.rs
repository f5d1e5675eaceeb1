//! Masters identified by what they are, and masters that restarted empty
//! (issue 10, parts 2 and 3), against real `redis-server`s.
//!
//! - One server listed under two addresses votes once: the second
//!   handshake with the same `run_id` is refused with `SameServer`.
//! - With the restart guard, a master that restarted without its keys
//!   cannot grant a lock that another client still holds: its grants do not
//!   count until the longest TTL has passed. Without the guard the same
//!   scenario gives two holders, which shows the test can see a violation.
//! - A restart or a flush seen at a reconnect quarantines the master for
//!   the guard, and no longer.

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::rules::{NodeError, NodeState};
use redlock_mio::{ConfigError, Error, Redlock, Require};
use support::check::eventually;
use support::cluster::{Cluster, ClusterOptions};

const MARKER: &[u8] = b"redlock-mio:marker";

fn builder(urls: Vec<String>) -> redlock_mio::Builder {
    Redlock::builder(urls)
        .request_timeout(Duration::from_millis(200))
        .retry_count(0)
}

/// Waits until every node has been up for more than `uptime` (INFO counts
/// whole seconds), and sets the marker on each, as an operator provisioning
/// the masters would.
fn settle(cluster: &Cluster, uptime: Duration) {
    thread::sleep(uptime + Duration::from_millis(1100));
    for node in cluster.nodes() {
        node.set(MARKER, "provisioned");
    }
}

#[test]
fn one_server_through_two_addresses_votes_once() {
    let cluster = ClusterOptions::new(2)
        .args(["--bind", "127.0.0.1 127.0.0.2"])
        .start();
    let port = |i: usize| cluster.node(i).addr().port().expect("tcp");
    let urls = vec![
        format!("redis://127.0.0.1:{}", port(0)),
        format!("redis://127.0.0.2:{}", port(0)),
        format!("redis://127.0.0.1:{}", port(1)),
    ];
    let ttl = Duration::from_secs(10);

    // Identified: one of the two addresses is refused at its handshake,
    // naming the other, so that server 0 has one vote. With server 1
    // stopped, an extend cannot reach a quorum.
    let redlock = builder(urls.clone()).build().expect("build");
    let mut lock = redlock.try_lock("once", ttl).expect("servers 0 and 1");
    cluster.stop(1);
    let err = redlock
        .extend(&mut lock, ttl)
        .expect_err("one vote of three");
    let report = err.report().expect("report");
    let twins: Vec<(usize, usize)> = report
        .nodes()
        .iter()
        .enumerate()
        .filter_map(|(i, state)| match state {
            NodeState::Failed(NodeError::SameServer { other, .. }) => Some((i, *other)),
            _ => None,
        })
        .collect();
    assert!(
        twins == [(1, 0)] || twins == [(0, 1)],
        "exactly one of the twins refused: {report}"
    );
    let text = err.to_string();
    assert!(text.contains("same run_id"), "{text}");
    println!("{text}");

    // Not identified, server 0 votes twice: the extend "succeeds" with one
    // server of two up.
    cluster.node(1).restart();
    let blind = builder(urls.clone())
        .identify_masters(false)
        .build()
        .expect("build");
    let mut lock = blind.try_lock("twice", ttl).expect("servers 0 and 1");
    cluster.stop(1);
    blind
        .extend(&mut lock, ttl)
        .expect("one server, two votes: the hazard the check removes");

    let err = builder(urls)
        .require_handshakes(Require::All)
        .build()
        .expect_err("a twin and a stopped server");
    let ConfigError::Handshakes { failures, .. } = &err else {
        panic!("expected Handshakes, got {err:?}");
    };
    assert!(
        failures
            .iter()
            .any(|(_, e)| matches!(e, NodeError::SameServer { .. }) && e.is_configuration()),
        "{err}"
    );
    println!("{err}");
}

/// The scenario: a lock held on 3 of 5 masters, one of those
/// restarted empty, and a fresh client that could win through it and the
/// 2 free masters.
#[test]
fn a_master_restarted_empty_cannot_grant_a_held_lock() {
    let ttl = Duration::from_secs(3);
    let cluster = Cluster::start(5);
    settle(&cluster, ttl);
    let holder = builder(cluster.urls()).build().expect("build");
    let lock = holder.try_lock("orders", ttl).expect("free");
    // Held on masters 0, 1, 2 only.
    for i in [3, 4] {
        cluster.command(i, &[b"DEL", b"orders"]);
    }
    cluster.restart(2);
    assert!(!cluster.exists(2, "orders"), "restarted empty");

    let guarded = builder(cluster.urls())
        .restart_guard(ttl)
        .build()
        .expect("build");
    let err = guarded
        .try_lock("orders", ttl)
        .expect_err("master 2 is quarantined");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    let report = err.report().expect("report");
    assert_eq!(report.nodes()[2], NodeState::Quarantined, "{report}");
    println!("{err}");
    let stats = guarded.stats();
    assert_eq!(stats.masters[2].suspicions, 1, "{stats:?}");
    assert_eq!(stats.masters[2].quarantined, 1, "{stats:?}");
    for i in [0, 1, 3, 4] {
        assert_eq!(stats.masters[i].suspicions, 0, "master {i}: {stats:?}");
    }

    // Without the guard, the same attempt wins: two holders at once.
    let unguarded = builder(cluster.urls()).build().expect("build");
    let mut second = unguarded
        .try_lock("orders", ttl)
        .expect("the restarted master grants");
    assert!(
        !lock.is_expired(),
        "the first holder's lock is still valid: two holders"
    );
    unguarded.unlock(&mut second).expect("unlock");
}

#[test]
fn a_restart_or_flush_seen_at_a_reconnect_quarantines_for_the_guard() {
    let guard = Duration::from_secs(1);
    let cluster = Cluster::start(3);
    settle(&cluster, guard);
    let redlock = builder(cluster.urls())
        .restart_guard(guard)
        .build()
        .expect("build");
    let ttl = Duration::from_secs(10);
    let mut lock = redlock.try_lock("a", ttl).expect("all trusted");
    redlock.unlock(&mut lock).expect("unlock");

    for (master, upset) in [(0usize, "restart"), (1, "flush")] {
        match upset {
            "restart" => cluster.restart(master),
            _ => {
                cluster.flushall(master);
                cluster.command(master, &[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
            }
        }
        // Rounds on a scratch resource until the client has reconnected.
        let connects = redlock.stats().masters[master].connects;
        assert!(
            eventually(Duration::from_secs(5), || {
                if let Ok(mut l) = redlock.try_lock("scratch", ttl) {
                    let _ = redlock.unlock(&mut l);
                }
                redlock.stats().masters[master].connects > connects
                    && redlock.stats().masters[master].suspicions == 1
            }),
            "{upset}: no reconnect seen: {:?}",
            redlock.stats()
        );
        let seen = Instant::now();
        // Another master refuses, so the quorum hangs on this one.
        let other = (master + 1) % 3;
        cluster.set(other, "b", "someone-else");
        let err = redlock.try_lock("b", ttl).expect_err("quarantined");
        assert_eq!(
            err.report().expect("report").nodes()[master],
            NodeState::Quarantined,
            "{upset}: {err}"
        );
        // Once the guard (1 s plus 12 ms of drift) has passed, it counts
        // again.
        thread::sleep(
            (seen + guard + Duration::from_millis(50)).saturating_duration_since(Instant::now()),
        );
        let mut lock = redlock
            .try_lock("b", ttl)
            .expect("trusted again after the guard");
        redlock.unlock(&mut lock).expect("unlock");
        cluster.command(other, &[b"DEL", b"b"]);
    }
}

/// Masters seen for the first time with an uptime below the guard's TTL
/// are quarantined: nothing holds the resource, so the failed attempt is
/// `Unavailable`, not "held by another client".
#[test]
fn quarantined_grants_are_unavailable_not_contended() {
    let cluster = Cluster::start(3);
    let guarded = builder(cluster.urls())
        .restart_guard(Duration::from_secs(30))
        .build()
        .expect("build");
    let err = guarded
        .try_lock("fresh", Duration::from_secs(3))
        .expect_err("every master is quarantined at first sight");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    let report = err.report().expect("report");
    assert!(report.quarantined() >= 2, "{report}");
    assert!(!err.to_string().contains("held by another"), "{err}");
}
