//! The lock against real masters: acquire, contention, release, extend,
//! stale tokens, guards, retries and deadlines; for N = 1, 3 and 5, over
//! TCP, Unix sockets, with a password and on a non-zero database.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::{assert_gone, command_stats, eventually, holders, pttl};
use crate::support::clients::{client, one_try};
use crate::support::cluster::{Cluster, ClusterOptions};
use redlock_mio::{ConfigError, Error, Lock, MAX_TTL, Redlock, TOKEN_LEN};
use redlock_mio::{NodeError, NodeState};

const TTL: Duration = Duration::from_secs(10);

/// How long the last nodes may take to apply a round that returned at
/// quorum; generous for a loaded machine.
const SETTLE: Duration = Duration::from_secs(5);

/// The request timeout of rounds against healthy masters: far above what
/// they take, so that a busy machine does not time them out.
const HEALTHY: Duration = Duration::from_secs(1);

/// Waits until no node has `key`; panics naming the nodes that keep it.
fn assert_gone_everywhere(cluster: &Cluster, key: &[u8]) {
    let all: Vec<usize> = (0..cluster.len()).collect();
    assert_gone(cluster, &all, key, SETTLE);
}

/// Waits until every node has `key` with `token`.
fn assert_held_everywhere(cluster: &Cluster, key: &[u8], token: &[u8]) {
    let held = eventually(SETTLE, || {
        holders(cluster, 0..cluster.len(), key, token).len() == cluster.len()
    });
    assert!(
        held,
        "token held on {} of {} nodes",
        holders(cluster, 0..cluster.len(), key, token).len(),
        cluster.len()
    );
}

fn acquire_release_cycle(n: usize) {
    let cluster = Cluster::start(n);
    let a = client(cluster.urls(), HEALTHY);
    let b = client(cluster.urls(), HEALTHY);
    let mut lock = a.try_lock("res", TTL).expect("first acquire");
    assert_eq!(lock.resource(), b"res");
    assert!(lock.validity() > TTL - Duration::from_millis(500));
    // The call returns at quorum: the last nodes follow shortly.
    assert_held_everywhere(&cluster, b"res", lock.token());

    let err = b.try_lock("res", TTL).expect_err("second client must fail");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    // Early decision: the round stops once a quorum is impossible.
    let report = err.report().expect("a round report");
    assert!(report.refused() > n - report.quorum(), "{report}");
    assert_eq!(
        holders(&cluster, 0..cluster.len(), b"res", lock.token()).len(),
        n,
        "the loser's cleanup removed nothing"
    );

    a.unlock(&mut lock).expect("release");
    // Quorum decides the call; give the last releases a moment to land.
    let freed = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(5));
        (0..n).all(|i| !cluster.exists(i, b"res"))
    });
    assert!(freed, "released on all nodes");
    let mut again = b.try_lock("res", TTL).expect("free again");
    b.unlock(&mut again).expect("release again");
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

/// Extending renews the lock's validity and the key's expiry on every node.
#[test]
fn extend_renews_validity_and_pttl() {
    let cluster = Cluster::start(5);
    let redlock = client(cluster.urls(), HEALTHY);
    let short = Duration::from_secs(3);
    let mut lock = redlock.try_lock("ext", short).expect("acquire");
    // Let part of the TTL run out, so that a renewal is visible.
    thread::sleep(Duration::from_millis(600));
    let before_until = lock.valid_until();
    let before: Vec<i64> = (0..5).map(|i| pttl(&cluster, i, b"ext")).collect();
    for (i, &ms) in before.iter().enumerate() {
        assert!((1..=2_500).contains(&ms), "node {i}: PTTL {ms} before");
    }

    redlock.extend(&mut lock, TTL).expect("extend");
    assert_eq!(lock.extensions(), 1);
    assert!(lock.valid_until() > before_until, "valid_until renewed");
    assert!(
        lock.validity() > TTL - Duration::from_secs(1),
        "validity {:?} after extending to {TTL:?}",
        lock.validity()
    );
    // Extend returns at quorum: wait for the last nodes.
    let renewed = eventually(SETTLE, || (0..5).all(|i| pttl(&cluster, i, b"ext") > 8_000));
    let after: Vec<i64> = (0..5).map(|i| pttl(&cluster, i, b"ext")).collect();
    assert!(renewed, "PTTL before {before:?}, after {after:?}");
    assert_eq!(
        holders(&cluster, 0..cluster.len(), b"ext", lock.token()).len(),
        5
    );

    // A second extension works too, and unlock still owns the key.
    redlock.extend(&mut lock, TTL).expect("extend again");
    assert_eq!(lock.extensions(), 2);
    redlock.unlock(&mut lock).expect("unlock");
    assert_gone_everywhere(&cluster, b"ext");
}

