//! `redlock run`: take the lock, run the command under it, release.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::process::{Child, Command, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::{Error, KeepOptions, Lock, Redlock, Require};

use crate::duration::parse_duration;
use crate::{EX_CONFIG, EX_OSERR, EX_UNAVAILABLE, EX_USAGE, config_exit_code, tls};

/// The pause between two attempts while waiting for the lock: this plus a
/// random part of up to [`RETRY_JITTER`], so that waiters spread out.
const RETRY_DELAY: Duration = Duration::from_millis(200);
/// See [`RETRY_DELAY`].
const RETRY_JITTER: Duration = Duration::from_millis(100);

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
    /// After SIGTERM on loss, how long before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    grace: Duration,
    /// Give the command a fence (`REDLOCK_FENCE`), one more round trip.
    #[arg(long)]
    fence: bool,
    /// With `--fence`: the longest TTL any fenced client uses on these
    /// masters (default: the larger of `--ttl` and 5m).
    #[arg(long, value_parser = parse_duration)]
    longest_ttl: Option<Duration>,
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

/// Runs `args.command` under the lock; the exit status.
pub(crate) fn run(
    urls: &[String],
    request_timeout: Duration,
    tls: Option<tls::Config>,
    args: &RunArgs,
) -> u8 {
    let mut builder = Redlock::builder(urls)
        .request_timeout(request_timeout)
        .require_handshakes(Require::Quorum);
    if let Some(config) = tls {
        builder = builder.tls_config(config);
    }
    if args.fence {
        let longest = args
            .longest_ttl
            .unwrap_or(args.ttl.max(Duration::from_secs(300)));
        builder = builder.fencing(longest);
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
        Err(e) => {
            eprintln!("redlock: could not lock {:?}: {e}", args.resource);
            return match e {
                Error::Misconfigured(_) => EX_CONFIG,
                Error::Unavailable(_) => EX_UNAVAILABLE,
                Error::InvalidTtl { .. } | Error::InvalidResource { .. } => EX_USAGE,
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
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("redlock: cannot run {program:?}: {e}");
            let _ = keeper.release();
            return 127;
        }
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let (_, released) = keeper.release();
                if let Err(e) = released {
                    eprintln!("redlock: release: {e}");
                }
                return exit_code(status);
            }
            Ok(None) => {}
            Err(e) => eprintln!("redlock: waiting for the command: {e}"),
        }
        if keeper.wait_lost(Duration::from_millis(20)) {
            eprintln!(
                "redlock: lost the lock on {:?}; stopping the command",
                args.resource
            );
            stop(&mut child, args.grace);
            let _ = keeper.release();
            return args.lost_exit_code;
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`; waits for the child.
fn stop(child: &mut Child, grace: Duration) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) with a pid this process spawned and has not
        // reaped yet (so the pid cannot have been reused) and a valid
        // signal number.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The command's exit code, or 128 + the signal that ended it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

/// Tries for the lock until `--wait` has passed: one attempt, and then,
/// while the deadline has not passed, another after each pause (cut short
/// at the deadline), so that the last attempt starts at the deadline at the
/// latest.
fn acquire(client: &Redlock, args: &RunArgs) -> Result<Lock, Error> {
    // Taken once connected, so that connecting does not eat into the wait.
    let deadline = Instant::now().checked_add(args.wait);
    loop {
        let error = match client.try_lock(&args.resource, args.ttl) {
            Ok(lock) => return Ok(lock),
            Err(error) => error,
        };
        if !error.is_retryable() {
            return Err(error);
        }
        let now = Instant::now();
        let left = match deadline {
            Some(deadline) => deadline.saturating_duration_since(now),
            None => Duration::MAX,
        };
        if left.is_zero() {
            return Err(error);
        }
        thread::sleep(retry_delay().min(left));
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
