//! `--rtt`: the masters across a network. Every master sits behind the
//! delay line (`benches/delay.rs`), which holds each chunk half a round-trip
//! time each way, ± the jitter; the scenarios (every master at each RTT of
//! `--rtts`, and one master at `--slow` with the others at a base RTT of
//! `--slow-at`) and the variants interleave, in batches, over the same
//! connections. Each cycle is acquire + release, closed loop, checked as in
//! the loopback suite; PINGs through the line measure the RTT the clients
//! actually saw, and the line reports how late it wrote. Before anything is
//! measured, a self-check proves the line keeps each connection's bytes
//! whole and in order under the widest jitter.

use super::*;
use delay::DelayLine;
use markdown::{command, thousands};

/// The variants of the network rows (`--only` picks others).
pub(crate) const RTT_KINDS: [Kind; 6] = [
    Kind::Mine,
    Kind::FloorQuorum,
    Kind::Floor,
    Kind::Rslock,
    Kind::AsyncBaseline,
    Kind::SyncBaseline,
];

/// The master that is slow in the slow-master scenarios.
const SLOW_MASTER: usize = 0;

/// PINGs per master through the line in each batch round of a scenario.
const PINGS: usize = 10;

/// A variant's failed cycles beyond which the run stops: a few are a
/// loaded machine (a round past its 50 ms timeout), many are a bug.
fn failure_limit(cycles: u64) -> u64 {
    10 + cycles / 100
}

/// One network scenario: every master at `base`, or one at `slow`.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct Scenario {
    base: f64,
    slow: Option<f64>,
}

impl Scenario {
    /// `1 ms`, or `1 ms, one at 10 ms`.
    fn label(self) -> String {
        match self.slow {
            None => format!("{} ms", self.base),
            Some(slow) => format!("{} ms, one at {slow} ms", self.base),
        }
    }

    fn rtt(ms: f64) -> Duration {
        Duration::from_secs_f64(ms / 1000.0)
    }

    /// Sets the line's delays to this scenario.
    fn apply(self, line: &DelayLine, masters: usize, jitter: f64) {
        for i in 0..masters {
            let ms = match self.slow {
                Some(slow) if i == SLOW_MASTER => slow,
                _ => self.base,
            };
            line.set(i, Scenario::rtt(ms), jitter);
        }
    }
}

/// What one scenario measured.
struct Measured {
    scenario: Scenario,
    /// Per variant, in the order of the slots.
    stats: Vec<Stats>,
    /// PING round trips through the line: the base masters, the slow one.
    ping: [Histogram<u64>; 2],
    /// How late the line wrote each chunk.
    lateness: Histogram<u64>,
}

/// One cycle as `measure::cycle` runs it ([`timed_cycle`]), except that a
/// failed acquire or release is counted (in `stats.failures`, the first
/// reason in `stats.note`) rather than fatal: on a loaded machine a round
/// can outlast its timeout. After a failure the cycle waits, untimed, until
/// the key is gone from every master (at most its TTL), and says so
/// (`true`): the caller then builds the variant anew, as a service would,
/// because some (the redis-rs sync baseline) drop a connection that timed
/// out for good.
fn rtt_cycle(
    slot: &mut Slot,
    checker: &mut Checker,
    quorum: usize,
    stats: &mut Stats,
    timed: bool,
) -> Result<bool> {
    let cycle = match timed_cycle(slot, checker, quorum) {
        Ok(cycle) => cycle,
        Err(Broken::Acquire(e)) => {
            return failed(slot, checker, stats, &format!("acquire failed: {e}"));
        }
        Err(Broken::Release(e)) => {
            return failed(slot, checker, stats, &format!("release failed: {e}"));
        }
        Err(Broken::Bench(e)) => return Err(e),
    };
    if timed {
        stats.acquire.saturating_record(nanos(cycle.acquire()));
        stats.release.saturating_record(nanos(cycle.release()));
        stats
            .cycle
            .saturating_record(nanos(cycle.acquire() + cycle.release()));
        stats.allocations += cycle.allocations;
    }
    Ok(false)
}