/// Deletes `lock`'s keys behind its holder's back (as a master that lost
/// its data would), then lets `new` take the resource; returns the new
/// lock. The old `lock` still believes itself valid: a stale holder.
fn lose_and_reacquire(cluster: &Cluster, lock: &Lock, new: &Redlock) -> Lock {
    for i in 0..cluster.len() {
        cluster.command(i, &[b"DEL", lock.resource()]);
    }
    assert_gone_everywhere(cluster, lock.resource());
    assert!(!lock.is_expired(), "the stale holder still trusts its lock");
    let taken = new
        .try_lock(lock.resource(), Duration::from_secs(5))
        .expect("the new owner acquires");
    assert_held_everywhere(cluster, lock.resource(), taken.token());
    taken
}

/// Waits until every node has run at least `calls` scripts by `EVALSHA`,
/// so that a round that returned at quorum has reached all of them.
fn wait_evalsha(cluster: &Cluster, calls: u64) {
    let ran = eventually(SETTLE, || {
        (0..cluster.len()).all(|i| command_stats(cluster, i, "evalsha").0 >= calls)
    });
    assert!(ran, "every node ran {calls} EVALSHA");
}

/// A lock from an earlier acquisition cannot extend the resource once
/// another client owns it, and leaves the new owner's keys alone.
#[test]
fn extend_with_stale_token_is_not_held() {
    let cluster = Cluster::start(5);
    let a = client(cluster.urls(), HEALTHY);
    let b = client(cluster.urls(), HEALTHY);
    let mut stale = a.try_lock("stale", TTL).expect("acquire");
    let mut fresh = lose_and_reacquire(&cluster, &stale, &b);
    let until = stale.valid_until();
    for i in 0..5 {
        cluster.command(i, &[b"CONFIG", b"RESETSTAT"]);
    }

    let err = a
        .extend(&mut stale, Duration::from_secs(60))
        .expect_err("a stale token must not extend");
    assert!(matches!(err, Error::NotHeld(_)), "{err}");
    let report = err.report().expect("a round report");
    assert!(report.refused() >= report.quorum(), "{report}");
    assert_eq!(report.ok(), 0, "{report}");
    assert!(
        stale.valid_until() < until && stale.is_expired(),
        "a quorum said the token is gone: the lock is expired"
    );
    assert_eq!(stale.extensions(), 0);

    wait_evalsha(&cluster, 1);
    assert_eq!(
        holders(&cluster, 0..cluster.len(), b"stale", fresh.token()).len(),
        5
    );
    for i in 0..5 {
        let ms = pttl(&cluster, i, b"stale");
        assert!(
            (1..=5_000).contains(&ms),
            "node {i}: PTTL {ms}: the new owner's expiry was touched"
        );
    }
    b.unlock(&mut fresh).expect("the new owner releases");
    assert_gone_everywhere(&cluster, b"stale");
}

