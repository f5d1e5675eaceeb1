//! Mutual exclusion under contention: 8 threads, each with its own client,
//! take one resource 200 times each through 5 masters. Every holding
//! window is recorded, and a checker proves that no two overlap.

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::{Redlock, TOKEN_LEN};
use support::cluster::Cluster;

const THREADS: usize = 8;
const ROUNDS: usize = 200;
const RESOURCE: &[u8] = b"contended";
const TTL: Duration = Duration::from_secs(2);
/// The test fails, rather than hangs, if the work is not done by then.
const OVERALL: Duration = Duration::from_secs(120);

/// One holding of the lock, by one thread.
#[derive(Debug, Clone, Copy)]
struct Window {
    thread: usize,
    token: [u8; TOKEN_LEN],
    /// Taken right after the lock call returned.
    start: Instant,
    /// The earlier of the lock's validity end and the moment just before
    /// the unlock call.
    end: Instant,
}

/// What one thread did.
#[derive(Debug, Default)]
struct Outcome {
    windows: Vec<Window>,
    unlock_errors: Vec<String>,
    /// Moments when the in-process witness saw another holder.
    violations: Vec<String>,
    lock_error: Option<String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn worker(thread: usize, redlock: Redlock, deadline: Instant, inside: &AtomicUsize) -> Outcome {
    let mut outcome = Outcome::default();
    while outcome.windows.len() < ROUNDS {
        let lock = match redlock.lock_until(RESOURCE, TTL, deadline) {
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
        outcome.windows.push(Window {
            thread,
            token: *lock.token(),
            start,
            end,
        });
        if others != 0 {
            outcome.violations.push(format!(
                "thread {thread}: {others} other holder(s) inside with token {}",
                hex(lock.token())
            ));
        }
        if let Err(err) = redlock.unlock(&lock) {
            outcome
                .unlock_errors
                .push(format!("thread {thread}: {err}"));
        }
    }
    outcome
}

/// The first two windows that overlap, if any.
fn first_overlap(windows: &mut [Window]) -> Option<(Window, Window)> {
    windows.sort_by_key(|w| w.start);
    let mut latest: Option<Window> = None;
    for &w in windows.iter() {
        if let Some(prev) = latest {
            if w.start < prev.end {
                return Some((prev, w));
            }
            if w.end > prev.end {
                latest = Some(w);
            }
        } else {
            latest = Some(w);
        }
    }
    None
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
            Redlock::builder(&urls)
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

    let mut windows: Vec<Window> = outcomes.iter().flat_map(|o| o.windows.clone()).collect();
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
    if let Some((a, b)) = first_overlap(&mut windows) {
        let at = |i: Instant| i.saturating_duration_since(started);
        panic!(
            "overlap: thread {} (token {}) held [{:?}, {:?}], thread {} (token {}) held [{:?}, {:?}]",
            a.thread,
            hex(&a.token),
            at(a.start),
            at(a.end),
            b.thread,
            hex(&b.token),
            at(b.start),
            at(b.end),
        );
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
    let window = |thread: usize, start: u64, end: u64| Window {
        thread,
        token: [thread as u8; TOKEN_LEN],
        start: ms(start),
        end: ms(end),
    };
    let mut fine = vec![window(1, 10, 20), window(0, 0, 10), window(2, 20, 30)];
    assert!(first_overlap(&mut fine).is_none());
    // A long window followed by a short one inside it, then another one
    // that starts before the long one ends.
    let mut bad = vec![window(0, 0, 50), window(1, 60, 70), window(2, 10, 20)];
    let (a, b) = first_overlap(&mut bad).expect("an overlap");
    assert_eq!((a.thread, b.thread), (0, 2));
    let mut nested = vec![window(0, 0, 50), window(1, 5, 10), window(2, 20, 60)];
    let (a, b) = first_overlap(&mut nested).expect("an overlap");
    assert_eq!((a.thread, b.thread), (0, 1));
}