/// Counts a failed cycle and waits until its key is gone.
fn failed(slot: &Slot, checker: &mut Checker, stats: &mut Stats, what: &str) -> Result<bool> {
    stats.failures += 1;
    if stats.note.is_empty() {
        stats.note = what.to_owned();
    }
    eprintln!("warning: {}: {what}", slot.kind.name());
    let deadline = Instant::now() + TTL + Duration::from_secs(1);
    while checker.count(&slot.resource)? != 0 {
        if Instant::now() >= deadline {
            return Err(format!("{}: the key outlived its TTL", slot.kind.name()).into());
        }
        thread::sleep(Duration::from_millis(5));
    }
    Ok(true)
}

/// A variant for the network rows: as in the loopback suite, except that
/// this crate does not yield to its masters (`yield_to_local_masters`): it
/// sees them on loopback, where the line listens, but they stand for
/// masters on other hosts, for which the client never yields.
fn make_remote(kind: Kind, env: &Env, resource: &str, live: &[usize]) -> Result<Box<dyn Variant>> {
    if kind != Kind::Mine {
        return make(kind, env, resource, live);
    }
    let client = Redlock::builder(&env.urls)
        .request_timeout(REQUEST_TIMEOUT)
        .retry_count(0)
        .yield_to_local_masters(false)
        .build()?;
    Ok(Box::new(Mine {
        client,
        resource: resource.as_bytes().to_vec(),
        held: None,
    }))
}

/// Runs one cycle; after a failed one, builds the variant anew and warms
/// it up with a few untimed cycles (whose failures count too).
fn run_cycle(
    slot: &mut Slot,
    env: &Env,
    checker: &mut Checker,
    stats: &mut Stats,
    timed: bool,
) -> Result<()> {
    let quorum = env.quorum();
    if rtt_cycle(slot, checker, quorum, stats, timed)? {
        let all: Vec<usize> = (0..env.addrs.len()).collect();
        slot.variant = make_remote(slot.kind, env, &slot.resource, &all)
            .map_err(|e| format!("{}: rebuilding failed: {e}", slot.kind.name()))?;
        for _ in 0..5 {
            rtt_cycle(slot, checker, quorum, stats, false)?;
        }
    }
    Ok(())
}

/// `PINGS` round trips to each master through the line, recorded as the
/// base masters' or the slow one's.
fn ping(conns: &mut [TcpStream], scenario: Scenario, into: &mut [Histogram<u64>; 2]) -> Result<()> {
    let cmd = encode(&[b"PING"]);
    for (i, conn) in conns.iter_mut().enumerate() {
        let class = usize::from(scenario.slow.is_some() && i == SLOW_MASTER);
        for _ in 0..PINGS {
            let t0 = Instant::now();
            conn.write_all(&cmd)?;
            let mut reply = [0u8; 7];
            conn.read_exact(&mut reply)?;
            let took = t0.elapsed();
            if &reply != b"+PONG\r\n" {
                return Err(format!("PING through the line replied {reply:?}").into());
            }
            into[class].saturating_record(nanos(took));
        }
    }
    Ok(())
}

/// Commands the line's self-check sends to each master.
const CHECK_ECHOES: usize = 500;

/// The line's promise, checked before anything is measured: with every
/// master at 1 ms and the widest jitter (±90%), `CHECK_ECHOES` `ECHO`s sent
/// one write each come back complete and in order, from every master.
fn check_line(line: &DelayLine, env: &Env) -> Result<()> {
    for i in 0..env.addrs.len() {
        line.set(i, Scenario::rtt(1.0), 0.9);
    }
    let mut conns = Vec::new();
    for addr in &env.addrs {
        let conn = TcpStream::connect_timeout(addr, Duration::from_secs(1))?;
        conn.set_nodelay(true)?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        conns.push(conn);
    }
    for n in 0..CHECK_ECHOES {
        let word = format!("echo-{n}");
        let cmd = encode(&[b"ECHO", word.as_bytes()]);
        for conn in &mut conns {
            conn.write_all(&cmd)?;
        }
    }
    for (i, conn) in conns.iter().enumerate() {
        let mut reader = BufReader::new(conn);
        let mut line = String::new();
        for n in 0..CHECK_ECHOES {
            let word = format!("echo-{n}");
            for expected in [format!("${}", word.len()), word] {
                line.clear();
                reader.read_line(&mut line)?;
                if line.trim_end() != expected {
                    return Err(format!(
                        "the delay line did not keep a connection whole and in order: master {i} answered {line:?} \
                         where {expected:?} was due"
                    )
                    .into());
                }
            }
        }
    }
    Ok(())
}

