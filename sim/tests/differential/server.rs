//! A real `redis-server` (or `valkey-server`) whose wall clock the test
//! sets: an `LD_PRELOAD` shim makes `clock_gettime(CLOCK_REALTIME*)`,
//! `gettimeofday` and `time` read a 64-bit count of microseconds from a
//! file the test maps too. The server's clock then stands still between
//! two moves of the test, exactly as the model's does, so that `TIME`,
//! `PTTL`, expiry and the scripts' time-derived values compare exactly.
//! The monotonic clock, on which the server's timers run, is left alone.
//! The server's background expiry is off (`DEBUG SET-ACTIVE-EXPIRE 0`),
//! so that a key expires only when a command touches it, as in the model:
//! a connection that tracks the key is told then, not at a moment of the
//! server's timers.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_mio_sim::{PushOrder, ScriptReads};

use super::wire::{Value, Wire};

/// The password the servers (and the models) require.
pub(crate) const PASSWORD: &str = "sim-secret";

/// How long a server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The shim. Its clock is mapped once, in a constructor; until then (the
/// dynamic loader and the allocator may ask for the time first) the real
/// clock is read through the system call.
const SHIM: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static uint64_t *frozen;

__attribute__((constructor)) static void map_clock(void) {
    const char *path = getenv("REDLOCK_SIM_CLOCK_FILE");
    if (!path) return;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void *p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
    syscall(SYS_close, fd);
    if (p != MAP_FAILED) __atomic_store_n(&frozen, (uint64_t *)p, __ATOMIC_RELEASE);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    uint64_t *clock = __atomic_load_n(&frozen, __ATOMIC_ACQUIRE);
    if (clock && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        uint64_t us = __atomic_load_n(clock, __ATOMIC_ACQUIRE);
        ts->tv_sec = (time_t)(us / 1000000);
        ts->tv_nsec = (long)(us % 1000000) * 1000;
        return 0;
    }
    return (int)syscall(SYS_clock_gettime, id, ts);
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

/// The server binary: `$REDIS_SERVER`, else `redis-server` on `PATH`.
pub(crate) fn binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// The shim, compiled with the system's C compiler (`$CC`, else `cc`)
/// into the target's temporary directory, once for its source text: it
/// is named after a hash of the source and moved into place whole, so
/// that test processes running at once share it.
fn shim() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let hash = SHIM.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let lib = dir.join(format!("sim-clock-shim-{hash:016x}.so"));
        if lib.is_file() {
            return lib;
        }
        let pid = std::process::id();
        let source = dir.join(format!("sim-clock-shim-{pid}.c"));
        let partial = dir.join(format!("sim-clock-shim-{pid}.so"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        fs::write(&source, SHIM).unwrap_or_else(|e| panic!("cannot write the shim: {e}"));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let output = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&partial)
            .arg(&source)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "the differential test builds an LD_PRELOAD clock shim with a C compiler, \
                     and `{cc}` could not run ({e}): install one (`apt-get install -y gcc`) or set CC"
                )
            });
        let _ = fs::remove_file(&source);
        assert!(
            output.status.success(),
            "`{cc}` failed to build the clock shim:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        fs::rename(&partial, &lib).unwrap_or_else(|e| panic!("cannot move the shim into place: {e}"));
        lib
    })
}

/// The clock file, mapped: the test's stores are the server's reads.
struct Clock {
    ptr: *mut AtomicU64,
    _file: File,
}

