//! Holds 1,000 locks from one event loop that the caller owns, extends
//! them all, and waits for one of them with `lock_until`: the client registers its sockets
//! with the caller's `mio` poller, takes the events of each poll, and
//! says when it next needs the time. No thread of the client's, nothing
//! blocks.
//!
//! ```sh
//! cargo run --release --example embedded                  # five local masters
//! cargo run --release --example embedded -- redis://127.0.0.1:7000 redis://127.0.0.1:7001 redis://127.0.0.1:7002
//! ```
//!
//! It exits with a non-zero status if a lock is not taken, a held lock can
//! be taken by another client, an extend or a release fails, or a `lock_until` waiting
//! for a held lock does not get it once it is released.

#[path = "../tests/support/mod.rs"]
mod support;

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use redlock_mio::{Completion, EmbeddedRedlock, Error, Lock, Redlock};
use support::cluster::Cluster;

type Result<T> = std::result::Result<T, Box<dyn StdError>>;

const LOCKS: usize = 1000;
const TTL: Duration = Duration::from_secs(30);
/// The caller's own source in the same loop.
const MINE: Token = Token(0);
/// The client's tokens start here (one per master).
const CLIENT: Token = Token(1);

/// The caller's event loop: its poller, its events, and how often its
/// own source fired.
struct EventLoop {
    poll: Poll,
    events: Events,
    own: usize,
}

impl EventLoop {
    /// Polls until `n` completions were collected, handing each to `each`;
    /// the caller's own events are counted in `own`.
    fn drive(
        &mut self,
        redlock: &mut EmbeddedRedlock,
        n: usize,
        mut each: impl FnMut(Completion) -> Result<()>,
    ) -> Result<()> {
        let mut done = 0;
        let give_up = Instant::now() + Duration::from_secs(30);
        while done < n {
            if Instant::now() > give_up {
                return Err(format!("only {done} of {n} completed in 30 s").into());
            }
            let timeout = redlock
                .next_timeout()
                .map(|at| at.saturating_duration_since(Instant::now()));
            self.poll.poll(&mut self.events, timeout)?;
            self.own += self.events.iter().filter(|e| e.token() == MINE).count();
            redlock.handle_events(&self.events);
            redlock.handle_timeout(Instant::now());
            while let Some(completion) = redlock.poll_completion() {
                each(completion)?;
                done += 1;
            }
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cluster;
    let urls = if args.is_empty() {
        cluster = Cluster::start(5);
        cluster.urls()
    } else {
        args
    };

    let poll = Poll::new()?;
    // The caller's own source, woken once from another thread.
    let waker = Arc::new(Waker::new(poll.registry(), MINE)?);
    let mut redlock = Redlock::builder(&urls)
        .request_timeout(Duration::from_secs(1))
        .max_in_flight(LOCKS + 1) // and the lock_until below
        .build_embedded(poll.registry(), CLIENT)?;
    let mut event_loop = EventLoop {
        poll,
        events: Events::with_capacity(256),
        own: 0,
    };
    println!(
        "embedded client on {} masters, tokens {:?}; the loop's own source is token {}",
        urls.len(),
        redlock.tokens(),
        MINE.0
    );
    let other = Arc::clone(&waker);
    std::thread::spawn(move || other.wake());

    let started = Instant::now();
    let mut tickets = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        tickets.push(redlock.try_lock(format!("embedded:{i}"), TTL)?);
    }
    let mut locks: Vec<Lock> = Vec::with_capacity(LOCKS);
    event_loop.drive(&mut redlock, LOCKS, |c| match c {
        Completion::Acquired { result, .. } => {
            locks.push(result?);
            Ok(())
        }
        other => Err(format!("unexpected {other:?}").into()),
    })?;
    let acquired = started.elapsed();
    println!(
        "{} locks held after {:.1} ms, all started at once from one loop",
        locks.len(),
        acquired.as_secs_f64() * 1e3
    );

    // Another client cannot take any of them.
    let probe = Redlock::builder(&urls).retry_count(0).build()?;
    for i in [0, LOCKS / 2, LOCKS - 1] {
        match probe.try_lock(format!("embedded:{i}"), TTL) {
            Err(Error::Contended(_)) => {}
            other => return Err(format!("lock {i} is not held: {other:?}").into()),
        }
    }
    if locks.iter().any(|l| l.validity() < TTL / 2) {
        return Err("a lock has less validity than expected".into());
    }

    // Extend them all, in one tick: each extend holds its lock until its
    // completion gives it back, renewed.
    let started = Instant::now();
    for lock in locks.drain(..) {
        redlock.extend(lock, 2 * TTL).map_err(|(_, error)| error)?;
    }
    event_loop.drive(&mut redlock, LOCKS, |c| match c {
        Completion::Extended { lock, result, .. } => {
            result?;
            if lock.validity() <= TTL {
                return Err("an extended lock was not renewed".into());
            }
            locks.push(lock);
            Ok(())
        }
        other => Err(format!("unexpected {other:?}").into()),
    })?;
    println!(
        "{} locks extended to {:?} after {:.1} ms",
        locks.len(),
        2 * TTL,
        started.elapsed().as_secs_f64() * 1e3
    );

    // A call that waits for one of them: its first attempt is refused and
    // queues it on the masters; the release below hands the lock over and
    // tells it, on the same connections, as readable events.
    let deadline = Instant::now() + Duration::from_secs(10);
    let waiting = redlock.lock_until("embedded:0", TTL, deadline)?;
    let started = Instant::now();
    for lock in &mut locks {
        redlock.unlock(lock)?;
    }
    let mut handed = None;
    event_loop.drive(&mut redlock, LOCKS + 1, |c| match c {
        Completion::Acquired { ticket, result } if ticket == waiting => {
            handed = Some(result?);
            Ok(())
        }
        other => released(other),
    })?;
    println!(
        "{LOCKS} locks released after {:.1} ms, one of them handed to the lock_until waiting for it; \
         the loop's own source fired {} time(s)",
        started.elapsed().as_secs_f64() * 1e3,
        event_loop.own
    );
    let mut handed = handed.ok_or("lock_until did not complete")?;
    redlock.unlock(&mut handed)?;
    event_loop.drive(&mut redlock, 1, released)?;
    let mut again = probe.try_lock("embedded:0", TTL)?;
    probe.unlock(&mut again)?;
    Ok(())
}

/// A release's completion: an error unless it released the lock.
fn released(completion: Completion) -> Result<()> {
    match completion {
        Completion::Released { result, .. } => Ok(result?),
        other => Err(format!("unexpected {other:?}").into()),
    }
}
