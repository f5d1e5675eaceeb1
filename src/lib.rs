//! A low-latency client for the Redlock distributed lock over N independent
//! Redis masters.
//!
//! The crate is layered so that each part can be read, tested and fuzzed
//! on its own:
//!
//! - [`resp`]: the RESP2/RESP3 codec. Incremental, allocation-free and
//!   strict, with hard limits on nesting and lengths. It never touches a
//!   socket.
//!
//! The Redlock rules (quorum, validity, retries) as a sans-IO state machine
//! and the `mio` driver that sends each round to all masters in one
//! event-loop tick are built on top of it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod addr;
mod client;
mod commands;
mod driver;
mod error;
pub mod resp;
pub mod rules;

pub use addr::{AddrError, Endpoint, ServerAddr};
pub use client::{Builder, Lock, LockGuard, MAX_RESOURCE_LEN, MAX_TTL, Redlock, TOKEN_LEN};
pub use commands::{EXTEND_SCRIPT, EXTEND_SHA1, RELEASE_SCRIPT, RELEASE_SHA1};
pub use error::{ConfigError, Error};
