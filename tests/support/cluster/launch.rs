//! Starting one `redis-server` process: finding the binary, the node's
//! temporary directory and free port, its command line, and the launch
//! that waits until the process itself answers `PING`.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::resp::{Connection, encode_command, is_error_with};
use super::{ClusterOptions, LOG_TAIL_LINES, NodeAddr, POLL_INTERVAL, START_TIMEOUT};

/// The install hint printed when `redis-server` is missing.
const INSTALL_HINT: &str = "install it with `apt-get install -y redis-server` \
     (or `bash .ci/install-redis`), or set REDIS_SERVER=/path/to/redis-server";

// ---------------------------------------------------------------------------
// Finding the binary
// ---------------------------------------------------------------------------

/// The `redis-server` binary the harness runs: `$REDIS_SERVER` if set (and
/// not empty), else the first executable `redis-server` on `$PATH`.
///
/// # Panics
///
/// If there is none, with a message naming the install command. Tests that
/// need Redis fail rather than skip silently.
pub fn redis_server_path() -> PathBuf {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FOUND.get_or_init(find_redis_server) {
        Ok(path) => path.clone(),
        Err(msg) => panic!("{msg}"),
    }
}

/// The `redis-server` to use (`REDIS_SERVER`, else the one on `PATH`), or
/// why there is none; never panics.
pub fn find_redis_server() -> Result<PathBuf, String> {
    if let Some(var) = std::env::var_os("REDIS_SERVER").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&var);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(format!(
                "REDIS_SERVER={} is not an executable file; {INSTALL_HINT}",
                path.display()
            ))
        };
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| {
            format!(
                "redis-server was not found on PATH ({}); the integration tests \
                 need a real Redis server: {INSTALL_HINT}",
                path_var.to_string_lossy()
            )
        })
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

// ---------------------------------------------------------------------------
// Temporary directories and ports
// ---------------------------------------------------------------------------

/// A directory under `temp_dir()` removed (with its content) on drop.
#[derive(Debug)]
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        for _ in 0..100 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!(
                "redlock-mio-test-{}-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed),
                nanos
            );
            let path = base.join(name);
            match fs::create_dir(&path) {
                Ok(()) => return Self(path),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create a temp dir {}: {e}", path.display()),
            }
        }
        panic!(
            "cannot create a unique temp dir under {}: 100 names taken",
            base.display()
        );
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The first port of the bands test processes take their ports from,
/// below the kernel's ephemeral range (32768 and up on Linux), which the
/// proxies, fake servers and clients bind from.
const BANDS_START: u16 = 20_000;
/// Ports in one process's band.
const BAND: u16 = 40;
/// Bands, one per process id modulo this (up to port 32 000).
const BANDS: u32 = 300;

/// A port free on 127.0.0.1, not yet handed out by this process: first
/// from this process's band, then one the kernel picks. nextest runs each
/// test in a process of its own, and a test that kills a node restarts it
/// on the same port later: a port of its own band is one that another
/// test process, taking its own band's, does not pick meanwhile (the
/// kernel's picks never fall in a band), so the clients of the killed
/// node never reach another test's server there. Another process may
/// still take a port before `redis-server` binds it; the caller retries
/// then.
pub(super) fn free_port() -> u16 {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let first = BANDS_START + (std::process::id() % BANDS) as u16 * BAND;
    for port in first..first + BAND {
        if !handed_out.contains(&port) && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to pick a free port: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("cannot read the port of a bound listener: {e}"))
            .port();
        drop(listener);
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
    panic!("the kernel keeps handing out ports this process already used");
}

// ---------------------------------------------------------------------------
// Starting one process
// ---------------------------------------------------------------------------

/// Why one start attempt failed.
pub(super) enum LaunchError {
    /// The port was taken (by another test, most likely): try again.
    AddrInUse,
    /// Anything else: the message says what, with the logs.
    Failed(String),
}

/// What a node needs to be started (again).
#[derive(Debug)]
pub(super) struct LaunchSpec {
    pub(super) label: String,
    pub(super) addr: NodeAddr,
    pub(super) args: Vec<OsString>,
    pub(super) log: PathBuf,
    pub(super) output: PathBuf,
    pub(super) password: Option<String>,
    /// Environment variables set for the process (on top of the test's).
    pub(super) env: Vec<(String, String)>,
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// The content of `path` from byte `from` on (lossy), empty if unreadable.
fn read_from(path: &Path, from: u64) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let from = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

/// The last `n` lines of a file, for panic messages.
pub(super) fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            if lines.is_empty() {
                "(empty)".to_owned()
            } else {
                lines[start..].join("\n")
            }
        }
        Err(e) => format!("(cannot read: {e})"),
    }
}

impl LaunchSpec {
    pub(super) fn logs(&self) -> String {
        format!(
            "--- last {LOG_TAIL_LINES} lines of {} ---\n{}\n--- stdout/stderr {} ---\n{}\n---",
            self.log.display(),
            tail(&self.log, LOG_TAIL_LINES),
            self.output.display(),
            tail(&self.output, LOG_TAIL_LINES),
        )
    }

    fn command_line(&self, bin: &Path) -> String {
        let mut s = bin.display().to_string();
        for a in &self.args {
            s.push(' ');
            let a = a.to_string_lossy();
            if a.is_empty() || a.contains(' ') {
                s.push_str(&format!("{a:?}"));
            } else {
                s.push_str(&a);
            }
        }
        s
    }

