//! A client for [Redlock], the distributed lock over N independent Redis or
//! Valkey masters, built for low latency: every *round* (one attempt at an
//! acquire, an extend or a release: the command sent to every master at
//! once, and their replies) goes to all masters in one event-loop tick and
//! returns as soon as its outcome is certain. The lock rules and each
//! master's protocol session are state machines free of I/O; a `mio`
//! engine drives them for blocking, async and embedded callers alike. The
//! library depends on no async runtime.
//!
//! [Redlock]: https://redis.io/docs/latest/develop/use/patterns/distributed-locks/
//!
//! # Which API for which job
//!
//! | job | use |
//! |---|---|
//! | a tokio service, or tasks on any executor | one client shared by every task (in an [`Arc`](std::sync::Arc)): [`lock_guard_until_async`](Redlock::lock_guard_until_async) waits up to a deadline and releases on drop, or [`lock_until_async`](Redlock::lock_until_async) then [`unlock_async`](Redlock::unlock_async); [`lock_async`](Redlock::lock_async) and [`lock_guard_async`](Redlock::lock_guard_async) try a few times, [`try_lock_async`](Redlock::try_lock_async) once; [`extend_async`](Redlock::extend_async) |
//! | a thread pool | one [`Redlock`] shared by every thread (in an [`Arc`](std::sync::Arc), or borrowed by scoped threads): [`lock_guard_until`](Redlock::lock_guard_until) (wait up to a deadline, release on drop), [`lock_until`](Redlock::lock_until), [`lock_guard`](Redlock::lock_guard), [`lock`](Redlock::lock), [`try_lock`](Redlock::try_lock); [`LockGuard::new`] guards a lock taken otherwise |
//! | a long job that must keep its lock | [`with_lock`](Redlock::with_lock) (a closure) or [`with_lock_async`](Redlock::with_lock_async) (a future): the lock is extended while the work runs, released at its end, and the call fails with [`Error::Lost`] if the lock was lost meanwhile; or [`keep`](Redlock::keep) a lock and watch its [`Keeper`] |
//! | to hear at once that a held lock's keys vanished (deleted, flushed, evicted on a majority) | [`watch`](Redlock::watch) the lock, then [`Lock::is_lost`], [`Lock::wait_lost`] or [`Lock::lost`]; keepers and the scoped calls watch theirs |
//! | writes that a stale holder must not make | [`Builder::fencing`], then send [`Lock::fence`] with every write ([`fencing`]) |
//! | several resources at once | [`try_lock_all`](Redlock::try_lock_all) (all or nothing), [`try_lock_many`](Redlock::try_lock_many) (a batch of separate locks) |
//! | shell scripts and cron jobs | `redlock run RESOURCE -- COMMAND`, the command-line tool ([`operations`](crate::operations#the-redlock-command)) |
//! | your own `mio` event loop | [`Builder::build_embedded`] and its [`EmbeddedRedlock`] |
//!
//! # A first lock
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use redlock_mio::{Error, Redlock};
//!
//! let redlock = Redlock::builder([
//!     "redis://10.0.0.1:6379",
//!     "redis://10.0.0.2:6379",
//!     "redis://10.0.0.3:6379",
//! ])
//! .build()?;
//!
//! // Wait for the lock at most 500 ms; the guard releases it when dropped,
//! // also on an early return (`?`) or a panic.
//! let deadline = Instant::now() + Duration::from_millis(500);
//! match redlock.lock_guard_until("orders:42", Duration::from_secs(10), deadline) {
//!     Ok(guard) => {
//!         // Work while the lock is valid; check before each step.
//!         assert!(guard.validity() > Duration::from_secs(9));
//!         guard.release()?; // or let it drop
//!     }
//!     Err(Error::Contended(report)) => eprintln!("still held by another client: {report}"),
//!     Err(other) => return Err(other.into()),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # When the lock is held
//!
//! [`try_lock`](Redlock::try_lock) tries once, within one request timeout,
//! and fails with [`Error::Contended`] if another client holds the
//! resource. The calls that wait are queued on the masters by their
//! refused attempts; the release that frees the lock *hands it over* to
//! the first caller in the queue: it reserves the key for that caller and
//! *tells* its client (a message on the connection the client already
//! has), which then wins the lock by its own round, within about a round
//! trip of the release. A waiter nobody tells (the holder crashed) tries
//! again when the holder's key expires, or after a retry delay
//! ([`how_it_works`](crate::how_it_works#waiting-for-a-contended-lock)):
//!
//! - [`lock_until`](Redlock::lock_until) (and
//!   [`lock_guard_until`](Redlock::lock_guard_until), their async forms)
//!   waits until a deadline of yours, and returns by it: the usual choice.
//! - [`lock`](Redlock::lock) (and [`lock_guard`](Redlock::lock_guard),
//!   [`lock_async`](Redlock::lock_async), [`with_lock`](Redlock::with_lock))
//!   makes up to [`retry_count`](Builder::retry_count)` + 1` attempts (4 by
//!   default), at most a [retry delay](Builder::retry_delay) apart (200 ms ±
//!   100 ms): with the defaults, about a second at most (4 request timeouts
//!   of 50 ms and 3 delays of at most 300 ms).
//!
//! Either fails with [`Error::Contended`] once its time or its attempts
//! run out while another client holds the lock; the error's
//! [report](crate::Report::waited) says how long it waited. The
//! [`Lock`] knows until when it may be trusted
//! ([`validity`](Lock::validity)); after every outcome it claims no more
//! than the masters granted. Dropping a [`Lock`] releases nothing (the
//! masters keep it until its TTL): [`unlock`](Redlock::unlock) it, or hold
//! it in a guard.
//!
//! # One client for a whole process
//!
//! A [`Redlock`] is `Send` and `Sync`, and keeps one connection per master
//! whatever the number of callers: build one and share it, rather than one
//! per thread or a `Mutex` around it. The rounds of all its callers are in
//! flight at once over the same connections.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use redlock_mio::Redlock;
//!
//! let redlock = Arc::new(Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?);
//! let workers: Vec<_> = (0..8)
//!     .map(|i| {
//!         let redlock = Arc::clone(&redlock);
//!         std::thread::spawn(move || -> Result<(), redlock_mio::Error> {
//!             let guard = redlock.lock_guard(format!("job:{i}"), Duration::from_secs(10))?;
//!             // ... work while guard.validity() covers the next step ...
//!             guard.release()
//!         })
//!     })
//!     .collect();
//! for worker in workers {
//!     if let Ok(outcome) = worker.join() {
//!         outcome?;
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same operations are futures for any executor (tokio, smol,
//! `futures::executor`, …). They are cancellation-safe: a future dropped
//! with its round in flight gives the round up, and a dropped acquire's key
//! is released on every master ([`try_lock_async`](Redlock::try_lock_async)
//! says exactly how).
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use redlock_mio::{Error, Redlock};
//!
//! async fn nightly_report(redlock: Arc<Redlock>) -> Result<(), Error> {
//!     let guard = redlock.lock_guard_async("report:nightly", Duration::from_secs(30)).await?;
//!     // ... work while guard.validity() covers the next step ...
//!     guard.release().await
//! }
//! ```
//!
//! # Keeping a lock for a long job
//!
//! A job that may outlast any TTL you would choose keeps its lock alive:
//! the scoped [`with_lock`](Redlock::with_lock) (blocking, a closure) and
//! [`with_lock_async`](Redlock::with_lock_async) (a future) extend the lock
//! while the work runs and release it at the end, and fail with
//! [`Error::Lost`] if the lock was lost meanwhile;
//! [`keep`](Redlock::keep) hands a lock to a [`Keeper`], whose thread
//! extends it every `ttl / 3` ([`KeepOptions`] sets the period, a hold
//! limit and a callback). The keeper says at once how the lock stands, its
//! [*standing*](Standing): held, at risk when an extension missed a
//! quorum, lost when the masters no longer hold it (as soon as they say its
//! keys changed and a read finds them gone from a majority: the keeper's
//! lock is watched, see [`Redlock::watch`]), released (not lost) at the end
//! of a normal holding. Check it before each step of the work:
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_mio::{KeepOptions, Redlock};
//!
//! let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
//! let lock = redlock.lock("backup:db1", Duration::from_secs(30))?;
//! let keeper = redlock.keep(lock, KeepOptions::new(Duration::from_secs(30)))?;
//! for _chunk in 0..1000 {
//!     if keeper.is_lost() {
//!         break; // another client may hold it now: stop writing
//!     }
//!     // ... copy one chunk ...
//! }
//! keeper.release()?; // waits for the release; dropping the keeper releases without waiting
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Fences
//!
//! A pause (garbage collection, a stopped VM) can outlast a lock: the
//! holder wakes up and writes after another client took the lock. With
//! [`Builder::fencing`] every lock carries a [fence](Lock::fence), a
//! number larger for every later holder of the resource; the protected
//! store keeps the largest fence it accepted and refuses smaller ones. The
//! scheme, its assumptions and the proof are in [`fencing`].
//!
//! # Your own event loop
//!
//! [`Builder::build_embedded`] registers the client's sockets with the
//! caller's `mio` poller, one token per master, and starts no thread; the
//! caller hands it its events and collects what completed
//! ([`EmbeddedRedlock`] shows the whole loop):
//!
//! ```no_run
//! use std::time::Duration;
//! use mio::{Poll, Token};
//! use redlock_mio::Redlock;
//!
//! let poll = Poll::new()?;
//! let mut redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
//!     .build_embedded(poll.registry(), Token(1000))?; // tokens 1000..1003
//! let ticket = redlock.try_lock("orders:42", Duration::from_secs(10))?;
//! // In the loop: poll no longer than redlock.next_timeout(), then
//! // handle_events, handle_timeout, and poll_completion() for `ticket`.
//! # let _ = ticket;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Errors
//!
//! [`Builder::build`] refuses a bad configuration with a [`ConfigError`]
//! (a bad address, a master listed twice, a timeout out of range, or
//! masters that answer but refuse the client: a wrong password, a replica;
//! masters merely down are retried later, see [`operations`]). A lock
//! operation fails with an [`Error`]; those that come from a round carry a
//! *report* ([`Error::report`]): what each master did in that round (granted,
//! refused, failed and why, or not needed once the outcome was certain),
//! each named by its address with the password masked.
//!
//! | error | means | then |
//! |---|---|---|
//! | [`Error::Contended`] | another client holds the resource; also a wait ([`lock`](Redlock::lock), [`lock_until`](Redlock::lock_until)) that ran out | try again later, or wait longer |
//! | [`Error::Unavailable`] | too few masters reachable for a quorum | try again later; the report says what each failed with |
//! | [`Error::TooSlow`] | a quorum agreed, but no validity was left | try again; a longer TTL, or a shorter request timeout |
//! | [`Error::Misconfigured`] | masters refuse the client: a password, an ACL, a replica, a cluster node | fix the configuration; not retried |
//! | [`Error::Unfenced`] | a fenced acquire got no fence | try again later ([`fencing`]) |
//! | [`Error::NotHeld`] | extend or unlock: the token no longer owns the resource | the lock is gone |
//! | [`Error::Lost`] | [`with_lock`](Redlock::with_lock): the lock was lost while the work ran | check what the work did before running it again |
//! | [`Error::TooManyInFlight`] | this client had its cap of rounds in flight ([`Builder::max_in_flight`]) for a whole request timeout; not a held lock | try again later; raise the cap |
//!
//! [`Error::is_retryable`] tells the two kinds apart. Resource names are
//! bytes (up to [`MAX_RESOURCE_LEN`]); names under `redlock-mio:` are the
//! crate's own and refused with [`Error::ReservedResource`].
//!
//! # Configuration
//!
//! Every setting has a default and a range, and [`Builder::build`] refuses
//! values outside it:
//!
//! | setting | default |
//! |---|---|
//! | [`request_timeout`](Builder::request_timeout): how long a round waits for the masters | 50 ms |
//! | [`retry_count`](Builder::retry_count), [`retry_delay`](Builder::retry_delay), [`retry_jitter`](Builder::retry_jitter) | 3, 200 ms, ± 100 ms |
//! | [`connect_timeout`](Builder::connect_timeout), [`stall_timeout`](Builder::stall_timeout), [`max_backoff`](Builder::max_backoff) | 1 s; twice the request timeout, at least 1 s; 1 s |
//! | [`drift_factor`](Builder::drift_factor) | 0.01 |
//! | [`max_extensions`](Builder::max_extensions) | no limit |
//! | [`require_handshakes`](Builder::require_handshakes) | none required |
//! | [`identify_masters`](Builder::identify_masters): refuse replicas, cluster nodes, a server listed twice | on |
//! | [`wake_on_release`](Builder::wake_on_release): a release tells the waiter it hands the lock to | on |
//! | [`restart_guard`](Builder::restart_guard): a master that restarted is not counted (*quarantined*) for the longest TTL; [`fencing`](Builder::fencing) | off |
//! | tuning: [`max_in_flight`](Builder::max_in_flight), [`spin`](Builder::spin), [`yield_to_local_masters`](Builder::yield_to_local_masters) | 256, 1 ms, on |
//!
//! Addresses are `redis://[[user]:password@]host[:port][/db]`, `rediss://…`
//! (feature `tls`) and `unix:///path/to/redis.sock[?db=N&user=U&pass=P]`.
//!
//! # Feature flags
//!
//! | feature | what it adds |
//! |---|---|
//! | `tls` | `rediss://` addresses over rustls (the system's roots by default; `Builder::tls_config` for a private CA or a client certificate) |
//! | `tracing` | a `tracing` span per round, events for connects, dropped connections and quarantined masters |
//! | `metrics` | round latency histograms and counters through the `metrics` facade |
//!
//! All are off by default; with them off, nothing of them is compiled in.
//!
//! # Further reading
//!
//! - [`guarantees`]: what a lock guarantees, under which assumptions, and
//!   what it cannot do.
//! - [`operations`]: running the masters: persistence, the restart guard,
//!   ACL permissions, the crate's keys, TLS, metrics, supported servers.
//! - [`fencing`]: fencing tokens, and why they hold.
//! - [`limitations`]: what the crate does not do, or does at a cost.
//! - [`how_it_works`]: rounds, connections, and many callers on one client.
//! - [`resp`]: the RESP2/RESP3 codec, usable on its own.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod addr;
mod calls;
mod client;
mod clock;
mod commands;
mod driver;
mod error;
pub mod fencing;
mod flights;
pub mod guarantees;
pub mod how_it_works;
mod ids;
pub mod limitations;
mod link;
pub mod operations;
pub mod resp;
mod rules;
pub mod scripts;
mod sync;

pub use addr::{AddrError, Endpoint, ServerAddr};
pub use client::{
    AsyncLockGuard, Builder, Completion, EmbeddedRedlock, EngineStats, KeepOptions, Keeper, Lock,
    LockGuard, LockLoss, LossSignal, MAX_BATCH, MAX_IN_FLIGHT, MAX_RESOURCE_LEN, MAX_TIMEOUT,
    MAX_TTL, MasterStats, OnChange, Redlock, Require, Standing, Stats, TOKEN_LEN, Ticket,
};
pub use commands::{FENCE_KEY, FENCE_LOST_KEY, LONGEST_TTL_KEY, MARKER_KEY, RESERVED_PREFIX};
pub use error::{ConfigError, Error};
pub use rules::{NodeError, NodeState, Op, Report, ServerError};

/// The fuzz harnesses of the protocol session and of the table of rounds
/// in flight, for the fuzz crate's `session` and `flights` targets
/// (feature `fuzzing`; not a stable API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::flights::fuzz::{FlightsSeen, flights};
    pub use crate::link::fuzz::{Seen, session};
}
/// The sans-IO machines, for the `redlock-mio-sim` crate's client and the
/// `redlock-mio-model` crate's tie to the library (feature `sim`; not a
/// stable API: it changes with the library's internals).
///
/// A simulator drives what the front ends drive: the driver's [`Core`](sim::Core)
/// (the sessions, the tables of rounds, waits and watches, moved with
/// bytes and the time passed in), the calls' machines (`calls`) and the
/// fenced acquire ([`FencedAcquire`](sim::FencedAcquire) with its [`Host`](sim::Host)). Nothing here
/// decides on the simulator's behalf; what it owns is the moving of bytes,
/// time and callers.
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod sim {
    /// The calls as machines, as every front end drives them.
    pub mod calls {
        pub use crate::calls::{
            Acquire, Acquired, Attempted, Claim, Extend, Fenced, Granted, Holding, Keeping,
            KeepingStep, Leave, Limits, Pursue, Release, Rewatch, Step, Times, Validity, Wait,
            Waited, check_resource, decision, longest_ttl, pack_names, release_behind, restarter,
            timeout, unknown,
        };
    }
    /// The configuration a front end derives from its builder's settings.
    pub mod builder {
        pub use crate::client::builder::{backoff_min, default_stall};
    }
    /// The commands' keys and wake channel.
    pub mod commands {
        pub use crate::commands::{unpack_keys, wake_channel};
    }
    /// The lock rules a client's rounds follow.
    pub mod rules {
        pub use crate::rules::identity::CLIENT_MARKER;
        pub use crate::rules::{drift, outlived};
    }
    pub use crate::client::fence::{FenceBook, FencedAcquire, Host};
    pub use crate::client::rounds::{Ends, RoundEnd};
    pub use crate::commands::{Command, Keys, WakeChannel};
    pub use crate::driver::core::Core;
    pub use crate::flights::{Flights, Waits, Watches};
    pub use crate::ids::{RoundId, WatchId};
    pub use crate::link::LinkConfig;
    pub use crate::rules::wait::Terms;
    pub use crate::rules::{Decision, Reply, Round};

    /// What `lock` holds, as an extend or a release of it reads it.
    pub fn holding(lock: &crate::Lock) -> calls::Holding<'_> {
        lock.holding()
    }
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
