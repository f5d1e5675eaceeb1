//! `redlock`: a distributed `flock(1)` over N independent Redis masters,
//! built on `redlock-mio`.
//!
//! ```text
//! redlock [--servers URL,...] run [--ttl 30s] [--wait 10s] [--fence] RESOURCE -- COMMAND [ARG...]
//! redlock [--servers URL,...] status RESOURCE [--token HEX]
//! ```
//!
//! `run` acquires RESOURCE, runs COMMAND with the lock kept alive in the
//! background (extended every TTL/3), and releases it when the command
//! exits. The command gets `REDLOCK_RESOURCE` and `REDLOCK_TOKEN` (the
//! lock's token, hex) in its environment, and with `--fence`
//! `REDLOCK_FENCE`: a number larger for every later holder of RESOURCE,
//! for the command to send with its writes so that the store can refuse a
//! holder whose lock ran out (see `redlock_mio::fencing`; every client of
//! RESOURCE must then use `--fence`). If the lock is lost while the
//! command runs, the command gets SIGTERM, then SIGKILL after the grace
//! period.
//!
//! Exit status: the command's own (128 + N if a signal N ended it); 1 if the
//! lock could not be taken (`--conflict-exit-code`, as `flock -n/-w`); 75 if
//! the lock was lost while the command ran (`--lost-exit-code`); 64 for bad
//! usage, 69 if no quorum of masters could be reached, 78 for a
//! configuration the masters refuse.
//!
//! Servers come from `--servers` or `REDLOCK_SERVERS` (commas or spaces
//! between addresses). `REDLOCK_PASSWORD`, if set, is the password of every
//! address that has none. Passwords are never printed.

mod duration;
mod status;
mod tls;

use std::process::{Child, Command, ExitCode, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use redlock_mio::{Error, KeepOptions, Redlock, Require};

use duration::parse_duration;

/// Exit status for bad usage (sysexits `EX_USAGE`).
const EX_USAGE: u8 = 64;
/// Exit status when no quorum of masters can be reached (`EX_UNAVAILABLE`).
const EX_UNAVAILABLE: u8 = 69;
/// Exit status when the masters refuse the configuration (`EX_CONFIG`).
const EX_CONFIG: u8 = 78;

/// A distributed flock(1) over N independent Redis masters (Redlock).
#[derive(Parser, Debug)]
#[command(name = "redlock", version)]
struct Cli {
    /// The masters: redis://[[user]:password@]host[:port][/db] or
    /// unix:///path?db=N, separated by commas or spaces.
    #[arg(long, env = "REDLOCK_SERVERS", hide_env_values = true)]
    servers: String,
    /// Time each master has to answer one round.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    request_timeout: Duration,
    /// For rediss:// masters: PEM file of the CA certificates to trust
    /// (default: the system's roots).
    #[arg(long, env = "REDLOCK_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// For rediss:// masters that ask for one: PEM client certificate
    /// (chain), with --key.
    #[arg(long, env = "REDLOCK_CERT", requires = "key")]
    cert: Option<std::path::PathBuf>,
    /// The client certificate's PEM private key.
    #[arg(long, env = "REDLOCK_KEY", requires = "cert")]
    key: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Sub,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Acquire RESOURCE, run COMMAND with the lock kept alive, release.
    Run(RunArgs),
    /// Show, per master, whether RESOURCE's key exists, its TTL, and
    /// whether it holds a given token.
    Status {
        /// The resource.
        resource: String,
        /// A token (hex, as `REDLOCK_TOKEN` gives it) to compare with.
        #[arg(long)]
        token: Option<String>,
    },
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Lock TTL; the lock is extended every TTL/3 while COMMAND runs.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to wait for the lock (0: one attempt).
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

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EX_USAGE } else { 0 });
        }
    };
    let urls = servers(
        &cli.servers,
        std::env::var("REDLOCK_PASSWORD").ok().as_deref(),
    );
    let tls = match tls::config(
        cli.ca_file.as_deref(),
        cli.cert.as_deref(),
        cli.key.as_deref(),
    ) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("redlock: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let code = match &cli.command {
        Sub::Run(args) => run(&urls, cli.request_timeout, tls, args),
        Sub::Status { resource, token } => {
            status::show(&urls, resource, token.as_deref(), tls.as_ref())
        }
    };
    ExitCode::from(code)
}

/// The addresses in `list`, with `password` given to those without one.
fn servers(list: &str, password: Option<&str>) -> Vec<String> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|url| match password {
            Some(pw) => with_password(url, pw),
            None => url.to_owned(),
        })
        .collect()
}

/// `url` with `password` if it has none (percent-encoded).
fn with_password(url: &str, password: &str) -> String {
    let encoded: String = password
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    for scheme in ["redis://", "rediss://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            return match rest.split_once('@') {
                Some((user, host)) if !user.contains(':') => {
                    format!("{scheme}{user}:{encoded}@{host}")
                }
                Some(_) => url.to_owned(),
                None => format!("{scheme}:{encoded}@{rest}"),
            };
        }
    }
    if let Some(rest) = url.strip_prefix("unix://") {
        if !rest.contains("pass=") && !rest.contains("password=") {
            let sep = if rest.contains('?') { '&' } else { '?' };
            return format!("unix://{rest}{sep}pass={encoded}");
        }
    }
    url.to_owned()
}

fn run(urls: &[String], request_timeout: Duration, tls: Option<tls::Config>, args: &RunArgs) -> u8 {
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
            return EX_UNAVAILABLE;
        }
    };
    let acquired = if args.wait.is_zero() {
        client.try_lock(&args.resource, args.ttl)
    } else {
        client.lock_until(&args.resource, args.ttl, Instant::now() + args.wait)
    };
    let lock = match acquired {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("redlock: could not lock {:?}: {e}", args.resource);
            return match e {
                Error::Misconfigured(_) => EX_CONFIG,
                Error::InvalidTtl { .. }
                | Error::InvalidResource { .. }
                | Error::ReservedResource => EX_USAGE,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_from_the_environment() {
        assert_eq!(
            servers("redis://h:1, redis://u@h:2 redis://:x@h:3", Some("p w")),
            [
                "redis://:p%20w@h:1",
                "redis://u:p%20w@h:2",
                "redis://:x@h:3"
            ]
        );
        assert_eq!(
            servers("unix:///s.sock?db=1,unix:///t.sock", Some("pw")),
            ["unix:///s.sock?db=1&pass=pw", "unix:///t.sock?pass=pw"]
        );
        assert_eq!(servers("redis://h:1", None), ["redis://h:1"]);
    }
}
