//! Fences against masters whose wall clocks disagree, on real
//! `redis-server`s (one run with its clock an hour ahead through
//! `support::clock`). Counters that start from the masters' clocks (a new
//! deployment, or every master lost its data) all start from the largest
//! clock of the N, so a fast master's earlier start can never exceed a
//! later start taken while it refuses. Why: `redlock_mio::fencing`.

use std::time::Duration;

use crate::support::check::pttl;
use crate::support::clients::fenced;
use crate::support::clock;
use crate::support::cluster::{Cluster, ClusterOptions};
use redlock_mio::FENCE_KEY;

const HOUR_US: i64 = 3_600_000_000;
const LONGEST: Duration = Duration::from_millis(500);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);

/// Node `i`'s `TIME`, in seconds.
fn time(cluster: &Cluster, i: usize) -> i64 {
    let reply = cluster.command(i, &[b"TIME"]);
    let text = String::from_utf8_lossy(&reply);
    // *2\r\n$10\r\n<seconds>\r\n$6\r\n<micros>\r\n
    text.split("\r\n")
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a TIME reply: {text:?}"))
}

/// Node 0 runs an hour ahead. Holder X is granted by nodes 0 and 1 (node 2
/// holds the resource for someone else), so X's fence comes from the fast
/// master. Every master then restarts empty; a client that crashed
/// mid-acquire left its key on the fast master, which refuses. Holder Y,
/// who began after X, is granted by nodes 1 and 2 through a new client
/// that finds no counter anywhere and starts them from the clocks: its
/// fence must still be above X's. (Started each from its own clock, node 1
/// and 2 would hand Y a fence an hour below X's.)
#[test]
fn a_fast_masters_earlier_fence_stays_below_a_later_start() {
    let cluster = clock::skewed(ClusterOptions::new(3), 0, HOUR_US).start();
    // The skew is there, and expiry still runs at the normal rate.
    let ahead = time(&cluster, 0) - time(&cluster, 1);
    assert!((3540..=3660).contains(&ahead), "node 0 ahead by {ahead} s");
    cluster.command(0, &[b"SET", b"expiring", b"v", b"PX", b"60000"]);
    let left = pttl(&cluster, 0, b"expiring");
    assert!(
        (1..=60_000).contains(&left),
        "PTTL {left} on the fast master"
    );

    let ttl = Duration::from_millis(400);
    let first = fenced(cluster.urls(), REQUEST_TIMEOUT, LONGEST);
    cluster.set(2, "invoice", "someone-else");
    let mut x = first.try_lock("invoice", ttl).expect("nodes 0 and 1");
    let x_fence = x.fence().expect("fenced");
    first.unlock(&mut x).expect("unlock");
    cluster.command(2, &[b"DEL", b"invoice"]);

    for i in 0..3 {
        cluster.restart(i);
        assert_eq!(cluster.get(i, FENCE_KEY), None, "node {i} restarted empty");
    }
    cluster.command(0, &[b"SET", b"invoice", b"crashed", b"PX", b"60000"]);

    let second = fenced(cluster.urls(), REQUEST_TIMEOUT, LONGEST);
    let mut y = second.try_lock("invoice", ttl).expect("nodes 1 and 2");
    let y_fence = y.fence().expect("fenced");
    second.unlock(&mut y).expect("unlock");
    assert!(
        y_fence > x_fence,
        "Y began after X but got fence {y_fence} <= {x_fence} ({} s lower)",
        (x_fence.saturating_sub(y_fence)) / 1_000_000
    );
}