/// A lock from an earlier acquisition cannot release the resource once
/// another client owns it.
#[test]
fn unlock_with_stale_token_is_not_held() {
    let cluster = Cluster::start(5);
    let a = client(cluster.urls(), HEALTHY);
    let b = client(cluster.urls(), HEALTHY);
    let mut stale = a.try_lock("stale", TTL).expect("acquire");
    let mut fresh = lose_and_reacquire(&cluster, &stale, &b);
    for i in 0..5 {
        cluster.command(i, &[b"CONFIG", b"RESETSTAT"]);
    }

    let err = a
        .unlock(&mut stale)
        .expect_err("a stale token must not release");
    assert!(matches!(err, Error::NotHeld(_)), "{err}");
    let report = err.report().expect("a round report");
    assert_eq!(report.ok(), 0, "{report}");
    assert!(stale.is_expired(), "an unlocked lock is expired");

    // Every node has run the stale release, and the new owner's key stays.
    wait_evalsha(&cluster, 1);
    assert_eq!(
        holders(&cluster, 0..cluster.len(), b"stale", fresh.token()).len(),
        5
    );
    b.unlock(&mut fresh).expect("the new owner releases");
    assert_gone_everywhere(&cluster, b"stale");
}

/// Extending a lock whose validity has run out is refused without asking
/// the servers: the key may already be someone else's.
#[test]
fn extend_after_validity_expired() {
    let cluster = Cluster::start(5);
    let redlock = client(cluster.urls(), Duration::from_millis(50));
    let ttl = Duration::from_millis(300);
    let mut lock = redlock.try_lock("short", ttl).expect("acquire");
    assert!(lock.validity() <= ttl);
    for i in 0..5 {
        cluster.command(i, &[b"CONFIG", b"RESETSTAT"]);
    }
    // The behaviour under test is what happens after time has passed.
    thread::sleep(ttl + Duration::from_millis(50));
    assert!(lock.is_expired());
    assert_eq!(lock.validity(), Duration::ZERO);

    let err = redlock
        .extend(&mut lock, Duration::from_secs(5))
        .expect_err("expired");
    assert_eq!(err, Error::Expired);
    assert!(err.report().is_none());
    assert!(!err.is_retryable());
    for i in 0..5 {
        let (calls, _) = command_stats(&cluster, i, "evalsha");
        let (eval, _) = command_stats(&cluster, i, "eval");
        assert_eq!((calls, eval), (0, 0), "node {i} was asked to extend");
    }
    // The keys expire on their own; then the lock cannot be released.
    assert_gone_everywhere(&cluster, b"short");
    let err = redlock
        .unlock(&mut lock)
        .expect_err("expired on the servers");
    assert!(matches!(err, Error::NotHeld(_)), "{err}");
}

/// `max_extensions` bounds how often one lock may be extended.
#[test]
fn extension_limit() {
    let cluster = Cluster::start(5);
    let redlock = Redlock::builder(cluster.urls())
        .max_extensions(2)
        .build()
        .expect("build a client");
    let mut lock = redlock.try_lock("limited", TTL).expect("acquire");
    redlock.extend(&mut lock, TTL).expect("first extension");
    redlock.extend(&mut lock, TTL).expect("second extension");
    let until = lock.valid_until();
    let err = redlock.extend(&mut lock, TTL).expect_err("third extension");
    assert_eq!(err, Error::ExtensionLimit { limit: 2 });
    assert_eq!(lock.extensions(), 2);
    assert_eq!(lock.valid_until(), until);
    // The limit is per lock: a new acquisition may be extended again.
    redlock.unlock(&mut lock).expect("unlock");
    let mut next = redlock.try_lock("limited", TTL).expect("acquire again");
    redlock.extend(&mut next, TTL).expect("a new lock extends");
    redlock.unlock(&mut next).expect("unlock");
}

