//! `redlock`: a distributed `flock(1)` over N independent Redis masters,
//! built on `redlock-mio`.
//!
//! ```text
//! redlock [--servers URL,...] run [--ttl 30s] [--wait 10s] [--fence] RESOURCE -- COMMAND [ARG...]
//! redlock [--servers URL,...] status RESOURCE [--token HEX]
//! ```
//!
//! `run` acquires RESOURCE, runs COMMAND with the lock kept alive in the
//! background (extended every TTL/3), and releases it once nothing of the
//! command is left. The command gets `REDLOCK_RESOURCE` and `REDLOCK_TOKEN`
//! (the lock's token, hex) in its environment, and with `--fence`
//! `REDLOCK_FENCE`: a number larger for every later holder of RESOURCE,
//! for the command to send with its writes so that the store can refuse a
//! holder whose lock ran out (see `redlock_mio::fencing`; every client of
//! RESOURCE must then use `--fence`).
//!
//! The command runs in a process group of its own ([`process`]): SIGINT,
//! SIGTERM and SIGHUP to `redlock` are sent on to the group; a lost lock
//! sends it SIGTERM; processes the command leaves behind when it exits get
//! SIGTERM too. In each case the group gets SIGKILL after `--grace`, and
//! the lock is released only when the group is gone.
//!
//! The exit statuses and the environment are in [`AFTER_HELP`] (and
//! `--help`).

#[cfg(not(unix))]
compile_error!(
    "redlock runs on Unix only: it supervises the command as a process group, \
     and `status` reads Unix-socket masters"
);

mod duration;
mod process;
mod run;
mod status;
mod tls;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redlock_mio::{AddrError, ConfigError, ServerAddr};

use duration::parse_duration;

/// Exit status for bad usage (sysexits `EX_USAGE`): a bad option, server
/// address or duration, a server listed twice, no servers.
const EX_USAGE: u8 = 64;
/// Exit status when a server's host name does not resolve (`EX_NOHOST`).
const EX_NOHOST: u8 = 68;
/// Exit status when no quorum of masters can be reached (`EX_UNAVAILABLE`).
const EX_UNAVAILABLE: u8 = 69;
/// Exit status when the operating system refuses what is needed: the
/// event poller, signal handlers (`EX_OSERR`).
const EX_OSERR: u8 = 71;
/// Exit status when the masters refuse the configuration (`EX_CONFIG`).
const EX_CONFIG: u8 = 78;

/// The heading of the TLS options in `--help`: they apply to `rediss://`
/// masters only.
const TLS_HEADING: &str = "TLS options (rediss:// masters)";

/// `--request-timeout` when not given, as `--help` and the messages show
/// it.
const DEFAULT_REQUEST_TIMEOUT: &str = "200ms";

/// The end of `--help`: exit statuses and environment.
const AFTER_HELP: &str = "\
Exit status of run:
  (any)    the command's own exit status (128+N if signal N ended it)
  1        the lock could not be taken (--conflict-exit-code)
  75       the lock was lost while the command ran (--lost-exit-code)
  128+N    redlock got signal N (129 SIGHUP, 130 SIGINT, 143 SIGTERM), sent it
           to the command's process group and waited for the group to be gone
  126, 127 the command could not be run (126) or was not found (127)
Exit status of status:
  0        a quorum holds the key (with --token, that token)
  1        no quorum holds it
Exit status of both:
  64       bad usage: an option, a server address or a duration is wrong, a
           server is listed twice, no servers are given
  68       a server's host name does not resolve
  69       no quorum of masters could be reached
  71       an operating system error
  78       the masters refuse the configuration: a wrong or missing password,
           a missing ACL permission, a replica or cluster-mode node, a refused
           TLS certificate

Environment:
  REDLOCK_SERVERS    the masters, if --servers is not given
  REDLOCK_PASSWORD   the password of every address that has none
  REDLOCK_CA_FILE, REDLOCK_CERT, REDLOCK_KEY   as --ca-file, --cert, --key
The command gets, besides redlock's own environment:
  REDLOCK_RESOURCE   the resource
  REDLOCK_TOKEN      the lock's token, hex (for `redlock status --token`)
  REDLOCK_FENCE      with --fence: the lock's fence, a decimal number";

/// How `run` treats the command, at the end of `run --help`.
const RUN_AFTER_HELP: &str = "\
Signals: the command runs in a process group of its own. SIGINT, SIGTERM and
SIGHUP to redlock are sent on to the group; if the lock is lost, the group
gets SIGTERM; processes the command leaves in its group when it exits get
SIGTERM. Then, after --grace, SIGKILL; the lock is released once the group
is gone. On Linux the command (not what it started) also gets SIGKILL if
redlock dies, even by SIGKILL; on other systems it then runs on without the
lock. Processes that
leave the group (setsid, daemons) are not followed. From a terminal, the
command gets the terminal (it can read from it; Ctrl-C and Ctrl-Z reach it);
while it is stopped, the lock is not extended.";

