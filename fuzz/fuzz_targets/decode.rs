//! Fuzz target: see [`redlock_mio_fuzz::decode`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redlock_mio_fuzz::decode(data));
