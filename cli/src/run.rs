//! `redlock run`: take the lock, run the command under it, release.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use libc::c_int;
use redlock_mio::{Error, KeepOptions, Lock, Redlock, Require};

use crate::duration::parse_duration;
use crate::process::{self, End, Group};
use crate::{EX_CONFIG, EX_OSERR, EX_UNAVAILABLE, EX_USAGE, config_exit_code, tls};

/// The pause between two attempts while waiting for the lock: this plus a
/// random part of up to [`RETRY_JITTER`], so that waiters spread out.
const RETRY_DELAY: Duration = Duration::from_millis(200);
/// See [`RETRY_DELAY`].
const RETRY_JITTER: Duration = Duration::from_millis(100);
/// How often a pause looks for a caught signal.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// The options of `run`.
#[derive(clap::Args, Debug)]
pub(crate) struct RunArgs {
    /// Lock TTL; the lock is extended every TTL/3 while COMMAND runs.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to keep trying for the lock once connected (0: one
    /// attempt). Attempts go on until this has passed: the last one starts
    /// then at the latest, and takes up to a request timeout.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    wait: Duration,
    /// When the command's process group is stopped (a signal to redlock,
    /// a lost lock, processes left behind): how long after SIGTERM (or the
    /// signal) before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    grace: Duration,
    /// Give the command a fence (`REDLOCK_FENCE`), one more round trip.
    #[arg(long)]
    fence: bool,
    /// With `--fence`: the longest TTL any fenced client uses on these
    /// masters. Every fenced client of a deployment must give the same
    /// value (the masters keep it and refuse a client that differs), and
    /// `--ttl` may not exceed it.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    longest_ttl: Duration,
    /// Exit status when the lock cannot be taken.
    #[arg(long, default_value_t = 1)]
    conflict_exit_code: u8,
    /// Exit status when the lock is lost while COMMAND runs.
    #[arg(long, default_value_t = 75)]
    lost_exit_code: u8,
    /// The resource to lock.
    resource: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Why no lock was taken.
enum NoLock {
    /// The last attempt's error.
    Error(Error),
    /// `redlock` got this signal while waiting.
    Signal(c_int),
}

/// The exit status for signal `signo` caught by `redlock`: 128 + N, as a
/// shell reports a process that signal N ended.
fn signal_exit_code(signo: c_int) -> u8 {
    u8::try_from((128 + signo) & 0xff).unwrap_or(1)
}

/// Runs `args.command` under the lock; the exit status.
pub(crate) fn run(
    urls: &[String],
    request_timeout: Duration,
    tls: Option<tls::Config>,
    args: &RunArgs,
) -> u8 {
    // From here on SIGINT, SIGTERM and SIGHUP no longer end redlock: they
    // are taken into account where it is safe (between attempts, before
    // the command starts, while it runs).
    if let Err(e) = process::catch_signals() {
        eprintln!("redlock: cannot catch signals: {e}");
        return EX_OSERR;
    }
    let mut builder = Redlock::builder(urls)
        .request_timeout(request_timeout)
        .require_handshakes(Require::Quorum);
    if let Some(config) = tls {
        builder = builder.tls_config(config);
    }
    if args.fence {
        builder = builder.fencing(args.longest_ttl);
    }
    let client = match builder.build() {
        Ok(client) => client,
        Err(e) => {
            eprintln!("redlock: {e}");
            return config_exit_code(&e);
        }
    };
    let lock = match acquire(&client, args) {
        Ok(lock) => lock,
        Err(NoLock::Signal(signo)) => {
            eprintln!(
                "redlock: got {} while waiting for the lock",
                process::signal_name(signo)
            );
            return signal_exit_code(signo);
        }
        Err(NoLock::Error(e)) => {
            eprintln!("redlock: could not lock {:?}: {e}", args.resource);
            return match e {
                Error::Misconfigured(_) => EX_CONFIG,
                Error::Unavailable(_) => EX_UNAVAILABLE,
                Error::InvalidTtl { .. }
                | Error::InvalidResource { .. }
                | Error::ReservedResource => EX_USAGE,
                Error::Io(_) => EX_OSERR,
                _ => args.conflict_exit_code,
            };
        }
    };
    let token: String = lock.token().iter().map(|b| format!("{b:02x}")).collect();
    let fence = lock.fence().map(|f| f.to_string());
    let keeper = match client.keep(lock, KeepOptions::new(args.ttl)) {
        Ok(keeper) => keeper,
        Err(e) => {
            eprintln!("redlock: could not keep the lock: {e}");
            return args.lost_exit_code;
        }
    };
    let release = |keeper: redlock_mio::Keeper| {
        if let Err(e) = keeper.release() {
            eprintln!("redlock: release: {e}");
        }
    };
    if let Some(signo) = process::take_signals().next() {
        eprintln!(
            "redlock: got {} before the command started",
            process::signal_name(signo)
        );
        release(keeper);
        return signal_exit_code(signo);
    }
    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => return EX_USAGE,
    };
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("REDLOCK_RESOURCE", &args.resource)
        .env("REDLOCK_TOKEN", &token);
    if let Some(fence) = &fence {
        command.env("REDLOCK_FENCE", fence);
    }
    let mut group = match Group::spawn(&mut command) {
        Ok(group) => group,
        Err(e) => {
            eprintln!("redlock: cannot run {program:?}: {e}");
            release(keeper);
            // As a shell: 127 for a command not found, 126 for one that
            // cannot be run.
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let end = group.supervise(&keeper, args.grace);
    if end == End::Lost {
        // Whatever is left of it is no longer this lock's: nothing to say.
        let _ = keeper.release();
    } else {
        release(keeper);
    }
    match end {
        End::Exited(code) => code,
        End::Signalled(signo) => signal_exit_code(signo),
        End::Lost => args.lost_exit_code,
    }
}

/// Tries for the lock until `--wait` has passed: one attempt, and then,
/// while the deadline has not passed, another after each pause (cut short
/// at the deadline), so that the last attempt starts at the deadline at the
/// latest. A caught signal ends the wait.
fn acquire(client: &Redlock, args: &RunArgs) -> Result<Lock, NoLock> {
    // Taken once connected, so that connecting does not eat into the wait.
    let deadline = Instant::now().checked_add(args.wait);
    loop {
        if let Some(signo) = process::take_signals().next() {
            return Err(NoLock::Signal(signo));
        }
        let error = match client.try_lock(&args.resource, args.ttl) {
            Ok(lock) => return Ok(lock),
            Err(error) => error,
        };
        if !error.is_retryable() {
            return Err(NoLock::Error(error));
        }
        let now = Instant::now();
        let left = match deadline {
            Some(deadline) => deadline.saturating_duration_since(now),
            None => Duration::MAX,
        };
        if left.is_zero() {
            return Err(match process::take_signals().next() {
                Some(signo) => NoLock::Signal(signo),
                None => NoLock::Error(error),
            });
        }
        let pause_until = now + retry_delay().min(left);
        while let Some(pause) = pause_until.checked_duration_since(Instant::now()) {
            if pause.is_zero() {
                break;
            }
            if let Some(signo) = process::take_signals().next() {
                return Err(NoLock::Signal(signo));
            }
            thread::sleep(pause.min(SIGNAL_POLL));
        }
    }
}

/// [`RETRY_DELAY`] plus a random part of [`RETRY_JITTER`] at most.
fn retry_delay() -> Duration {
    // A hasher with random keys: randomness enough for a jitter, without a
    // dependency.
    let random = RandomState::new().hash_one(Instant::now());
    let jitter_us = u64::try_from(RETRY_JITTER.as_micros()).unwrap_or(0);
    RETRY_DELAY + Duration::from_micros(random % jitter_us.max(1))
}
