//! `Redlock::stats()`: every counter moves with what the client did,
//! against real masters.

use std::time::Duration;

use crate::support::clients::client;
use crate::support::cluster::Cluster;
use redlock_mio::{EngineStats, Error, Stats};

const TTL: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(50);

#[test]
fn counters_follow_every_outcome() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let other = client(cluster.urls(), REQUEST_TIMEOUT);
    let fresh = redlock.stats();
    let mut zero = fresh.clone();
    zero.masters.clear();
    // The engine's counters count the connections' handshakes, made at
    // build: a write and reads per master.
    assert!(fresh.engine.writes >= 3 && fresh.engine.reads >= 3);
    zero.engine = EngineStats::default();
    assert_eq!(zero, Stats::default(), "nothing counted yet");
    assert_eq!(fresh.masters.len(), 3);
    for (master, url) in fresh.masters.iter().zip(cluster.urls()) {
        assert_eq!(master.address, url);
        assert_eq!(master.connects, 1, "connected once at build");
    }

    // Two cycles with an extend each.
    for _ in 0..2 {
        let mut lock = redlock.try_lock("r", TTL).expect("acquire");
        redlock.extend(&mut lock, TTL).expect("extend");
        redlock.unlock(&mut lock).expect("release");
    }
    // Contended.
    let mut held = other.try_lock("r", TTL).expect("the other holds");
    let err = redlock.try_lock("r", TTL).expect_err("held");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    other.unlock(&mut held).expect("release");
    // Unavailable: two of three paused, they time out.
    cluster.pause(1);
    cluster.pause(2);
    let err = redlock.try_lock("r", TTL).expect_err("paused");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    cluster.resume(1);
    cluster.resume(2);

    let stats = redlock.stats();
    assert_eq!(stats.attempts, 4, "{stats:?}");
    assert_eq!(stats.acquired, 2, "{stats:?}");
    assert_eq!(stats.contended, 1, "{stats:?}");
    assert_eq!(stats.unavailable, 1, "{stats:?}");
    assert_eq!((stats.extends, stats.extended), (2, 2), "{stats:?}");
    assert_eq!((stats.releases, stats.released), (2, 2), "{stats:?}");
    assert_eq!(stats.misconfigured, 0);
    let timeouts: Vec<u64> = stats.masters.iter().map(|m| m.timeouts).collect();
    assert_eq!(timeouts, [0, 1, 1], "{stats:?}");

    // A killed master: its failures and reconnects are counted.
    cluster.kill(0);
    for _ in 0..3 {
        let mut lock = redlock.try_lock("r", TTL).expect("two of three");
        redlock.unlock(&mut lock).expect("release");
        std::thread::sleep(Duration::from_millis(30));
    }
    let stats = redlock.stats();
    assert!(stats.masters[0].errors >= 3, "{stats:?}");
    assert!(
        stats.masters[0].connects >= 2,
        "reconnects counted: {stats:?}"
    );
    assert_eq!(stats.masters[1].errors, 0, "{stats:?}");
}

#[test]
fn misconfigured_rounds_are_counted() {
    let cluster = Cluster::start(3);
    // A user that may touch `lock:*` keys only: the handshake passes, a
    // lock on another name is refused by every master.
    for i in 0..3 {
        let reply = cluster.command(
            i,
            &[
                b"ACL", b"SETUSER", b"locker", b"on", b">pw", b"~lock:*", b"+@all",
            ],
        );
        assert_eq!(reply, b"+OK\r\n");
    }
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| u.replace("redis://", "redis://locker:pw@"))
        .collect();
    let redlock = client(urls, REQUEST_TIMEOUT);
    let err = redlock.try_lock("r", TTL).expect_err("no permission");
    assert!(matches!(err, Error::Misconfigured(_)), "{err}");
    let stats = redlock.stats();
    assert_eq!((stats.attempts, stats.misconfigured), (1, 1), "{stats:?}");
    // The round ends once two refusals make a quorum impossible: the
    // third may answer after it.
    let refused = stats.masters.iter().filter(|m| m.errors == 1).count();
    assert!(refused >= 2, "{stats:?}");
    assert!(stats.masters.iter().all(|m| m.errors <= 1), "{stats:?}");
    assert!(
        stats.masters.iter().all(|m| !m.address.contains(":pw@")),
        "{stats:?}"
    );
}
