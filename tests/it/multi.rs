//! Several resources in one lock, all or nothing,
//! against real `redis-server`s.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::{assert_gone, eventually, pttl};
use crate::support::clients::client;
use crate::support::cluster::Cluster;
use crate::support::holdings::{Holding, overlaps};
use redlock_mio::Error;

const TTL: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);
/// How long the last master may take to apply a round that returned at a
/// quorum; generous for a loaded machine.
const SETTLE: Duration = Duration::from_secs(5);

#[test]
fn all_keys_are_set_extended_and_released_together() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock
        .try_lock_all(&["m:a", "m:b", "m:c"], TTL)
        .expect("all free");
    let names: Vec<&[u8]> = lock.resources().collect();
    assert_eq!(names, [b"m:a", b"m:b", b"m:c"]);
    assert_eq!(lock.resource(), b"m:a");
    assert!(format!("{lock:?}").contains("m:c"), "{lock:?}");
    for i in 0..3 {
        for key in ["m:a", "m:b", "m:c"] {
            assert_eq!(
                cluster.get(i, key).as_deref(),
                Some(&lock.token()[..]),
                "master {i} key {key}"
            );
        }
    }
    redlock
        .extend(&mut lock, Duration::from_secs(60))
        .expect("extend all");
    for i in 0..3 {
        for key in ["m:a", "m:b", "m:c"] {
            assert!(
                pttl(&cluster, i, key.as_bytes()) > 10_000,
                "master {i} key {key}"
            );
        }
    }
    redlock.unlock(&mut lock).expect("unlock all");
    assert!(lock.is_expired());
    for i in 0..3 {
        for key in ["m:a", "m:b", "m:c"] {
            assert!(!cluster.exists(i, key), "master {i} key {key}");
        }
    }
}

#[test]
fn one_key_held_elsewhere_sets_none() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let other = client(cluster.urls(), REQUEST_TIMEOUT);
    let held = other.try_lock("n:b", TTL).expect("free");
    let err = redlock
        .try_lock_all(&["n:a", "n:b", "n:c"], TTL)
        .expect_err("n:b is held");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    for i in 0..3 {
        assert!(!cluster.exists(i, "n:a") && !cluster.exists(i, "n:c"));
        assert_eq!(cluster.get(i, "n:b").as_deref(), Some(&held.token()[..]));
    }
    // A set that does not overlap is free.
    let mut lock = redlock
        .try_lock_all(&["n:a", "n:c"], TTL)
        .expect("disjoint from n:b");
    redlock.unlock(&mut lock).expect("unlock");
}

#[test]
fn a_failed_attempt_leaves_no_key_on_any_master() {
    let cluster = Cluster::start(5);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    // f:b is held by someone else on three masters: masters 3 and 4 grant
    // both keys, the attempt fails, and its release must remove them.
    for i in 0..3 {
        cluster.set(i, "f:b", "someone-else");
    }
    let err = redlock
        .try_lock_all(&["f:a", "f:b"], TTL)
        .expect_err("f:b held on a majority");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    // Masters 3 and 4 granted both keys; the release removes them.
    assert!(
        eventually(Duration::from_secs(2), || {
            (0..5).all(|i| !cluster.exists(i, "f:a")) && (3..5).all(|i| !cluster.exists(i, "f:b"))
        }),
        "keys left behind"
    );
}

#[test]
fn extend_is_all_or_nothing_per_master() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock_all(&["e:a", "e:b"], TTL).expect("free");
    // e:b lost on every master: no master may extend e:a alone.
    for i in 0..3 {
        cluster.command(i, &[b"DEL", b"e:b"]);
    }
    let err = redlock
        .extend(&mut lock, Duration::from_secs(60))
        .expect_err("e:b is gone");
    assert!(matches!(err, Error::NotHeld(_)), "{err}");
    assert!(lock.is_expired());
    for i in 0..3 {
        let left = pttl(&cluster, i, b"e:a");
        assert!(
            left > 0 && left <= 10_000,
            "master {i}: e:a not extended ({left})"
        );
    }
}

