//! Command-line options.

use std::time::Duration;

pub(crate) const USAGE: &str = "usage: service [--quick] [--secs S] [--warm-up S] [--cells tasks,threads] \
                                [--tasks N] [--threads N] [--resources N] [--zipf S] [--pin] [--markdown]";

/// One cell: the callers of one client.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Cell {
    /// Async tasks on a two-worker tokio runtime.
    Tasks,
    /// Threads, the blocking API.
    Threads,
}

pub(crate) struct Args {
    pub(crate) quick: bool,
    /// The measured part of each cell's mixed load.
    pub(crate) secs: Duration,
    /// The mixed load before the measured part.
    pub(crate) warm_up: Duration,
    /// The uncontended load that measures allocations per cycle.
    pub(crate) uncontended: Duration,
    /// Each pipelined floor's run.
    pub(crate) floor: Duration,
    pub(crate) cells: Vec<Cell>,
    pub(crate) tasks: usize,
    pub(crate) threads: usize,
    pub(crate) resources: usize,
    pub(crate) zipf: f64,
    pub(crate) pin: bool,
    pub(crate) markdown: bool,
}

pub(crate) fn parse() -> Result<Option<Args>, String> {
    let mut args = Args {
        quick: false,
        secs: Duration::from_secs(60),
        warm_up: Duration::from_secs(5),
        uncontended: Duration::from_secs(4),
        floor: Duration::from_secs(2),
        cells: vec![Cell::Tasks, Cell::Threads],
        tasks: 1000,
        threads: 64,
        resources: 10_000,
        zipf: 0.99,
        pin: false,
        markdown: false,
    };
    let (mut secs, mut warm_up) = (None, None);
    let mut words = std::env::args().skip(1);
    let positive = |name: &str, v: Option<String>| -> Result<f64, String> {
        let v = v.ok_or_else(|| format!("{name} needs a value\n{USAGE}"))?;
        match v.parse::<f64>() {
            Ok(n) if n.is_finite() && n > 0.0 => Ok(n),
            _ => Err(format!("{name}: {v:?} is not a positive number")),
        }
    };
    let count = |name: &str, v: Option<String>| -> Result<usize, String> {
        let v = v.ok_or_else(|| format!("{name} needs a value\n{USAGE}"))?;
        match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{name}: {v:?} is not a positive whole number")),
        }
    };
    while let Some(arg) = words.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            // `cargo bench` passes `--bench` to harness-less benches.
            "--bench" => {}
            "--quick" => args.quick = true,
            "--pin" => args.pin = true,
            "--markdown" => args.markdown = true,
            "--secs" => secs = Some(positive("--secs", words.next())?),
            "--warm-up" => warm_up = Some(positive("--warm-up", words.next())?),
            "--tasks" => args.tasks = count("--tasks", words.next())?,
            "--threads" => args.threads = count("--threads", words.next())?,
            "--resources" => args.resources = count("--resources", words.next())?,
            "--zipf" => args.zipf = positive("--zipf", words.next())?,
            "--cells" => {
                let list = words.next().ok_or("--cells needs a list")?;
                args.cells = list
                    .split(',')
                    .map(|c| match c {
                        "tasks" => Ok(Cell::Tasks),
                        "threads" => Ok(Cell::Threads),
                        _ => Err(format!("--cells: {c:?} is not tasks or threads")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            _ => return Err(format!("unknown argument {arg}\n{USAGE}")),
        }
    }
    if args.quick {
        args.secs = Duration::from_secs(4);
        args.warm_up = Duration::from_secs(1);
        args.uncontended = Duration::from_secs(1);
        args.floor = Duration::from_millis(500);
    }
    if let Some(s) = secs {
        args.secs = Duration::from_secs_f64(s);
    }
    if let Some(s) = warm_up {
        args.warm_up = Duration::from_secs_f64(s);
    }
    if args.resources < 8 {
        return Err("--resources: at least 8".to_owned());
    }
    Ok(Some(args))
}
