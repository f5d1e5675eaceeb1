//! The `redlock` binary end to end, against real `redis-server`s.

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::fs;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::Redlock;
use support::check::eventually;
use support::cluster::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_redlock");

fn redlock(cluster: &Cluster, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("REDLOCK_SERVERS", cluster.urls().join(","))
        .env_remove("REDLOCK_PASSWORD")
        .args(args);
    command
}

fn output(command: &mut Command) -> Output {
    command.output().expect("redlock runs")
}

fn temp_file(name: &str) -> std::path::PathBuf {
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
    let script = format!(
        "trap 'echo terminated > {}; exit 0' TERM; while true; do sleep 0.05; done",
        marker.display()
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