/// The scenarios of the run: each base RTT, then each slow-master one.
fn scenarios(args: &Args) -> Vec<Scenario> {
    let mut out: Vec<Scenario> = args
        .rtts
        .iter()
        .map(|&base| Scenario { base, slow: None })
        .collect();
    for &base in &args.slow_at {
        out.push(Scenario {
            base,
            slow: Some(args.slow),
        });
    }
    out
}

/// The network rows: see the module docs.
pub(crate) fn run_rtt(args: &Args, urls: Vec<String>) -> Result<()> {
    let began = Instant::now();
    let load_start = loadavg();
    let direct = Env::new(urls)?;
    let masters = direct.addrs.len();
    let line = DelayLine::start(&direct.addrs)?;
    let env = Env::new(line.urls())?;
    let quorum = env.quorum();
    let all: Vec<usize> = (0..masters).collect();
    let scenarios = scenarios(args);
    if scenarios.is_empty() {
        return Err("--rtt: no scenario (--rtts and --slow-at are empty)".into());
    }
    let kinds: Vec<Kind> = if args.only.is_empty() {
        RTT_KINDS.to_vec()
    } else {
        args.only.clone()
    };
    println!(
        "latency bench, masters across a network: {masters} masters (quorum {quorum}) behind the delay line, \
         RTT ± {:.0}%, scenarios {}; {} cycles per variant and scenario in batches of {}; load average at start {load_start}",
        args.jitter * 100.0,
        scenarios
            .iter()
            .map(|s| s.label())
            .collect::<Vec<_>>()
            .join(" / "),
        args.cycles,
        args.batch
    );

    check_line(&line, &env)?;
    scenarios[0].apply(&line, masters, args.jitter);
    let mut slots = Vec::new();
    for &kind in &kinds {
        let resource = kind.resource("rtt");
        let variant = make_remote(kind, &env, &resource, &all)
            .map_err(|e| format!("{}: setup failed: {e}", kind.name()))?;
        slots.push(Slot {
            kind,
            resource,
            variant,
            cycles: 0,
            check_every: if args.quick { 50 } else { CHECK_EVERY / 4 },
            checks: 0,
            leftovers: 0,
        });
    }
    // The checks read the masters directly, outside the timed region.
    let mut checker = Checker::new(&direct, &all)?;
    let mut pings = Vec::new();
    for addr in &env.addrs {
        let conn = TcpStream::connect_timeout(addr, Duration::from_secs(1))?;
        conn.set_nodelay(true)?;
        conn.set_read_timeout(Some(Duration::from_secs(2)))?;
        pings.push(conn);
    }
    let mut scratch = Stats::new();
    for slot in &mut slots {
        for _ in 0..args.warm_up {
            run_cycle(slot, &env, &mut checker, &mut scratch, false)?;
        }
    }
    if scratch.failures > failure_limit(args.warm_up) {
        return Err(format!(
            "warm-up: {} cycles failed: {}",
            scratch.failures, scratch.note
        )
        .into());
    }
    let mut measured: Vec<Measured> = scenarios
        .iter()
        .map(|&scenario| Measured {
            scenario,
            stats: vec![Stats::new(); slots.len()],
            ping: [histogram(), histogram()],
            lateness: histogram(),
        })
        .collect();

    let load_measuring = loadavg();
    let rounds = args.cycles.div_ceil(args.batch);
    let mut not_idle = 0;
    for round in 0..rounds {
        for k in 0..measured.len() {
            let m = &mut measured[(k + round as usize) % scenarios.len()];
            m.scenario.apply(&line, masters, args.jitter);
            // Late replies of the scenario before go out at its delays.
            if !line.wait_idle(Duration::from_secs(1)) {
                not_idle += 1;
            }
            line.take_lateness();
            ping(&mut pings, m.scenario, &mut m.ping)?;
            for j in 0..slots.len() {
                let i = (j + round as usize) % slots.len();
                for _ in 0..args.batch {
                    run_cycle(&mut slots[i], &env, &mut checker, &mut m.stats[i], true)?;
                }
                let failures = m.stats[i].failures;
                if failures > failure_limit(args.cycles) {
                    return Err(format!(
                        "{} at {}: {failures} cycles failed: {}",
                        slots[i].kind.name(),
                        m.scenario.label(),
                        m.stats[i].note
                    )
                    .into());
                }
            }
            let _ = m.lateness.add(line.take_lateness());
        }
        eprintln!(
            "round {} of {rounds} done at {:.0} s",
            round + 1,
            began.elapsed().as_secs_f64()
        );
    }
    let load_end = loadavg();

    let mut out = String::new();
    for m in &measured {
        latency_table(
            &mut out,
            &format!(
                "RTT {} ± {:.0}%: closed loop, {} cycles per variant (PING through the line: {}; the line wrote late by {})",
                m.scenario.label(),
                args.jitter * 100.0,
                args.cycles,
                ping_text(m),
                lateness_text(&m.lateness)
            ),
            &kinds,
            &m.stats,
        );
        for (slot, s) in slots.iter().zip(&m.stats) {
            if s.failures > 0 {
                let _ = writeln!(
                    out,
                    "  {}: {} failed cycles (the first: {})",
                    slot.kind.name(),
                    s.failures,
                    s.note
                );
            }
        }
    }
    let _ = writeln!(out, "\n## allocations per cycle; spot checks");
    for (k, slot) in slots.iter().enumerate() {
        let (allocs, cycles) = measured.iter().fold((0, 0), |(a, c), m| {
            (a + m.stats[k].allocations, c + m.stats[k].count())
        });
        let _ = writeln!(
            out,
            "{:<15} {:>8.1}   key gone after release: {} of {} checks",
            slot.kind.name(),
            allocs as f64 / cycles.max(1) as f64,
            slot.checks - slot.leftovers,
            slot.checks
        );
    }
    out.push_str(&goals(&measured, &kinds));
    let _ = writeln!(
        out,
        "\nload average: start {load_start}, measuring {load_measuring}, end {load_end}; \
         the line's thread at priority {:?}, not idle at a switch: {not_idle}, connections broken: {}; \
         total run time {:.1} s",
        line.priority(),
        line.broken(),
        began.elapsed().as_secs_f64()
    );
    print!("{out}");

    let dir = target_dir();
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("rtt.txt"), &out)?;
    std::fs::write(
        dir.join("rtt.json"),
        json(args, &measured, &kinds, &load_start, &load_end),
    )?;
    std::fs::write(dir.join("rtt.svg"), plot(&measured, &kinds, args.jitter))?;
    println!("wrote {}/rtt.{{json,svg,txt}}", dir.display());
    if args.markdown {
        println!(
            "\n{}",
            markdown_table(
                args,
                &measured,
                &kinds,
                &load_start,
                &load_end,
                line.priority()
            )
        );
    }
    drop(slots);
    drop(line);
    Ok(())
}

