//! Fuzz target: the table of rounds in flight against a model of it (see
//! the harness, `src/flights/fuzz.rs` in the main crate).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    redlock_mio::fuzzing::flights(data);
});
