//! The loss watch (`Redlock::watch`, and the keeper's own) against real
//! masters: each way a lock's keys can vanish early is reported without a
//! call of the holder's, long before the lock's TTL, and a loss on a
//! minority is not one. "Without a call" is what shows the watch at work:
//! nothing else reads the keys, and the TTL is far away.

use std::time::Duration;

use crate::support::check::eventually;
use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use crate::support::restart::restart_empty;
use redlock_mio::{KeepOptions, Lock, Redlock, Standing};

const MASTERS: usize = 5;
/// Far beyond any wait here: a loss reported is the watch's doing, never
/// the TTL's.
const TTL: Duration = Duration::from_secs(120);
/// How long a test waits for a report: generous for a loaded machine.
const REPORT: Duration = Duration::from_secs(20);

fn client(cluster: &Cluster) -> Redlock {
    one_try(cluster.urls(), Duration::from_secs(2))
        .stall_timeout(Duration::from_secs(4))
        .build()
        .expect("build the client")
}

/// A watched lock on `resource`, every master read.
fn watched(client: &Redlock, cluster: &Cluster, resource: &str) -> Lock {
    let before = reads(cluster);
    let mut lock = client.try_lock(resource, TTL).expect("acquire");
    client.watch(&mut lock);
    // Every master answered the watch's first read (and tracks the key).
    assert_read_again(cluster, &before, "the watch read every master");
    lock
}

/// Every master's count of a watch's reads ([`gets`]).
fn reads(cluster: &Cluster) -> Vec<u64> {
    (0..MASTERS).map(|i| gets(cluster, i)).collect()
}

/// Waits until every master has run a watch's read since `before` was
/// counted ([`reads`]); fails with `what` if one has not.
fn assert_read_again(cluster: &Cluster, before: &[u64], what: &str) {
    assert!(
        eventually(REPORT, || (0..MASTERS)
            .all(|i| gets(cluster, i) > before[i])),
        "{what}"
    );
}

