//! The crate's own key space on real `redis-server`s: no resource may enter
//! it, and a key there that someone else wrote (another type, a value the
//! crate never writes) fails that master alone, with a typed error, while
//! its connection stays up and the other masters serve.

use std::sync::Arc;
use std::time::Duration;

use crate::support::clients::one_try;
use crate::support::cluster::{Cluster, Node};
use mio::{Poll, Token};
use redlock_mio::{
    Error, FENCE_KEY, FENCE_LOST_KEY, LONGEST_TTL_KEY, MARKER_KEY, RESERVED_PREFIX, Redlock,
};
use redlock_mio::{NodeError, NodeState};

const TTL: Duration = Duration::from_millis(400);

fn fenced(cluster: &Cluster) -> Redlock {
    one_try(cluster.urls(), Duration::from_millis(200))
        .retry_delay(Duration::ZERO)
        .fencing(Duration::from_millis(500))
        .build()
        .expect("build")
}

fn reserved(result: Result<impl std::fmt::Debug, Error>, entry: &str) {
    match result {
        Err(Error::ReservedResource) => {}
        other => panic!("{entry}: {other:?}"),
    }
}

/// Two holders through a reserved name: plain client P locked `redlock-mio:fence-lost`,
/// and a fenced client's raise, which deletes that key where it succeeds,
/// took P's lock away, so Q could take it too. Such a name is refused
/// wherever a resource is named, before anything is sent, and a plain lock
/// can no longer stand in for the fence counter either.
#[test]
fn names_in_the_reserved_space_are_refused_everywhere() {
    let cluster = Cluster::start(3);
    let plain = Arc::new(
        Redlock::builder(cluster.urls())
            .retry_count(1)
            .retry_delay(Duration::ZERO)
            .build()
            .expect("build"),
    );
    let later = std::time::Instant::now() + Duration::from_secs(1);
    for name in [
        FENCE_LOST_KEY,
        FENCE_KEY,
        MARKER_KEY,
        LONGEST_TTL_KEY,
        "redlock-mio:anything",
        RESERVED_PREFIX,
    ] {
        reserved(plain.try_lock(name, TTL), "try_lock");
        reserved(plain.lock(name, TTL), "lock");
        reserved(plain.lock_until(name, TTL, later), "lock_until");
        reserved(plain.lock_guard(name, TTL), "lock_guard");
        reserved(plain.try_lock_all(&["free", name], TTL), "try_lock_all");
        reserved(plain.lock_all(&[name, "free"], TTL), "lock_all");
        reserved(plain.try_lock_many(&["free", name], TTL), "try_lock_many");
        use futures_executor::block_on;
        reserved(block_on(plain.try_lock_async(name, TTL)), "try_lock_async");
        reserved(block_on(plain.lock_async(name, TTL)), "lock_async");
        reserved(
            block_on(plain.lock_until_async(name, TTL, later)),
            "lock_until_async",
        );
        reserved(
            block_on(plain.lock_guard_async(name, TTL)),
            "lock_guard_async",
        );
    }
    let poll = Poll::new().expect("poll");
    let mut embedded = Redlock::builder(cluster.urls())
        .build_embedded(poll.registry(), Token(0))
        .expect("build");
    reserved(embedded.try_lock(FENCE_LOST_KEY, TTL), "embedded try_lock");
    // Nothing was sent: no attempt counted, no key set.
    assert_eq!(plain.stats().attempts, 0, "{:?}", plain.stats());
    for node in cluster.nodes() {
        assert!(!node.exists(FENCE_LOST_KEY) && !node.exists("free"));
    }
    // Names that only look alike are not reserved.
    for name in ["redlock-mio", "Redlock-mio:fence", "x:redlock-mio:fence"] {
        let mut lock = plain.try_lock(name, TTL).expect(name);
        plain.unlock(&mut lock).expect("unlock");
    }
    let error = plain
        .try_lock(FENCE_LOST_KEY, TTL)
        .expect_err("reserved")
        .to_string();
    assert!(error.contains(RESERVED_PREFIX), "{error}");
    assert!(!Error::ReservedResource.is_retryable());

    // The fenced side of the scenario still works beside it.
    let fenced = fenced(&cluster);
    let mut lock = fenced.try_lock("invoice:42", TTL).expect("free");
    assert!(lock.fence().is_some());
    fenced.unlock(&mut lock).expect("unlock");
}

