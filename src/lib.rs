//! A low-latency client for Redlock, the distributed lock over N independent
//! Redis masters.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_mio::Redlock;
//!
//! let redlock = Redlock::builder([
//!     "redis://127.0.0.1:7000",
//!     "redis://127.0.0.1:7001",
//!     "redis://127.0.0.1:7002",
//! ])
//! .request_timeout(Duration::from_millis(50))
//! .build()?;
//!
//! let mut lock = redlock.lock("invoice:42", Duration::from_secs(10))?;
//! // Work only while the lock is valid, and check before each step.
//! assert!(lock.validity() > Duration::from_secs(9));
//! redlock.extend(&mut lock, Duration::from_secs(10))?;
//! redlock.unlock(&mut lock)?;
//! assert!(lock.is_expired());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Layers
//!
//! The crate is three layers, each readable and testable on its own:
//!
//! - [`resp`]: the RESP2/RESP3 codec. Incremental, allocation-free and
//!   strict, with hard limits on nesting and lengths. It never touches a
//!   socket.
//! - [`rules`]: the Redlock rules (quorum, drift, validity, retry delay)
//!   and the state machine of one round, free of I/O and driven by the
//!   caller's clock.
//! - the link (private): one master's protocol session, free of I/O and
//!   driven with the time passed in: the pipelined handshake, the requests
//!   in flight and the matching of replies to them, `NOSCRIPT` replay, the
//!   budgets that keep a hostile server from holding the client, and the
//!   connection's timers. Unit-tested with a fake clock and no socket.
//! - the flights (private): the rounds a shared client has in flight at
//!   once, with their ids, deadlines and waiters, free of I/O and tested
//!   with a fake clock.
//! - the `mio` driver (private): one non-blocking connection per master;
//!   each round's command is written to all masters in the same event-loop
//!   tick and the replies are read as they arrive. It feeds the rounds and
//!   never decides quorum itself. Its engine lets many threads and tasks
//!   share it.
//!
//! [`Redlock`] is the API on top: blocking calls for threads, and the same
//! operations as futures (`*_async`) for any executor, one client shared
//! by all of them.
//!
//! # The algorithm
//!
//! Acquiring takes `t0` from the monotonic clock, sends
//! `SET resource token NX PX ttl` to all masters at once and reads the
//! replies until a quorum (`N / 2 + 1`) has agreed, a quorum has become
//! impossible, or the request timeout has passed. The lock is held if a
//! quorum agreed and `ttl - elapsed - drift > 0`, where
//! `drift = ttl * drift_factor + 2 ms`. Otherwise it is released on every
//! master (also those that seemed to fail: a reply can be lost after the
//! server set the key), and [`Redlock::lock`] tries again after a random
//! delay. Release and extend are Lua scripts that act only if the key still
//! holds the lock's token, sent by SHA1 (`EVALSHA`) and sent again as `EVAL`
//! on a `NOSCRIPT` reply within the same call.
//!
//! # What the lock guarantees, and what it does not
//!
//! - **Mutual exclusion holds only while the holder finishes within the
//!   lock's validity** ([`Lock::validity`]), and only if the clocks of the
//!   processes involved drift apart by less than the drift allowance. The
//!   client measures time on a monotonic clock (see below).
//! - **A pause can outlive the lock.** A process pause (GC, page fault,
//!   scheduling, swapping) or a network delay after the lock was granted
//!   can let a holder act on a lock that has already expired. Redlock
//!   cannot prevent this. Only the protected resource can, by checking a
//!   token with each write.
//! - **What this crate offers for that:** every lock carries a unique,
//!   unpredictable [token](Lock::token) (20 bytes from a generator seeded by
//!   the operating system, new for every acquisition). A resource that
//!   stores the token of the last writer and refuses writes with another
//!   token uses it as a compare-and-set guard. That detects a holder whose
//!   lock was taken over, but it does not order holders: it cannot tell an
//!   old token from a new one. Stronger, with
//!   [`Builder::fencing`]: a [fence](Lock::fence) that grows with every
//!   holder, which the resource compares with "greater than" (one more
//!   round trip per acquisition; see [`fencing`] for how and why it
//!   holds).
//! - **A suspend counts.** On Linux and Android the client's clock is
//!   `CLOCK_BOOTTIME`, which keeps counting while the host or VM is
//!   suspended: after a resume [`Lock::validity`] has run down by the
//!   suspension, as the masters' keys have. Elsewhere it is
//!   [`Instant`](std::time::Instant), which may stop during a suspend:
//!   there, treat a resume as the loss of every lock. Instants the API
//!   takes and gives ([`Redlock::lock_until`]'s deadline,
//!   [`Lock::valid_until`], the embedded driver's timeouts) are
//!   [`Instant::now`](std::time::Instant::now)'s, converted at the
//!   boundary.
//! - **Masters must not forget locks.** A master that crashes and restarts
//!   with an empty dataset can grant a lock that another client still holds
//!   on it. Operators must run the masters with persistence
//!   (`appendonly yes`, `appendfsync always`), or keep a crashed master down
//!   for longer than the longest TTL in use before it rejoins.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod addr;
mod client;
mod clock;
mod commands;
mod driver;
mod error;
pub mod fencing;
mod flights;
pub mod guarantees;
pub mod how_it_works;
pub mod limitations;
mod link;
pub mod operations;
pub mod resp;
pub mod rules;