/// How many reads of a watch master `i` has run: each asks first that
/// its key be tracked (`CLIENT CACHING YES`), which nothing else sends.
/// (The lock scripts' own `GET`s count as `GET`s too: not these.)
fn gets(cluster: &Cluster, i: usize) -> u64 {
    let info = cluster.command(i, &[b"INFO", b"commandstats"]);
    let text = String::from_utf8_lossy(&info);
    text.lines()
        .find_map(|line| line.strip_prefix("cmdstat_client|caching:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Deletes `key` on `masters` and waits until the watch has read it
/// again on each.
fn delete_and_wait_for_reads(cluster: &Cluster, masters: &[usize], key: &str) {
    let before: Vec<u64> = masters.iter().map(|&i| gets(cluster, i)).collect();
    for &i in masters {
        cluster.command(i, &[b"DEL", key.as_bytes()]);
    }
    assert!(
        eventually(REPORT, || masters
            .iter()
            .zip(&before)
            .all(|(&i, &b)| gets(cluster, i) > b)),
        "the watch read the key again where it changed"
    );
}

#[test]
fn a_delete_on_a_minority_is_no_loss_and_on_a_majority_is_one() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let lock = watched(&client, &cluster, "watch:del");
    delete_and_wait_for_reads(&cluster, &[0, 1], "watch:del");
    assert!(!lock.is_lost(), "three masters still hold the lock");
    cluster.command(2, &[b"DEL", b"watch:del"]);
    assert!(lock.wait_lost(REPORT), "a majority's DEL is a loss");
    assert!(lock.is_lost());
    assert!(!lock.is_expired(), "reported long before the TTL");
}

#[test]
fn a_flush_an_overwrite_and_an_eviction_on_a_majority_are_a_loss() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let lock = watched(&client, &cluster, "watch:ways");
    cluster.command(0, &[b"FLUSHALL"]);
    cluster.command(1, &[b"SET", b"watch:ways", b"somebody else"]);
    // Evicted: no memory left for anything, every key goes.
    cluster.command(
        2,
        &[b"CONFIG", b"SET", b"maxmemory-policy", b"allkeys-random"],
    );
    cluster.command(2, &[b"CONFIG", b"SET", b"maxmemory", b"1"]);
    cluster.command(2, &[b"SET", b"filler", b"x"]);
    cluster.command(2, &[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    assert!(lock.wait_lost(REPORT), "flushed, overwritten and evicted");
    assert!(!lock.is_expired());
}

#[test]
fn masters_restarted_empty_are_a_loss_and_a_blip_is_not() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let lock = watched(&client, &cluster, "watch:restart");
    // A connection killed by the server: the master is unknown until the
    // reconnect's read, which finds the key.
    let before = gets(&cluster, 0);
    // (A connection subscribed to the wake channel is of type pubsub.)
    for kind in [&b"normal"[..], b"pubsub"] {
        cluster.command(0, &[b"CLIENT", b"KILL", b"TYPE", kind, b"SKIPME", b"yes"]);
    }
    assert!(
        eventually(REPORT, || gets(&cluster, 0) > before),
        "the reconnect reads the key"
    );
    assert!(client.stats().masters[0].connects > 1, "it reconnected");
    assert!(!lock.is_lost(), "a dropped connection is no loss");
    for i in 0..3 {
        restart_empty(&cluster, i);
    }
    assert!(lock.wait_lost(REPORT), "three masters came back empty");
    assert!(!lock.is_expired());
}

#[test]
fn an_extended_lock_stays_watched() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let mut lock = watched(&client, &cluster, "watch:extend");
    // The servers forget a key this client changed itself: the extension
    // must read it again for the watch to go on.
    client.extend(&mut lock, TTL).expect("extend");
    assert!(
        eventually(REPORT, || (0..MASTERS).all(|i| gets(&cluster, i) >= 2)),
        "the extension read every master again"
    );
    for i in 0..3 {
        cluster.command(i, &[b"DEL", b"watch:extend"]);
    }
    assert!(lock.wait_lost(REPORT), "lost after the extension");
}

#[test]
fn a_released_lock_is_no_longer_watched_and_an_unwatched_one_never_reports() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let mut lock = watched(&client, &cluster, "watch:released");
    client.unlock(&mut lock).expect("release");
    assert!(!lock.is_lost(), "a release is no loss");
    assert_eq!(
        client.stats().engine.watched,
        0,
        "the watch ended with the release"
    );
    let unwatched = client.try_lock("watch:plain", TTL).expect("acquire");
    for i in 0..MASTERS {
        cluster.command(i, &[b"DEL", b"watch:plain"]);
    }
    assert!(!unwatched.wait_lost(Duration::ZERO));
    assert!(!unwatched.is_lost(), "nobody watches it");
    assert!(
        !futures_executor::block_on(unwatched.lost()),
        "its future says at once that nobody watches it"
    );
}

#[test]
fn an_unlock_dropped_in_flight_ends_the_watch() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let mut lock = watched(&client, &cluster, "watch:dropped-unlock");
    // The release may free the key, of which this client's connections
    // hear nothing (NOLOOP): the watch must not outlive it.
    for i in 0..MASTERS {
        cluster.pause(i);
    }
    {
        let mut unlock = std::pin::pin!(client.unlock_async(&mut lock));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(unlock.as_mut().poll(&mut context).is_pending());
    }
    for i in 0..MASTERS {
        cluster.resume(i);
    }
    assert_eq!(client.stats().engine.watched, 0, "the watch ended");
    assert!(!lock.is_lost());
}

#[test]
fn a_watched_locks_future_completes_at_the_loss() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let lock = watched(&client, &cluster, "watch:future");
    let lost = lock.lost();
    let waiter = std::thread::spawn(move || futures_executor::block_on(lost));
    for i in 0..3 {
        cluster.command(i, &[b"FLUSHALL"]);
    }
    assert!(
        waiter.join().expect("the waiting thread"),
        "the future saw the loss"
    );
    assert!(lock.is_lost());
}

