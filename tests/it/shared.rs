//! One client shared by many threads (`Redlock` is `Sync`): their rounds
//! are in flight at once over the same connections, the lock stays
//! mutually exclusive, and the cap on rounds in flight holds.

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::eventually;
use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use crate::support::holdings::{Holding, overlaps};
use crate::support::proxy::{Dir, Proxies};
use redlock_mio::{ConfigError, Error, Redlock, Require};

const TTL: Duration = Duration::from_secs(10);
/// What the proxies add to every reply.
const LATENCY: Duration = Duration::from_millis(150);

#[test]
fn one_client_for_many_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Redlock>();
    let cluster = Cluster::start(3);
    let redlock = Redlock::builder(cluster.urls())
        .retry_count(20)
        .retry_delay(Duration::from_millis(2))
        .retry_jitter(Duration::from_millis(2))
        .build()
        .expect("build");
    let holdings = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::new());
    thread::scope(|s| {
        for t in 0..8 {
            let (redlock, holdings, failures) = (&redlock, &holdings, &failures);
            s.spawn(move || {
                for i in 0..25 {
                    let r = (t + i) % 2;
                    match redlock.lock(format!("shared:{r}"), Duration::from_secs(5)) {
                        Ok(mut lock) => {
                            let start = Instant::now();
                            thread::sleep(Duration::from_micros(300));
                            holdings
                                .lock()
                                .expect("not poisoned")
                                .push(Holding::of(r, t, &lock, start));
                            redlock.unlock(&mut lock).expect("unlock");
                        }
                        Err(error) => failures.lock().expect("not poisoned").push(error),
                    }
                }
            });
        }
    });
    let holdings = holdings.into_inner().expect("not poisoned");
    let failures = failures.into_inner().expect("not poisoned");
    assert!(
        failures.iter().all(|e| matches!(e, Error::Contended(_))),
        "{failures:?}"
    );
    assert!(holdings.len() >= 150, "{} of 200 taken", holdings.len());
    assert!(overlaps(&holdings).is_empty(), "{:?}", overlaps(&holdings));
    let stats = redlock.stats();
    assert_eq!(stats.acquired, holdings.len() as u64);
    assert_eq!(stats.released, holdings.len() as u64);
}

/// Eight callers start a round each while every reply is held back: the
/// SETs of all eight rounds reach every master before any reply comes
/// back, so the rounds are in flight together (taking turns, the second
/// would wait for the first's replies).
#[test]
fn rounds_of_many_callers_are_in_flight_at_once() {
    callers_in_flight_at_once(8);
}

/// A hundred callers' rounds, decided in the same few reads: the poller
/// wakes them in batches once it lets go of the driver, and more of them
/// than one batch holds are woken all the same (none waits for its
/// round's deadline).
#[test]
fn more_callers_than_one_wake_batch_are_all_woken() {
    callers_in_flight_at_once(100);
}

fn callers_in_flight_at_once(n: usize) {
    // So long that a caller left to its round's deadline cannot pass for
    // a slow machine: every caller is back within half of it.
    const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let redlock = one_try(proxies.urls(), REQUEST_TIMEOUT)
        .stall_timeout(REQUEST_TIMEOUT * 2)
        // Connections and handshakes done first: the stall below holds
        // the rounds' replies only.
        .require_handshakes(Require::All)
        .build()
        .expect("build");
    for proxy in proxies.iter() {
        proxy.stall(Dir::ToClient);
    }
    let keys: Vec<String> = (0..n).map(|t| format!("together:{t}")).collect();
    thread::scope(|s| {
        let callers: Vec<_> = keys
            .iter()
            .map(|key| {
                let redlock = &redlock;
                s.spawn(move || {
                    let lock = redlock.try_lock(key, REQUEST_TIMEOUT * 2);
                    (lock, Instant::now())
                })
            })
            .collect();
        let all_sent = eventually(REQUEST_TIMEOUT / 2, || {
            keys.iter()
                .all(|k| (0..cluster.len()).all(|i| cluster.exists(i, k)))
        });
        let healed = Instant::now();
        proxies.heal_all();
        assert!(
            all_sent,
            "every round's SET reached every master, no reply back"
        );
        for caller in callers {
            let (lock, ended) = caller.join().expect("a caller panicked");
            assert!(lock.is_ok(), "{lock:?}");
            assert!(
                ended - healed < REQUEST_TIMEOUT / 2,
                "a caller was left to its round's deadline: back {:?} after the replies",
                ended - healed
            );
        }
    });
    let stats = redlock.stats();
    assert_eq!(stats.acquired, n as u64);
    for master in &stats.masters {
        assert_eq!(master.connects, 1, "one connection per master: {stats:?}");
    }
}

/// With a cap of one round in flight, a second caller waits for the
/// first's round to end before its own starts, and both succeed.
#[test]
fn past_the_cap_a_call_waits_for_a_slot() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let redlock = one_try(proxies.urls(), Duration::from_secs(5))
        .max_in_flight(1)
        .require_handshakes(Require::All)
        .build()
        .expect("build");
    for proxy in proxies.iter() {
        proxy.latency(Dir::ToClient, LATENCY);
    }
    let began = Instant::now();
    let (first, second) = thread::scope(|s| {
        let first = s.spawn(|| redlock.try_lock("cap:first", TTL).is_ok());
        // The first's round is under way (its SET is on every master) when
        // the second caller comes.
        assert!(
            eventually(Duration::from_secs(5), || (0..cluster.len())
                .all(|i| cluster.exists(i, "cap:first"))),
            "the first round went out"
        );
        let second = s.spawn(|| {
            let lock = redlock.try_lock("cap:second", TTL);
            (lock.is_ok(), Instant::now())
        });
        (
            first.join().expect("first caller"),
            second.join().expect("second caller"),
        )
    });
    assert!(first && second.0, "both acquired: {first:?} {second:?}");
    // Each round waits at least one latency for its replies, and the
    // second starts only once the first has ended: two latencies at least
    // since the first began. Overlapping the first, the second would end
    // about one latency after it began.
    assert!(
        second.1 >= began + LATENCY * 2,
        "the second round started before the first had ended: it ended {:?} after the first began",
        second.1 - began
    );
}

/// A batch larger than the cap runs the rounds it got slots for and gives
/// `TooManyInFlight` for the rest, having sent nothing for them; a cap of zero is a
/// configuration error.
#[test]
fn a_batch_past_the_cap_is_busy_for_the_rest() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::builder(cluster.urls())
        .max_in_flight(2)
        .build()
        .expect("build");
    let names = ["busy:0", "busy:1", "busy:2"];
    let results = redlock.try_lock_many(&names, TTL).expect("a valid batch");
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    match &results[2] {
        Err(error @ Error::TooManyInFlight { limit: 2 }) => {
            assert!(error.is_retryable());
            // Says what it is (not a held lock) and what changes it.
            let text = error.to_string();
            for needle in [
                "too many rounds in flight",
                "max_in_flight",
                "nothing was sent",
            ] {
                assert!(text.contains(needle), "{needle:?} missing from {text}");
            }
        }
        other => panic!("expected TooManyInFlight, got {other:?}"),
    }
    for i in 0..cluster.len() {
        assert!(
            !cluster.exists(i, "busy:2"),
            "nothing was sent for the third"
        );
    }
    assert!(matches!(
        Redlock::builder(cluster.urls()).max_in_flight(0).build(),
        Err(ConfigError::MaxInFlight(0))
    ));
}
