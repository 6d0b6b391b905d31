"""Growing states (issue 18): a conversation re-scored after every turn, against `kev serve` with
growing-state reuse (the default), with exact-match caching only (`--cache-exact-only`, the
behaviour before) and with no cache (`--cache-entries 0`).

    /usr/bin/python3 bench/growing_bench.py [--kev build/release/kev] [--bundle DIR | --shape 0.8b]
        [--turns 30] [--words 70] [--sample-every 1] [--out results.json]

Two workloads, each `--turns` turns: "append" (each turn appends a line of ~--words words to a
text trace) and "rewrite" (the same, then a one-line summary that is rewritten every turn). Each
turn asks the same two questions (a 3-option choice and a noul). Per turn: client latency,
the server's CPU seconds (from /proc: robust to other load on a shared machine), state tokens, tokens computed (input_tokens - cached_tokens: state tokens not reused plus every
question row). The exact-only and no-cache servers reuse nothing across turns (each turn is a new
state), so with --sample-every K they are sent only every K-th turn (and the first and last), and
their totals over all turns are the sum of input_tokens (exact, the same requests) and the
latency linearly interpolated between the sampled turns (labelled "estimated"). Every answer a
sampled server gives is checked byte-identical (latency and cached_tokens aside) to the reuse
server's answer to the same request.

Goal (issue 18): tokens computed over a replay <= 1.15 x (final state tokens + question row
tokens of all turns), and the last turn's latency within 1.5 x the first turn's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from benchlib import comparable, synth_bundle

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
QUESTIONS = {"next": {"type": "choice", "instructions": "What should the agent do next?",
                      "criteria": {"continue": "keep going", "escalate": "hand to a human", "stop": None}},
             "risk": {"type": "noul", "instructions": "Is the customer at risk of leaving?"}}
WORDS = ("order refund parcel courier invoice address delay warehouse label tracking customer agent "
         "replacement discount voucher payment card status shipped returned damaged missing weekend "
         "priority ticket reply confirm cancel schedule").split()


def line(t, words):
    body = " ".join(WORDS[(t * 7 + k * 3) % len(WORDS)] for k in range(words))
    return f"turn {t}: tool_{t % 5} returned {t * 37 % 1000} items; note: {body}."


def trace(kind, turns, words):
    out = []
    for t in range(turns):
        text = "\n".join(line(i, words) for i in range(t + 1))
        if kind == "rewrite":
            moods = ["calm", "impatient", "relieved", "angry"]
            text += f"\nsummary: {t + 1} turns so far, customer {moods[t % 4]}, open items {t * 3 % 7}"
        out.append({"state": text, "questions": QUESTIONS})
    return out


def post(port, body, timeout=3600):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        t = time.perf_counter()
        conn.request("POST", "/v1/systemone", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        dt = time.perf_counter() - t
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
        return dt, json.loads(data)
    finally:
        conn.close()


def start(kev, bundle, args):
    p = subprocess.Popen([kev, "serve", "--bundle", bundle, "--port", "0", "--max-state", "16384",
                          "--max-row", "20000", "--usage-details", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    listening = json.loads(p.stdout.readline())
    return p, int(listening["listening"].rsplit(":", 1)[1])


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat): the server's own work,
    much less sensitive than wall time to other load on a shared machine."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interpolate(samples, n):
    """Latency per turn 0..n-1 from {turn: seconds}, linear between sampled turns."""
    ks = sorted(samples)
    out = []
    for t in range(n):
        lo = max(k for k in ks if k <= t)
        hi = min(k for k in ks if k >= t)
        out.append(samples[lo] if lo == hi else samples[lo] + (samples[hi] - samples[lo]) * (t - lo) / (hi - lo))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kev", default=os.path.join(ROOT, "build", "release", "kev"))
    ap.add_argument("--bundle")
    ap.add_argument("--shape", default="0.8b")
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--words", type=int, default=70)
    ap.add_argument("--sample-every", type=int, default=1)
    ap.add_argument("--workloads", default="append,rewrite")
    ap.add_argument("--modes", default="reuse,exact,none")
    ap.add_argument("--extra", default="", help="extra `kev serve` flags for every server, space-separated")
    ap.add_argument("--out")
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    bundle = a.bundle or synth_bundle(a.kev, tmp.name, shape=a.shape)
    extra = a.extra.split()
    mode_args = {"reuse": [], "exact": ["--cache-exact-only"], "none": ["--cache-entries", "0"]}
    results = {}
    for kind in a.workloads.split(","):
        reqs = trace(kind, a.turns, a.words)
        sampled = sorted({t for t in range(a.turns) if t % a.sample_every == 0} | {0, a.turns - 1})
        res = results[kind] = {}
        reference = {}
        for mode in a.modes.split(","):
            proc, port = start(a.kev, bundle, [*mode_args[mode], *extra])
            try:
                turns = range(a.turns) if mode == "reuse" else sampled
                t0 = time.perf_counter()
                rows = []
                for t in turns:
                    cpu = cpu_seconds(proc.pid)
                    dt, body = post(port, reqs[t])
                    cpu = cpu_seconds(proc.pid) - cpu
                    u = body["usage"]
                    rows.append({"turn": t, "latency_s": round(dt, 3), "cpu_s": round(cpu, 2),
                                 "state_tokens": u["state_tokens"],
                                 "input_tokens": u["input_tokens"], "cached_tokens": u["cached_tokens"],
                                 "computed_tokens": u["input_tokens"] - u["cached_tokens"]})
                    if t in reference:
                        assert comparable(body) == reference[t], f"{kind} turn {t}: {mode} differs from the first mode"
                    else:
                        reference[t] = comparable(body)
                    print(f"{kind} {mode} turn {t}: {dt:.2f} s ({cpu:.1f} CPU s), state {u['state_tokens']}, "
                          f"reused {u['cached_tokens']}", file=sys.stderr, flush=True)
                res[mode] = {"wall_s": round(time.perf_counter() - t0, 2), "turns": rows}
            finally:
                proc.terminate()
                proc.wait(30)
        # Summary per mode over all turns.
        full = res[a.modes.split(",")[0]]["turns"]
        final_state = full[-1]["state_tokens"]
        rows_tokens = sum(r["input_tokens"] - r["state_tokens"] for r in full)
        inputs = sum(r["input_tokens"] for r in full)
        for mode, r in res.items():
            lat = {x["turn"]: x["latency_s"] for x in r["turns"]}
            cpu = {x["turn"]: x["cpu_s"] for x in r["turns"]}
            per_turn = [lat[t] for t in range(a.turns)] if len(lat) == a.turns else interpolate(lat, a.turns)
            computed = sum(x["computed_tokens"] for x in r["turns"]) if len(lat) == a.turns else inputs
            r["summary"] = {"tokens_computed": computed, "final_state_tokens": final_state,
                            "question_row_tokens": rows_tokens,
                            "computed_over_goal_base": round(computed / (final_state + rows_tokens), 3),
                            "first_turn_s": per_turn[0], "last_turn_s": per_turn[-1],
                            "last_over_first": round(per_turn[-1] / per_turn[0], 2),
                            "cpu_first_s": cpu[0], "cpu_last_s": cpu[a.turns - 1],
                            "cpu_last_over_first": round(cpu[a.turns - 1] / max(cpu[0], 0.01), 2),
                            "total_latency_s": round(sum(per_turn), 1),
                            "estimated": len(lat) != a.turns}
            print(f"{kind} {mode}: " + json.dumps(r["summary"]), flush=True)
    meta = {"turns": a.turns, "words": a.words, "shape": a.shape if not a.bundle else a.bundle,
            "sample_every": a.sample_every, "extra": extra, "loadavg": os.getloadavg()}
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