#[test]
fn a_keeper_hears_of_a_loss_before_its_next_extension() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let before = reads(&cluster);
    let lock = client.try_lock("watch:kept", TTL).expect("acquire");
    // The first extension is a third of the TTL away.
    let keeper = client
        .keep(lock, KeepOptions::new(TTL))
        .expect("keep the lock");
    assert_read_again(&cluster, &before, "the keeper's watch read every master");
    for i in 0..3 {
        cluster.command(i, &[b"DEL", b"watch:kept"]);
    }
    assert!(keeper.wait_lost(REPORT), "the keeper heard of the loss");
    assert_eq!(keeper.standing(), Standing::Lost);
    assert_eq!(client.stats().extends, 0, "no extension found it");
    let _ = keeper.release();
    assert_eq!(client.stats().engine.watched, 0);
}

#[test]
fn a_keeper_told_not_to_watch_sends_no_read() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let lock = client.try_lock("watch:unwatched", TTL).expect("acquire");
    let keeper = client
        .keep(lock, KeepOptions::new(TTL).watch(false))
        .expect("keep the lock");
    assert_eq!(client.stats().engine.watched, 0);
    keeper.release().expect("release");
    assert!((0..MASTERS).all(|i| gets(&cluster, i) == 0), "no read");
}

#[test]
fn with_lock_ends_lost_when_a_majority_loses_the_keys_mid_work() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let result = client.with_lock("watch:scoped", KeepOptions::new(TTL), |keeper| {
        assert!(
            eventually(REPORT, || (0..MASTERS).all(|i| gets(&cluster, i) > 0)),
            "the scoped call's watch read every master"
        );
        for i in 2..5 {
            cluster.command(i, &[b"FLUSHALL"]);
        }
        keeper.wait_lost(REPORT)
    });
    assert!(
        matches!(result, Err(redlock_mio::Error::Lost)),
        "{result:?}"
    );
    assert_eq!(client.stats().extends, 0, "no extension found it");
}

#[test]
fn a_watched_lock_dropped_unreleased_is_forgotten_once_its_keys_expire() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let before = reads(&cluster);
    let mut lock = client
        .try_lock("watch:dropped", Duration::from_secs(3))
        .expect("acquire");
    client.watch(&mut lock);
    assert_read_again(&cluster, &before, "the watch read every master");
    drop(lock);
    assert_eq!(client.stats().engine.watched, 1);
    // The masters tell of the expiry; the reads find the key gone; the
    // watch, its holder gone, ends.
    assert!(
        eventually(REPORT, || client.stats().engine.watched == 0),
        "the watch of a dropped lock ended with its keys"
    );
}

#[test]
fn an_extend_dropped_in_flight_keeps_the_watch() {
    let cluster = Cluster::start(MASTERS);
    let client = client(&cluster);
    let mut lock = watched(&client, &cluster, "watch:dropped-extend");
    let before = reads(&cluster);
    // Paused masters leave the extend in flight when its future is
    // dropped; once they resume they apply it, and forget the key for
    // the watching connection.
    for i in 0..MASTERS {
        cluster.pause(i);
    }
    {
        let mut extend = std::pin::pin!(client.extend_async(&mut lock, TTL));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(extend.as_mut().poll(&mut context).is_pending());
    }
    for i in 0..MASTERS {
        cluster.resume(i);
    }
    assert_read_again(
        &cluster,
        &before,
        "the dropped extend's masters were read again",
    );
    for i in 0..3 {
        cluster.command(i, &[b"DEL", b"watch:dropped-extend"]);
    }
    assert!(lock.wait_lost(REPORT), "the watch still hears the masters");
}

/// The operator's guide's least-privilege user (`operations`): its
/// `ACL SETUSER` line that ends with `last`, the password `pw`.
fn guide_user(last: &str, pw: &str) -> Vec<String> {
    let guide = include_str!("../../src/operations.rs");
    let line = guide
        .lines()
        .filter_map(|line| line.strip_prefix("//! ACL SETUSER locker "))
        .find(|line| line.ends_with(last))
        .expect("the guide's ACL line");
    ["ACL", "SETUSER", "locker"]
        .into_iter()
        .map(String::from)
        .chain(line.split_whitespace().map(|word| match word {
            ">password" => format!(">{pw}"),
            word => word.to_owned(),
        }))
        .collect()
}