    fn failure(&self, bin: &Path, what: &str) -> LaunchError {
        LaunchError::Failed(format!(
            "redis {} ({}) {what}\ncommand: {}\n{}",
            self.label,
            self.addr,
            self.command_line(bin),
            self.logs()
        ))
    }

    /// Starts the process and waits until it answers `PING`.
    pub(super) fn launch(&self) -> Result<Child, LaunchError> {
        let bin = redis_server_path();
        let log_start = file_len(&self.log);
        let out_start = file_len(&self.output);
        let output = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.output)
            .map_err(|e| self.failure(&bin, &format!("cannot open its output file: {e}")))?;
        let output2 = output
            .try_clone()
            .map_err(|e| self.failure(&bin, &format!("cannot clone its output file: {e}")))?;
        let mut child = Command::new(&bin)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(output))
            .stderr(Stdio::from(output2))
            .spawn()
            .map_err(|e| self.failure(&bin, &format!("could not be spawned: {e}")))?;

        match self.wait_ready(&mut child) {
            Ready::Yes => Ok(child),
            Ready::Exited(status) => {
                let _ = child.wait();
                let new_output =
                    read_from(&self.log, log_start) + &read_from(&self.output, out_start);
                if new_output.contains("Address already in use") {
                    Err(LaunchError::AddrInUse)
                } else {
                    Err(self.failure(&bin, &format!("exited during startup ({status})")))
                }
            }
            Ready::No(why) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(self.failure(&bin, &format!("was killed: {why}")))
            }
        }
    }

    /// One readiness probe: `Ok` once the process `pid` itself answers
    /// `+PONG`; `Err(why not yet)` otherwise. `AUTH` (if any), `PING` and
    /// `INFO server` are pipelined, and `process_id` in the `INFO` reply
    /// must be `pid`: if another test's server holds the port, it is the
    /// one that answers, and our process is about to exit on `EADDRINUSE`.
    fn probe(&self, pid: u32) -> Result<(), String> {
        let mut conn = Connection::open(&self.addr, Duration::from_millis(250))
            .map_err(|e| format!("connect: {e}"))?;
        let mut request = Vec::new();
        if let Some(pw) = &self.password {
            request.extend(encode_command(&[b"AUTH", pw.as_bytes()]));
        }
        request.extend(encode_command(&[b"PING"]));
        request.extend(encode_command(&[b"INFO", b"server"]));
        conn.send_raw(&request).map_err(|e| format!("send: {e}"))?;
        let mut read = |what: &str| {
            conn.read_reply()
                .map_err(|e| format!("reading the reply to {what}: {e}"))
        };
        let auth = match &self.password {
            Some(_) => Some(read("AUTH")?),
            None => None,
        };
        let ping = read("PING")?;
        let info = read("INFO")?;
        let lossy = |r: &[u8]| String::from_utf8_lossy(r).into_owned();
        if let Some(auth) = auth.filter(|r| r != b"+OK\r\n") {
            return Err(format!("AUTH got {:?}", lossy(&auth)));
        }
        if is_error_with(&ping, b"LOADING") {
            return Err("-LOADING".to_owned());
        }
        if !lossy(&info).contains(&format!("\r\nprocess_id:{pid}\r\n")) {
            return Err(format!(
                "answered by another process (INFO: {:?})",
                lossy(&info).lines().find(|l| l.starts_with("process_id:"))
            ));
        }
        if ping == b"+PONG\r\n" {
            Ok(())
        } else {
            Err(format!("PING got {:?}", lossy(&ping)))
        }
    }

    /// Polls until the process answers `+PONG`, exits, or
    /// [`START_TIMEOUT`] passes.
    fn wait_ready(&self, child: &mut Child) -> Ready {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Ready::Exited(status);
            }
            let last = match self.probe(child.id()) {
                Ok(()) => return Ready::Yes,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                return Ready::No(format!(
                    "no +PONG within {START_TIMEOUT:?}; last probe: {last}"
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

/// The outcome of [`LaunchSpec::wait_ready`].
enum Ready {
    /// It answered `+PONG`.
    Yes,
    /// The process exited.
    Exited(ExitStatus),
    /// Timed out; the reason.
    No(String),
}

/// The command line of one node; `extra_args` come last so they win.
pub(super) fn server_args(
    opts: &ClusterOptions,
    addr: &NodeAddr,
    dir: &Path,
    log: &Path,
) -> Vec<OsString> {
    let port = addr.port().unwrap_or(0).to_string();
    let mut args: Vec<OsString> = [
        "--port",
        &port,
        "--bind",
        "127.0.0.1",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
        "--enable-debug-command",
        "local",
        "--save",
        "",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let persistence: &[&str] = if opts.persistence {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &["--appendonly", "no"]
    };
    args.extend(persistence.iter().map(OsString::from));
    if let Some(pw) = &opts.password {
        args.push("--requirepass".into());
        args.push(pw.into());
    }
    args.push("--dir".into());
    args.push(dir.into());
    args.push("--logfile".into());
    args.push(log.into());
    if let NodeAddr::Unix(path) = addr {
        args.push("--unixsocket".into());
        args.push(path.into());
        args.push("--unixsocketperm".into());
        args.push("700".into());
    }
    args.extend(opts.extra_args.iter().map(OsString::from));
    args
}
