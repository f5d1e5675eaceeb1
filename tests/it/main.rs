//! The integration tests, one module per feature, in one test binary: the
//! support code is compiled once and one binary is linked, instead of one
//! per feature. Run one feature with `cargo test --test it <module>::`, or
//! `cargo nextest run -E 'binary(it) & test(/^<module>::/)'`.
//!
//! A test stays in a binary of its own only when it needs its process to
//! itself: `tests/fork.rs` forks, `tests/poll_error.rs` breaks a poller by
//! its descriptor number, and `tests/observe.rs` sets up `tracing`, whose
//! per-call-site cache is shared by the whole process (each file says more).

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

#[path = "../support/mod.rs"]
mod support;

mod alloc;
mod async_api;
mod availability;
mod backpressure;
mod batch;
mod budget;
mod cancel;
mod chaos;
mod clock_skew;
mod cluster;
mod config;
mod contention;
mod embedded;
mod errors;
mod executors;
mod faults;
mod fenced_async;
mod fencing;
mod fuzz_corpus;
mod hostile;
mod identity;
mod keeper;
mod local_yield;
mod lock;
mod loss_watch;
mod matrix;
mod multi;
mod reserved;
mod resp_conformance;
mod scoped;
mod shared;
mod stats;
mod time_bounds;
#[cfg(feature = "tls")]
mod tls;
mod validity;
mod waiting;

/// Counts allocations per thread, for the "allocates nothing" tests of
/// `alloc` and the memory bounds of `hostile`. Since it counts per thread,
/// the other tests running at once in this process (under `cargo test`'s
/// threads) never enter a count; to the rest it is the system allocator.
#[global_allocator]
static GLOBAL: support::counting::CountingAlloc = support::counting::CountingAlloc;