/// A guard releases when dropped, and `release` reports the outcome.
#[test]
fn lock_guard_release() {
    let cluster = Cluster::start(5);
    let redlock = client(cluster.urls(), HEALTHY);
    {
        let mut guard = redlock.lock_guard("guarded", TTL).expect("guard");
        assert_held_everywhere(&cluster, b"guarded", guard.token());
        guard.extend(TTL).expect("extend through the guard");
        assert_eq!(guard.extensions(), 1);
    }
    assert_gone_everywhere(&cluster, b"guarded");

    let guard = redlock.lock_guard("guarded", TTL).expect("guard again");
    assert_eq!(guard.resource(), b"guarded");
    guard.release().expect("release returns Ok");
    assert_gone_everywhere(&cluster, b"guarded");

    // A guard whose lock was taken over reports the failed release.
    let guard = redlock.lock_guard("guarded", TTL).expect("third guard");
    assert_held_everywhere(&cluster, b"guarded", guard.token());
    for i in 0..5 {
        cluster.command(i, &[b"DEL", b"guarded"]);
    }
    let other = client(cluster.urls(), HEALTHY);
    let mut thief = other.try_lock("guarded", TTL).expect("another owner");
    assert_held_everywhere(&cluster, b"guarded", thief.token());
    let err = guard.release().expect_err("not held any more");
    assert!(matches!(err, Error::NotHeld(_)), "{err}");
    assert_held_everywhere(&cluster, b"guarded", thief.token());
    other.unlock(&mut thief).expect("unlock");
}

/// `lock_guard_until` waits for the lock until its deadline and guards
/// what it won; held by another past the deadline, it fails `Contended`.
/// `LockGuard::new` guards a lock taken otherwise (here over two
/// resources), and `into_lock` hands it back unreleased.
#[test]
fn guards_with_a_deadline_and_from_a_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(cluster.urls(), HEALTHY);
    let holder = client(cluster.urls(), HEALTHY);
    let mut held = holder.try_lock("until", TTL).expect("free");
    let deadline = Instant::now() + Duration::from_millis(300);
    let err = redlock
        .lock_guard_until("until", TTL, deadline)
        .expect_err("held past the deadline");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    holder.unlock(&mut held).expect("released");
    {
        let guard = redlock
            .lock_guard_until("until", TTL, Instant::now() + SETTLE)
            .expect("free now");
        // A quorum, not every master: the holder's release may reach a
        // master before the first call's leave (two clients, two
        // connections), and then reserves the key there for the departed
        // wait for its window.
        let quorum = cluster.len() / 2 + 1;
        let held = holders(&cluster, 0..cluster.len(), b"until", guard.token()).len();
        assert!(
            held >= quorum,
            "token held on {held} of {} nodes",
            cluster.len()
        );
    }
    assert_gone_everywhere(&cluster, b"until");

    {
        let lock = redlock
            .try_lock_all(&["both:a", "both:b"], TTL)
            .expect("free");
        let guard = redlock_mio::LockGuard::new(&redlock, lock);
        assert_held_everywhere(&cluster, b"both:a", guard.token());
        assert_held_everywhere(&cluster, b"both:b", guard.token());
    }
    assert_gone_everywhere(&cluster, b"both:a");
    assert_gone_everywhere(&cluster, b"both:b");

    let guard = redlock.lock_guard("handed", TTL).expect("free");
    let before = redlock.stats().releases;
    let mut lock = guard.into_lock();
    assert_eq!(
        redlock.stats().releases,
        before,
        "the guard sent no release"
    );
    assert_held_everywhere(&cluster, b"handed", lock.token());
    assert!(!lock.is_expired(), "handed back as it was");
    redlock
        .unlock(&mut lock)
        .expect("still held: the guard released nothing");
    assert_gone_everywhere(&cluster, b"handed");
}

