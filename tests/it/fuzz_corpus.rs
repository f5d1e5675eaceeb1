//! Replays the fuzz corpus on a stable toolchain.
//!
//! Each fuzz target in `fuzz/` has a seed corpus, `fuzz/seeds/<target>/`,
//! and may have regressions, `fuzz/regressions/<target>/` (inputs that once
//! crashed a target, kept forever). This test feeds every file of both
//! through the very check the fuzz target runs: the checks live in
//! `fuzz/src/checks/` (`mod.rs` and its submodules), which is included here
//! as a module, so `cargo test` exercises them without libFuzzer or a
//! nightly toolchain.
//!
//! A target whose seed directory is missing or empty fails: the test cannot
//! pass without replaying anything.
//!
//! The `session` and `flights` targets are the exceptions: their harnesses
//! drive private parts of the crate (the protocol session, the table of
//! rounds in flight), so they live in the crate (`src/link/fuzz.rs`,
//! `src/flights/fuzz.rs`) and their seeds are replayed by the crate's unit
//! tests (`link::fuzz::tests::session_corpus`,
//! `flights::fuzz::tests::flights_corpus`).

#[allow(unreachable_pub)]
#[path = "../../fuzz/src/checks/mod.rs"]
mod checks;

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// The files of `dir`, sorted; empty if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| match entry {
            Ok(entry) => entry.path(),
            Err(e) => panic!("reading {}: {e}", dir.display()),
        })
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` on every seed and regression of `target`, reporting every
/// failing file by name.
fn replay(target: &str, check: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let seeds = files(&fuzz.join("seeds").join(target));
    assert!(
        !seeds.is_empty(),
        "no seeds in fuzz/seeds/{target}/: the replay would pass vacuously"
    );
    let regressions = files(&fuzz.join("regressions").join(target));
    let mut failed = Vec::new();
    for path in seeds.iter().chain(&regressions) {
        let data = match fs::read(path) {
            Ok(data) => data,
            Err(e) => panic!("reading {}: {e}", path.display()),
        };
        if panic::catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs failed (see the panics above): {failed:#?}",
        failed.len(),
        seeds.len() + regressions.len()
    );
}

#[test]
fn decode_corpus() {
    replay("decode", checks::decode);
}

#[test]
fn chunked_corpus() {
    replay("chunked", checks::chunked);
}

#[test]
fn roundtrip_corpus() {
    replay("roundtrip", checks::roundtrip);
}

#[test]
fn oracle_corpus() {
    replay("oracle", checks::oracle);
}
