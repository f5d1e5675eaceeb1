//! Fuzz target: see [`redlock_mio_fuzz::chunked`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redlock_mio_fuzz::chunked(data));
