//! One client shared by many threads (`Redlock` is `Sync`): calls take
//! turns for their rounds, never for the retry delays, and the lock stays
//! mutually exclusive. (The pipelined shared client of issue 9, with many
//! callers' rounds in flight at once, is not built yet.)

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::{Error, Redlock};
use support::cluster::Cluster;
use support::holdings::{Holding, overlaps};

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
