//! Batches against real `redis-server`s: many independent
//! locks taken or released in one tick, one write per master, each with
//! its own result; several rounds in flight on each connection.

use std::collections::HashSet;
use std::time::Duration;

use crate::support::clients::{client, fenced};
use crate::support::cluster::Cluster;
use crate::support::proxy::{Dir, Proxies};
use redlock_mio::scripts::{FENCED_ACQUIRE_SCRIPT, FENCED_ACQUIRE_SHA1, RAISE_SCRIPT, RAISE_SHA1};
use redlock_mio::{Error, Lock, MAX_BATCH, Redlock};

const TTL: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// Every result is a lock; releases them all in one batch, each released.
fn release_all(redlock: &Redlock, results: Vec<Result<Lock, Error>>) {
    let mut locks: Vec<Lock> = results.into_iter().map(|r| r.expect("locked")).collect();
    let released = redlock.unlock_many(&mut locks).expect("valid");
    assert!(released.iter().all(Result::is_ok), "{released:?}");
}

#[test]
fn each_resource_of_a_batch_gets_its_own_result() {
    let cluster = Cluster::start(5);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let other = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut held = other.try_lock("batch:3", TTL).expect("free");
    let names: Vec<String> = (0..10).map(|i| format!("batch:{i}")).collect();
    let results = redlock.try_lock_many(&names, TTL).expect("valid");
    assert_eq!(results.len(), 10);
    let mut tokens = HashSet::new();
    let mut locks = Vec::new();
    for (i, result) in results.into_iter().enumerate() {
        if i == 3 {
            assert!(matches!(result, Err(Error::Contended(_))), "{result:?}");
            continue;
        }
        let lock = result.expect("free");
        assert_eq!(lock.resource(), names[i].as_bytes());
        assert!(lock.validity() > TTL - Duration::from_secs(1));
        assert!(tokens.insert(*lock.token()), "tokens differ");
        // Each key holds its own lock's token, on every master.
        for node in cluster.nodes() {
            assert_eq!(
                node.get(&names[i]).as_deref(),
                Some(&lock.token()[..]),
                "{} on node {}",
                names[i],
                node.index()
            );
        }
        locks.push(lock);
    }
    assert_eq!(
        cluster.get(0, "batch:3").as_deref(),
        Some(&held.token()[..])
    );
    let released = redlock.unlock_many(&mut locks).expect("valid");
    assert!(released.iter().all(Result::is_ok), "{released:?}");
    assert!(locks.iter().all(redlock_mio::Lock::is_expired));
    for name in names.iter().filter(|n| *n != "batch:3") {
        for i in 0..5 {
            assert!(!cluster.exists(i, name), "{name} released on node {i}");
        }
    }
    // Releasing again: each is not held any more.
    let again = redlock.unlock_many(&mut locks).expect("valid");
    assert!(again.iter().all(|r| matches!(r, Err(Error::NotHeld(_)))));
    other.unlock(&mut held).expect("unlock");
}

/// A batch goes to each master in one write: the proxy in front of each
/// sees one chunk from the client for the whole batch (100 acquires, about
/// 7 KB: one read of the proxy's 16 KiB buffer). The largest batch works
/// too.
#[test]
fn a_batch_is_one_write_per_master() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let redlock = client(proxies.urls(), REQUEST_TIMEOUT);
    let writes = || -> Vec<usize> {
        proxies
            .iter()
            .map(|p| {
                p.deliveries()
                    .iter()
                    .filter(|d| d.1 == Dir::ToServer)
                    .count()
            })
            .collect()
    };
    // Every master has acted on `keys` (in or not, as `held` says), and no
    // proxy is in the middle of a write: what reached the masters is all
    // counted.
    let settled = |keys: &[String], held: bool| {
        crate::support::check::eventually(Duration::from_secs(5), || {
            keys.iter()
                .all(|k| (0..3).all(|i| cluster.exists(i, k) == held))
                && proxies.iter().all(|p| !p.is_forwarding())
        })
    };
    // Warm up: connections made and handshakes done. The unlock returns at
    // a quorum; the release to the third master may still be on its way.
    let mut lock = redlock.try_lock("warm", TTL).expect("free");
    redlock.unlock(&mut lock).expect("unlock");
    assert!(settled(&["warm".to_owned()], false), "the warm-up released");
    let before = writes();
    let names: Vec<String> = (0..100).map(|i| format!("one-write:{i}")).collect();
    let results = redlock.try_lock_many(&names, TTL).expect("valid");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // The round decides at a quorum: the third master's chunk may still be
    // in its proxy.
    assert!(settled(&names, true), "every master took the batch");
    for (now, was) in writes().into_iter().zip(before) {
        assert_eq!(now - was, 1, "the acquires in one write to each master");
    }
    release_all(&redlock, results);
}

/// Two masters of five paused: every lock of the batch still decides on the
/// three others.
#[test]
fn a_paused_minority_costs_a_batch_nothing() {
    let cluster = Cluster::start(5);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    cluster.pause(1);
    cluster.pause(4);
    let names: Vec<String> = (0..20).map(|i| format!("paused:{i}")).collect();
    let results = redlock.try_lock_many(&names, TTL).expect("valid");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    release_all(&redlock, results);
    cluster.resume(1);
    cluster.resume(4);
}