/// A distributed flock(1) over N independent Redis or Valkey masters (Redlock).
#[derive(Parser, Debug)]
#[command(name = "redlock", version, after_help = AFTER_HELP)]
struct Cli {
    /// The masters, separated by commas or spaces (the forms in `--help`).
    #[arg(
        long,
        env = "REDLOCK_SERVERS",
        hide_env_values = true,
        global = true,
        help = "The masters, separated by commas or spaces: \
                redis://[[user]:password@]host[:port][/db], \
                rediss://… (TLS: see the TLS options), or unix:///path?db=N"
    )]
    servers: Option<String>,
    /// How long each master has to answer one request (an attempt at the
    /// lock, an extension, the release); --ttl must be longer.
    #[arg(long, default_value = DEFAULT_REQUEST_TIMEOUT, value_parser = parse_duration, global = true)]
    request_timeout: Duration,
    /// PEM file of the CA certificates that signed the masters'
    /// certificates (default: the system's roots).
    #[arg(long, env = "REDLOCK_CA_FILE", global = true, hide_env_values = true, help_heading = TLS_HEADING)]
    ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate (chain), for masters that ask for one; with
    /// --key.
    #[arg(long, env = "REDLOCK_CERT", requires = "key", global = true, hide_env_values = true, help_heading = TLS_HEADING)]
    cert: Option<std::path::PathBuf>,
    /// The client certificate's PEM private key.
    #[arg(long, env = "REDLOCK_KEY", requires = "cert", global = true, hide_env_values = true, help_heading = TLS_HEADING)]
    key: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Sub,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Acquire RESOURCE, run COMMAND with the lock kept alive, release.
    #[command(after_help = format!("{RUN_AFTER_HELP}\n\n{AFTER_HELP}"))]
    Run(run::RunArgs),
    /// Show, per master, whether RESOURCE's key exists, its TTL, and
    /// whether it holds a given token.
    #[command(after_help = AFTER_HELP)]
    Status {
        /// The resource.
        resource: String,
        /// A token (hex, as `REDLOCK_TOKEN` gives it) to compare with.
        #[arg(long)]
        token: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EX_USAGE } else { 0 });
        }
    };
    let Some(list) = cli.servers.as_deref() else {
        eprintln!("redlock: no servers: give --servers or set REDLOCK_SERVERS");
        return ExitCode::from(EX_USAGE);
    };
    let urls = servers(list, std::env::var("REDLOCK_PASSWORD").ok().as_deref());
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
        Sub::Run(args) => run::run(&urls, cli.request_timeout, tls, args),
        Sub::Status { resource, token } => match check_servers(&urls) {
            Ok(()) => status::show(&urls, resource, token.as_deref(), tls.as_ref()),
            Err(code) => code,
        },
    };
    ExitCode::from(code)
}

/// For `status` (which does not build a client): refuses an empty list, an address that does
/// not parse, and a master listed twice; the exit status if so.
fn check_servers(urls: &[String]) -> Result<(), u8> {
    if urls.is_empty() {
        eprintln!("redlock: no servers given");
        return Err(EX_USAGE);
    }
    let mut seen: Vec<ServerAddr> = Vec::with_capacity(urls.len());
    for (index, url) in urls.iter().enumerate() {
        match ServerAddr::parse(url) {
            Ok(addr) => {
                if let Some(first) = seen.iter().position(|a| a.endpoint() == addr.endpoint()) {
                    eprintln!("redlock: server #{index} is the same master as server #{first}");
                    return Err(EX_USAGE);
                }
                seen.push(addr);
            }
            Err(error) => {
                // The message never contains the password.
                eprintln!("redlock: server #{index}: {error}");
                return Err(match error {
                    AddrError::Resolve { .. } => EX_NOHOST,
                    _ => EX_USAGE,
                });
            }
        }
    }
    Ok(())
}

/// The exit status for a configuration `build()` refused.
fn config_exit_code(error: &ConfigError) -> u8 {
    match error {
        // Masters down or too slow: trying again later may help.
        ConfigError::Handshakes { .. } => EX_UNAVAILABLE,
        ConfigError::Misconfigured { .. } | ConfigError::LongestTtl { .. } => EX_CONFIG,
        ConfigError::InvalidAddr {
            error: AddrError::Resolve { .. },
            ..
        } => EX_NOHOST,
        ConfigError::Tls(_) => EX_CONFIG,
        ConfigError::Io(_) => EX_OSERR,
        // Everything else is in the arguments or the environment.
        _ => EX_USAGE,
    }
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
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // Schemes are case-insensitive, as the library reads them.
    match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" => match rest.split_once('@') {
            Some((user, host)) if !user.contains(':') => {
                return format!("{scheme}://{user}:{encoded}@{host}");
            }
            Some(_) => {}
            None => return format!("{scheme}://:{encoded}@{rest}"),
        },
        "unix" | "redis+unix" if !rest.contains("pass=") && !rest.contains("password=") => {
            let sep = if rest.contains('?') { '&' } else { '?' };
            return format!("{scheme}://{rest}{sep}pass={encoded}");
        }
        _ => {}
    }
    url.to_owned()
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
        assert_eq!(servers("REDIS://h:1", Some("p")), ["REDIS://:p@h:1"]);
    }
}
