//! What `Lock::validity()` means after every outcome, against real
//! masters: a lock never claims more validity than the masters grant it.
//!
//! - a successful extend grants `t0 + ttl - drift`, shorter or longer
//!   (masters never shorten a key: the lock claims less than they hold);
//! - an extend that was sent and failed caps the validity at what that
//!   round would have granted;
//! - an unlock expires the lock, whatever its outcome;
//! - a stale extend (its round over) is never replayed after a newer one.

use std::time::{Duration, Instant};

use crate::support::check::{assert_gone, command_stats, drift, eventually, pttl};
use crate::support::clients::client;
use crate::support::cluster::Cluster;
use crate::support::proxy::{Dir, Proxies};
use redlock_mio::Error;
use redlock_mio::scripts::EXTEND_SCRIPT;

const REQUEST_TIMEOUT: Duration = Duration::from_millis(50);
const TTL: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(5);

/// The most an extend round that ended by `ended` may grant.
fn granted_by(ended: Instant, ttl: Duration) -> Instant {
    ended + ttl - drift(ttl, 0.01)
}

/// A lock for 10 s, two of three masters paused, an extend to 300 ms
/// fails as `Unavailable`; the paused masters run it when they resume.
/// The lock must not claim its old 10 s (it claims no more than the
/// extend would have granted), and the masters keep the key's later
/// expiry: an extend never shortens a key, so a stale one cannot cut a
/// newer one short.
#[test]
fn failed_extend_caps_validity_at_the_new_ttl() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("cap", TTL).expect("acquire");
    assert!(lock.validity() > TTL / 2);

    cluster.pause(1);
    cluster.pause(2);
    let short = Duration::from_millis(300);
    let err = redlock
        .extend(&mut lock, short)
        .expect_err("two of three paused");
    let ended = Instant::now();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert!(
        lock.valid_until() <= granted_by(ended, short),
        "validity {:?} after a failed extend to {short:?}: more than the masters grant",
        lock.validity()
    );
    assert_eq!(lock.extensions(), 0, "a failed extend is not an extension");
    cluster.resume(1);
    cluster.resume(2);
    // The resumed masters run the extend (the only script they are sent),
    // and none shortens the key.
    assert!(
        eventually(SETTLE, || (1..3)
            .all(|i| command_stats(&cluster, i, "evalsha").0 >= 1)),
        "the paused masters ran the extend once resumed"
    );
    for i in 0..3 {
        let ms = pttl(&cluster, i, b"cap");
        assert!(ms > 1000, "node {i}: PTTL {ms}: the key was shortened");
    }
    redlock
        .unlock(&mut lock)
        .expect("the key is still there: released");
    assert_gone(&cluster, &[0, 1, 2], b"cap", SETTLE);
}

/// A successful extend to a shorter TTL shortens the validity: it is
/// what the extend round granted, not the larger of old and new. The
/// masters keep the later expiry (an extend never shortens a key), so the
/// lock claims less than they hold.
#[test]
fn successful_extend_to_a_shorter_ttl_shortens_validity() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("shorter", TTL).expect("acquire");
    let short = Duration::from_secs(1);
    redlock.extend(&mut lock, short).expect("extend");
    let ended = Instant::now();
    assert!(lock.valid_until() <= granted_by(ended, short));
    assert!(!lock.is_expired());
    assert_eq!(lock.extensions(), 1);
    for i in 0..3 {
        let ms = pttl(&cluster, i, b"shorter");
        assert!(ms > 1000, "node {i}: PTTL {ms}: the key was shortened");
    }
    redlock.unlock(&mut lock).expect("unlock");
}

/// After a successful unlock the lock reports expired.
#[test]
fn unlock_expires_the_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("done", TTL).expect("acquire");
    redlock.unlock(&mut lock).expect("unlock");
    assert!(lock.is_expired(), "an unlocked lock is expired");
    assert_eq!(lock.validity(), Duration::ZERO);
    // And it cannot be extended back to life.
    let err = redlock
        .extend(&mut lock, TTL)
        .expect_err("extend after unlock");
    assert!(matches!(err, Error::Expired), "{err}");
    assert_gone(&cluster, &[0, 1, 2], b"done", SETTLE);
}

/// An unlock that fails (a majority paused) still expires the lock: the
/// masters that got the release no longer hold it.
#[test]
fn failed_unlock_expires_the_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("half", TTL).expect("acquire");
    cluster.pause(1);
    cluster.pause(2);
    let err = redlock.unlock(&mut lock).expect_err("two of three paused");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert!(
        lock.is_expired(),
        "a lock whose release was sent is expired"
    );
    cluster.resume(1);
    cluster.resume(2);
    assert_gone(&cluster, &[0, 1, 2], b"half", SETTLE);
}

/// A `NOSCRIPT` reply to an extend whose round is over arrives after a
/// newer, longer extend was applied on that master: replaying the old one
/// with `EVAL` would cut the key back to the old, shorter TTL behind the
/// holder's back. It is not replayed.
///
/// Master 0 sits behind a proxy that delays its replies by 200 ms, with
/// its script cache flushed: extend #1 (2 s) gets `NOSCRIPT` there, late,
/// after the round decided on masters 1 and 2. The script is then loaded
/// again on master 0, and extend #2 (30 s) is applied there at once. A
/// later call reads the late `NOSCRIPT`.
#[test]
fn stale_extend_is_not_replayed_after_a_newer_one() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let mut urls = cluster.urls();
    urls[0] = proxies.urls()[0].clone();
    let redlock = client(urls, REQUEST_TIMEOUT);
    let mut lock = redlock.try_lock("order", TTL).expect("acquire");

    cluster.command(0, &[b"SCRIPT", b"FLUSH"]);
    let proxy = proxies.iter().next().expect("proxy 0");
    proxy.latency(Dir::ToClient, Duration::from_millis(200));
    redlock
        .extend(&mut lock, Duration::from_secs(2))
        .expect("extend #1 on masters 1 and 2");
    cluster.command(0, &[b"SCRIPT", b"LOAD", EXTEND_SCRIPT.as_bytes()]);
    let long = Duration::from_secs(30);
    redlock
        .extend(&mut lock, long)
        .expect("extend #2 on masters 1 and 2");
    let applied = eventually(SETTLE, || pttl(&cluster, 0, b"order") > 20_000);
    assert!(applied, "extend #2 reached master 0");

    // Make the client read the late replies: with master 1 paused, a lock
    // and its release need master 0, whose replies to them come after the
    // late ones on the same connection. Whatever the client sends master 0
    // on reading the late `NOSCRIPT` (a replay of extend #1, if it made
    // one) goes before the release, so it is applied once the release is
    // through.
    proxy.latency(Dir::ToClient, Duration::ZERO);
    cluster.pause(1);
    let read = eventually(SETTLE, || {
        let Ok(mut probe) = redlock.try_lock("probe", TTL) else {
            return false;
        };
        redlock.unlock(&mut probe).is_ok()
    });
    cluster.resume(1);
    assert!(read, "a lock and its release through master 0");

    let ms = pttl(&cluster, 0, b"order");
    assert!(
        ms > 20_000,
        "master 0: PTTL {ms} ms: the stale 2 s extend overtook the 30 s one"
    );
    assert!(lock.validity() > Duration::from_secs(20));
    redlock.unlock(&mut lock).expect("unlock");
}
