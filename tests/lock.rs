//! The lock against real masters: acquire, contention, release, extend,
//! stale tokens; for N = 1, 3 and 5.

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::time::Duration;

use redlock_mio::{Error, Redlock};
use support::cluster::Cluster;

const TTL: Duration = Duration::from_secs(10);

fn client(cluster: &Cluster) -> Redlock {
    Redlock::builder(cluster.urls())
        .retry_count(0)
        .build()
        .expect("build a client")
}

/// How many nodes hold `key` with exactly `token`.
fn holders(cluster: &Cluster, key: &[u8], token: &[u8]) -> usize {
    (0..cluster.len())
        .filter(|&i| cluster.get(i, key).as_deref() == Some(token))
        .count()
}

fn acquire_release_cycle(n: usize) {
    let cluster = Cluster::start(n);
    let a = client(&cluster);
    let b = client(&cluster);
    let lock = a.try_lock("res", TTL).expect("first acquire");
    assert_eq!(lock.resource(), b"res");
    assert!(lock.validity() > TTL - Duration::from_millis(500));
    assert_eq!(
        holders(&cluster, b"res", lock.token()),
        n,
        "held on every node"
    );

    let err = b.try_lock("res", TTL).expect_err("second client must fail");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    // Early decision: the round stops once a quorum is impossible.
    let report = err.report().expect("a round report");
    assert!(report.refused() > n - report.quorum(), "{report}");
    assert_eq!(
        holders(&cluster, b"res", lock.token()),
        n,
        "the loser's cleanup removed nothing"
    );

    a.unlock(&lock).expect("release");
    // Quorum decides the call; give the last releases a moment to land.
    let freed = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(5));
        (0..n).all(|i| !cluster.exists(i, b"res"))
    });
    assert!(freed, "released on all nodes");
    let again = b.try_lock("res", TTL).expect("free again");
    b.unlock(&again).expect("release again");
}

#[test]
fn one_node() {
    acquire_release_cycle(1);
}

#[test]
fn three_nodes() {
    acquire_release_cycle(3);
}

#[test]
fn five_nodes() {
    acquire_release_cycle(5);
}
