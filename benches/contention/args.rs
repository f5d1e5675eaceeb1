//! Command-line options: the cells, the variants, how long each cell runs.

use std::time::Duration;

use super::variants::{ALL, Variant};

pub(crate) const USAGE: &str = "usage: contention [--quick] [--secs S] [--cells 1,8,32,128,shared32,crash] \
                                [--only redlock_mio,redlock_mio_5ms,rslock] [--rtt MS] [--pin] [--markdown]";

/// One cell of the table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Cell {
    /// C workers, each a thread with a client of its own (as C processes).
    Clients(usize),
    /// C tokio tasks sharing one client.
    Shared(usize),
    /// The crashed holder: a holder that never releases, 8 waiters.
    Crash,
}

impl Cell {
    fn parse(word: &str) -> Result<Cell, String> {
        let count = |n: &str| match n.parse::<usize>() {
            Ok(c) if c > 0 => Ok(c),
            _ => Err(format!(
                "--cells: {word:?} is not a cell (1, 8, shared32, crash, …)"
            )),
        };
        match word {
            "crash" => Ok(Cell::Crash),
            _ => match word.strip_prefix("shared") {
                Some(n) => Ok(Cell::Shared(count(n)?)),
                None => Ok(Cell::Clients(count(word)?)),
            },
        }
    }

    /// The number of contending callers (the waiters of the crash cell).
    pub(crate) fn callers(self) -> usize {
        match self {
            Cell::Clients(c) | Cell::Shared(c) => c,
            Cell::Crash => super::crash::WAITERS,
        }
    }

    /// How the cell is named in the tables: `32` or `32 shared`.
    pub(crate) fn label(self) -> String {
        match self {
            Cell::Clients(c) => format!("{c}"),
            Cell::Shared(c) => format!("{c} shared"),
            Cell::Crash => "crash".to_owned(),
        }
    }
}

pub(crate) struct Args {
    /// A smoke run: short cells, non-zero exit on any error.
    pub(crate) quick: bool,
    /// How long each cell (and the capacity run) lasts.
    pub(crate) run: Duration,
    pub(crate) cells: Vec<Cell>,
    pub(crate) variants: Vec<Variant>,
    /// The crashed holder's TTL.
    pub(crate) crash_ttl: Duration,
    /// Crashed-holder trials per variant.
    pub(crate) trials: usize,
    pub(crate) pin: bool,
    pub(crate) markdown: bool,
    /// The masters behind the delay line at this round-trip time in ms,
    /// ± 20% (`--rtt`; `benches/delay.rs`).
    pub(crate) rtt: Option<f64>,
}

/// The options, or `None` after `--help`.
pub(crate) fn parse() -> Result<Option<Args>, String> {
    let mut quick = false;
    let mut secs: Option<f64> = None;
    let mut cells: Option<Vec<Cell>> = None;
    let mut variants: Vec<Variant> = ALL.to_vec();
    let (mut pin, mut markdown) = (false, false);
    let mut rtt = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            // `cargo bench` passes `--bench` to harness-less benches.
            "--bench" => {}
            "--quick" => quick = true,
            "--pin" => pin = true,
            "--markdown" => markdown = true,
            "--secs" => {
                let v = it.next().ok_or("--secs needs a number of seconds")?;
                let s: f64 = v.parse().map_err(|e| format!("--secs {v}: {e}"))?;
                if !(s > 0.0 && s < 3600.0) {
                    return Err(format!("--secs {v}: between 0 and 3600"));
                }
                secs = Some(s);
            }
            "--rtt" => {
                let v = it.next().ok_or("--rtt needs milliseconds")?;
                match v.parse::<f64>() {
                    Ok(ms) if ms.is_finite() && ms >= 0.0 => rtt = Some(ms),
                    _ => return Err(format!("--rtt {v}: not a number of milliseconds")),
                }
            }
            "--cells" => {
                let v = it.next().ok_or("--cells needs a list")?;
                cells = Some(v.split(',').map(Cell::parse).collect::<Result<_, _>>()?);
            }
            "--only" => {
                let v = it.next().ok_or("--only needs variant ids")?;
                variants = v
                    .split(',')
                    .map(|id| {
                        ALL.into_iter()
                            .find(|k| k.id() == id)
                            .ok_or_else(|| format!("--only: unknown variant {id:?}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    let default_cells: &[Cell] = if quick {
        &[
            Cell::Clients(1),
            Cell::Clients(8),
            Cell::Shared(8),
            Cell::Crash,
        ]
    } else {
        &[
            Cell::Clients(1),
            Cell::Clients(8),
            Cell::Clients(32),
            Cell::Clients(128),
            Cell::Shared(32),
            Cell::Shared(128),
            Cell::Crash,
        ]
    };
    Ok(Some(Args {
        quick,
        run: Duration::from_secs_f64(secs.unwrap_or(if quick { 0.3 } else { 3.0 })),
        cells: cells.unwrap_or_else(|| default_cells.to_vec()),
        variants,
        crash_ttl: Duration::from_millis(if quick { 200 } else { 1000 }),
        trials: if quick { 1 } else { 5 },
        pin,
        markdown,
        rtt,
    }))
}
