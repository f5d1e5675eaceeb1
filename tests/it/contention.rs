//! Mutual exclusion under contention: 8 threads, each with its own client,
//! take one resource 200 times each through 5 masters. Every holding
//! window is recorded, and a checker proves that no two overlap.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::cluster::Cluster;
use crate::support::holdings::{Holding, hex, overlaps};
use redlock_mio::{Redlock, TOKEN_LEN};

const THREADS: usize = 8;
const ROUNDS: usize = 200;
const RESOURCE: &[u8] = b"contended";
const TTL: Duration = Duration::from_secs(2);
/// The test fails, rather than hangs, if the work is not done by then.
const OVERALL: Duration = Duration::from_secs(120);

/// What one thread did.
#[derive(Debug, Default)]
struct Outcome {
    windows: Vec<Holding>,
    unlock_errors: Vec<String>,
    /// Moments when the in-process witness saw another holder.
    violations: Vec<String>,
    lock_error: Option<String>,
}

fn worker(thread: usize, redlock: Redlock, deadline: Instant, inside: &AtomicUsize) -> Outcome {
    let mut outcome = Outcome::default();
    while outcome.windows.len() < ROUNDS {
        let mut lock = match redlock.lock_until(RESOURCE, TTL, deadline) {
            Ok(lock) => lock,
            Err(err) => {
                outcome.lock_error = Some(format!(
                    "thread {thread} after {} acquisitions: {err}",
                    outcome.windows.len()
                ));
                return outcome;
            }
        };
        let start = Instant::now();
        // A second, in-process witness of exclusion.
        let others = inside.fetch_add(1, Ordering::SeqCst);
        // Hold for a moment: long enough for others to try.
        thread::sleep(Duration::from_micros(200));
        inside.fetch_sub(1, Ordering::SeqCst);
        let end = Instant::now().min(lock.valid_until());
        outcome.windows.push(Holding {
            resource: 0,
            thread,
            token: *lock.token(),
            start,
            end,
            fence: None,
        });
        if others != 0 {
            outcome.violations.push(format!(
                "thread {thread}: {others} other holder(s) inside with token {}",
                hex(lock.token())
            ));
        }
        if let Err(err) = redlock.unlock(&mut lock) {
            outcome
                .unlock_errors
                .push(format!("thread {thread}: {err}"));
        }
    }
    outcome
}

/// The first two holdings that overlap, if any (one resource here).
fn first_overlap(windows: &[Holding]) -> Option<(Holding, Holding)> {
    overlaps(windows).into_iter().next()
}

#[test]
fn no_two_holders_overlap() {
    let cluster = Cluster::start(5);
    let urls = cluster.urls();
    let started = Instant::now();
    let deadline = started + OVERALL;
    let inside = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    // Built here and moved into the threads: a client is `Send`.
    let clients: Vec<Redlock> = (0..THREADS)
        .map(|_| {
            // A request timeout far above what healthy masters take, so
            // that a busy machine does not time the releases out (a lock
            // left to its TTL would stall the others, not break them).
            Redlock::builder(&urls)
                .request_timeout(Duration::from_millis(500))
                .retry_delay(Duration::from_millis(2))
                .retry_jitter(Duration::from_millis(2))
                .build()
                .expect("build a client")
        })
        .collect();
    thread::scope(|s| {
        for (t, redlock) in clients.into_iter().enumerate() {
            let (inside, outcomes) = (&inside, &outcomes);
            s.spawn(move || {
                let outcome = worker(t, redlock, deadline, inside);
                outcomes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(outcome);
            });
        }
    });
    let took = started.elapsed();
    let outcomes = outcomes
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert_eq!(outcomes.len(), THREADS, "a worker panicked");

    let lock_errors: Vec<&String> = outcomes
        .iter()
        .filter_map(|o| o.lock_error.as_ref())
        .collect();
    assert!(
        lock_errors.is_empty(),
        "gave up at the deadline: {lock_errors:?}"
    );
    let unlock_errors: Vec<&String> = outcomes.iter().flat_map(|o| &o.unlock_errors).collect();
    assert!(unlock_errors.is_empty(), "{unlock_errors:#?}");
    let violations: Vec<&String> = outcomes.iter().flat_map(|o| &o.violations).collect();
    assert!(violations.is_empty(), "{violations:#?}");

    let windows: Vec<Holding> = outcomes.iter().flat_map(|o| o.windows.clone()).collect();
    assert_eq!(windows.len(), THREADS * ROUNDS);
    for t in 0..THREADS {
        assert_eq!(windows.iter().filter(|w| w.thread == t).count(), ROUNDS);
    }
    let tokens: HashSet<[u8; TOKEN_LEN]> = windows.iter().map(|w| w.token).collect();
    assert_eq!(tokens.len(), windows.len(), "a token was used twice");
    for w in &windows {
        assert!(
            w.start <= w.end,
            "window of thread {} ends before it starts",
            w.thread
        );
    }
    if let Some((a, b)) = first_overlap(&windows) {
        panic!("overlap: {}, {}", a.describe(started), b.describe(started));
    }

    // Unlock returns at quorum: the last nodes catch up shortly.
    let clean = {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let left: Vec<usize> = (0..5).filter(|&i| cluster.exists(i, RESOURCE)).collect();
            if left.is_empty() {
                break Ok(());
            }
            if Instant::now() >= until {
                break Err(left);
            }
            thread::sleep(Duration::from_millis(5));
        }
    };
    assert_eq!(clean, Ok(()), "the key stays on these nodes");
    let sets: u64 = {
        let reply = cluster.command(0, &[b"INFO", b"commandstats"]);
        let text = String::from_utf8_lossy(&reply).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    println!(
        "{} acquisitions by {THREADS} threads in {took:?}; {sets} SET attempts on node 0",
        windows.len()
    );
}

/// The checker itself finds an overlap, and accepts back-to-back windows.
#[test]
fn checker_finds_overlap() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let window = |thread: usize, start: u64, end: u64| Holding {
        resource: 0,
        thread,
        token: [thread as u8; TOKEN_LEN],
        start: ms(start),
        end: ms(end),
        fence: None,
    };
    let fine = vec![window(1, 10, 20), window(0, 0, 10), window(2, 20, 30)];
    assert!(first_overlap(&fine).is_none());
    // A long window followed by a short one inside it, then another one
    // that starts before the long one ends.
    let bad = vec![window(0, 0, 50), window(1, 60, 70), window(2, 10, 20)];
    let (a, b) = first_overlap(&bad).expect("an overlap");
    assert_eq!((a.thread, b.thread), (0, 2));
    let nested = vec![window(0, 0, 50), window(1, 5, 10), window(2, 20, 60)];
    let (a, b) = first_overlap(&nested).expect("an overlap");
    assert_eq!((a.thread, b.thread), (0, 1));
}
