//! Fuzz target: one master's protocol session against whatever a hostile
//! server sends (see the harness, `src/link/fuzz.rs` in the main crate).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    redlock_mio::fuzzing::session(data);
});
