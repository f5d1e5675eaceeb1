//! `redlock run`: take the lock, run the command under it, release.

use std::future::Future;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use libc::c_int;
use redlock_mio::{Error, KeepOptions, Lock, Redlock, Require};

use crate::duration::parse_duration;
use crate::process::{self, End, Group};
use crate::{EX_CONFIG, EX_OSERR, EX_UNAVAILABLE, EX_USAGE, config_exit_code, tls};

/// How often a wait for the lock looks for a caught signal.
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
    if let Err(message) = check_ttl(args.ttl, request_timeout) {
        eprintln!("redlock: {message}");
        return EX_USAGE;
    }
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
    let lock = match acquire(&client, args, request_timeout) {
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

/// Refuses a `--ttl` that is not longer than the request timeout before
/// anything connects, naming both flags (the library would refuse it too,
/// in its own words, after connecting).
fn check_ttl(ttl: Duration, request_timeout: Duration) -> Result<(), String> {
    if ttl > request_timeout {
        return Ok(());
    }
    let which =
        if crate::duration::parse_duration(crate::DEFAULT_REQUEST_TIMEOUT) == Ok(request_timeout) {
            "the default of --request-timeout"
        } else {
            "--request-timeout"
        };
    Err(format!(
        "--ttl {ttl:?} is too short: it must be longer than the request timeout, \
         {request_timeout:?} ({which}); give a longer --ttl, or a shorter --request-timeout"
    ))
}

/// Tries for the lock until `--wait` has passed: the last attempt starts
/// then at the latest. Between attempts the client waits as the library's
/// `lock_until` does: told by the release that hands it the lock, or until
/// the holder's key expires, or after a retry delay. A caught signal ends
/// the wait (the dropped call leaves the masters' queues).
fn acquire(client: &Redlock, args: &RunArgs, request_timeout: Duration) -> Result<Lock, NoLock> {
    if let Some(signo) = process::take_signals().next() {
        return Err(NoLock::Signal(signo));
    }
    // Taken once connected, so that connecting does not eat into the wait.
    // The library's last attempt fits its request timeout before the
    // deadline; this one's starts at the end of the wait.
    let now = Instant::now();
    let deadline = now
        .checked_add(args.wait)
        .and_then(|end| end.checked_add(request_timeout))
        .unwrap_or_else(|| now + FOREVER);
    match until_signal(client.lock_until_async(&args.resource, args.ttl, deadline)) {
        Ok(Ok(lock)) => Ok(lock),
        Ok(Err(error)) => Err(NoLock::Error(error)),
        Err(signo) => Err(NoLock::Signal(signo)),
    }
}

/// A wait longer than any `--wait` anyone gives.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Runs `future` on this thread until it completes, or until a signal is
/// caught: then it is dropped (a call of the library's async API is
/// cancelled as its docs say) and the signal returned.
fn until_signal<F: Future>(future: F) -> Result<F::Output, c_int> {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Ok(output);
        }
        if let Some(signo) = process::take_signals().next() {
            return Err(signo);
        }
        thread::park_timeout(SIGNAL_POLL);
    }
}
