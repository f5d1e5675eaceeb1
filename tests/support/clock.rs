//! Masters whose wall clock is ahead of (or behind) the host's: an
//! `LD_PRELOAD` shim that adds a fixed offset to what
//! `clock_gettime(CLOCK_REALTIME*)`, `gettimeofday` and `time` return in
//! one `redis-server`. Its `TIME`, the `TIME` its scripts see, and the
//! clock its key expiry runs on all move by the same offset, so TTLs still
//! run at the normal rate (its monotonic clock is left alone).
//!
//! ```ignore
//! let cluster = support::clock::skewed(ClusterOptions::new(3), 0, 3_600_000_000).start();
//! ```
//!
//! The shim is C, compiled on first use with the system's C compiler (`cc`,
//! or `$CC`). (Debian's libfaketime does not load into Debian's
//! `redis-server`: it recurses into `clock_gettime` while jemalloc starts.)
//! Without a compiler the tests that need it fail, saying what to install;
//! they never skip.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::cluster::ClusterOptions;

/// The variable the shim reads: the offset in microseconds (may be
/// negative).
const OFFSET_VAR: &str = "REDLOCK_TEST_CLOCK_OFFSET_US";

/// The shim. It calls the `clock_gettime` system call directly, never the
/// next symbol through `dlsym` (which may allocate, and the allocator may
/// ask for the time while it starts).
const SHIM: &str = r#"
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_us(void) {
    static long long offset;
    static int known;
    if (!known) {
        const char *text = getenv("REDLOCK_TEST_CLOCK_OFFSET_US");
        offset = text ? strtoll(text, NULL, 10) : 0;
        known = 1;
    }
    return offset;
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_nsec + (offset_us() % 1000000) * 1000;
    ts->tv_sec += offset_us() / 1000000 + ns / 1000000000;
    ns %= 1000000000;
    if (ns < 0) {
        ns += 1000000000;
        ts->tv_sec -= 1;
    }
    ts->tv_nsec = ns;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = (int)syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
"#;

/// The compiled shim, built once per test process into the target's
/// temporary directory (a name per source text, written through a rename,
/// so that test processes running at once share it safely).
///
/// # Panics
///
/// If no C compiler can build it, with what to install.
pub fn shim() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(build) {
        Ok(path) => path.clone(),
        Err(why) => panic!("{why}"),
    }
}

fn build() -> Result<PathBuf, String> {
    // Set for integration tests; the examples that share `support` fall
    // back on the system's.
    let dir = option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let name = format!("clock-shim-{:016x}", fnv1a(SHIM.as_bytes()));
    let lib = dir.join(format!("{name}.so"));
    if lib.is_file() {
        return Ok(lib);
    }
    let pid = std::process::id();
    let source = dir.join(format!("{name}-{pid}.c"));
    let partial = dir.join(format!("{name}-{pid}.so"));
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    fs::write(&source, SHIM).map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&partial)
        .arg(&source)
        .output();
    let _ = fs::remove_file(&source);
    let output = built.map_err(|e| {
        format!(
            "the skewed-clock tests need a C compiler to build their LD_PRELOAD shim, \
             and `{cc}` could not be run ({e}): install one (`apt-get install -y gcc`, \
             or `bash .ci/install-cc`) or set CC"
        )
    })?;
    if !output.status.success() {
        return Err(format!(
            "`{cc}` failed to build the clock shim ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    fs::rename(&partial, &lib)
        .map_err(|e| format!("cannot move the clock shim to {}: {e}", lib.display()))?;
    Ok(lib)
}

/// FNV-1a, to name the shim after its source.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// `opts` with node `node`'s wall clock moved by `offset_us` microseconds
/// (ahead if positive), at every start and restart.
pub fn skewed(opts: ClusterOptions, node: usize, offset_us: i64) -> ClusterOptions {
    opts.node_env(node, "LD_PRELOAD", shim().display().to_string())
        .node_env(node, OFFSET_VAR, offset_us.to_string())
}