/// Replaces node `node`'s `key` with what `command` writes (`{key}` stands
/// for the key).
fn write_foreign(node: &Node, key: &str, command: &[&str]) {
    node.command(&[b"DEL", key.as_bytes()]);
    let command: Vec<&[u8]> = command
        .iter()
        .map(|a| {
            if *a == "{key}" {
                key.as_bytes()
            } else {
                a.as_bytes()
            }
        })
        .collect();
    node.command(&command);
}

/// Every connect this client made, over all masters.
fn connects(redlock: &Redlock) -> Vec<u64> {
    redlock.stats().masters.iter().map(|m| m.connects).collect()
}

/// A plain value or another type written by hand into node 0's fence
/// counter or loss id: node 0 fails the fenced rounds with
/// `NodeError::ForeignKey` naming the key (a configuration error, so the
/// report says what to fix), no connection is dropped (before, a read that
/// met a non-number dropped the connection as a protocol error), and nodes
/// 1 and 2 keep granting fenced locks.
#[test]
fn a_foreign_fence_key_fails_that_master_alone() {
    let cluster = Cluster::start(3);
    let old = fenced(&cluster);
    let mut lock = old.try_lock("fence:foreign", TTL).expect("free");
    let mut last = lock.fence().expect("fenced");
    old.unlock(&mut lock).expect("unlock");
    let cases: [(&str, &[&str]); 5] = [
        (FENCE_KEY, &["SET", "{key}", "not-a-number"]),
        (FENCE_KEY, &["SET", "{key}", "0"]),
        (FENCE_KEY, &["HSET", "{key}", "a", "b"]),
        (FENCE_LOST_KEY, &["SET", "{key}", "junk"]),
        (FENCE_LOST_KEY, &["RPUSH", "{key}", "x"]),
    ];
    for (key, command) in cases {
        let what = format!("{command:?} on {key}");
        let node = cluster.node(0);
        let kept = node.get(FENCE_KEY).expect("node 0 in sync");
        let kept: u64 = String::from_utf8_lossy(&kept).parse().expect("a counter");
        if key == FENCE_LOST_KEY {
            // The loss id is read where the counter is missing.
            node.command(&[b"DEL", FENCE_KEY.as_bytes()]);
        }
        write_foreign(node, key, command);
        // A new client reads every counter first; one in use does not.
        let new = fenced(&cluster);
        for redlock in [&new, &old] {
            let before = connects(redlock);
            let mut lock = redlock
                .try_lock("fence:foreign", TTL)
                .unwrap_or_else(|e| panic!("{what}: nodes 1 and 2 grant: {e}"));
            let fence = lock.fence().expect("fenced");
            assert!(fence > last, "{what}: {fence} after {last}");
            last = fence;
            redlock.unlock(&mut lock).expect("unlock");
            // Node 0's refusal is typed: with node 1 holding the resource
            // for someone else, the quorum hangs on it.
            cluster.set(1, "fence:held", "someone-else");
            let err = redlock
                .try_lock("fence:held", TTL)
                .expect_err("node 1 refuses, node 0 fails");
            let report = err.report().expect("report");
            assert_eq!(
                report.nodes()[0],
                NodeState::Failed(NodeError::ForeignKey(key)),
                "{what}: {report}"
            );
            assert!(report.to_string().contains(key), "{report}");
            cluster.command(1, &[b"DEL", b"fence:held"]);
            assert_eq!(
                connects(redlock),
                before,
                "{what}: a connection was re-made"
            );
        }
        // What was written there is still there, untouched.
        let kind = node.command(&[b"TYPE", key.as_bytes()]);
        assert_ne!(kind, b"+none\r\n", "{what}: deleted");
        // Node 0 back in sync by hand: the others' counter, no loss id.
        node.command(&[b"DEL", FENCE_LOST_KEY.as_bytes()]);
        let highest = cluster.get(1, FENCE_KEY).expect("node 1 in sync");
        let parsed: u64 = String::from_utf8_lossy(&highest)
            .parse()
            .expect("a counter");
        assert!(parsed >= kept, "counters never go back");
        node.set(FENCE_KEY, highest);
    }
}