/// Resource names are bytes: NUL, CR LF and non-UTF-8 bytes go through.
#[test]
fn binary_safe_resources() {
    let cluster = Cluster::start(5);
    let a = client(cluster.urls(), HEALTHY);
    let b = client(cluster.urls(), HEALTHY);
    for resource in [
        &b"nul\0in\0the\0middle"[..],
        b"\r\n*1\r\n$4\r\nPING\r\n",
        b"\xff\xfe\x00\x80",
        b"\0",
        b"$-1\r\n",
    ] {
        let lock = a.try_lock(resource, TTL).expect("acquire");
        assert_eq!(lock.resource(), resource);
        assert_held_everywhere(&cluster, resource, lock.token());
        let err = b.try_lock(resource, TTL).expect_err("held");
        assert!(matches!(err, Error::Contended(_)), "{err}");
        let mut lock = lock;
        a.extend(&mut lock, TTL).expect("extend");
        a.unlock(&mut lock).expect("unlock");
        assert_gone_everywhere(&cluster, resource);
    }
    // A name that only differs in a byte after a NUL is another resource.
    let mut one = a.try_lock(b"x\0a", TTL).expect("x\\0a");
    let mut two = b.try_lock(b"x\0b", TTL).expect("x\\0b");
    a.unlock(&mut one).expect("unlock");
    b.unlock(&mut two).expect("unlock");
}

/// Tokens are 20 random bytes, new for every acquisition and every client.
#[test]
fn tokens_are_unique() {
    let cluster = Cluster::start(5);
    let clients = [
        client(cluster.urls(), HEALTHY),
        client(cluster.urls(), HEALTHY),
    ];
    assert_eq!(TOKEN_LEN, 20);
    let mut tokens = HashSet::new();
    for round in 0..1000 {
        // Alternate clients; a resource per round, so that one client's
        // release still in flight to the last nodes cannot refuse the
        // other's SET.
        let redlock = &clients[round % 2];
        let resource = format!("tokens:{round}");
        let mut lock = redlock.try_lock(&resource, TTL).expect("acquire");
        let token: [u8; 20] = *lock.token();
        if round % 100 == 0 {
            assert_held_everywhere(&cluster, resource.as_bytes(), &token);
        }
        assert!(tokens.insert(token), "token {token:02x?} repeated");
        redlock.unlock(&mut lock).expect("unlock");
    }
    assert_eq!(tokens.len(), 1000);
    // Random bytes, not a counter or a clock: every byte position varies.
    for position in 0..TOKEN_LEN {
        let values: HashSet<u8> = tokens.iter().map(|t| t[position]).collect();
        assert!(values.len() > 100, "byte {position} takes few values");
    }
}

/// `lock` retries until the holder (in another thread) releases: the
/// holder lets go only once the waiter's `lock` has been refused.
#[test]
fn lock_retries_until_released() {
    let cluster = Cluster::start(5);
    let urls = cluster.urls();
    let releasing = AtomicBool::new(false);
    let (held_tx, held_rx) = mpsc::channel();
    let waiter = one_try(&urls, HEALTHY)
        .retry_count(10)
        .retry_delay(Duration::from_millis(100))
        .retry_jitter(Duration::from_millis(20))
        .build()
        .expect("waiter client");
    thread::scope(|s| {
        let (urls, releasing, waiter) = (&urls, &releasing, &waiter);
        let holder = s.spawn(move || {
            let redlock = one_try(urls, HEALTHY).build().expect("holder client");
            let mut lock = redlock.try_lock("busy", TTL).expect("holder acquires");
            held_tx.send(()).expect("signal");
            // Refused twice: the waiter's `try_lock`, then the first
            // attempt of its `lock`.
            let refused = crate::support::check::eventually(Duration::from_secs(10), || {
                waiter.stats().contended >= 2
            });
            releasing.store(true, Ordering::SeqCst);
            redlock.unlock(&mut lock).expect("holder releases");
            refused
        });
        held_rx.recv().expect("the holder holds the lock");
        let err = waiter.try_lock("busy", TTL).expect_err("held");
        assert!(matches!(err, Error::Contended(_)), "{err}");
        let mut lock = waiter.lock("busy", TTL).expect("acquired after a retry");
        assert!(
            releasing.load(Ordering::SeqCst),
            "acquired while the holder still held it"
        );
        assert!(holders(&cluster, 0..cluster.len(), b"busy", lock.token()).len() >= 3);
        assert!(
            holder.join().expect("holder thread"),
            "the waiter's lock was refused before the release"
        );
        let stats = waiter.stats();
        assert!(stats.attempts >= 3, "lock retried: {stats:?}");
        waiter.unlock(&mut lock).expect("unlock");
    });
    assert_gone_everywhere(&cluster, b"busy");
}

