//! A lock kept alive in the background, with a loss signal, against real
//! `redis-server`s: a healthy hold over many periods, a normal release (and
//! a dropped keeper) reported as released and never as lost, a key deleted
//! on a majority (lost at the next extension), a paused majority (at risk
//! at once, lost at the end of the validity), a release asked for while an
//! extension is in flight (sent after it, nothing left behind), a drop
//! that never blocks, and a callback that panics.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use crate::support::check::{assert_gone, eventually};
use crate::support::clients::{client, fenced};
use crate::support::cluster::Cluster;
use crate::support::executor::block_on_for;
use crate::support::proxy::{Dir, Proxies};
use crate::support::standings::Changes;
use redlock_mio::{Error, KeepOptions, Keeper, Lock, Redlock, Standing};

const REQUEST_TIMEOUT: Duration = Duration::from_millis(100);

/// How long a test waits for something that must happen: a bound on a
/// hang, never a measure.
const PATIENCE: Duration = Duration::from_secs(30);

/// Hands `lock` to a keeper of `holder` extending to `ttl`, every change
/// of standing recorded.
fn keep_recorded(holder: &Redlock, lock: Lock, ttl: Duration) -> (Keeper, Changes) {
    keep_recorded_with(holder, lock, KeepOptions::new(ttl))
}

/// [`keep_recorded`] with `options`.
fn keep_recorded_with(holder: &Redlock, lock: Lock, options: KeepOptions) -> (Keeper, Changes) {
    let changes = Changes::new();
    let options = options.on_change(changes.recorder(holder));
    (holder.keep(lock, options).expect("keep"), changes)
}

/// Many extension periods on a short TTL: every extension holds, another
/// client never wins the lock, the keeper reports nothing until the
/// release, and then only the release.
#[test]
fn a_healthy_hold_over_many_periods_with_a_short_ttl() {
    const EXTENSIONS: u64 = 8;
    let cluster = Cluster::start(3);
    // Long enough that a starved keeper thread on a loaded machine still
    // extends in time; short enough for many periods in a few seconds.
    let ttl = Duration::from_secs(2);
    // Room for a busy machine: a slow round would read as a missed quorum.
    let holder = client(cluster.urls(), Duration::from_millis(250));
    let other = client(cluster.urls(), REQUEST_TIMEOUT);
    let lock = holder.try_lock("kept", ttl).expect("free");
    let (keeper, changes) = keep_recorded(&holder, lock, ttl);
    let mut refused = 0;
    let kept = eventually(PATIENCE, || {
        assert_eq!(keeper.standing(), Standing::Held, "{keeper:?}");
        assert!(!keeper.validity().is_zero(), "{keeper:?}");
        assert!(
            other.try_lock("kept", ttl).is_err(),
            "another client won a kept lock"
        );
        refused += 1;
        holder.stats().extended >= EXTENSIONS
    });
    assert!(kept, "{EXTENSIONS} extensions: {:?}", holder.stats());
    assert!(changes.standings().is_empty(), "{:?}", changes.standings());
    keeper.release().expect("released");
    let stats = holder.stats();
    assert_eq!(stats.extends, stats.extended, "every extension held");
    assert_eq!((stats.releases, stats.released), (1, 1), "{stats:?}");
    assert_eq!(changes.standings(), [Standing::Released]);
    println!("{} extensions, {refused} refused attempts", stats.extended);
    assert_gone(&cluster, &[0, 1, 2], b"kept", PATIENCE);
    let _lock = other.try_lock("kept", ttl).expect("free after the release");
}

/// A release ends a holding without a loss: the callback and the `lost()`
/// future say `Released`, never `Lost`, whether the keeper was released or
/// dropped.
#[test]
fn a_normal_release_is_reported_as_released_never_as_lost() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(3);
    let holder = client(cluster.urls(), REQUEST_TIMEOUT);

    let lock = holder.try_lock("released", ttl).expect("free");
    let (keeper, released) = keep_recorded(&holder, lock, ttl);
    let lost = keeper.lost();
    assert!(!keeper.is_lost());
    keeper.release().expect("released");
    assert_eq!(released.standings(), [Standing::Released]);
    assert_eq!(block_on_for(lost, PATIENCE), Some(Standing::Released));

    let lock = holder.try_lock("dropped", ttl).expect("free");
    let (keeper, dropped) = keep_recorded(&holder, lock, ttl);
    let lost = keeper.lost();
    drop(keeper);
    // Completes once the thread's release is over: a future kept after
    // its keeper never hangs.
    assert_eq!(block_on_for(lost, PATIENCE), Some(Standing::Released));
    assert_eq!(dropped.standings(), [Standing::Released]);

    let stats = holder.stats();
    assert_eq!((stats.releases, stats.released), (2, 2), "{stats:?}");
    assert_gone(&cluster, &[0, 1, 2], b"released", PATIENCE);
    assert_gone(&cluster, &[0, 1, 2], b"dropped", PATIENCE);
}

