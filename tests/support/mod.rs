//! Shared support code for the integration tests.
//!
//! Each test binary declares `mod support;` (`tests/it/main.rs` once for
//! all its modules; the examples, the benchmarks and the CLI's tests by
//! `#[path]`) and uses only part of it, so unused items are expected; and since `support` is a private module of a
//! test crate, its `pub` items are not reachable from outside by design.
#![allow(dead_code, unreachable_pub)]

pub mod check;
pub mod clients;
pub mod clock;
pub mod cluster;
pub mod counting;
pub mod executor;
pub mod gate;
pub mod holdings;
pub mod hostile;
pub mod join;
pub mod pki;
pub mod proxy;
pub mod restart;
pub mod standings;
