//! Command-line options and the masters' addresses.

use super::*;

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

pub(crate) type Result<T> = std::result::Result<T, Box<dyn StdError>>;

pub(crate) const USAGE: &str = "usage: latency [--quick] [--cycles N] [--paced N] [--rate N] [--closed-only] [--only ID,..] \
                     [--contention-secs N] [--no-fault] [--no-tls] [--no-fence] [--pin] [--markdown] \
                     [--rtt [--rtts MS,..] [--slow MS] [--slow-at MS,..] [--jitter PCT]] [redis://HOST:PORT ...]";
pub(crate) const MASTERS: usize = 5;
pub(crate) const TTL: Duration = Duration::from_secs(10);
pub(crate) const TTL_MS: u64 = 10_000;
/// Per-node request timeout where a variant has one to set.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_millis(50);
/// Spot-check the keys every this many cycles, outside the timed region.
pub(crate) const CHECK_EVERY: u64 = 1000;
/// The master paused in the fault scenario.
pub(crate) const PAUSED: usize = 2;
/// Percentiles reported in the tables.
pub(crate) const PCTS: [f64; 4] = [50.0, 90.0, 99.0, 99.9];
/// Percentiles drawn in the plot.
pub(crate) const PLOT_PCTS: [f64; 9] = [50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99];

pub(crate) struct Args {
    pub(crate) quick: bool,
    pub(crate) cycles: u64,
    pub(crate) batch: u64,
    pub(crate) paced: u64,
    pub(crate) rate: u64,
    pub(crate) slice: u64,
    pub(crate) warm_up: u64,
    pub(crate) contention: Duration,
    pub(crate) fault_cycles: u64,
    pub(crate) fault_budget: Duration,
    /// Failed `try_lock` attempts measured with a master paused.
    pub(crate) fault_attempts: u64,
    /// Whether to run the TLS row.
    pub(crate) tls: bool,
    /// Cycles per client in the TLS row.
    pub(crate) tls_cycles: u64,
    /// Whether to run the fencing row.
    pub(crate) fence: bool,
    /// Cycles per client in the fencing row.
    pub(crate) fence_cycles: u64,
    pub(crate) fault: bool,
    pub(crate) contention_on: bool,
    /// Only these variants (`--only`); all when empty.
    pub(crate) only: Vec<Kind>,
    /// The local masters on one CPU, this bench on the others (`--pin`).
    pub(crate) pin: bool,
    /// Print the summary table as markdown at the end (`--markdown`).
    pub(crate) markdown: bool,
    /// The masters behind the delay line instead of the loopback suite
    /// (`--rtt`, see `rtt.rs`).
    pub(crate) rtt: bool,
    /// The round-trip times every master gets in turn, in ms (`--rtts`).
    pub(crate) rtts: Vec<f64>,
    /// The round-trip time of the one slow master, in ms (`--slow`).
    pub(crate) slow: f64,
    /// The base round-trip times with a slow master, in ms (`--slow-at`).
    pub(crate) slow_at: Vec<f64>,
    /// The jitter, a fraction of the delay (`--jitter` in percent).
    pub(crate) jitter: f64,
    pub(crate) urls: Vec<String>,
}