/// Without its loss watch, the first extension after the key is deleted
/// on a majority reports the loss (so within one period of it); the extend
/// script never recreates the key; the release after a loss reports
/// nothing more. (With the watch, `loss_watch.rs` shows it sooner.)
#[test]
fn a_key_deleted_on_a_majority_is_lost_at_the_next_extension() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(3);
    let holder = client(cluster.urls(), REQUEST_TIMEOUT);
    let lock = holder.try_lock("deleted", ttl).expect("free");
    let (keeper, changes) = keep_recorded_with(&holder, lock, KeepOptions::new(ttl).watch(false));
    let lost = keeper.lost();
    for i in 0..2 {
        cluster.command(i, &[b"DEL", b"deleted"]);
    }
    assert_eq!(block_on_for(lost, PATIENCE), Some(Standing::Lost));
    assert!(keeper.is_lost() && keeper.validity().is_zero());
    let all = changes.all();
    let [(Standing::Lost, _, at_loss)] = &all[..] else {
        panic!("one change, the loss: {all:?}");
    };
    assert_eq!(
        at_loss.extends - at_loss.extended,
        1,
        "the first extension that missed the key reported the loss: {at_loss:?}"
    );
    assert!(!cluster.exists(0, "deleted") && !cluster.exists(1, "deleted"));
    assert!(
        matches!(keeper.release(), Err(Error::NotHeld(_))),
        "nothing left to release on a quorum"
    );
    assert_eq!(changes.standings(), [Standing::Lost], "a loss stays a loss");
    assert_gone(&cluster, &[2], b"deleted", PATIENCE);
}

/// With a majority paused, the first extension after the pause reports
/// the lock at risk; no extension holds after that, and the keeper reports
/// the loss once the validity has run out, not before.
#[test]
fn a_paused_majority_is_at_risk_at_once_and_lost_at_the_validity_end() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(3);
    let holder = client(cluster.urls(), REQUEST_TIMEOUT);
    let lock = holder.try_lock("paused", ttl).expect("free");
    let valid_until = lock.valid_until();
    let (keeper, changes) = keep_recorded(&holder, lock, ttl);
    cluster.pause(0);
    cluster.pause(1);
    let lost = keeper.wait_lost(ttl + PATIENCE);
    cluster.resume(0);
    cluster.resume(1);
    assert!(lost, "{keeper:?}");
    let all = changes.all();
    let [
        (Standing::AtRisk, _, at_risk),
        (Standing::Lost, lost_at, at_loss),
    ] = &all[..]
    else {
        panic!("at risk, then lost: {all:?}");
    };
    assert_eq!(
        at_risk.extends - at_risk.extended,
        1,
        "the first extension after the pause: {at_risk:?}"
    );
    assert_eq!(at_loss.extended, at_risk.extended, "none held after it");
    // Not before the validity the masters granted ran out (an extension
    // that held before the pause only moved it later; the instants cross
    // the API rounded to the millisecond).
    assert!(
        *lost_at + Duration::from_millis(1) >= valid_until,
        "lost {:?} before the validity end",
        valid_until.saturating_duration_since(*lost_at)
    );
    drop(keeper);
}

