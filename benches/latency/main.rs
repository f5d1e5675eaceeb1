//! Lock latency of this crate against its redis-rs peers and the physical
//! floor, in one interleaved run. See `benches/README.md`.
//!
//! ```sh
//! cargo bench -p redlock-mio-bench --bench latency                      # five local masters, ~5 min
//! cargo bench -p redlock-mio-bench --bench latency -- --quick           # smoke run
//! cargo bench -p redlock-mio-bench --bench latency -- redis://h1:6379 redis://h2:6379 ...
//! cargo bench -p redlock-mio-bench --bench latency -- --markdown        # and the table of benches/README.md
//! cargo bench -p redlock-mio-bench --bench latency -- --rtt             # the masters across a network (rtt.rs)
//! ```
//!
//! Writes `target/latency/latency.json` and `target/latency/latency.svg`.

// The shared test harness (`tests/support`) panics loudly on a broken set-up.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

mod args;
#[path = "../delay.rs"]
mod delay;
mod floor;
#[path = "../markdown.rs"]
mod markdown;
mod measure;
mod pair;
#[path = "../pin.rs"]
mod pin;
mod report;
mod rtt;
mod summary;
mod tls;
mod variants;

use args::*;
use floor::*;
use measure::*;
use pair::*;
use report::*;
use rtt::*;
use summary::*;
use tls::*;
use variants::*;

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, LazyLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hdrhistogram::Histogram;
use redlock_mio::Redlock;
use redlock_mio::scripts::{RELEASE_SCRIPT, RELEASE_SHA1};
use support::cluster::Cluster;
use support::counting::CountingAlloc;

// ---------------------------------------------------------------------------
// Allocation counting, per thread
// ---------------------------------------------------------------------------