#[test]
fn bad_batches_are_refused_before_anything_is_sent() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let empty: [&str; 0] = [];
    assert!(
        redlock
            .try_lock_many(&empty, TTL)
            .expect("valid")
            .is_empty()
    );
    let too_many: Vec<String> = (0..=MAX_BATCH).map(|i| i.to_string()).collect();
    assert!(matches!(
        redlock.try_lock_many(&too_many, TTL),
        Err(Error::InvalidResources { count }) if count == MAX_BATCH + 1
    ));
    assert!(matches!(
        redlock.try_lock_many(&["ok", ""], TTL),
        Err(Error::InvalidResource { len: 0 })
    ));
    assert!(matches!(
        redlock.try_lock_many(&["ok"], Duration::ZERO),
        Err(Error::InvalidTtl { .. })
    ));
    for i in 0..3 {
        assert!(!cluster.exists(i, "ok"), "nothing was sent");
    }
}

/// Each lock of a fenced batch gets a fence larger than that of a lock of
/// its resource released before the batch, and smaller than that of a
/// lock taken after it.
#[test]
fn fenced_batches_give_each_lock_a_larger_fence() {
    let cluster = Cluster::start(3);
    let redlock = fenced(cluster.urls(), REQUEST_TIMEOUT, TTL);
    let names = ["f:a", "f:b", "f:c"];
    let mut before = Vec::new();
    for name in names {
        let mut lock = redlock.try_lock(name, TTL).expect("free");
        before.push(lock.fence().expect("fenced"));
        redlock.unlock(&mut lock).expect("unlock");
    }
    let results = redlock.try_lock_many(&names, TTL).expect("valid");
    let fences: Vec<u64> = results
        .iter()
        .map(|r| r.as_ref().expect("free").fence().expect("fenced"))
        .collect();
    for (fence, earlier) in fences.iter().zip(&before) {
        assert!(fence > earlier, "{fences:?} after {before:?}");
    }
    release_all(&redlock, results);
    for (name, fence) in names.iter().zip(&fences) {
        let mut lock = redlock.try_lock(name, TTL).expect("free");
        assert!(lock.fence().expect("fenced") > *fence, "{name}");
        redlock.unlock(&mut lock).expect("unlock");
    }
}

/// Which of `scripts` node `i` ran, in the order it ran them, from its slow
/// log (which the test set to log every command): each entry names its
/// script by SHA1 (`EVALSHA`) or by the text's first bytes (`EVAL`).
fn scripts_run(cluster: &Cluster, i: usize, scripts: &[(&str, &str)]) -> Vec<usize> {
    let log = cluster.command(i, &[b"SLOWLOG", b"GET", b"-1"]);
    let mut found = Vec::new();
    for (kind, (sha1, text)) in scripts.iter().enumerate() {
        for needle in [sha1.as_bytes(), &text.as_bytes()[..64]] {
            found.extend(
                log.windows(needle.len())
                    .enumerate()
                    .filter(|(_, w)| *w == needle)
                    .map(|(at, _)| (at, kind)),
            );
        }
    }
    // The newest entry comes first.
    found.sort_unstable_by_key(|&(at, _)| std::cmp::Reverse(at));
    found.into_iter().map(|(_, kind)| kind).collect()
}

/// A fenced batch takes two round trips whatever its size, one more than
/// a plain batch: every master runs all of its acquires, then all of its
/// raises (as each master's log of commands shows), never a lock's raise
/// before another lock's acquire.
#[test]
fn a_fenced_batch_is_two_round_trips() {
    let cluster = Cluster::start(3);
    let redlock = fenced(cluster.urls(), REQUEST_TIMEOUT, TTL);
    // Counters read and in sync: the batch runs its acquires and raises
    // only.
    let mut warm = redlock.try_lock("warm", TTL).expect("free");
    redlock.unlock(&mut warm).expect("unlock");
    for i in 0..3 {
        for (name, value) in [
            ("slowlog-max-len", "1024"),
            ("slowlog-log-slower-than", "0"),
        ] {
            let reply = cluster.command(i, &[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()]);
            assert_eq!(reply, b"+OK\r\n", "{}", String::from_utf8_lossy(&reply));
        }
        cluster.command(i, &[b"SLOWLOG", b"RESET"]);
    }
    let k = 8;
    let names: Vec<String> = (0..k).map(|i| format!("fenced-batch:{i}")).collect();
    let results = redlock.try_lock_many(&names, TTL).expect("valid");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let scripts = [
        (FENCED_ACQUIRE_SHA1, FENCED_ACQUIRE_SCRIPT),
        (RAISE_SHA1, RAISE_SCRIPT),
    ];
    // The batch returns at a quorum: a master may run its share later.
    let expected: Vec<usize> = [0].repeat(k).into_iter().chain([1].repeat(k)).collect();
    for i in 0..3 {
        let ran = crate::support::check::eventually(Duration::from_secs(5), || {
            scripts_run(&cluster, i, &scripts).len() >= 2 * k
        });
        assert!(ran, "node {i} ran {:?}", scripts_run(&cluster, i, &scripts));
        assert_eq!(
            scripts_run(&cluster, i, &scripts),
            expected,
            "node {i}: 0 an acquire, 1 a raise"
        );
    }
    release_all(&redlock, results);
}
