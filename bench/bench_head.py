#!/usr/bin/python3
"""Pointer head: kev-native (bench_head) vs torch in the same run, at d = 2560, p = 256.

Cases: one question with 255 options; a batch of 64 questions x 8 options. Each timing covers
projection + calibration (softmax(logit / T) per question). Torch runs the reference
PointerHead form (k(h_opts) @ q(h_decide) * scale, / T in eval mode) with torch.set_num_threads
equal to the cores kev uses; for the batch, both the reference's batched `many` form and one
forward call per question. Prints a markdown table (median of repeated runs) with ratios.

usage: bench/bench_head.py --bench-bin build/release/bench/bench_head [--threads 2]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import head_oracle  # noqa: E402

D, P, T = 2560, 256, 2.406050072164233


def median_us(fn, min_seconds=1.0, min_reps=20):
    fn()  # warm-up
    times, start = [], time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def torch_timings(threads):
    torch.set_num_threads(threads)
    head = head_oracle.build_head(D, P)
    head.eval()
    head.temperature = T
    g = torch.Generator().manual_seed(1)
    one_dec, one_opts = torch.rand(D, generator=g) * 2 - 1, torch.rand(255, D, generator=g) * 2 - 1
    decs = torch.rand(64, D, generator=g) * 2 - 1
    opts = torch.rand(64 * 8, D, generator=g) * 2 - 1
    owner = torch.arange(64).repeat_interleave(8)
    counts = [8] * 64

    def single():
        with torch.no_grad():
            torch.softmax(head(one_dec, one_opts), -1)

    def batch_many():  # the reference's batched form, then one softmax per question
        with torch.no_grad():
            z = (head.k(opts) * head.q(decs)[owner]).sum(-1) * head.scale / head.temperature
            [torch.softmax(x, -1) for x in torch.split(z, counts)]

    def batch_loop():
        with torch.no_grad():
            for i in range(64):
                torch.softmax(head(decs[i], opts[8 * i: 8 * i + 8]), -1)

    return {"1x255": median_us(single), "64x8 many": median_us(batch_many), "64x8 loop": median_us(batch_loop)}


def kev_timings(bench_bin, threads):
    env = dict(os.environ, KEV_THREADS=str(threads))
    out = subprocess.run([bench_bin, "--benchmark_format=json", "--benchmark_min_time=1",
                          "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true",
                          "--benchmark_filter=auto"],
                         check=True, capture_output=True, text=True, env=env).stdout
    res = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            res[b["run_name"].replace("/real_time", "")] = b["real_time"]  # microseconds
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-bin", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    t = torch_timings(args.threads)
    k = kev_timings(args.bench_bin, args.threads)
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {args.threads} threads, load average {load:.1f}\n")
    print("| case | kev (all threads) | kev (1 thread) | torch reference | torch / kev |")
    print("|---|---|---|---|---|")
    kev1, kev1t = k["head_1x255/auto/allthreads"], k["head_1x255/auto/1thread"]
    print(f"| 1 question x 255 options | {kev1:.0f} us | {kev1t:.0f} us | {t['1x255']:.0f} us (forward) "
          f"| {t['1x255'] / kev1:.1f}x |")
    kb, kbt = k["head_64x8/auto/allthreads"], k["head_64x8/auto/1thread"]
    best = min(t["64x8 many"], t["64x8 loop"])
    print(f"| 64 questions x 8 options | {kb:.0f} us | {kbt:.0f} us | {t['64x8 many']:.0f} us (`many`), "
          f"{t['64x8 loop']:.0f} us (64 forwards) | {best / kb:.1f}x (vs best torch) |")
    if math.isnan(kev1):
        sys.exit(1)


if __name__ == "__main__":
    main()