/// `lock_until` keeps trying while the resource is held, and gives up by
/// its deadline.
#[test]
fn lock_until_gives_up_at_deadline() {
    let cluster = Cluster::start(5);
    let holder = client(cluster.urls(), HEALTHY);
    let mut lock = holder.try_lock("until", TTL).expect("holder acquires");
    let request_timeout = Duration::from_millis(50);
    let waiter = Redlock::builder(cluster.urls())
        .request_timeout(request_timeout)
        .retry_delay(Duration::from_millis(50))
        .retry_jitter(Duration::from_millis(10))
        .build()
        .expect("waiter client");
    for i in 0..5 {
        cluster.command(i, &[b"CONFIG", b"RESETSTAT"]);
    }
    let deadline = Instant::now() + Duration::from_millis(600);
    let err = waiter
        .lock_until("until", TTL, deadline)
        .expect_err("held until long after the deadline");
    let returned = Instant::now();
    // Contended; or, if the last attempt started just before the deadline
    // and its round was cut short by it, the nodes timed out.
    let cut_short = matches!(&err, Error::Unavailable(report)
        if report.nodes().iter().all(|s| matches!(s, NodeState::TimedOut | NodeState::Refused)));
    assert!(matches!(err, Error::Contended(_)) || cut_short, "{err}");
    // Bounded, not hanging: it stops at the deadline (plus one round).
    assert!(
        returned < deadline + request_timeout + Duration::from_secs(1),
        "returned {:?} after the deadline",
        returned - deadline
    );
    // It retried: several acquires (scripts that queue the waiter)
    // reached every node.
    let acquires: Vec<u64> = (0..5)
        .map(|i| command_stats(&cluster, i, "evalsha").0)
        .collect();
    assert!(
        acquires.iter().any(|&n| n >= 2),
        "acquires per node {acquires:?}"
    );
    assert_eq!(
        holders(&cluster, 0..cluster.len(), b"until", lock.token()).len(),
        5
    );
    holder.unlock(&mut lock).expect("unlock");
    assert_gone_everywhere(&cluster, b"until");

    // Free, it wins at once, long before the deadline.
    let mut won = waiter
        .lock_until("until", TTL, Instant::now() + Duration::from_secs(60))
        .expect("free");
    waiter.unlock(&mut won).expect("unlock");
}

/// Checks one whole acquire/extend/contend/release cycle on `cluster`.
fn full_cycle(cluster: &Cluster, urls: &[String]) {
    let a = one_try(urls, HEALTHY).build().expect("client a");
    let b = one_try(urls, HEALTHY).build().expect("client b");
    let mut lock = a.try_lock("cycle", TTL).expect("acquire");
    assert_held_everywhere(cluster, b"cycle", lock.token());
    let err = b.try_lock("cycle", TTL).expect_err("held");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    a.extend(&mut lock, TTL + TTL).expect("extend");
    let extended = eventually(SETTLE, || {
        (0..cluster.len()).all(|i| pttl(cluster, i, b"cycle") > 11_000)
    });
    assert!(extended, "extended on every node");
    a.unlock(&mut lock).expect("unlock");
    assert_gone_everywhere(cluster, b"cycle");
}

