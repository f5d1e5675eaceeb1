//! `--markdown`: the lock benches print their result table as GitHub
//! markdown at the end of a run, under the command line that produced it,
//! so that `benches/README.md` holds output pasted as it is, never figures
//! typed by hand.

/// The `cargo bench` command line of this run of `bench`, with the
/// arguments it was given (less the `--bench` cargo adds), as inline code.
pub(crate) fn command(bench: &str) -> String {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut line = format!("cargo bench -p redlock-mio-bench --bench {bench}");
    if !args.is_empty() {
        line.push_str(" -- ");
        line.push_str(&args.join(" "));
    }
    format!("`{line}`")
}

/// `value` rounded to a whole number, with thousands separated by commas.
pub(crate) fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}
