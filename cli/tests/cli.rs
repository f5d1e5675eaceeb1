//! The `redlock` binary end to end, against real `redis-server`s.

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::Redlock;
use support::check::eventually;
use support::cluster::{Cluster, ClusterOptions};

const BIN: &str = env!("CARGO_BIN_EXE_redlock");

fn redlock(cluster: &Cluster, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("REDLOCK_SERVERS", cluster.urls().join(","))
        .env_remove("REDLOCK_PASSWORD")
        // Not a terminal: the command does not take the test's terminal.
        .stdin(Stdio::null())
        .args(args);
    // The signals the tests send act by default even when the tests run
    // with some ignored (a script's background job ignores SIGINT): redlock
    // leaves ignored signals ignored, as they are for the command.
    // SAFETY: signal(2) is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            for signo in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(signo, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    command
}

fn output(command: &mut Command) -> Output {
    command.output().expect("redlock runs")
}

fn temp_file(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("redlock-cli-{name}-{}", std::process::id()));
    let _ = fs::remove_file(&path);
    path
}

/// Two `redlock run` loops race for one resource; the command appends
/// `start` and `end` to a file: the lines must alternate.
#[test]
fn two_racing_runs_never_both_run() {
    let cluster = Cluster::start(3);
    let log = temp_file("race");
    let script = format!(
        "echo start >> {0}; sleep 0.05; echo end >> {0}",
        log.display()
    );
    let racers: Vec<_> = (0..2)
        .map(|_| {
            let mut command = redlock(
                &cluster,
                &[
                    "run", "--ttl", "5s", "--wait", "10s", "race", "--", "sh", "-c", &script,
                ],
            );
            thread::spawn(move || {
                (0..10)
                    .map(|_| command.status().expect("redlock runs").code())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for racer in racers {
        let codes = racer.join().expect("no panic");
        assert!(codes.iter().all(|c| *c == Some(0)), "{codes:?}");
    }
    let text = fs::read_to_string(&log).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 40, "{text}");
    for pair in lines.chunks(2) {
        assert_eq!(pair, ["start", "end"], "two commands ran at once:\n{text}");
    }
    let _ = fs::remove_file(log);
    for i in 0..3 {
        assert!(!cluster.exists(i, "race"), "released");
    }
}

/// With `--fence`, each run's command gets a larger `REDLOCK_FENCE`;
/// without, none.
#[test]
fn fenced_runs_get_growing_fences() {
    let cluster = Cluster::start(3);
    let fence = |args: &[&str]| {
        let out = output(&mut redlock(&cluster, args));
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let script = ["--", "sh", "-c", "echo \"${REDLOCK_FENCE-none}\""];
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--ttl", "2s"];
        args.extend_from_slice(extra);
        args.push("fenced");
        args.extend_from_slice(&script);
        fence(&args)
    };
    let mut last = 0u64;
    for _ in 0..3 {
        let next: u64 = run(&["--fence"]).parse().expect("a number");
        assert!(next > last, "{next} after {last}");
        last = next;
    }
    // The deployment's longest TTL is kept on the masters: the runs above
    // left the default (5 min) there, and a run given another is refused
    // until an operator changes it on every master.
    let refused = output(&mut redlock(
        &cluster,
        &[
            "run",
            "--fence",
            "--longest-ttl",
            "10s",
            "fenced",
            "--",
            "true",
        ],
    ));
    assert!(!refused.status.success(), "{refused:?}");
    for i in 0..3 {
        cluster.set(i, redlock_mio::LONGEST_TTL_KEY, "10000");
    }
    let longest: u64 = run(&["--fence", "--longest-ttl", "10s"])
        .parse()
        .expect("a number");
    assert!(longest > last);
    assert_eq!(run(&[]), "none");
    // A TTL above the longest is bad usage.
    let out = output(&mut redlock(
        &cluster,
        &[
            "run",
            "--ttl",
            "20s",
            "--fence",
            "--longest-ttl",
            "10s",
            "fenced",
            "--",
            "true",
        ],
    ));
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}

#[test]
fn a_held_lock_is_a_conflict() {
    let cluster = Cluster::start(3);
    let holder = Redlock::builder(cluster.urls()).build().expect("build");
    let _lock = holder
        .try_lock("busy", Duration::from_secs(10))
        .expect("free");
    let started = Instant::now();
    let out = output(&mut redlock(&cluster, &["run", "busy", "--", "true"]));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("could not lock \"busy\""), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let out = output(&mut redlock(
        &cluster,
        &["run", "--conflict-exit-code", "9", "busy", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(9), "{out:?}");
}

#[test]
fn the_commands_status_token_and_lock_status() {
    let cluster = Cluster::start(3);
    let out = output(&mut redlock(
        &cluster,
        &["run", "code", "--", "sh", "-c", "exit 7"],
    ));
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let out = output(&mut redlock(
        &cluster,
        &["run", "code", "--", "sh", "-c", "kill -TERM $$"],
    ));
    assert_eq!(out.status.code(), Some(128 + 15), "{out:?}");

    // While the command runs, `status` sees its token on every master.
    let token_file = temp_file("token");
    let script = format!(
        "echo \"$REDLOCK_RESOURCE $REDLOCK_TOKEN\" > {}; sleep 2",
        token_file.display()
    );
    let mut running = redlock(&cluster, &["run", "seen", "--", "sh", "-c", &script])
        .spawn()
        .expect("spawn");
    assert!(
        eventually(Duration::from_secs(5), || fs::read_to_string(&token_file)
            .is_ok_and(|t| t.ends_with('\n'))),
        "the command never wrote its token"
    );
    let text = fs::read_to_string(&token_file).expect("token");
    let (resource, token) = text.trim().split_once(' ').expect("two words");
    assert_eq!(resource, "seen");
    assert_eq!(token.len(), 40, "{token}");
    let out = output(&mut redlock(
        &cluster,
        &["status", "seen", "--token", token],
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout.matches("held by the given token").count(),
        3,
        "{stdout}"
    );
    let other = "00".repeat(20);
    let out = output(&mut redlock(
        &cluster,
        &["status", "seen", "--token", &other],
    ));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(running.wait().expect("wait").code(), Some(0));
    let out = output(&mut redlock(&cluster, &["status", "seen"]));
    assert_eq!(out.status.code(), Some(1), "released: {out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches(": free")
            .count(),
        3
    );
    let _ = fs::remove_file(token_file);
}

/// The lock is deleted under a running command: the command is stopped
/// (SIGTERM) and `redlock` exits with the lost status.
#[test]
fn a_lost_lock_stops_the_command() {
    let cluster = Cluster::start(3);
    let marker = temp_file("lost");
    let ready = temp_file("lost-ready");
    // The command says when its trap is set: the loss is reported within
    // milliseconds of the deletion, which must not come before the trap.
    let script = format!(
        "trap 'echo terminated > {}; exit 0' TERM; echo ready > {}; while true; do sleep 0.05; done",
        marker.display(),
        ready.display()
    );
    let started = Instant::now();
    let mut running = redlock(
        &cluster,
        &[
            "run", "--ttl", "1500ms", "doomed", "--", "sh", "-c", &script,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    assert!(
        eventually(Duration::from_secs(5), || cluster.exists(0, "doomed")),
        "never locked"
    );
    assert!(
        eventually(Duration::from_secs(5), || fs::read_to_string(&ready)
            .is_ok()),
        "the command never set its trap"
    );
    for i in 0..3 {
        cluster.command(i, &[b"DEL", b"doomed"]);
    }
    let deleted = Instant::now();
    let status = running.wait().expect("wait");
    assert_eq!(status.code(), Some(75), "{status:?}");
    // One extension period (500 ms) plus a request timeout, and some slack.
    assert!(
        deleted.elapsed() < Duration::from_secs(3),
        "{:?}",
        deleted.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(2), || fs::read_to_string(&marker)
            .is_ok_and(|t| t.contains("terminated"))),
        "the command did not get SIGTERM"
    );
    println!(
        "lost and stopped {:?} after the deletion ({:?} in all)",
        deleted.elapsed(),
        started.elapsed()
    );
    let _ = fs::remove_file(marker);
    let _ = fs::remove_file(ready);
}

#[test]
fn usage_errors() {
    let out = output(
        Command::new(BIN)
            .env_remove("REDLOCK_SERVERS")
            .args(["run", "r", "--", "true"]),
    );
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let out = output(
        Command::new(BIN)
            .env("REDLOCK_SERVERS", "redis://127.0.0.1:1")
            .args(["run", "--ttl", "5 parsecs", "r", "--", "true"]),
    );
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"));
}

/// `rediss://` masters signed by a private CA: `run` and `status` with
/// `--ca-file`, and a clear refusal without it.
#[test]
fn tls_masters_with_a_private_ca() {
    let dir = std::env::temp_dir().join(format!("redlock-cli-tls-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    let pki = support::pki::Pki::new("redlock-cli test CA");
    let server = pki.issue(&["localhost"], false);
    let (_clusters, urls) = pki.tls_nodes(&dir, &server, 3, false);
    let ca = dir.join("ca.crt");
    let tls = |args: &[&str]| {
        let mut command = Command::new(BIN);
        command
            .env("REDLOCK_SERVERS", urls.join(","))
            .env_remove("REDLOCK_PASSWORD")
            .arg("--ca-file")
            .arg(&ca)
            .args(args);
        command
    };
    let token_file = dir.join("token");
    let script = format!("echo $REDLOCK_TOKEN > {}; sleep 1", token_file.display());
    let mut running = tls(&["run", "tls", "--", "sh", "-c", &script])
        .spawn()
        .expect("spawn");
    assert!(
        eventually(Duration::from_secs(5), || fs::read_to_string(&token_file)
            .is_ok_and(|t| t.ends_with('\n'))),
        "the command never ran"
    );
    let token = fs::read_to_string(&token_file).expect("token");
    let out = output(&mut tls(&["status", "tls", "--token", token.trim()]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{out:?}");
    assert_eq!(
        stdout.matches("held by the given token").count(),
        3,
        "{stdout}"
    );
    assert!(stdout.contains("rediss://"), "{stdout}");
    assert_eq!(running.wait().expect("wait").code(), Some(0));

    // Without the CA, the servers' certificates are refused.
    let out = output(
        Command::new(BIN)
            .env("REDLOCK_SERVERS", urls.join(","))
            .env_remove("REDLOCK_CA_FILE")
            .args(["run", "tls", "--", "true"]),
    );
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("TLS failed"), "{stderr}");
    println!("{stderr}");
    let _ = fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------
// The command's process group: signals, a lost lock, a killed `redlock`.
// ---------------------------------------------------------------------------

/// Whether process `pid` is alive: it exists and is not a zombie (a dead
/// process whose parent, init here once orphaned, has not reaped it).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the command name, which is
        // in parentheses and may hold spaces.
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// The pid a command wrote to `path` (a line ending in a newline, so that
/// a half-written file is not read), waiting for it a bounded time.
fn read_pid(path: &Path) -> i32 {
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            pid = fs::read_to_string(path)
                .ok()
                .filter(|t| t.ends_with('\n'))
                .and_then(|t| t.trim().parse().ok());
            pid.is_some()
        }),
        "no pid in {}",
        path.display()
    );
    pid.expect("checked")
}

fn send(pid: u32, signal: i32) {
    let pid = i32::try_from(pid).expect("a pid");
    // SAFETY: kill with a child of this test, not yet reaped.
    assert_eq!(
        unsafe { libc::kill(pid, signal) },
        0,
        "kill({pid}, {signal})"
    );
}

/// What `redlock` wrote to its piped stderr. Read only after the test
/// has killed what it checked: the command's processes hold the pipe open
/// too.
fn stderr_of(running: &mut std::process::Child) -> String {
    let mut text = String::new();
    if let Some(mut pipe) = running.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
    }
    text
}

/// Kills what a failed test may leave running.
fn cleanup(pids: &[i32]) {
    for &pid in pids {
        if alive(pid) {
            // SAFETY: kill with a pid this test read from its command.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Files for a command that starts a grandchild ignoring SIGTERM, SIGINT
/// and SIGHUP (it must get SIGKILL), and the `sh -c` script doing it: the
/// leader writes its pid to `leader`, the grandchild to `grandchild`.
struct Family {
    leader: PathBuf,
    grandchild: PathBuf,
    script: String,
}

impl Family {
    fn new(name: &str) -> Family {
        let leader = temp_file(&format!("{name}-leader"));
        let grandchild = temp_file(&format!("{name}-grandchild"));
        let script = format!(
            "sh -c 'trap \"\" TERM INT HUP; echo $$ > {g}; exec sleep 60' & echo $$ > {l}; wait",
            g = grandchild.display(),
            l = leader.display()
        );
        Family {
            leader,
            grandchild,
            script,
        }
    }

    /// Both pids, once both are written.
    fn pids(&self) -> [i32; 2] {
        [read_pid(&self.leader), read_pid(&self.grandchild)]
    }
}

impl Drop for Family {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.leader);
        let _ = fs::remove_file(&self.grandchild);
    }
}

/// SIGTERM, SIGINT or SIGHUP to `redlock` while the command runs: the
/// signal goes to the command's whole group, the grandchild that ignores
/// it gets SIGKILL after the grace, `redlock` exits only then, with
/// 128 + N, and the lock is released.
#[test]
fn a_signal_to_redlock_stops_the_whole_group_then_releases() {
    let cluster = Cluster::start(3);
    for (signal, name) in [
        (libc::SIGTERM, "term"),
        (libc::SIGINT, "int"),
        (libc::SIGHUP, "hup"),
    ] {
        let family = Family::new(name);
        let resource = format!("signalled-{name}");
        let mut running = redlock(
            &cluster,
            &[
                "run",
                "--ttl",
                "5s",
                "--grace",
                "500ms",
                &resource,
                "--",
                "sh",
                "-c",
                &family.script,
            ],
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
        let pids = family.pids();
        assert!(pids.iter().all(|&pid| alive(pid)));
        for i in 0..3 {
            assert!(cluster.exists(i, &resource), "locked on node {i}");
        }
        send(running.id(), signal);
        let status = running.wait().expect("wait");
        let left: Vec<i32> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
        cleanup(&pids);
        let stderr = stderr_of(&mut running);
        assert_eq!(
            status.code(),
            Some(128 + signal),
            "{name}: {status:?}\n{stderr}"
        );
        assert!(
            left.is_empty(),
            "{name}: still running after redlock exited: {left:?} of {pids:?}\n{stderr}"
        );
        assert!(stderr.contains("SIGKILL"), "{name}: {stderr}");
        support::check::assert_gone(
            &cluster,
            &[0, 1, 2],
            resource.as_bytes(),
            Duration::from_secs(5),
        );
    }
}

/// `redlock` killed by SIGKILL: on Linux the command dies with it.
#[cfg(target_os = "linux")]
#[test]
fn the_command_dies_with_a_killed_redlock() {
    let cluster = Cluster::start(3);
    let pid_file = temp_file("orphan");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut running = redlock(&cluster, &["run", "orphan", "--", "sh", "-c", &script])
        .spawn()
        .expect("spawn");
    let pid = read_pid(&pid_file);
    assert!(alive(pid));
    send(running.id(), libc::SIGKILL);
    let status = running.wait().expect("wait");
    assert_eq!(status.code(), None, "killed: {status:?}");
    let died = eventually(Duration::from_secs(10), || !alive(pid));
    cleanup(&[pid]);
    let _ = fs::remove_file(pid_file);
    assert!(died, "the command {pid} outlived redlock");
}

/// The lock is deleted on every master under a running command: the whole
/// group is stopped (the grandchild that ignores SIGTERM gets SIGKILL)
/// before `redlock` exits with the lost status.
#[test]
fn a_lost_lock_stops_the_whole_group() {
    let cluster = Cluster::start(3);
    let family = Family::new("lost-group");
    let mut running = redlock(
        &cluster,
        &[
            "run",
            "--ttl",
            "1500ms",
            "--grace",
            "500ms",
            "lost-group",
            "--",
            "sh",
            "-c",
            &family.script,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    let pids = family.pids();
    for i in 0..3 {
        cluster.flushall(i);
    }
    let status = running.wait().expect("wait");
    let left: Vec<i32> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
    cleanup(&pids);
    let stderr = stderr_of(&mut running);
    assert_eq!(status.code(), Some(75), "{status:?}\n{stderr}");
    assert!(
        left.is_empty(),
        "still running after redlock exited: {left:?} of {pids:?}\n{stderr}"
    );
}

/// A command that exits leaving a process in its group: that process is
/// stopped before the lock is released; the exit status is the command's.
#[test]
fn processes_left_behind_are_stopped_before_the_release() {
    let cluster = Cluster::start(3);
    let grandchild = temp_file("left-behind");
    let script = format!(
        "sh -c 'trap \"\" TERM; echo $$ > {0}; exec sleep 60' & \
         while [ ! -s {0} ]; do sleep 0.01; done; exit 3",
        grandchild.display()
    );
    let mut running = redlock(
        &cluster,
        &[
            "run",
            "--grace",
            "300ms",
            "left-behind",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    let status = running.wait().expect("wait");
    let pid = read_pid(&grandchild);
    let left = alive(pid);
    cleanup(&[pid]);
    let _ = fs::remove_file(grandchild);
    let stderr = stderr_of(&mut running);
    assert_eq!(status.code(), Some(3), "{status:?}\n{stderr}");
    assert!(!left, "{pid} still runs without the lock\n{stderr}");
    for i in 0..3 {
        assert!(!cluster.exists(i, "left-behind"), "released");
    }
}

/// Run from a terminal, the command gets the terminal: it reads a line
/// typed there, and Ctrl-C reaches it (not `redlock`, which then reports
/// the command's own status).
#[cfg(target_os = "linux")]
#[test]
fn the_command_gets_the_terminal() {
    use std::ffi::CString;
    use std::io::Write;
    use std::os::fd::{FromRawFd, OwnedFd};

    let cluster = Cluster::start(3);
    // SAFETY: posix_openpt, grantpt, unlockpt, ptsname_r on the new
    // master, with a buffer of the size given.
    let (master, slave) = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt");
        let master = OwnedFd::from_raw_fd(fd);
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
        (
            master,
            CString::from(std::ffi::CStr::from_ptr(name.as_ptr())),
        )
    };
    let line_file = temp_file("tty-line");
    let pid_file = temp_file("tty-pid");
    let script = format!(
        "read line; echo \"$line\" > {}; echo $$ > {}; exec sleep 60",
        line_file.display(),
        pid_file.display()
    );
    let mut command = redlock(&cluster, &["run", "tty", "--", "sh", "-c", &script]);
    command.stdin(Stdio::inherit()).stderr(Stdio::piped());
    // SAFETY: setsid, open, ioctl, dup2, close: async-signal-safe; the
    // path was made before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::open(slave.as_ptr(), libc::O_RDWR);
            if fd < 0 || libc::ioctl(fd, libc::TIOCSCTTY, 0) != 0 || libc::dup2(fd, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            Ok(())
        });
    }
    let mut running = command.spawn().expect("spawn");
    let mut terminal = fs::File::from(master);
    terminal.write_all(b"typed\n").expect("type");
    let read = eventually(Duration::from_secs(10), || {
        fs::read_to_string(&line_file).is_ok_and(|t| t == "typed\n")
    });
    let pid = if read { read_pid(&pid_file) } else { 0 };
    if read {
        // Ctrl-C, through the terminal's line discipline.
        terminal.write_all(b"\x03").expect("type");
    } else {
        send(running.id(), libc::SIGKILL);
    }
    let status = running.wait().expect("wait");
    cleanup(&[pid]);
    let stderr = stderr_of(&mut running);
    let _ = fs::remove_file(line_file);
    let _ = fs::remove_file(pid_file);
    assert!(read, "the command could not read the terminal\n{stderr}");
    assert_eq!(
        status.code(),
        Some(128 + libc::SIGINT),
        "{status:?}\n{stderr}"
    );
    for i in 0..3 {
        assert!(!cluster.exists(i, "tty"), "released");
    }
}

// ---------------------------------------------------------------------------
// Options, exit statuses, help.
// ---------------------------------------------------------------------------

/// The masters' addresses without a password.
fn bare_urls(cluster: &Cluster) -> Vec<String> {
    cluster
        .addrs()
        .iter()
        .map(|a| format!("redis://{}", a.socket_addr().expect("TCP")))
        .collect()
}

/// A wrong or missing password is the configuration (78), for `run` and
/// `status`; the password is never printed.
#[test]
fn a_wrong_password_is_a_configuration_error() {
    let cluster = ClusterOptions::new(3).password("right-pw").start();
    let urls = bare_urls(&cluster).join(",");
    for password in [Some("hunter2-wrong"), None] {
        for args in [&["run", "pw", "--", "true"][..], &["status", "pw"]] {
            let mut command = Command::new(BIN);
            command
                .env("REDLOCK_SERVERS", &urls)
                .env_remove("REDLOCK_PASSWORD")
                .args(args);
            if let Some(password) = password {
                command.env("REDLOCK_PASSWORD", password);
            }
            let out = output(&mut command);
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(78), "{password:?} {args:?}: {text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
    }
    let out = output(
        Command::new(BIN)
            .env("REDLOCK_SERVERS", &urls)
            .env("REDLOCK_PASSWORD", "right-pw")
            .args(["run", "pw", "--", "true"]),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A mistyped address or a master listed twice is bad usage (64), for
/// `run` and `status`, and nothing is run.
#[test]
fn bad_or_duplicate_addresses_are_usage_errors() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let marker = temp_file("never-run");
    let touch = format!("touch {}", marker.display());
    for servers in [
        format!("{},{},redis://127.0.0.1:99999", urls[0], urls[1]),
        format!("{},{},http://127.0.0.1:6379", urls[0], urls[1]),
        format!("{},{},{}", urls[0], urls[1], urls[0]),
    ] {
        for args in [
            &["run", "addr", "--", "sh", "-c", &touch][..],
            &["status", "addr"],
        ] {
            let out = output(
                Command::new(BIN)
                    .env("REDLOCK_SERVERS", &servers)
                    .env_remove("REDLOCK_PASSWORD")
                    .args(args),
            );
            assert_eq!(out.status.code(), Some(64), "{servers} {args:?}: {out:?}");
        }
    }
    assert!(!marker.exists(), "the command ran");
}

/// The global options are accepted after the subcommand too.
#[test]
fn global_options_after_the_subcommand() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls().join(",");
    let out = output(Command::new(BIN).env_remove("REDLOCK_SERVERS").args([
        "run",
        "--servers",
        &urls,
        "--request-timeout",
        "300ms",
        "after",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = output(Command::new(BIN).env_remove("REDLOCK_SERVERS").args([
        "status",
        "after",
        "--servers",
        &urls,
    ]));
    assert_eq!(out.status.code(), Some(1), "free: {out:?}");
}

/// A request timeout longer than the library's default stall timeout is
/// accepted: nothing in the CLI sets a conflicting one.
#[test]
fn a_long_request_timeout_builds() {
    let cluster = Cluster::start(3);
    let out = output(&mut redlock(
        &cluster,
        &[
            "--request-timeout",
            "2s",
            "run",
            "--ttl",
            "10s",
            "slow",
            "--",
            "true",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// `--help` of `redlock` and of `run` lists the exit statuses, the
/// environment redlock reads and what the command gets.
#[test]
fn help_lists_exit_statuses_and_environment() {
    for args in [&["--help"][..], &["run", "--help"], &["status", "--help"]] {
        let out = output(Command::new(BIN).args(args));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        for needle in [
            "Exit status",
            "64",
            "69",
            "75",
            "78",
            "143",
            "REDLOCK_SERVERS",
            "REDLOCK_PASSWORD",
            "REDLOCK_RESOURCE",
            "REDLOCK_TOKEN",
            "REDLOCK_FENCE",
            // The TLS options apart, and the TLS scheme among the address forms.
            "TLS options (rediss:// masters):",
            "rediss://… (TLS",
        ] {
            assert!(help.contains(needle), "{args:?}: no {needle:?} in\n{help}");
        }
        let tls = help
            .find("TLS options (rediss:// masters):")
            .expect("a TLS heading");
        for option in ["--ca-file", "--cert", "--key"] {
            let at = help.find(option).expect("the option is listed");
            assert!(
                at > tls,
                "{args:?}: {option} listed before the TLS heading:\n{help}"
            );
        }
    }
}

/// `--wait` with the lock held throughout: `redlock` gives up only once
/// the whole wait has passed (a lower bound, which load cannot break).
#[test]
fn wait_uses_its_whole_budget() {
    let cluster = Cluster::start(3);
    let holder = Redlock::builder(cluster.urls()).build().expect("build");
    let _lock = holder
        .try_lock("awaited", Duration::from_secs(30))
        .expect("free");
    let wait = Duration::from_millis(1500);
    let started = Instant::now();
    let out = output(&mut redlock(
        &cluster,
        &["run", "--wait", "1500ms", "awaited", "--", "true"],
    ));
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(took >= wait, "gave up after {took:?} of {wait:?}");
}

/// `--wait` and a lock released by its holder shortly before the end of
/// the wait: the lock is taken. The release is checked to have happened
/// before the wait ended (`redlock` starts its wait after it was spawned);
/// a trial where the test itself ran late is not counted.
#[test]
fn wait_takes_a_lock_released_near_its_end() {
    let cluster = Cluster::start(3);
    let holder = Redlock::builder(cluster.urls()).build().expect("build");
    let wait = Duration::from_secs(2);
    let mut counted = 0;
    for trial in 0..5 {
        let resource = format!("late-{trial}");
        let marker = temp_file(&format!("late-{trial}"));
        let mut lock = holder
            .try_lock(&resource, Duration::from_secs(30))
            .expect("free");
        let touch = format!("touch {}", marker.display());
        let spawned = Instant::now();
        let running = redlock(
            &cluster,
            &["run", "--wait", "2s", &resource, "--", "sh", "-c", &touch],
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
        thread::sleep(wait - Duration::from_millis(300));
        holder.unlock(&mut lock).expect("released");
        let released_in_time = spawned.elapsed() < wait;
        let out = running.wait_with_output().expect("wait");
        if !released_in_time {
            continue;
        }
        counted += 1;
        assert_eq!(out.status.code(), Some(0), "trial {trial}: {out:?}");
        assert!(marker.exists(), "trial {trial}: the command did not run");
        let _ = fs::remove_file(marker);
    }
    assert!(counted > 0, "the test never released in time");
}

/// An address where nothing listens: a port bound, then freed.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    format!("redis://127.0.0.1:{port}")
}

/// The messages say what happened and what to change: a master that
/// refuses connections is worded the same by `run` and `status`; the
/// count of masters is grammatical; a TTL shorter than the request
/// timeout names the default and the flag; a wait that ran out says how
/// long it waited.
#[test]
fn messages_name_what_happened_and_the_fix() {
    let refused = "connection refused: no server listens there";
    let down = closed_port();
    let stderr_of = |args: &[&str], servers: &str| {
        let out = output(
            Command::new(BIN)
                .env("REDLOCK_SERVERS", servers)
                .env_remove("REDLOCK_PASSWORD")
                .args(args),
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, run) = stderr_of(&["run", "r", "--", "true"], &down);
    assert_eq!(code, Some(69), "{run}");
    assert!(run.contains(&format!("{down}: {refused}")), "{run}");
    assert!(
        run.contains("0 of 1 master completed the handshake"),
        "{run}"
    );
    assert!(!run.contains("1 masters"), "{run}");
    let (code, status) = stderr_of(&["status", "r"], &down);
    assert_eq!(code, Some(69), "{status}");
    assert!(status.contains(&format!("{down}: {refused}")), "{status}");

    let cluster = Cluster::start(3);
    let servers = cluster.urls().join(",");
    let (code, text) = stderr_of(&["run", "--ttl", "100ms", "r", "--", "true"], &servers);
    assert_eq!(code, Some(64), "{text}");
    for needle in [
        "--ttl 100ms",
        "longer than the request timeout, 200ms",
        "the default of --request-timeout",
        "a shorter --request-timeout",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from {text}");
    }

    let holder = Redlock::builder(cluster.urls()).build().expect("build");
    let mut held = holder
        .try_lock("waited", Duration::from_secs(30))
        .expect("free");
    let (code, text) = stderr_of(
        &["run", "--wait", "300ms", "waited", "--", "true"],
        &servers,
    );
    holder.unlock(&mut held).expect("released");
    assert_eq!(code, Some(1), "{text}");
    for needle in [
        "held by another client",
        "after waiting",
        "ms, the last attempt in",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from {text}");
    }
}