#[test]
fn unix_socket_cluster() {
    let cluster = ClusterOptions::new(5).unix(true).start();
    let urls = cluster.urls();
    assert!(urls.iter().all(|u| u.starts_with("unix://")), "{urls:?}");
    full_cycle(&cluster, &urls);
}

#[test]
fn unix_socket_cluster_with_password() {
    let cluster = ClusterOptions::new(5).unix(true).password("pw").start();
    let urls = cluster.urls();
    assert!(urls.iter().all(|u| u.ends_with("?pass=pw")), "{urls:?}");
    full_cycle(&cluster, &urls);
}

#[test]
fn password_cluster() {
    let cluster = ClusterOptions::new(5).password("pw").start();
    let urls = cluster.urls();
    assert!(
        urls.iter().all(|u| u.starts_with("redis://:pw@")),
        "{urls:?}"
    );
    full_cycle(&cluster, &urls);

    // Without the password, or with a wrong one, no node lets us in.
    for bad in [":wrong@", ""] {
        let urls: Vec<String> = urls.iter().map(|u| u.replace(":pw@", bad)).collect();
        let err = Redlock::builder(&urls)
            .retry_count(0)
            .build()
            .expect_err("not logged in");
        // Refused logins are a configuration error, not "unreachable".
        assert!(
            matches!(&err, ConfigError::Misconfigured { failures } if failures.len() == 5),
            "{bad:?}: {err}"
        );
        assert!(!format!("{err} {err:?}").contains("pw@"), "{err:?}");
        for i in 0..5 {
            assert!(!cluster.exists(i, b"cycle"), "node {i} took a SET");
        }
    }
}

/// A `/db` URL selects that database in the handshake: the keys land in
/// database 3, not 0.
#[test]
fn database_url() {
    let cluster = Cluster::start(5);
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("{u}/3")).collect();
    let redlock = Redlock::builder(&urls).build().expect("build");
    let mut lock = redlock.try_lock("in-db-3", TTL).expect("acquire");
    let in_db3 = |i: usize| -> Vec<u8> {
        let mut conn = cluster
            .node(i)
            .connect_authenticated(Duration::from_secs(2))
            .expect("connect");
        assert_eq!(
            conn.request(&[b"SELECT", b"3"]).expect("SELECT"),
            b"+OK\r\n"
        );
        conn.request(&[b"GET", b"in-db-3"]).expect("GET")
    };
    let expected = {
        let mut bulk = format!("${TOKEN_LEN}\r\n").into_bytes();
        bulk.extend_from_slice(lock.token());
        bulk.extend_from_slice(b"\r\n");
        bulk
    };
    assert!(
        eventually(SETTLE, || (0..5).all(|i| in_db3(i) == expected)),
        "the token is in database 3 on every node"
    );
    for i in 0..5 {
        assert!(
            !cluster.exists(i, b"in-db-3"),
            "node {i}: key in database 0"
        );
    }
    // Extend and release find the key in database 3 too.
    redlock.extend(&mut lock, TTL).expect("extend");
    redlock.unlock(&mut lock).expect("unlock");
    assert!(
        eventually(SETTLE, || (0..5).all(|i| in_db3(i) == b"$-1\r\n")),
        "released in database 3 on every node"
    );
    // The longest TTL allowed works end to end.
    let mut long = redlock.try_lock("in-db-3", MAX_TTL).expect("MAX_TTL");
    redlock.unlock(&mut long).expect("unlock");
}

/// A client built on `urls` while every master of `cluster` is stopped,
/// which are then started again: what their handshakes refuse is seen by
/// a running client, not by `build`.
fn built_while_down(cluster: &Cluster, urls: &[String]) -> Redlock {
    for i in 0..cluster.len() {
        cluster.stop(i);
    }
    let redlock = Redlock::builder(urls)
        .build()
        .expect("masters down are not a configuration error");
    for i in 0..cluster.len() {
        cluster.restart(i);
    }
    redlock
}

