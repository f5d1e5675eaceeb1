//! The clients most tests build: every call one try (no retry), each round
//! with a request timeout of the test's choosing, so that a call's outcome
//! is that of one round.
#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

use std::time::Duration;

use redlock_mio::{Builder, Redlock};

/// A builder for `servers` whose calls try once (`retry_count(0)`), each
/// round with `request_timeout`; the test adds its own settings.
pub fn one_try(
    servers: impl IntoIterator<Item = impl AsRef<str>>,
    request_timeout: Duration,
) -> Builder {
    Redlock::builder(servers)
        .request_timeout(request_timeout)
        .retry_count(0)
}

/// A client of [`one_try`].
///
/// # Panics
///
/// If the client cannot be built.
pub fn client(
    servers: impl IntoIterator<Item = impl AsRef<str>>,
    request_timeout: Duration,
) -> Redlock {
    one_try(servers, request_timeout)
        .build()
        .expect("build a client")
}

/// A fenced client of [`one_try`], `longest` the longest TTL it will lock
/// for.
///
/// # Panics
///
/// If the client cannot be built.
pub fn fenced(
    servers: impl IntoIterator<Item = impl AsRef<str>>,
    request_timeout: Duration,
    longest: Duration,
) -> Redlock {
    one_try(servers, request_timeout)
        .fencing(longest)
        .build()
        .expect("build a fenced client")
}
