//! Checks for the RESP codec of `redlock-mio`, shared by the fuzz targets and
//! the main crate's tests.
//!
//! Every check is a plain function taking the fuzzer's bytes and panicking
//! when it finds a bug. These files use nothing but `std`, `redlock_mio`,
//! `arbitrary`, `bytes` and `redis_protocol`, and no libfuzzer, so that the
//! main crate's `tests/it/fuzz_corpus.rs` can include this module with
//! `#[path = "../../fuzz/src/checks/mod.rs"] mod checks;` and replay the seed
//! corpus and the regressions on a stable toolchain.
//!
//! - [`decode`]: the decoder never panics and keeps its invariants, with
//!   default, small, the largest and fuzzer-chosen limits.
//! - [`chunked`]: feeding the input in pieces gives exactly the tokens and
//!   the error of feeding it whole.
//! - [`roundtrip`]: an encoded command has the announced length, the
//!   canonical bytes, and decodes back to its arguments.
//! - [`oracle`]: differential test of the first frame against the
//!   independent `redis-protocol` crate, RESP2 and RESP3 parsers.
//!
//! The checks live in submodules, one per concern: `decoding` ([`decode`]
//! and the whole-input decoding the other checks compare with), `chunking`
//! ([`chunked`]), `encoding` ([`roundtrip`]), and for [`oracle`]:
//! `differential` (the comparison), `tree` (the normalised tree both sides
//! become, built from our tokens) and `theirs` (redis-protocol's side).
//! They are found in this directory both when this file is the fuzz
//! crate's root and when it is included by `#[path]` (a file so included
//! acts as a `mod.rs`).

mod chunking;
mod decoding;
mod differential;
mod encoding;
mod theirs;
mod tree;

pub use chunking::chunked;
pub use decoding::decode;
pub use differential::oracle;
pub use encoding::roundtrip;