/// Tries to lock until some node reports its handshake refused with a
/// message starting with `refusal` (attempts before the reconnects may
/// find the masters unreachable); no attempt may succeed.
fn until_handshake_refused(redlock: &Redlock, resource: &[u8], refusal: &[u8]) {
    let refused = eventually(SETTLE, || {
        let err = redlock.try_lock(resource, TTL).expect_err("no login");
        let Error::Misconfigured(report) = &err else {
            assert!(matches!(err, Error::Unavailable(_)), "{err}");
            return false;
        };
        report.nodes().iter().any(|s| {
            matches!(s, NodeState::Failed(NodeError::Handshake(e))
                if e.message().starts_with(refusal))
        })
    });
    assert!(
        refused,
        "no node reported a handshake refused with {:?}",
        refusal.escape_ascii().to_string()
    );
}

/// A `SELECT` refused in the handshake (no such database): the lock
/// command must not run anyway, in database 0.
#[test]
fn failed_select_writes_nothing() {
    let cluster = Cluster::start(5);
    let urls: Vec<String> = cluster.urls().iter().map(|u| format!("{u}/99")).collect();
    let err = Redlock::builder(&urls).build().expect_err("no database 99");
    assert!(
        matches!(&err, ConfigError::Misconfigured { failures } if failures.len() == 5),
        "{err}"
    );
    // Built while the masters are down, the client meets the refusal at
    // its first handshakes, on a running client.
    let redlock = built_while_down(&cluster, &urls);
    until_handshake_refused(&redlock, b"in-db-99", b"ERR");
    let written: Vec<usize> = (0..5).filter(|&i| cluster.exists(i, b"in-db-99")).collect();
    assert!(
        written.is_empty(),
        "the SET ran in database 0 on nodes {written:?} although SELECT 99 failed"
    );
}

/// An `AUTH` refused in the handshake (wrong password for an ACL user,
/// while the default user needs none): the lock command must not run
/// anyway, as the default user.
#[test]
fn failed_auth_writes_nothing() {
    let cluster = Cluster::start(5);
    for i in 0..5 {
        let reply = cluster.command(
            i,
            &[
                b"ACL",
                b"SETUSER",
                b"alice",
                b"on",
                b">alicepw",
                b"~*",
                b"+@all",
            ],
        );
        assert_eq!(reply, b"+OK\r\n");
    }
    let with_user = |password: &str| -> Vec<String> {
        cluster
            .urls()
            .iter()
            .map(|u| u.replace("redis://", &format!("redis://alice:{password}@")))
            .collect()
    };
    // The right password works.
    let good = Redlock::builder(with_user("alicepw"))
        .build()
        .expect("build");
    let mut lock = good.try_lock("acl", TTL).expect("alice locks");
    good.unlock(&mut lock).expect("unlock");
    assert_gone_everywhere(&cluster, b"acl");

    let err = Redlock::builder(with_user("wrong"))
        .build()
        .expect_err("a wrong password");
    assert!(
        matches!(&err, ConfigError::Misconfigured { failures } if failures.len() == 5),
        "{err}"
    );
    // The password changed under a running client: its reconnects are
    // refused.
    let bad = Redlock::builder(with_user("alicepw"))
        .build()
        .expect("build");
    for i in 0..5 {
        let reply = cluster.command(i, &[b"ACL", b"SETUSER", b"alice", b"resetpass", b">newpw"]);
        assert_eq!(reply, b"+OK\r\n");
        cluster.command(i, &[b"CLIENT", b"KILL", b"USER", b"alice"]);
    }
    until_handshake_refused(&bad, b"acl", b"WRONGPASS");
    let written: Vec<usize> = (0..5).filter(|&i| cluster.exists(i, b"acl")).collect();
    assert!(
        written.is_empty(),
        "the SET ran as the default user on nodes {written:?} although AUTH failed"
    );
}