/// This thread's allocations so far (`support::counting` counts per thread).
fn allocations() -> u64 {
    support::counting::allocations().0
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------

fn main() -> ExitCode {
    match parse_args().and_then(|args| args.map_or(Ok(()), run)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("latency bench failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let began = Instant::now();
    let load_start = loadavg();
    // Short sleeps in the paced mode: ask for 1 ns of timer slack.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only affects
    // this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
    let mut cluster = None;
    let urls = if args.urls.is_empty() {
        let c = Cluster::start(MASTERS);
        if args.pin {
            println!("{}", pin::split(c.nodes().iter().filter_map(|n| n.pid()))?);
        }
        let urls = c.urls();
        cluster = Some(c);
        urls
    } else if args.pin {
        return Err("--pin pins the masters this bench starts: give no URLs".into());
    } else {
        args.urls.clone()
    };
    if args.rtt {
        let result = run_rtt(&args, urls);
        drop(cluster);
        return result;
    }
    let env = Env::new(urls)?;
    let quorum = env.quorum();
    let all: Vec<usize> = (0..env.addrs.len()).collect();
    println!(
        "latency bench: {} masters (quorum {quorum}), TTL {TTL:?}, {} mode; load average at start {load_start}",
        env.urls.len(),
        if args.quick { "quick" } else { "full" }
    );

    let selected: Vec<Kind> = ALL
        .into_iter()
        .filter(|k| args.only.is_empty() || args.only.contains(k))
        .collect();
    let mut slots = Vec::new();
    for &kind in &selected {
        let resource = kind.resource("healthy");
        let variant = make(kind, &env, &resource, &all)
            .map_err(|e| format!("{}: setup failed: {e}", kind.name()))?;
        slots.push(Slot {
            kind,
            resource,
            variant,
            cycles: 0,
            check_every: if args.quick { 100 } else { CHECK_EVERY },
            checks: 0,
            leftovers: 0,
        });
    }
    let mut checker = Checker::new(&env, &all)?;
    warm_up(&mut slots, &mut checker, quorum, args.warm_up)?;

    let t = Instant::now();
    let load_closed = loadavg();
    let closed = closed_loop(&mut slots, &mut checker, quorum, &args)?;
    eprintln!("closed loop done in {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let paced_stats = paced(&mut slots, &mut checker, quorum, &args)?;
    eprintln!("paced done in {:.1} s", t.elapsed().as_secs_f64());
    let load_measured = loadavg();

    let kinds: Vec<Kind> = slots.iter().map(|s| s.kind).collect();
    let mut out = String::new();
    latency_table(&mut out, "closed loop (service time)", &kinds, &closed);
    latency_table(
        &mut out,
        &format!(
            "paced at {}/s per variant (response time from the intended start; release is service time)",
            args.rate
        ),
        &kinds,
        &paced_stats,
    );
    let _ = writeln!(
        out,
        "\n## heap allocations per cycle (acquire + release, measuring thread); spot checks"
    );
    for (slot, (c, p)) in slots.iter().zip(closed.iter().zip(&paced_stats)) {
        let _ = writeln!(
            out,
            "{:<15} closed {:>8.1}   paced {:>8.1}   key gone after release: {} of {} checks",
            slot.kind.name(),
            c.allocs_per_cycle(),
            p.allocs_per_cycle(),
            slot.checks - slot.leftovers,
            slot.checks
        );
    }
    print!("{out}");

    // Contention: every lock variant (the floor has no lock logic).
    let mut contended = Vec::new();
    let mut cout = String::new();
    let contending: Vec<Kind> = selected
        .iter()
        .copied()
        .filter(|&k| {
            args.contention_on && !matches!(k, Kind::Floor | Kind::FloorQuorum | Kind::FloorClassic)
        })
        .collect();
    for backoff in CONTENTION_BACKOFFS {
        if !contending.is_empty() {
            let _ = writeln!(
                cout,
                "\n## contention: 4 client threads, one resource, {:?} each; after a failed attempt \
                 a random wait of 0 to {:?} (acquire latency, µs)",
                args.contention, backoff
            );
            let _ = writeln!(
                cout,
                "{:<15} {:>9} {:>9} {:>8} | success {:>7} {:>7} {:>7} {:>7} | attempts {:>7} {:>7} {:>7} {:>7}",
                "variant",
                "acq/s",
                "attempts",
                "success%",
                "p50",
                "p90",
                "p99",
                "p99.9",
                "p50",
                "p90",
                "p99",
                "p99.9"
            );
        }
        for &kind in &contending {
            let r = contention(&env, kind, 4, args.contention, backoff);
            let line = |h: &Histogram<u64>| {
                PCTS.iter()
                    .map(|&p| {
                        if h.is_empty() {
                            format!("{:>7}", "-")
                        } else {
                            format!("{:>7}", fmt_us(pct(h, p)))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let _ = writeln!(
                cout,
                "{:<15} {:>9.0} {:>9} {:>7.1}% | success {} | attempts {}{}",
                kind.name(),
                r.acquired as f64 / r.secs,
                r.attempts,
                100.0 * r.acquired as f64 / r.attempts.max(1) as f64,
                line(&r.success),
                line(&r.attempt),
                r.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("  error: {e}"))
            );
            let left = checker.count(&kind.resource("contended"))?;
            if left != 0 {
                let _ = writeln!(cout, "  warning: key left on {left} masters after the run");
            }
            contended.push(r);
        }
    }
    print!("{cout}");
    out.push_str(&cout);

    // TLS: this crate over TLS and plain TCP to the same five masters.
    let mut tls_json = "null".to_owned();
    let mut tls_row = None;
    let mut tout = String::new();
    if cluster.is_some() && args.tls {
        let row = tls_vs_plain(
            args.tls_cycles,
            args.batch.min(args.tls_cycles),
            args.warm_up.min(500),
        )?;
        let title = format!(
            "TLS: {} try_lock + unlock cycles each, the same five masters over their plain and TLS ports, interleaved",
            args.tls_cycles
        );
        let (text, json) = pair_section(
            &title,
            ["redlock-mio (TCP)", "redlock-mio (TLS)"],
            &row,
            args.tls_cycles,
        );
        tout.push_str(&text);
        tls_json = json;
        tls_row = Some(row);
    } else {
        let _ = writeln!(
            tout,
            "\n## TLS: skipped ({})",
            if args.tls {
                "needs the bench's own masters"
            } else {
                "--no-tls"
            }
        );
    }
    print!("{tout}");
    out.push_str(&tout);

    // Fencing: plain and fenced clients of this crate, same masters.
    let mut fence_json = "null".to_owned();
    let mut fence_row = None;
    if args.fence {
        let row = fenced_vs_plain(
            &env.urls,
            args.fence_cycles,
            args.batch.min(args.fence_cycles),
            args.warm_up.min(500),
        )?;
        let title = format!(
            "Fencing: {} try_lock + unlock cycles each, plain and fenced (acquire, raise, release), interleaved",
            args.fence_cycles
        );
        let (text, json) = pair_section(
            &title,
            ["redlock-mio (plain)", "redlock-mio (fenced)"],
            &row,
            args.fence_cycles,
        );
        print!("{text}");
        out.push_str(&text);
        fence_json = json;
        fence_row = Some(row);
    }

    // Fault: one master paused (only with our own cluster).
    let mut fault = Vec::new();
    let mut failed_json = "null".to_owned();
    let mut fout = String::new();
    if let (Some(cluster), true) = (&cluster, args.fault) {
        let live: Vec<usize> = all.iter().copied().filter(|&i| i != PAUSED).collect();
        let mut variants = Vec::new();
        for &kind in &selected {
            let resource = kind.resource("fault");
            // The floor talks only to the live masters: it has no timeout.
            let nodes = if matches!(kind, Kind::Floor | Kind::FloorQuorum | Kind::FloorClassic) {
                &live
            } else {
                &all
            };
            let mut slot = Slot {
                kind,
                resource: resource.clone(),
                variant: make(kind, &env, &resource, nodes)?,
                cycles: 0,
                check_every: CHECK_EVERY,
                checks: 0,
                leftovers: 0,
            };
            // Connections up and warm before the pause.
            warm_up(
                std::slice::from_mut(&mut slot),
                &mut checker,
                quorum,
                args.warm_up.min(100),
            )?;
            variants.push(slot);
        }
        cluster.pause(PAUSED);
        let _ = writeln!(
            fout,
            "\n## fault: master {PAUSED} of {} paused (SIGSTOP); closed loop, up to {} cycles or {:?} per variant (µs)",
            env.urls.len(),
            args.fault_cycles,
            args.fault_budget
        );
        let _ = writeln!(
            fout,
            "{:<15} {:>6} {:>6} | acquire {:>7} {:>7} {:>7} {:>7} {:>8} | healthy acquire {:>7} {:>7} | note",
            "variant", "n", "failed", "p50", "p90", "p99", "p99.9", "max", "p50", "p99"
        );
        for slot in variants {
            let kind = slot.kind;
            let healthy = &closed[kinds.iter().position(|&k| k == kind).unwrap_or(0)];
            let outcome = fault_run(kind, slot.variant, args.fault_cycles, args.fault_budget);
            match &outcome {
                FaultOutcome::Done(s) => {
                    let h = &s.acquire;
                    let cell = |p: Option<f64>| {
                        if h.is_empty() {
                            "-".to_owned()
                        } else {
                            fmt_us(p.map_or(h.max(), |p| pct(h, p)))
                        }
                    };
                    let _ = writeln!(
                        fout,
                        "{:<15} {:>6} {:>6} | acquire {:>7} {:>7} {:>7} {:>7} {:>8} | healthy acquire {:>7} {:>7} | {}",
                        kind.name(),
                        s.count(),
                        s.failures,
                        cell(Some(50.0)),
                        cell(Some(90.0)),
                        cell(Some(99.0)),
                        cell(Some(99.9)),
                        cell(None),
                        fmt_us(pct(&healthy.acquire, 50.0)),
                        fmt_us(pct(&healthy.acquire, 99.0)),
                        s.note
                    );
                }
                FaultOutcome::Blocked { after, waited } => {
                    let _ = writeln!(
                        fout,
                        "{:<15} blocked > {} s (the call never returned; {after} acquire attempts returned before)",
                        kind.name(),
                        waited.as_secs()
                    );
                }
            }
            fault.push((kind, outcome));
        }
        // What a contender pays for each failed attempt meanwhile.
        let failed = failed_attempts(&env, "redlock-bench:fault:contended", args.fault_attempts)?;
        let h = &failed.attempt;
        let _ = writeln!(
            fout,
            "\n## fault: {} failed try_lock attempts on a held resource, master {PAUSED} paused, request timeout {:?} (µs)\n{:<15} {:>6} {:>6} | attempt {:>7} {:>7} {:>7} {:>8} | note\n{:<15} {:>6} {:>6} | attempt {:>7} {:>7} {:>7} {:>8} | {}",
            args.fault_attempts,
            REQUEST_TIMEOUT,
            "variant",
            "n",
            "other",
            "p50",
            "p90",
            "p99",
            "max",
            Kind::Mine.name(),
            h.len(),
            failed.other,
            fmt_us(pct(h, 50.0)),
            fmt_us(pct(h, 90.0)),
            fmt_us(pct(h, 99.0)),
            fmt_us(h.max()),
            failed.note
        );
        failed_json = format!(
            "{{\"attempts\": {}, \"other\": {}, \"attempt\": {}}}",
            args.fault_attempts,
            failed.other,
            json_hist(h)
        );
        cluster.resume(PAUSED);
    } else {
        let _ = writeln!(
            fout,
            "\n## fault: skipped ({})",
            if args.fault {
                "needs the bench's own cluster"
            } else {
                "--no-fault"
            }
        );
    }
    print!("{fout}");
    out.push_str(&fout);

    let elapsed = began.elapsed();
    let load_end = loadavg();
    let summary = format!(
        "\nload average: start {load_start}, before measuring {load_closed}, after closed+paced {load_measured}, end {load_end}; total run time {:.1} s\n",
        elapsed.as_secs_f64()
    );
    print!("{summary}");

    // JSON and SVG.
    let dir = target_dir();
    std::fs::create_dir_all(&dir)?;
    let contention_json: Vec<String> = contended
        .iter()
        .map(|r| {
            format!(
                "    {{\"variant\": {}, \"id\": \"{}\", \"threads\": 4, \"backoff_us\": {}, \"seconds\": {}, \"acquired\": {}, \
                 \"attempts\": {}, \"acquisitions_per_s\": {:.1}, \"success_acquire_us\": {}, \
                 \"attempt_us\": {}, \"error\": {}}}",
                json_str(r.kind.name()),
                r.kind.id(),
                r.backoff.as_micros(),
                r.secs,
                r.acquired,
                r.attempts,
                r.acquired as f64 / r.secs,
                json_hist(&r.success),
                json_hist(&r.attempt),
                r.error.as_deref().map_or("null".to_owned(), json_str)
            )
        })
        .collect();
    let fault_json: Vec<String> = fault
        .iter()
        .map(|(k, o)| match o {
            FaultOutcome::Done(s) => json_stats(&[*k], std::slice::from_ref(s))
                .trim_start_matches("[\n")
                .trim_end_matches("\n  ]")
                .to_owned(),
            FaultOutcome::Blocked { after, waited } => format!(
                "    {{\"variant\": {}, \"id\": \"{}\", \"blocked_after_s\": {}, \"attempts_returned\": {after}}}",
                json_str(k.name()),
                k.id(),
                waited.as_secs()
            ),
        })
        .collect();
    let json = format!(
        "{{\n  \"masters\": {},\n  \"quick\": {},\n  \"ttl_ms\": {TTL_MS},\n  \"paced_rate_per_s\": {},\n  \
         \"load_average\": {{\"start\": \"{load_start}\", \"measuring\": \"{load_closed}\", \"after\": \"{load_measured}\", \"end\": \"{load_end}\"}},\n  \
         \"run_seconds\": {:.1},\n  \"closed_loop\": {},\n  \"paced\": {},\n  \"spot_checks\": [{}],\n  \"contention\": [\n{}\n  ],\n  \"fault_paused_master\": {PAUSED},\n  \"fault\": [\n{}\n  ],\n  \"fault_failed_attempts\": {},\n  \"tls\": {},\n  \"fence\": {}\n}}\n",
        env.urls.len(),
        args.quick,
        args.rate,
        elapsed.as_secs_f64(),
        json_stats(&kinds, &closed),
        json_stats(&kinds, &paced_stats),
        slots
            .iter()
            .map(|s| format!(
                "{{\"id\": \"{}\", \"after_release\": {}, \"key_left\": {}}}",
                s.kind.id(),
                s.checks,
                s.leftovers
            ))
            .collect::<Vec<_>>()
            .join(", "),
        contention_json.join(",\n"),
        fault_json.join(",\n"),
        failed_json,
        tls_json,
        fence_json,
    );
    std::fs::write(dir.join("latency.json"), json)?;
    let closed_curves: Vec<(Kind, &Histogram<u64>)> = kinds
        .iter()
        .copied()
        .zip(closed.iter().map(|s| &s.cycle))
        .collect();
    let paced_curves: Vec<(Kind, &Histogram<u64>)> = kinds
        .iter()
        .copied()
        .zip(paced_stats.iter().map(|s| &s.cycle))
        .collect();
    std::fs::write(
        dir.join("latency.svg"),
        svg(&closed_curves, &paced_curves, args.rate),
    )?;
    std::fs::write(dir.join("latency.txt"), format!("{out}{summary}"))?;
    println!("wrote {}/latency.{{json,svg,txt}}", dir.display());
    if args.markdown {
        let summary = Summary {
            args: &args,
            kinds: &kinds,
            closed: &closed,
            contended: &contended,
            fault: &fault,
            tls: tls_row.as_ref(),
            fence: fence_row.as_ref(),
        };
        println!("\n{}", summary.markdown());
    }
    drop(cluster);
    Ok(())
}