/// A client of `cluster` as user `locker` (password `pw`), made on every
/// master with the guide's ACL line that ends with `last`.
fn client_as_guide_user(cluster: &Cluster, last: &str) -> Redlock {
    let pw = "watch-pw";
    let args = guide_user(last, pw);
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let urls: Vec<String> = (0..MASTERS)
        .map(|i| {
            assert_eq!(cluster.command(i, &args), b"+OK\r\n", "ACL SETUSER");
            let port = (cluster.nodes()[i].addr().socket_addr())
                .expect("a TCP node")
                .port();
            format!("redis://locker:{pw}@127.0.0.1:{port}")
        })
        .collect();
    one_try(urls, Duration::from_secs(2))
        .stall_timeout(Duration::from_secs(4))
        .build()
        .expect("the guide's user passes the handshake")
}

/// Whether master `i` tracks keys for the connections of user `locker`
/// (the `t` flag of `CLIENT LIST`), and how many it has.
fn locker_tracks(cluster: &Cluster, i: usize) -> (bool, usize) {
    let list = cluster.command(i, &[b"CLIENT", b"LIST"]);
    let text = String::from_utf8_lossy(&list);
    let flags: Vec<&str> = (text.lines())
        .filter(|line| line.contains(" user=locker "))
        .filter_map(|line| line.split(' ').find_map(|kv| kv.strip_prefix("flags=")))
        .collect();
    (
        !flags.is_empty() && flags.iter().all(|flags| flags.contains('t')),
        flags.len(),
    )
}

/// How many `CLIENT TRACKING` calls master `i` refused for want of a
/// permission (`rejected_calls` of `INFO commandstats`).
fn tracking_refused(cluster: &Cluster, i: usize) -> u64 {
    let info = cluster.command(i, &[b"INFO", b"commandstats"]);
    let text = String::from_utf8_lossy(&info);
    (text.lines())
        .find_map(|line| line.strip_prefix("cmdstat_client|tracking:"))
        .and_then(|stats| {
            (stats.split(','))
                .find_map(|kv| kv.strip_prefix("rejected_calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The guide's user for the watch is tracked, and hears a loss on a
/// majority without an extension.
#[test]
fn the_guides_user_for_the_watch_hears_a_loss_at_once() {
    let cluster = Cluster::start(MASTERS);
    let client = client_as_guide_user(&cluster, "+client|tracking +client|caching");
    let mut lock = client.try_lock("lock:acl-watch", TTL).expect("acquire");
    client.watch(&mut lock);
    for i in 0..MASTERS {
        assert!(
            eventually(REPORT, || locker_tracks(&cluster, i).0),
            "master {i} tracks the watch's keys"
        );
        assert_eq!(tracking_refused(&cluster, i), 0, "master {i}");
    }
    delete_and_wait_for_reads(&cluster, &[0, 1, 2], "lock:acl-watch");
    assert!(lock.wait_lost(REPORT), "the loss is reported");
    assert_eq!(client.stats().extends, 0, "reported with no extension");
}

/// A user without `CLIENT` is refused the tracking: the client keeps its
/// connections and serves the lock all the same, and a loss shows at the
/// next extension, as the guide says.
#[test]
fn a_user_without_client_is_refused_the_tracking_and_a_loss_shows_at_the_extension() {
    let cluster = Cluster::start(MASTERS);
    let client = client_as_guide_user(&cluster, "+zrank +time");
    let mut lock = client.try_lock("lock:acl-refused", TTL).expect("acquire");
    client.watch(&mut lock);
    for i in 0..MASTERS {
        assert!(
            eventually(REPORT, || tracking_refused(&cluster, i) > 0),
            "master {i} refused the tracking"
        );
        let (tracks, connections) = locker_tracks(&cluster, i);
        assert!(!tracks && connections > 0, "master {i}: {connections}");
    }
    client
        .extend(&mut lock, TTL)
        .expect("an extension of a lock still held");
    for i in 0..3 {
        cluster.command(i, &[b"DEL", b"lock:acl-refused"]);
    }
    assert!(matches!(
        client.extend(&mut lock, TTL),
        Err(redlock_mio::Error::NotHeld { .. })
    ));
    assert!(lock.wait_lost(REPORT), "the read after the extension");
    let stats = client.stats();
    for (i, master) in stats.masters.iter().enumerate() {
        assert_eq!(master.connects, 1, "master {i} kept its connection");
    }
}
