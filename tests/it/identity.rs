//! Masters identified by what they are, and masters that restarted empty,
//! against real `redis-server`s.
//!
//! - One server listed under two addresses votes once: the second
//!   handshake with the same `run_id` is refused with `SameServer`.
//! - With the restart guard, a master that restarted without its keys
//!   cannot grant a lock that another client still holds: its grants do not
//!   count until the longest TTL has passed. Without the guard the same
//!   scenario gives two holders, which shows the test can see a violation.
//! - A restart or a flush seen at a reconnect quarantines the master for
//!   the guard, and no longer.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::{eventually, kill_clients};
use crate::support::clients::one_try;
use crate::support::cluster::{Cluster, ClusterOptions};
use redlock_mio::{ConfigError, Error, LONGEST_TTL_KEY, MARKER_KEY, Require};
use redlock_mio::{NodeError, NodeState};

const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);

/// Sets the marker on each node, as an operator provisioning the masters
/// would: trusted at once, however short their uptime.
fn provision(cluster: &Cluster) {
    for node in cluster.nodes() {
        node.set(MARKER_KEY, "1");
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
    // naming the other, so that server 0 would have one vote; `build`
    // refuses the list.
    let err = one_try(urls.clone(), REQUEST_TIMEOUT)
        .build()
        .expect_err("one server listed twice");
    let ConfigError::Misconfigured { failures } = &err else {
        panic!("expected Misconfigured, got {err:?}");
    };
    assert_eq!(failures.len(), 1, "{err}");
    assert!(
        matches!(failures[0].1, NodeError::SameServer { other: 0 | 1, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("same run_id"), "{text}");
    println!("{text}");

    // Not identified, server 0 votes twice: the extend "succeeds" with one
    // server of two up.
    cluster.node(1).restart();
    let blind = one_try(urls.clone(), REQUEST_TIMEOUT)
        .identify_masters(false)
        .build()
        .expect("build");
    let mut lock = blind.try_lock("twice", ttl).expect("servers 0 and 1");
    cluster.stop(1);
    blind
        .extend(&mut lock, ttl)
        .expect("one server, two votes: the hazard the check removes");

    // A twin and a stopped server: the twin is the configuration error.
    let err = one_try(urls, REQUEST_TIMEOUT)
        .require_handshakes(Require::All)
        .build()
        .expect_err("a twin and a stopped server");
    let ConfigError::Misconfigured { failures } = &err else {
        panic!("expected Misconfigured, got {err:?}");
    };
    assert!(
        failures
            .iter()
            .all(|(_, e)| matches!(e, NodeError::SameServer { .. }) && e.is_configuration()),
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
    provision(&cluster);
    let holder = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .build()
        .expect("build");
    let lock = holder.try_lock("orders", ttl).expect("free");
    // Held on masters 0, 1, 2 only.
    for i in [3, 4] {
        cluster.command(i, &[b"DEL", b"orders"]);
    }
    cluster.restart(2);
    assert!(!cluster.exists(2, "orders"), "restarted empty");

    let guarded = one_try(cluster.urls(), REQUEST_TIMEOUT)
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
    let unguarded = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .build()
        .expect("build");
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
    provision(&cluster);
    let redlock = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .restart_guard(guard)
        .build()
        .expect("build");
    let ttl = guard;
    let mut lock = redlock.try_lock("a", ttl).expect("all trusted");
    redlock.unlock(&mut lock).expect("unlock");

    for (master, upset) in [(0usize, "restart"), (1, "flush")] {
        match upset {
            "restart" => cluster.restart(master),
            _ => {
                cluster.flushall(master);
                kill_clients(&cluster, master);
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
    let guarded = one_try(cluster.urls(), REQUEST_TIMEOUT)
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

/// The operator's path of the docs: masters provisioned with
/// `SET redlock-mio:marker 1` before any lock count at once, although they
/// were started just now; masters whose marker a client set (it may have
/// set it again right after a restart that lost a lock) are still
/// quarantined on first sight while their uptime is short.
#[test]
fn a_provisioned_marker_spares_fresh_masters_the_quarantine() {
    let guard = Duration::from_secs(30);
    let ttl = Duration::from_secs(3);
    let provisioned = Cluster::start(3);
    provision(&provisioned);
    let redlock = one_try(provisioned.urls(), REQUEST_TIMEOUT)
        .restart_guard(guard)
        .build()
        .expect("build");
    let mut lock = redlock
        .try_lock("fresh", ttl)
        .expect("provisioned masters are trusted at once");
    redlock.unlock(&mut lock).expect("unlock");
    let stats = redlock.stats();
    assert!(stats.masters.iter().all(|m| m.suspicions == 0), "{stats:?}");

    // Not provisioned: the first client finds no marker (new, or lost) and
    // sets its own; a second client then finds a client's marker on
    // masters up for less than the guard.
    let fresh = Cluster::start(3);
    for _ in 0..2 {
        let client = one_try(fresh.urls(), REQUEST_TIMEOUT)
            .restart_guard(guard)
            .build()
            .expect("build");
        let err = client
            .try_lock("fresh", ttl)
            .expect_err("quarantined at first sight");
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
    }
    let marker = fresh.get(0, MARKER_KEY).expect("a client set it");
    assert!(marker.starts_with(b"client:"), "{marker:?}");
}

/// Two clients configured with another longest TTL on the same masters:
/// the second is refused at `build`, and a master whose value changes
/// under a client refuses it at the next handshake, typed, while its
/// connection stays and the others serve. A lock (or an extension, or a
/// kept lock) longer than the longest TTL is refused by the client itself.
#[test]
fn clients_that_disagree_on_the_longest_ttl_are_refused() {
    let cluster = Cluster::start(3);
    provision(&cluster);
    let longest = Duration::from_secs(10);
    let first = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .fencing(longest)
        .build()
        .expect("the first sets it");
    let mut lock = first.try_lock("ttl", longest).expect("free");
    first.unlock(&mut lock).expect("unlock");
    for node in cluster.nodes() {
        assert_eq!(node.get(LONGEST_TTL_KEY).as_deref(), Some(&b"10000"[..]));
    }
    for (what, other) in [
        (
            "fencing",
            one_try(cluster.urls(), REQUEST_TIMEOUT).fencing(longest * 2),
        ),
        (
            "restart guard",
            one_try(cluster.urls(), REQUEST_TIMEOUT).restart_guard(longest / 2),
        ),
    ] {
        match other.build() {
            Err(ConfigError::LongestTtl {
                deployed,
                configured,
                ..
            }) => {
                assert_eq!(deployed, longest, "{what}");
                assert_ne!(configured, longest, "{what}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    // The same value, through either setting or both: accepted.
    for agrees in [
        one_try(cluster.urls(), REQUEST_TIMEOUT).restart_guard(longest),
        one_try(cluster.urls(), REQUEST_TIMEOUT)
            .restart_guard(longest)
            .fencing(longest),
    ] {
        agrees.build().expect("agrees");
    }
    // One client, two values: refused before it connects.
    let err = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .restart_guard(longest)
        .fencing(longest * 2)
        .build()
        .expect_err("two values");
    assert!(matches!(err, ConfigError::LongestTtls { .. }), "{err}");

    // An operator changes master 0's value under the client: it refuses
    // the client at the next handshake, the others still serve.
    cluster.set(0, LONGEST_TTL_KEY, "20000");
    kill_clients(&cluster, 0);
    let refused = NodeState::Failed(NodeError::LongestTtl {
        deployed: longest * 2,
        configured: longest,
    });
    let mut seen = false;
    assert!(
        eventually(Duration::from_secs(5), || {
            match first.try_lock("ttl", longest) {
                Ok(mut lock) => {
                    first.unlock(&mut lock).expect("unlock");
                }
                Err(err) => panic!("masters 1 and 2 grant: {err}"),
            }
            cluster.set(1, "ttl:held", "someone-else");
            let err = first.try_lock("ttl:held", longest).expect_err("held on 1");
            cluster.command(1, &[b"DEL", b"ttl:held"]);
            seen = err.report().expect("report").nodes()[0] == refused;
            seen
        }),
        "master 0 never refused: {:?}",
        first.stats()
    );
    let connects = first.stats().masters[0].connects;
    for _ in 0..3 {
        let mut lock = first.try_lock("ttl", longest).expect("masters 1 and 2");
        first.unlock(&mut lock).expect("unlock");
    }
    assert_eq!(
        first.stats().masters[0].connects,
        connects,
        "the connection stays"
    );

    // Longer than the longest TTL: refused without asking the masters.
    let guarded = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .restart_guard(Duration::from_secs(1))
        .require_handshakes(Require::Nothing);
    cluster.set(1, LONGEST_TTL_KEY, "1000");
    cluster.set(2, LONGEST_TTL_KEY, "1000");
    cluster.set(0, LONGEST_TTL_KEY, "1000");
    let guarded = guarded.build().expect("agrees now");
    let too_long = Duration::from_millis(1001);
    assert!(matches!(
        guarded.try_lock("ttl:long", too_long),
        Err(Error::InvalidTtl { .. })
    ));
    let mut lock = guarded
        .try_lock("ttl:long", Duration::from_secs(1))
        .expect("free");
    assert!(matches!(
        guarded.extend(&mut lock, too_long),
        Err(Error::InvalidTtl { .. })
    ));
    guarded.unlock(&mut lock).expect("unlock");
}

/// Another type written by hand into the marker: a guarded client refuses
/// to start on it ([`ConfigError::Misconfigured`]); one already running
/// meets it at its reconnect, and then that master fails every round but
/// releases with `NodeError::ForeignKey` (it cannot tell whether its data
/// survived), its connection stays up, and the other masters serve.
#[test]
fn a_foreign_marker_fails_that_master_alone() {
    let cluster = Cluster::start(3);
    provision(&cluster);
    let foreign = |cluster: &Cluster| {
        cluster.command(0, &[b"DEL", MARKER_KEY.as_bytes()]);
        cluster.command(0, &[b"HSET", MARKER_KEY.as_bytes(), b"a", b"b"]);
    };
    foreign(&cluster);
    let err = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .restart_guard(Duration::from_secs(10))
        .build()
        .expect_err("a foreign marker");
    assert!(
        matches!(&err, ConfigError::Misconfigured { failures }
            if failures.len() == 1 && failures[0].1 == NodeError::ForeignKey(MARKER_KEY)),
        "{err:?}"
    );

    provision(&cluster);
    let redlock = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .restart_guard(Duration::from_secs(10))
        .build()
        .expect("build");
    foreign(&cluster);
    kill_clients(&cluster, 0);
    let ttl = Duration::from_secs(3);
    let foreign_seen = |err: &Error| {
        err.report()
            .is_some_and(|r| r.nodes()[0] == NodeState::Failed(NodeError::ForeignKey(MARKER_KEY)))
    };
    cluster.set(1, "marker:held", "someone-else");
    // Once master 0 has reconnected and read its marker.
    assert!(
        eventually(Duration::from_secs(10), || {
            let err = redlock.try_lock("marker:held", ttl).expect_err("held on 1");
            foreign_seen(&err)
        }),
        "the foreign marker is never reported"
    );
    let connects = redlock.stats().masters[0].connects;
    for _ in 0..3 {
        let mut lock = redlock.try_lock("marker", ttl).expect("masters 1 and 2");
        redlock.unlock(&mut lock).expect("unlock");
    }
    let err = redlock.try_lock("marker:held", ttl).expect_err("held on 1");
    assert!(foreign_seen(&err), "{err}");
    let stats = redlock.stats();
    assert_eq!(
        stats.masters[0].connects, connects,
        "the connection stays: {stats:?}"
    );
    assert!(
        stats.masters[1..].iter().all(|m| m.connects == 1),
        "{stats:?}"
    );
    assert_eq!(
        cluster.command(0, &[b"TYPE", MARKER_KEY.as_bytes()]),
        b"+hash\r\n",
        "left as it was"
    );
}