#[test]
fn an_empty_script_cache_is_answered_with_eval() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    for i in 0..3 {
        cluster.command(i, &[b"SCRIPT", b"FLUSH"]);
    }
    let mut lock = redlock
        .try_lock_all(&["s:a", "s:b"], TTL)
        .expect("NOSCRIPT replayed as EVAL in the round");
    for i in 0..3 {
        cluster.command(i, &[b"SCRIPT", b"FLUSH"]);
    }
    redlock
        .extend(&mut lock, TTL)
        .expect("extend after a flush");
    for i in 0..3 {
        cluster.command(i, &[b"SCRIPT", b"FLUSH"]);
    }
    redlock.unlock(&mut lock).expect("unlock after a flush");
    // The unlock returns at a quorum. A master that answers its release
    // with NOSCRIPT after that gets the release again as EVAL when the
    // client next reads from it (see `limitations`): the client's next
    // calls do.
    let gone = || (0..3).all(|i| !cluster.exists(i, b"s:a") && !cluster.exists(i, b"s:b"));
    let driven = eventually(SETTLE, || {
        let mut other = redlock.try_lock("s:next", TTL).expect("free");
        redlock.unlock(&mut other).expect("unlock");
        gone()
    });
    assert!(
        driven,
        "a release answered NOSCRIPT late was never sent again"
    );
    assert_gone(&cluster, &[0, 1, 2], b"s:a", SETTLE);
    assert_gone(&cluster, &[0, 1, 2], b"s:b", SETTLE);
}

#[test]
fn bad_lists_are_typed_errors() {
    let cluster = Cluster::start(1);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let none: [&str; 0] = [];
    assert!(matches!(
        redlock.try_lock_all(&none, TTL),
        Err(Error::InvalidResources { count: 0 })
    ));
    let many: Vec<String> = (0..65).map(|i| format!("k{i}")).collect();
    let err = redlock.try_lock_all(&many, TTL).expect_err("65 names");
    assert!(
        matches!(err, Error::InvalidResources { count: 65 }),
        "{err}"
    );
    println!("{err}");
    assert!(matches!(
        redlock.try_lock_all(&["ok", ""], TTL),
        Err(Error::InvalidResource { len: 0 })
    ));
    // 64 is fine.
    let mut lock = redlock.try_lock_all(&many[..64], TTL).expect("64 names");
    assert_eq!(lock.resources().count(), 64);
    redlock.unlock(&mut lock).expect("unlock");
}

/// Threads lock overlapping sets ({x, y}, {y, z}, {z, x}, and all three)
/// over five masters; no two holdings of one resource may overlap.
#[test]
fn overlapping_sets_are_never_held_twice() {
    let cluster = Cluster::start(5);
    let sets: [&[&str]; 4] = [
        &["o:x", "o:y"],
        &["o:y", "o:z"],
        &["o:z", "o:x"],
        &["o:x", "o:y", "o:z"],
    ];
    let index = |name: &[u8]| match name {
        b"o:x" => 0,
        b"o:y" => 1,
        _ => 2,
    };
    let holdings = Arc::new(Mutex::new(Vec::<Holding>::new()));
    let start = Arc::new(Barrier::new(sets.len()));
    let wins = Arc::new(Mutex::new(0usize));
    thread::scope(|scope| {
        for (thread, set) in sets.iter().enumerate() {
            let (holdings, start, wins) = (holdings.clone(), start.clone(), wins.clone());
            let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
            scope.spawn(move || {
                start.wait();
                for _ in 0..150 {
                    let Ok(mut lock) = redlock.try_lock_all(set, TTL) else {
                        continue;
                    };
                    let begun = Instant::now();
                    thread::sleep(Duration::from_micros(200));
                    let end = Instant::now().min(lock.valid_until());
                    let _ = redlock.unlock(&mut lock);
                    *wins.lock().expect("no panic") += 1;
                    let mut all = holdings.lock().expect("no panic");
                    for name in lock.resources() {
                        all.push(Holding {
                            resource: index(name),
                            thread,
                            token: *lock.token(),
                            start: begun,
                            end,
                            fence: None,
                        });
                    }
                }
            });
        }
    });
    let holdings = holdings.lock().expect("no panic");
    let wins = *wins.lock().expect("no panic");
    assert!(wins >= 20, "too few acquisitions to mean anything: {wins}");
    let found = overlaps(&holdings);
    assert!(
        found.is_empty(),
        "{} overlapping holdings: {:?}",
        found.len(),
        found.first()
    );
    println!("{wins} acquisitions of overlapping sets, no overlap");
}
