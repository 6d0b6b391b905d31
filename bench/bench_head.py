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
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "oracle"))
import head_oracle  # noqa: E402

D, P, T = 2560, 256, 2.406050072164233


class Timing:
    """Median and minimum of repeated runs, in microseconds. On a shared machine the minimum is
    the better estimate of the uncontended cost; both are reported."""

    def __init__(self, samples_us):
        self.median, self.min = statistics.median(samples_us), min(samples_us)

    def __str__(self):
        return f"{self.median:.0f} us (min {self.min:.0f})"

    def ratio(self, other):
        return f"{self.median / other.median:.1f}x (min {self.min / other.min:.1f}x)"


def median_us(fn, min_seconds=1.0, min_reps=20):
    fn()  # warm-up
    times, start = [], time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return Timing(times)


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

    wk, bk = head.k.weight, head.k.bias

    def single_folded():  # kev's algorithm written in torch: v = W_k^T q(h_d)
        with torch.no_grad():
            u = head.q(one_dec)
            z = (one_opts @ (u @ wk) + bk @ u) * head.scale / head.temperature
            torch.softmax(z, -1)

    def batch_folded():
        with torch.no_grad():
            u = head.q(decs)
            z = ((opts.view(64, 8, D) * (u @ wk)[:, None, :]).sum(-1) + (u @ bk)[:, None]) * head.scale / T
            torch.softmax(z, -1)  # rows are questions: still per-question softmax

    return {"1x255": median_us(single), "64x8 many": median_us(batch_many), "64x8 loop": median_us(batch_loop),
            "1x255 folded": median_us(single_folded), "64x8 folded": median_us(batch_folded)}


def kev_timings(bench_bin, threads):
    env = dict(os.environ, KEV_THREADS=str(threads))
    out = subprocess.run([bench_bin, "--samples", "300"], check=True, capture_output=True, text=True, env=env).stdout
    samples = json.loads(out)
    return {name: Timing(v) for name, v in samples.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-bin", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    t = torch_timings(args.threads)
    k = kev_timings(args.bench_bin, args.threads)
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {args.threads} threads, load average {load:.1f}; "
          f"median of repeated runs (minimum in brackets)\n")
    print("| case | kev, all threads | kev, 1 thread | torch reference | torch / kev | torch running kev's folded algorithm |")
    print("|---|---|---|---|---|---|")
    kev1, kev1t = k["head_1x255/allthreads"], k["head_1x255/1thread"]
    print(f"| 1 question x 255 options | {kev1} | {kev1t} | {t['1x255']} (forward) "
          f"| {t['1x255'].ratio(kev1)} | {t['1x255 folded']} ({t['1x255 folded'].ratio(kev1)}) |")
    kb, kbt = k["head_64x8/allthreads"], k["head_64x8/1thread"]
    best = min(t["64x8 many"], t["64x8 loop"], key=lambda x: x.median)
    print(f"| 64 questions x 8 options | {kb} | {kbt} | {t['64x8 many']} (`many`); {t['64x8 loop']} (64 forwards) "
          f"| {best.ratio(kb)} (best torch) | {t['64x8 folded']} ({t['64x8 folded'].ratio(kb)}) |")


if __name__ == "__main__":
    main()
