#!/usr/bin/env python3
"""Runs two builds of the perf-ab probe against the same five masters.

Started by `.ci/perf-ab`, which builds the probes. Starts five redis-servers
on free loopback ports, each in a temporary directory, then runs the base
and the head probe in turn, `passes` times, the order rotating (base first
in even passes, head first in odd ones), and prints each pass, the medians
over the passes, head/base at p50 and p99 with the quorum floor beside them,
and a verdict. Each run measures the quorum floor interleaved with its own
cycles, so each build is taken over the floor of its own runs, which
cancels the drift of a shared machine between runs (the raw figures of two
identical builds differ by several percent from run to run here; their
ratios to the floor by much less). Head worse than base by more than 3% at
p50, as the median of head/floor over the median of base/floor, is a
regression, and the exit status is 1.
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

MASTERS = 5
WARM_UP = 500
LIMIT = 1.03


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def wait_ready(port, proc, deadline):
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"redis-server on port {port} not ready in time")


def start_masters(server, tmp):
    procs, urls = [], []
    for i, port in enumerate(free_ports(MASTERS)):
        d = os.path.join(tmp, f"m{i}")
        os.mkdir(d)
        args = [server, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no",
                "--daemonize", "no", "--save", "", "--appendonly", "no", "--dir", d,
                "--logfile", os.path.join(d, "log")]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls.append(f"redis://127.0.0.1:{port}")
    deadline = time.monotonic() + 10
    for proc, url in zip(procs, urls):
        wait_ready(int(url.rsplit(":", 1)[1]), proc, deadline)
    return procs, urls


def run_probe(binary, cycles, urls):
    done = subprocess.run([binary, str(cycles), str(WARM_UP), *urls],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{binary} failed: {done.stderr.strip()}")
    lib50, lib99, fl50, fl99, failures = (int(x) for x in done.stdout.split())
    if failures:
        raise RuntimeError(f"{binary}: {failures} cycles failed on healthy masters")
    return {"p50": lib50, "p99": lib99, "floor_p50": fl50, "floor_p99": fl99}


def us(ns):
    return f"{ns / 1000:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--cycles", type=int, default=5000)
    ap.add_argument("--base", required=True)
    ap.add_argument("--head", required=True)
    ap.add_argument("--base-desc", default="base")
    ap.add_argument("--head-desc", default="head")
    a = ap.parse_args()

    version = subprocess.run([a.server, "--version"], capture_output=True, text=True).stdout.split()
    tmp = tempfile.mkdtemp(prefix="perf-ab-")
    procs = []
    try:
        procs, urls = start_masters(a.server, tmp)
        print(f"perf-ab: {MASTERS} local masters ({' '.join(version[:3])}), "
              f"{a.passes} passes of {a.cycles} try_lock + unlock cycles per build, "
              f"interleaved in blocks of 100 with the quorum floor (classic release script); "
              f"load average {os.getloadavg()[0]:.2f}")
        print(f"  base: {a.base_desc}")
        print(f"  head: {a.head_desc}")
        print(f"{'pass':>4}  {'first':<5} | {'base p50':>9} {'p99':>8} {'floor':>7} | "
              f"{'head p50':>9} {'p99':>8} {'floor':>7}   (µs)")
        runs = {"base": [], "head": []}
        for p in range(a.passes):
            order = ["base", "head"] if p % 2 == 0 else ["head", "base"]
            for side in order:
                runs[side].append(run_probe(a.base if side == "base" else a.head, a.cycles, urls))
            b, h = runs["base"][-1], runs["head"][-1]
            print(f"{p + 1:>4}  {order[0]:<5} | {us(b['p50']):>9} {us(b['p99']):>8} "
                  f"{us(b['floor_p50']):>7} | {us(h['p50']):>9} {us(h['p99']):>8} {us(h['floor_p50']):>7}")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    def med(side, key):
        return statistics.median(r[key] for r in runs[side])

    def med_ratio(side, key, floor_key):
        return statistics.median(r[key] / r[floor_key] for r in runs[side])

    print("\nmedians over the passes (µs), and each build over the floor measured in its own runs:")
    print(f"{'':<4} {'base':>8} {'head':>8} {'head/base':>10} | {'base/floor':>10} {'head/floor':>10} {'ratio':>10}")
    verdict_ratio = None
    for q in ("p50", "p99"):
        b, h = med("base", q), med("head", q)
        bf = med_ratio("base", q, f"floor_{q}")
        hf = med_ratio("head", q, f"floor_{q}")
        print(f"{q:<4} {us(b):>8} {us(h):>8} {h / b:>9.3f}x | {bf:>9.3f}x {hf:>9.3f}x {hf / bf:>9.3f}x")
        if q == "p50":
            verdict_ratio = hf / bf
    if verdict_ratio > LIMIT:
        print(f"\nverdict: REGRESSION: head is {verdict_ratio:.3f}x base at p50 (over the floor), more than {LIMIT:.2f}x")
        return 1
    print(f"\nverdict: no regression: head is {verdict_ratio:.3f}x base at p50 (over the floor; limit {LIMIT:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
