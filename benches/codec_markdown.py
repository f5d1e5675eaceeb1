#!/usr/bin/env python3
"""The codec bench's table of benches/README.md, as GitHub markdown.

Criterion has no way to print a table of its own, so this reads what a run
left in target/criterion (each benchmark's new/benchmark.json and
new/estimates.json) and prints the medians side by side, under the command
line that produced them:

    cargo bench -p redlock-mio-bench --bench codec
    python3 benches/codec_markdown.py [TARGET_DIR/criterion]

Only the standard library; exits non-zero if a row's results are missing.
"""

import json
import os
import sys

# (criterion group, label in the table), in the table's order.
ROWS = [
    ("decode/ok", "decode `+OK`"),
    ("decode/int", "decode `:1`"),
    ("decode/nil", "decode `$-1`"),
    ("decode/noscript", "decode `-NOSCRIPT …`"),
    ("decode/token-40", "decode 40-byte bulk"),
    ("decode/bulk-16k", "decode 16 KiB bulk"),
    ("decode/array-1000-bulk", "decode 1000 × bulk array"),
    ("decode/array-1000-int", "decode 1000 × integer array"),
    ("decode/pipeline-64", "decode 64 lock replies, one read"),
    ("decode/pipeline-64-resp3", "decode 64 lock replies, RESP3"),
    ("decode/resp3-null", "decode RESP3 `_`"),
    ("decode/resp3-hello-map", "decode RESP3 HELLO map"),
    ("encode/set-nx-px", "encode `SET k <40B> NX PX 30000`"),
    ("encode/evalsha-release", "encode `EVALSHA` release"),
    ("encode/pipeline-64-set-nx-px", "encode 64 × `SET NX PX`, one buffer"),
    ("encode/set-16k", "encode `SET` with 16 KiB value"),
]
# Rows that also show this codec's bytes per second.
WITH_RATE = {"decode/array-1000-bulk", "decode/array-1000-int"}
PEERS = ["redis-protocol", "redis-rs"]
COMMAND = "`cargo bench -p redlock-mio-bench --bench codec`, then `python3 benches/codec_markdown.py`"


def default_dir():
    """target/criterion of the workspace this script lives in."""
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "target"
    )
    return os.path.join(target, "criterion")


def load(root):
    """{(group, function): (median ns, bytes)} for every finished benchmark."""
    found = {}
    for dirpath, _, files in os.walk(root):
        if os.path.basename(dirpath) != "new" or "benchmark.json" not in files:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            bench = json.load(f)
        with open(os.path.join(dirpath, "estimates.json")) as f:
            median = json.load(f)["median"]["point_estimate"]
        size = (bench.get("throughput") or {}).get("Bytes")
        found[(bench["group_id"], bench["function_id"])] = (median, size)
    return found


def fmt_time(ns):
    """Three significant digits in the unit criterion would pick."""
    for unit, scale in (("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)):
        v = ns / scale
        if v < 1000 or unit == "s":
            digits = f"{v:.0f}" if v >= 100 else (f"{v:.1f}" if v >= 10 else f"{v:.2f}")
            return f"{digits} {unit}"
    raise AssertionError


def times(ratio):
    return f"{ratio:.0f}" if ratio >= 100 else f"{ratio:.1f}"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else default_dir()
    found = load(root)
    missing = [
        f"{g}/{fn}"
        for g, _ in ROWS
        for fn in ["redlock-mio"] + PEERS
        if (g, fn) not in found
    ]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        sys.exit(f"no criterion results under {root} for {shown}: run the codec bench first")
    print(f"{COMMAND}, medians; × is the peer's median over this codec's:\n")
    print("| input / command | bytes | redlock-mio | redis-protocol | × | redis-rs | × |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for group, label in ROWS:
        ours, size = found[(group, "redlock-mio")]
        cell = fmt_time(ours)
        if group in WITH_RATE and size:
            cell += f" ({size / ours:.2f} GB/s)"
        cells = [label, str(size or "–"), cell]
        for peer in PEERS:
            theirs, _ = found[(group, peer)]
            cells += [fmt_time(theirs), times(theirs / ours)]
        print("| " + " | ".join(cells) + " |")
    floor = found.get(("encode/set-16k", "copy-floor"))
    if floor:
        print(
            f"\nA bare `memcpy` of the 16 KiB value (`encode/set-16k`, `copy-floor`): "
            f"{fmt_time(floor[0])}."
        )


if __name__ == "__main__":
    main()