/// `p50 / p99` of the PINGs, the slow master's apart.
fn ping_text(m: &Measured) -> String {
    let pair =
        |h: &Histogram<u64>| format!("{} / {} µs", fmt_us(pct(h, 50.0)), fmt_us(pct(h, 99.0)));
    match m.scenario.slow {
        None => format!("p50 / p99 {}", pair(&m.ping[0])),
        Some(_) => format!(
            "p50 / p99 {}, the slow master {}",
            pair(&m.ping[0]),
            pair(&m.ping[1])
        ),
    }
}

fn lateness_text(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "–".to_owned();
    }
    format!(
        "p50 {} µs, p99 {} µs, max {} µs",
        fmt_us(pct(h, 50.0)),
        fmt_us(pct(h, 99.0)),
        fmt_us(h.max())
    )
}

/// Index of `kind` among the variants.
fn at(kinds: &[Kind], kind: Kind) -> Option<usize> {
    kinds.iter().position(|&k| k == kind)
}

/// `a / b` as `×1.02`.
fn times(a: u64, b: u64) -> String {
    format!("×{}", ratio(a, b))
}

/// The goals as measured: this crate over `floor_quorum` at each
/// RTT; the slow-master scenarios over their base RTT, for each variant.
fn goals(measured: &[Measured], kinds: &[Kind]) -> String {
    let mut out = String::from("\n## against the goals\n");
    if let (Some(me), Some(fq)) = (at(kinds, Kind::Mine), at(kinds, Kind::FloorQuorum)) {
        for m in measured {
            let (a, b) = (&m.stats[me].cycle, &m.stats[fq].cycle);
            if a.is_empty() || b.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "{:<22} redlock-mio over floor (quorum): p50 {}, p99 {}",
                m.scenario.label(),
                times(pct(a, 50.0), pct(b, 50.0)),
                times(pct(a, 99.0), pct(b, 99.0))
            );
        }
    }
    for m in measured.iter().filter(|m| m.scenario.slow.is_some()) {
        let Some(base) = measured.iter().find(|b| {
            b.scenario
                == Scenario {
                    base: m.scenario.base,
                    slow: None,
                }
        }) else {
            continue;
        };
        let _ = writeln!(
            out,
            "{} against all at {} ms (cycle p50, p99):",
            m.scenario.label(),
            m.scenario.base
        );
        for (k, kind) in kinds.iter().enumerate() {
            let (a, b) = (&m.stats[k].cycle, &base.stats[k].cycle);
            if a.is_empty() || b.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "  {:<15} {} {}",
                kind.name(),
                times(pct(a, 50.0), pct(b, 50.0)),
                times(pct(a, 99.0), pct(b, 99.0))
            );
        }
    }
    out
}

