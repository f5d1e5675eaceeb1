//! One client shared by many threads (`Redlock` is `Sync`): their rounds
//! are in flight at once over the same connections, the lock stays
//! mutually exclusive, and the cap on rounds in flight holds.

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::{ConfigError, Error, Redlock};
use support::cluster::Cluster;
use support::holdings::{Holding, overlaps};
use support::proxy::{Dir, Proxies};

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
                            let end = Instant::now().min(lock.valid_until());
                            holdings.lock().expect("not poisoned").push(Holding {
                                resource: r,
                                thread: t,
                                token: *lock.token(),
                                start,
                                end,
                                fence: None,
                            });
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

/// Eight callers start a round each at the same moment while every reply
/// takes 150 ms: the rounds are in flight together, so all of them end
/// within one latency of each other (taking turns, the last would end
/// seven latencies after the first).
#[test]
fn rounds_of_many_callers_are_in_flight_at_once() {
    callers_in_flight_at_once(8);
}

/// A hundred callers' rounds, decided in the same few reads: the poller
/// wakes them in batches once it lets go of the driver, and more of them
/// than one batch holds are woken all the same (none waits for its
/// round's deadline, which is a second away).
#[test]
fn more_callers_than_one_wake_batch_are_all_woken() {
    callers_in_flight_at_once(100);
}

fn callers_in_flight_at_once(n: usize) {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let redlock = Redlock::builder(proxies.urls())
        .request_timeout(Duration::from_secs(1))
        .retry_count(0)
        .build()
        .expect("build");
    for proxy in proxies.iter() {
        proxy.latency(Dir::ToClient, LATENCY);
    }
    let start = std::sync::Barrier::new(n);
    let ends: Vec<Instant> = thread::scope(|s| {
        let callers: Vec<_> = (0..n)
            .map(|t| {
                let (redlock, start) = (&redlock, &start);
                s.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    let lock = redlock.try_lock(format!("together:{t}"), TTL);
                    let ended = Instant::now();
                    assert!(lock.is_ok(), "{lock:?}");
                    assert!(ended - began >= LATENCY, "a round waits for its replies");
                    ended
                })
            })
            .collect();
        callers
            .into_iter()
            .map(|c| c.join().expect("a caller panicked"))
            .collect()
    });
    let first = ends.iter().min().copied().expect("n ends");
    let last = ends.iter().max().copied().expect("n ends");
    assert!(
        last - first < LATENCY,
        "the rounds took turns: the last ended {:?} after the first",
        last - first
    );
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
    let redlock = Redlock::builder(proxies.urls())
        .request_timeout(Duration::from_secs(1))
        .retry_count(0)
        .max_in_flight(1)
        .build()
        .expect("build");
    for proxy in proxies.iter() {
        proxy.latency(Dir::ToClient, LATENCY);
    }
    let (first, second) = thread::scope(|s| {
        let first = s.spawn(|| {
            let lock = redlock.try_lock("cap:first", TTL);
            (lock.is_ok(), Instant::now())
        });
        thread::sleep(LATENCY / 3);
        let second = s.spawn(|| {
            let lock = redlock.try_lock("cap:second", TTL);
            (lock.is_ok(), Instant::now())
        });
        (
            first.join().expect("first caller"),
            second.join().expect("second caller"),
        )
    });
    assert!(first.0 && second.0, "both acquired: {first:?} {second:?}");
    assert!(
        second.1 >= first.1 + LATENCY,
        "the second round started only once the first had ended"
    );
}

/// A batch larger than the cap runs the rounds it got slots for and gives
/// `Busy` for the rest, having sent nothing for them; a cap of zero is a
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
        Err(error @ Error::Busy { limit: 2 }) => assert!(error.is_retryable()),
        other => panic!("expected Busy, got {other:?}"),
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