pub(crate) fn parse_args() -> Result<Option<Args>> {
    let mut args = Args {
        quick: false,
        cycles: 20_000,
        batch: 500,
        paced: 5_000,
        rate: 1_000,
        slice: 250,
        warm_up: 1_000,
        contention: Duration::from_secs(5),
        fault_cycles: 5_000,
        fault_budget: Duration::from_secs(10),
        fault_attempts: 1000,
        tls: true,
        tls_cycles: 5_000,
        fence: true,
        fence_cycles: 5_000,
        fault: true,
        contention_on: true,
        only: Vec::new(),
        pin: false,
        markdown: false,
        rtt: false,
        rtts: vec![0.2, 1.0, 2.0],
        slow: 10.0,
        slow_at: vec![1.0],
        jitter: 0.2,
        urls: Vec::new(),
    };
    let mut cycles = None;
    let mut paced = None;
    let mut contention = None;
    let mut it = std::env::args().skip(1);
    let millis = |it: &mut dyn Iterator<Item = String>, name: &str| -> Result<Vec<f64>> {
        let v = it
            .next()
            .ok_or_else(|| format!("{name} needs milliseconds"))?;
        v.split(',')
            .map(|ms| match ms.parse::<f64>() {
                Ok(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms),
                _ => Err(format!("{name}: {ms:?} is not a number of milliseconds").into()),
            })
            .collect()
    };
    let number = |it: &mut dyn Iterator<Item = String>, name: &str| -> Result<u64> {
        let v = it.next().ok_or_else(|| format!("{name} needs a number"))?;
        let n: u64 = v.parse().map_err(|e| format!("{name} {v}: {e}"))?;
        if n == 0 {
            return Err(format!("{name} must be at least 1").into());
        }
        Ok(n)
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            // `cargo bench` passes `--bench` to harness-less benches.
            "--bench" => {}
            "--quick" => args.quick = true,
            "--no-fault" => args.fault = false,
            "--no-tls" => args.tls = false,
            "--no-fence" => args.fence = false,
            "--pin" => args.pin = true,
            "--markdown" => args.markdown = true,
            "--rtt" => args.rtt = true,
            "--rtts" => args.rtts = millis(&mut it, "--rtts")?,
            "--slow-at" => args.slow_at = millis(&mut it, "--slow-at")?,
            "--slow" => {
                args.slow = *millis(&mut it, "--slow")?
                    .first()
                    .ok_or("--slow needs milliseconds")?;
            }
            "--jitter" => {
                let pct = *millis(&mut it, "--jitter")?
                    .first()
                    .ok_or("--jitter needs a percentage")?;
                if pct >= 100.0 {
                    return Err("--jitter must be below 100 (%)".into());
                }
                args.jitter = pct / 100.0;
            }
            "--closed-only" => {
                args.fault = false;
                args.tls = false;
                args.fence = false;
                args.contention_on = false;
                paced = Some(0);
            }
            "--only" => {
                let ids = it.next().ok_or("--only needs variant ids")?;
                for id in ids.split(',') {
                    let kind = ALL
                        .into_iter()
                        .find(|k| k.id() == id)
                        .ok_or_else(|| format!("--only: unknown variant {id}"))?;
                    args.only.push(kind);
                }
            }
            "--cycles" => cycles = Some(number(&mut it, "--cycles")?),
            "--paced" => paced = Some(number(&mut it, "--paced")?),
            "--rate" => args.rate = number(&mut it, "--rate")?,
            "--contention-secs" => contention = Some(number(&mut it, "--contention-secs")?),
            _ if arg.starts_with('-') => {
                return Err(format!("unknown option {arg}\n{USAGE}").into());
            }
            _ => args.urls.push(arg),
        }
    }
    if args.quick {
        args.cycles = 600;
        args.batch = 100;
        args.paced = 300;
        args.slice = 50;
        args.warm_up = 50;
        args.contention = Duration::from_secs(1);
        args.fault_cycles = 300;
        args.fault_budget = Duration::from_secs(3);
        args.fault_attempts = 200;
        args.tls_cycles = 300;
        args.fence_cycles = 300;
    }
    if args.rtt {
        // Every cycle waits for round trips of milliseconds: fewer cycles,
        // in smaller batches, so that the scenarios interleave finely.
        (args.cycles, args.batch, args.warm_up) = if args.quick {
            (150, 50, 30)
        } else {
            (2_000, 100, 200)
        };
    }
    if let Some(n) = cycles {
        args.cycles = n;
    }
    if let Some(n) = paced {
        args.paced = n;
    }
    if let Some(n) = contention {
        args.contention = Duration::from_secs(n);
    }
    args.batch = args.batch.min(args.cycles);
    args.slice = args.slice.min(args.paced).max(1);
    Ok(Some(args))
}

/// Addresses of the masters, for the variants that open their own sockets.
#[derive(Clone)]
pub(crate) struct Env {
    pub(crate) urls: Vec<String>,
    pub(crate) addrs: Vec<SocketAddr>,
}

impl Env {
    pub(crate) fn new(urls: Vec<String>) -> Result<Env> {
        let addrs = urls
            .iter()
            .map(|u| socket_addr(u))
            .collect::<Result<Vec<_>>>()?;
        Ok(Env { urls, addrs })
    }

    pub(crate) fn quorum(&self) -> usize {
        self.urls.len() / 2 + 1
    }
}

/// `redis://host:port[/db]` to a socket address (no password: the raw
/// variants do not authenticate).
pub(crate) fn socket_addr(url: &str) -> Result<SocketAddr> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| format!("{url}: only redis://host:port addresses are supported"))?;
    if rest.contains('@') {
        return Err(format!("{url}: passwords are not supported by the raw variants").into());
    }
    let hostport = rest.split('/').next().unwrap_or(rest);
    let hostport = if hostport.contains(':') {
        hostport.to_owned()
    } else {
        format!("{hostport}:6379")
    };
    hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| format!("{url}: no address").into())
}