/// The run as the markdown table of `benches/README.md`.
fn markdown_table(
    args: &Args,
    measured: &[Measured],
    kinds: &[Kind],
    load_start: &str,
    load_end: &str,
    priority: delay::Priority,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} (µs; cycle = acquire + release, closed loop, {} cycles per variant and RTT, \
         interleaved; every RTT ± {:.0}%; ×fq = over `floor_quorum` at the same percentile; \
         load average {load_start} at the start, {load_end} at the end):\n",
        command("latency"),
        thousands(args.cycles as f64),
        args.jitter * 100.0
    );
    out.push_str(
        "| RTT | variant | cycle p50 | cycle p99 | ×fq p50 | ×fq p99 |\n|---|---|--:|--:|--:|--:|\n",
    );
    let fq = at(kinds, Kind::FloorQuorum);
    for m in measured {
        for (k, &kind) in kinds.iter().enumerate() {
            let h = &m.stats[k].cycle;
            if h.is_empty() {
                continue;
            }
            let over = |p: f64| {
                fq.map(|fq| &m.stats[fq].cycle)
                    .filter(|f| !f.is_empty())
                    .map_or("–".to_owned(), |f| ratio(pct(h, p), pct(f, p)))
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                m.scenario.label(),
                label(kind),
                thousands(us(pct(h, 50.0))),
                thousands(us(pct(h, 99.0))),
                over(50.0),
                over(99.0)
            );
        }
    }
    out.push_str("\nPING through the line, p50 / p99 (µs): ");
    let pings: Vec<String> = measured
        .iter()
        .map(|m| {
            let pair = |h: &Histogram<u64>| {
                format!(
                    "{} / {}",
                    thousands(us(pct(h, 50.0))),
                    thousands(us(pct(h, 99.0)))
                )
            };
            match m.scenario.slow {
                None => format!("{}: {}", m.scenario.label(), pair(&m.ping[0])),
                Some(slow) => format!(
                    "{}: {} (the {slow} ms master {})",
                    m.scenario.label(),
                    pair(&m.ping[0]),
                    pair(&m.ping[1])
                ),
            }
        })
        .collect();
    out.push_str(&pings.join("; "));
    out.push_str(".\n");
    let mut lateness = histogram();
    for m in measured {
        let _ = lateness.add(&m.lateness);
    }
    if !lateness.is_empty() {
        let _ = writeln!(
            out,
            "\nThe line ({}) wrote each chunk {} µs after its due time at p50, {} µs at p99, {} µs at most.",
            match priority {
                delay::Priority::RealTime => "its thread at a real-time priority",
                delay::Priority::Nice => "its thread at nice -10",
                _ => "its thread at the default priority",
            },
            fmt_us(pct(&lateness, 50.0)),
            fmt_us(pct(&lateness, 99.0)),
            thousands(us(lateness.max()))
        );
    }
    for m in measured.iter().filter(|m| m.scenario.slow.is_some()) {
        let Some(base) = measured.iter().find(|b| {
            b.scenario
                == Scenario {
                    base: m.scenario.base,
                    slow: None,
                }
        }) else {
            continue;
        };
        let cells: Vec<String> = kinds
            .iter()
            .enumerate()
            .filter(|(k, _)| !m.stats[*k].cycle.is_empty() && !base.stats[*k].cycle.is_empty())
            .map(|(k, &kind)| {
                let (a, b) = (&m.stats[k].cycle, &base.stats[k].cycle);
                format!(
                    "{} {} / {}",
                    label(kind),
                    times(pct(a, 50.0), pct(b, 50.0)),
                    times(pct(a, 99.0), pct(b, 99.0))
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "\n{} over all at {} ms, cycle p50 / p99: {}.",
            m.scenario.label(),
            m.scenario.base,
            cells.join(", ")
        );
    }
    let failed: Vec<String> = measured
        .iter()
        .flat_map(|m| {
            kinds
                .iter()
                .zip(&m.stats)
                .filter(|(_, s)| s.failures > 0)
                .map(move |(&kind, s)| {
                    format!("{} at {}: {}", label(kind), m.scenario.label(), s.failures)
                })
        })
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(
            out,
            "\nFailed cycles (an acquire or a release that failed, not in the percentiles): {}.",
            failed.join(", ")
        );
    }
    out
}