pub use addr::{AddrError, Endpoint, ServerAddr};
pub use client::{
    AsyncLockGuard, Builder, Completion, EmbeddedRedlock, KeepOptions, Keeper, Lock, LockGuard,
    Lost, MAX_BATCH, MAX_IN_FLIGHT, MAX_RESOURCE_LEN, MAX_TIMEOUT, MAX_TTL, MasterStats, OnChange,
    Redlock, Require, Standing, Stats, TOKEN_LEN, Ticket,
};
pub use commands::{
    ACQUIRE_MANY_SCRIPT, ACQUIRE_MANY_SHA1, EXTEND_MANY_SCRIPT, EXTEND_MANY_SHA1, EXTEND_SCRIPT,
    EXTEND_SHA1, FENCE_KEY, FENCE_LOST_KEY, FENCE_READ_SCRIPT, FENCE_READ_SHA1, FENCE_SYNC_SCRIPT,
    FENCE_SYNC_SHA1, FENCED_ACQUIRE_SCRIPT, FENCED_ACQUIRE_SHA1, LONGEST_TTL_KEY, MARKER_KEY,
    RAISE_SCRIPT, RAISE_SHA1, RELEASE_MANY_SCRIPT, RELEASE_MANY_SHA1, RELEASE_SCRIPT, RELEASE_SHA1,
    RESERVED_PREFIX,
};
pub use error::{ConfigError, Error};

/// The fuzz harnesses of the protocol session and of the table of rounds
/// in flight, for the fuzz crate's `session` and `flights` targets
/// (feature `fuzzing`; not a stable API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::flights::fuzz::{FlightsSeen, flights};
    pub use crate::link::fuzz::{Seen, session};
}
/// The rustls version this crate uses, to build a
/// [`Builder::tls_config`](crate::Builder::tls_config) (feature `tls`).
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use rustls;

/// The committed inputs of fuzz target `target` that the crate's harnesses
/// replay: its seeds and regressions (`fuzz/{seeds,regressions}/<target>/`),
/// sorted.
#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a test fails loudly")]
pub(crate) fn fuzz_inputs(target: &str) -> Vec<std::path::PathBuf> {
    let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for dir in ["seeds", "regressions"] {
        if let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) {
            files.extend(entries.map(|e| e.unwrap().path()));
        }
    }
    files.sort();
    files
}

/// The README's Rust examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