impl Clock {
    fn create(path: &Path, us: u64) -> io::Result<Clock> {
        use std::os::fd::AsRawFd;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(8)?;
        // SAFETY: a shared mapping of the 8 bytes of a file this struct
        // keeps open; it is unmapped in Drop and only used as one
        // aligned AtomicU64 (mmap returns page-aligned memory).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let clock = Clock {
            ptr: ptr.cast(),
            _file: file,
        };
        clock.set(us);
        Ok(clock)
    }

    fn set(&self, us: u64) {
        // SAFETY: see `create`: the mapping lives as long as `self`.
        unsafe { (*self.ptr).store(us, Ordering::Release) }
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`, not used after this.
        unsafe {
            libc::munmap(self.ptr.cast(), 8);
        }
    }
}

/// One server process at a time in a temporary directory, with its clock.
pub(crate) struct Server {
    dir: PathBuf,
    socket: PathBuf,
    clock: Clock,
    now: u64,
    child: Option<Child>,
    /// The clock at the process's start.
    started: u64,
}

impl Server {
    /// A server started at `now_us` (clock), empty.
    pub(crate) fn start(now_us: u64) -> Server {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "redlock-mio-sim-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let clock = Clock::create(&dir.join("clock"), now_us)
            .unwrap_or_else(|e| panic!("cannot map the clock file: {e}"));
        let mut server = Server {
            socket: dir.join("redis.sock"),
            dir,
            clock,
            now: now_us,
            child: None,
            started: now_us,
        };
        server.launch(None);
        server.check_clock();
        server
    }

    /// Panics unless the server's `TIME` is the clock the test set: the
    /// shim did not load (a statically linked server, say), and every
    /// comparison that involves time would fail for that reason.
    fn check_clock(&self) {
        let time = self.admin().call(&[b"TIME".to_vec()]);
        let expected = Value::Array(vec![
            Value::Bulk((self.now / 1_000_000).to_string().into_bytes()),
            Value::Bulk((self.now % 1_000_000).to_string().into_bytes()),
        ]);
        assert_eq!(
            time,
            expected,
            "{} does not read the test's clock: its LD_PRELOAD shim did not load",
            binary().display()
        );
    }

    /// Which keys a script's reads track on this server: its declared
    /// keys before Redis 7.2, the keys of the command it calls in Valkey
    /// and in Redis from 7.2 on (Redis 7.0 and Valkey 8.1 are the ones
    /// checked).
    pub(crate) fn script_reads(&self) -> ScriptReads {
        match self.push_order() {
            PushOrder::BeforeReply => ScriptReads::DeclaredKeys,
            PushOrder::AfterReply => ScriptReads::CalledKeys,
        }
    }

    /// Where the server writes a push to the connection that caused it,
    /// against that command's reply: before it in Redis 7.0 and 7.1, after
    /// it in Valkey and in Redis from 7.2 on (from `HELLO`'s `server` and
    /// `version`; Redis 7.0 and Valkey 8.1 are the ones checked).
    pub(crate) fn push_order(&self) -> PushOrder {
        let hello = self.admin().call(&[b"HELLO".to_vec(), b"3".to_vec()]);
        let Value::Map(items) = hello else {
            panic!("HELLO 3 gave no map: {hello:?}");
        };
        let field = |name: &[u8]| {
            items.chunks(2).find_map(|pair| match pair {
                [Value::Bulk(key), Value::Bulk(value)] if key == name => Some(value.clone()),
                _ => None,
            })
        };
        let version: Vec<u32> = String::from_utf8_lossy(&field(b"version").unwrap_or_default())
            .split('.')
            .map(|part| part.parse().unwrap_or(0))
            .collect();
        let redis_7_2 = version.as_slice() >= [7, 2].as_slice();
        if field(b"server").as_deref() == Some(b"redis") && !redis_7_2 {
            PushOrder::BeforeReply
        } else {
            PushOrder::AfterReply
        }
    }

    /// Waits until the server has as many client connections as the
    /// test holds (`open`), so that one the test closed no longer counts
    /// as a listener for `PUBLISH` (a server sees a socket close on its
    /// own time). A condition polled on the server, bounded by a deadline.
    pub(crate) fn await_connections(&self, open: usize) {
        let mut admin = self.admin();
        let info = vec![b"INFO".to_vec(), b"clients".to_vec()];
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let connected = match admin.call(&info) {
                Value::Bulk(text) | Value::Verbatim(text) => String::from_utf8_lossy(&text)
                    .lines()
                    .find_map(|line| line.strip_prefix("connected_clients:")?.trim().parse().ok()),
                _ => None,
            };
            // The admin connection counts too.
            if connected == Some(open + 1) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} kept {connected:?} connections, not {}",
                binary().display(),
                open + 1
            );
            thread::yield_now();
        }
    }

    /// When the running process started, on its clock.
    pub(crate) fn started(&self) -> u64 {
        self.started
    }

    /// Sets the server's clock.
    pub(crate) fn set_clock(&mut self, us: u64) {
        self.now = us;
        self.clock.set(us);
    }

    /// A new connection.
    pub(crate) fn connect(&self) -> Wire {
        let stream = UnixStream::connect(&self.socket)
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.socket.display()));
        Wire::new(stream)
    }

    /// An RDB of the data set now (`SAVE`), kept as the snapshot.
    pub(crate) fn snapshot(&self) {
        let mut admin = self.admin();
        let reply = admin.call(&[b"SAVE".to_vec()]);
        assert_eq!(reply, Value::Simple(b"OK".to_vec()), "SAVE failed");
        fs::copy(self.dir.join("dump.rdb"), self.dir.join("snapshot.rdb"))
            .unwrap_or_else(|e| panic!("cannot keep the snapshot: {e}"));
    }

    /// Kills the process (SIGKILL: nothing is saved) and starts a new one
    /// at the clock now, empty or from the last snapshot.
    pub(crate) fn restart(&mut self, from_snapshot: bool) {
        self.stop();
        let snapshot = from_snapshot.then(|| self.dir.join("snapshot.rdb"));
        self.started = self.now;
        self.launch(snapshot.as_deref());
    }

    /// A logged-in connection for the test's own commands.
    pub(crate) fn admin(&self) -> Wire {
        let mut wire = self.connect();
        let reply = wire.call(&[b"AUTH".to_vec(), PASSWORD.as_bytes().to_vec()]);
        assert_eq!(reply, Value::Simple(b"OK".to_vec()), "AUTH failed");
        wire
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process with `rdb` (or nothing) as its data, and waits
    /// until it answers.
    fn launch(&mut self, rdb: Option<&Path>) {
        let dump = self.dir.join("dump.rdb");
        let _ = fs::remove_file(&dump);
        if let Some(rdb) = rdb {
            fs::copy(rdb, &dump).unwrap_or_else(|e| panic!("cannot restore the snapshot: {e}"));
        }
        let _ = fs::remove_file(&self.socket);
        let log = self.dir.join("server.log");
        let child = Command::new(binary())
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--requirepass", PASSWORD])
            .args(["--enable-debug-command", "local"])
            .arg("--unixsocket")
            .arg(&self.socket)
            .arg("--dir")
            .arg(&self.dir)
            .args(["--dbfilename", "dump.rdb"])
            .arg("--logfile")
            .arg(&log)
            .env("LD_PRELOAD", shim())
            .env("REDLOCK_SIM_CLOCK_FILE", self.dir.join("clock"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}): install redis-server or set REDIS_SERVER",
                    binary().display()
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        // Polls until the process accepts a connection and answers PING
        // (a real wait for a condition, bounded by the deadline).
        loop {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "{} exited at start ({status}):\n{}",
                        binary().display(),
                        fs::read_to_string(&log).unwrap_or_default()
                    );
                }
            }
            if let Ok(stream) = UnixStream::connect(&self.socket) {
                let mut wire = Wire::new(stream);
                let login = vec![b"AUTH".to_vec(), PASSWORD.as_bytes().to_vec()];
                let logged_in = wire.try_call(&login).is_some();
                if logged_in
                    && wire.try_call(&[b"PING".to_vec()]) == Some(Value::Simple(b"PONG".to_vec()))
                {
                    // No background expiry: it would tell the connections
                    // that track a key of its expiry at a moment of its
                    // own, where the model (as a server does too) tells
                    // them at the access that expires it.
                    let words = [&b"DEBUG"[..], b"SET-ACTIVE-EXPIRE", b"0"].map(<[u8]>::to_vec);
                    let reply = wire.call(&words);
                    assert_eq!(
                        reply,
                        Value::Simple(b"OK".to_vec()),
                        "{} refused to stop its background expiry",
                        binary().display()
                    );
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{} did not answer within {START_TIMEOUT:?}",
                binary().display()
            );
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
