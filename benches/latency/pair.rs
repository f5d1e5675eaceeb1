//! Rows that compare this crate with itself under one change, interleaved
//! in one run: over TLS (`tls.rs`) and with fencing (here).

use super::*;

/// Full acquire + release cycles of two clients of this crate.
pub(crate) struct PairRow {
    pub(crate) base: Histogram<u64>,
    pub(crate) other: Histogram<u64>,
}

/// Runs `cycles` `try_lock` + `unlock` cycles per client, in interleaved
/// batches of `batch`, after `warm_up` unrecorded cycles each.
pub(crate) fn interleave(
    base: &Redlock,
    other: &Redlock,
    resource: &str,
    cycles: u64,
    batch: u64,
    warm_up: u64,
) -> Result<PairRow> {
    let mut row = PairRow {
        base: histogram(),
        other: histogram(),
    };
    let base_resource = format!("{resource}:base");
    let other_resource = format!("{resource}:other");
    let run = |client: &Redlock,
               resource: &str,
               n: u64,
               into: Option<&mut Histogram<u64>>|
     -> Result<()> {
        let mut into = into;
        for _ in 0..n {
            let t0 = Instant::now();
            let mut lock = client
                .try_lock(resource, TTL)
                .map_err(|e| format!("{resource}: acquire failed: {e}"))?;
            client
                .unlock(&mut lock)
                .map_err(|e| format!("{resource}: release failed: {e}"))?;
            if let Some(h) = into.as_deref_mut() {
                h.saturating_record(nanos(t0.elapsed()));
            }
        }
        Ok(())
    };
    run(base, &base_resource, warm_up, None)?;
    run(other, &other_resource, warm_up, None)?;
    for _ in 0..cycles.div_ceil(batch) {
        run(base, &base_resource, batch, Some(&mut row.base))?;
        run(other, &other_resource, batch, Some(&mut row.other))?;
    }
    Ok(row)
}

/// Plain and fenced clients of this crate on the same masters.
pub(crate) fn fenced_vs_plain(
    urls: &[String],
    cycles: u64,
    batch: u64,
    warm_up: u64,
) -> Result<PairRow> {
    let client = |fenced: bool| {
        let builder = Redlock::builder(urls)
            .request_timeout(REQUEST_TIMEOUT)
            .retry_count(0);
        if fenced {
            builder.fencing(TTL)
        } else {
            builder
        }
        .build()
    };
    interleave(
        &client(false)?,
        &client(true)?,
        "redlock-bench:fence",
        cycles,
        batch,
        warm_up,
    )
}

/// The section of the report for a pair row: a table of both and the
/// ratios of `other` over `base`; and its JSON.
pub(crate) fn pair_section(
    title: &str,
    names: [&str; 2],
    row: &PairRow,
    cycles: u64,
) -> (String, String) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## {title} (µs)\n{:<22} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "variant", "p50", "p90", "p99", "p99.9", "max"
    );
    for (name, h) in [(names[0], &row.base), (names[1], &row.other)] {
        let _ = writeln!(
            out,
            "{name:<22} {:>8} {:>8} {:>8} {:>8} {:>8}",
            fmt_us(pct(h, 50.0)),
            fmt_us(pct(h, 90.0)),
            fmt_us(pct(h, 99.0)),
            fmt_us(pct(h, 99.9)),
            fmt_us(h.max())
        );
    }
    let _ = writeln!(
        out,
        "{} / {}: p50 {}, p99 {}",
        names[1],
        names[0],
        ratio(pct(&row.other, 50.0), pct(&row.base, 50.0)),
        ratio(pct(&row.other, 99.0), pct(&row.base, 99.0))
    );
    let json = format!(
        "{{\"cycles\": {cycles}, \"{}\": {}, \"{}\": {}}}",
        json_key(names[0]),
        json_hist(&row.base),
        json_key(names[1]),
        json_hist(&row.other)
    );
    (out, json)
}

/// `redlock-mio (TLS)` -> `tls`: the word in parentheses, lower case.
fn json_key(name: &str) -> String {
    name.rsplit_once('(')
        .map_or(name, |(_, rest)| rest.trim_end_matches(')'))
        .to_lowercase()
}