/// A release asked for while an extension is in flight (every master got
/// it, no reply has come back) is sent after the extension: the extension
/// holds, the release follows, nothing is left on any master.
#[test]
fn a_release_during_an_extension_is_sent_after_it_and_leaves_nothing() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let ttl = Duration::from_secs(20);
    // The held replies must not time the extension out before the heal.
    let holder = client(proxies.urls(), Duration::from_secs(5));
    let lock = holder.try_lock("racing", ttl).expect("free");
    let changes = Changes::new();
    for proxy in proxies.iter() {
        proxy.stall(Dir::ToClient);
    }
    let sent: Vec<u64> = proxies.iter().map(|p| p.stats().to_server).collect();
    let keeper = holder
        .keep(
            lock,
            // (Unwatched: the bytes counted below are the extension's.)
            KeepOptions::new(ttl)
                .period(Duration::from_millis(200))
                .watch(false)
                .on_change(changes.recorder(&holder)),
        )
        .expect("keep");
    let in_flight = eventually(PATIENCE, || {
        proxies
            .iter()
            .zip(&sent)
            .all(|(proxy, &before)| proxy.stats().to_server > before)
    });
    assert!(in_flight, "the first extension reached every master");
    let lost = keeper.lost();
    drop(keeper);
    proxies.heal_all();
    assert_eq!(block_on_for(lost, PATIENCE), Some(Standing::Released));
    let stats = holder.stats();
    assert_eq!((stats.extends, stats.extended), (1, 1), "{stats:?}");
    assert_eq!((stats.releases, stats.released), (1, 1), "{stats:?}");
    assert_eq!(changes.standings(), [Standing::Released]);
    assert_gone(&cluster, &[0, 1, 2], b"racing", PATIENCE);
}

/// A keeper is the lock's guard in async code too: `Send + Sync`, and its
/// drop never blocks: with every master paused and a request timeout of
/// 5 s, the drop returns before the release's round could end. The thread
/// releases once the masters answer. It carries the lock's fence.
#[test]
fn dropping_a_keeper_never_blocks_and_still_releases() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<redlock_mio::Keeper>();
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(10);
    let holder = fenced(cluster.urls(), Duration::from_secs(5), ttl);
    let lock = holder.try_lock("dropped", ttl).expect("free");
    let fence = lock.fence();
    let keeper = holder.keep(lock, KeepOptions::new(ttl)).expect("keep");
    assert!(fence.is_some() && keeper.fence() == fence);
    let lost = keeper.lost();
    for i in 0..3 {
        cluster.pause(i);
    }
    drop(keeper);
    let releases = holder.stats().releases;
    for i in 0..3 {
        cluster.resume(i);
    }
    assert_eq!(releases, 0, "the drop waited for the release's round");
    assert_eq!(block_on_for(lost, PATIENCE), Some(Standing::Released));
    let stats = holder.stats();
    assert_eq!((stats.releases, stats.released), (1, 1), "{stats:?}");
    assert_gone(&cluster, &[0, 1, 2], b"dropped", PATIENCE);
}

/// A callback that panics (here at the release) ends the keeper's thread,
/// but whoever waits for the keeper is woken all the same, and the panic
/// reaches the holder through `release`.
#[test]
fn a_panicking_callback_still_wakes_the_waiters() {
    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(3);
    let holder = client(cluster.urls(), REQUEST_TIMEOUT);
    let lock = holder.try_lock("panicking", ttl).expect("free");
    let options = KeepOptions::new(ttl).on_change(|standing| {
        if standing == Standing::Released {
            panic!("the callback fails");
        }
    });
    let keeper = holder.keep(lock, options).expect("keep");
    let woken = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(Arc::clone(&woken));
    let mut lost = pin!(keeper.lost());
    assert!(
        lost.as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
    );
    let released = catch_unwind(AssertUnwindSafe(|| keeper.release()));
    assert!(released.is_err(), "the callback's panic reaches the holder");
    assert!(woken.0.load(Ordering::SeqCst), "the waiter was never woken");
    assert_eq!(
        lost.as_mut().poll(&mut Context::from_waker(&waker)),
        Poll::Ready(Standing::Released)
    );
    assert_gone(&cluster, &[0, 1, 2], b"panicking", PATIENCE);
}

/// A TTL the keeper cannot extend to is refused before any thread starts,
/// and the lock handed over is released, not left until its TTL.
#[test]
fn a_refused_ttl_releases_the_lock_handed_over() {
    let cluster = Cluster::start(3);
    let holder = client(cluster.urls(), REQUEST_TIMEOUT);
    let lock = holder
        .try_lock("refused", Duration::from_secs(30))
        .expect("free");
    let refused = holder.keep(lock, KeepOptions::new(REQUEST_TIMEOUT));
    assert!(
        matches!(refused, Err(Error::InvalidTtl { .. })),
        "{refused:?}"
    );
    let stats = holder.stats();
    assert_eq!((stats.releases, stats.released), (1, 1), "{stats:?}");
    assert_gone(&cluster, &[0, 1, 2], b"refused", PATIENCE);
}