fn json(
    args: &Args,
    measured: &[Measured],
    kinds: &[Kind],
    load_start: &str,
    load_end: &str,
) -> String {
    let rows: Vec<String> = measured
        .iter()
        .map(|m| {
            format!(
                "    {{\"scenario\": {}, \"base_rtt_ms\": {}, \"slow_rtt_ms\": {}, \"ping_us\": {}, \
                 \"slow_ping_us\": {}, \"lateness_us\": {}, \"variants\": {}}}",
                json_str(&m.scenario.label()),
                m.scenario.base,
                m.scenario.slow.map_or("null".to_owned(), |s| s.to_string()),
                json_hist(&m.ping[0]),
                json_hist(&m.ping[1]),
                json_hist(&m.lateness),
                json_stats(kinds, &m.stats)
            )
        })
        .collect();
    format!(
        "{{\n  \"masters\": {MASTERS},\n  \"jitter\": {},\n  \"cycles\": {},\n  \"quick\": {},\n  \
         \"load_average\": {{\"start\": \"{load_start}\", \"end\": \"{load_end}\"}},\n  \"scenarios\": [\n{}\n  ]\n}}\n",
        args.jitter,
        args.cycles,
        args.quick,
        rows.join(",\n")
    )
}

/// Two panels, cycle p50 and p99 against the scenario, a line per variant
/// on a log scale of time; the legend under them.
fn plot(measured: &[Measured], kinds: &[Kind], jitter: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="1040" height="430" viewBox="0 0 1040 430" font-family="sans-serif"><rect width="1040" height="430" fill="white"/>"##
    );
    for (n, p) in [50.0, 99.0].into_iter().enumerate() {
        panel(
            &mut out,
            n as f64 * 520.0,
            &format!(
                "cycle p{p}, masters RTT ± {:.0}% (closed loop)",
                jitter * 100.0
            ),
            measured,
            kinds,
            p,
        );
    }
    svg_legend(&mut out, 418.0, kinds);
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, x0: f64, title: &str, measured: &[Measured], kinds: &[Kind], p: f64) {
    let (w, h, left, top, right, bottom) = (520.0, 400.0, 60.0, 40.0, 20.0, 70.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="22" font-size="14" text-anchor="middle" font-weight="bold">{title}</text>"##,
        x0 + left + pw / 2.0
    );
    let values: Vec<Vec<Option<f64>>> = (0..kinds.len())
        .map(|k| {
            measured
                .iter()
                .map(|m| {
                    let h = &m.stats[k].cycle;
                    (!h.is_empty()).then(|| us(pct(h, p)))
                })
                .collect()
        })
        .collect();
    let all = values.iter().flatten().flatten().copied();
    let lo = all.clone().fold(f64::INFINITY, f64::min);
    let hi = all.fold(0.0f64, f64::max);
    if !lo.is_finite() {
        return;
    }
    let ylo = lo.max(1.0).log10().floor();
    let yhi = hi.log10().ceil().max(ylo + 1.0);
    let slots = measured.len().max(1) as f64;
    let px = |i: usize| x0 + left + pw * (i as f64 + 0.5) / slots;
    let py = |v: f64| top + ph - (v.log10().max(ylo) - ylo) / (yhi - ylo) * ph;
    let _ = writeln!(
        out,
        r##"<rect x="{:.1}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##,
        x0 + left
    );
    for e in (ylo as i32)..=(yhi as i32) {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(e);
            if v.log10() > yhi + 1e-9 || v.log10() < ylo - 1e-9 {
                continue;
            }
            let y = py(v);
            let label = if v >= 1000.0 {
                format!("{} ms", v / 1000.0)
            } else {
                format!("{v} µs")
            };
            let _ = writeln!(
                out,
                r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{label}</text>"##,
                x0 + left,
                x0 + left + pw,
                x0 + left - 4.0,
                y + 3.0
            );
        }
    }
    for (i, m) in measured.iter().enumerate() {
        let x = px(i);
        let (first, second) = match m.scenario.slow {
            None => (format!("{} ms", m.scenario.base), "all masters".to_owned()),
            Some(slow) => (
                format!("{} ms", m.scenario.base),
                format!("one at {slow} ms"),
            ),
        };
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">{first}</text><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="#555">{second}</text>"##,
            top + ph,
            top + ph + 16.0,
            top + ph + 30.0
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">round-trip time to the masters</text>"##,
        x0 + left + pw / 2.0,
        h - 12.0
    );
    // The RTTs with every master alike are joined by a line; a slow-master
    // scenario is a point of its own, after a dashed rule. Each variant's
    // points are nudged sideways a little, so that equal ones stay visible.
    if let Some(first) = measured.iter().position(|m| m.scenario.slow.is_some()) {
        let x = px(first) - pw / slots / 2.0;
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#999" stroke-dasharray="4 4"/>"##,
            top + ph
        );
    }
    for (k, kind) in kinds.iter().enumerate() {
        let nudge = (k as f64 - (kinds.len() as f64 - 1.0) / 2.0) * 3.0;
        let points: Vec<(bool, f64, f64)> = values[k]
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                v.map(|v| (measured[i].scenario.slow.is_none(), px(i) + nudge, py(v)))
            })
            .collect();
        let path: Vec<String> = points
            .iter()
            .filter(|(joined, _, _)| *joined)
            .map(|(_, x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"##,
            kind.color(),
            path.join(" ")
        );
        for (_, x, y) in points {
            let _ = writeln!(
                out,
                r##"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{}"/>"##,
                kind.color()
            );
        }
    }
}
