#!/usr/bin/python3
"""Long-state replay through `kev serve` (docs/performance.md, "Memory of one long state").

Starts `kev serve` on a bundle and, with the standard library's HTTP client:
  1. state A: one /v1/systemone request whose state is --words random words (about 2.3 tokens a
     word with the synthetic tokenizer: 27,600 words are ~64,600 tokens, under Kev 1.0's 65,536)
     and two `noul` questions; latency, usage, the server's peak memory;
  2. state A again: answered from the saved point (cached_tokens), its response compared with 1.
     but for latency and cached-token counts (benchlib.comparable);
  3. state B (other words) with SIGTERM sent --sigterm-after seconds into it: B's status and the
     seconds from the signal to the server's exit (the drain bound: docs/serving.md).
The server's VmRSS / RssAnon / RssFile are sampled every second from /proc (VmHWM: the kernel's own
peak, between samples too). Linux only.

  /usr/bin/python3 bench/long_state_replay.py --kev build/ci/kev --bundle B --words 27600
With --state-a-only it stops after step 2 (the memory of one long state, e.g. a quantized bundle's
with --precision int8).
"""
import argparse
import json
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

from benchlib import comparable

WORDS = ("the customer wrote again about the late parcel and asked for a refund because the box arrived "
         "damaged while the courier said it was left at the door on monday after two failed attempts to "
         "deliver it in person").split()
QUESTIONS = {"refund": {"type": "noul", "instructions": "Did the customer ask for a refund?"},
             "late": {"type": "noul", "instructions": "Was the parcel late?"}}


def request_body(seed, words):
    r = random.Random(seed)
    state = " ".join(r.choice(WORDS) for _ in range(words))
    return json.dumps({"state": state, "questions": QUESTIONS}).encode()


def post(port, data):
    """(status, body, seconds) of one POST /v1/systemone."""
    t = time.time()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/systemone", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=7200) as r:
            status, body = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read().decode()
    except OSError as e:
        status, body = None, repr(e)
    return status, body, round(time.time() - t, 2)


class MemorySampler(threading.Thread):
    """Peak VmRSS / RssAnon / RssFile (MiB) of one process, sampled every second."""
    FIELDS = {"VmRSS:": "rss", "VmHWM:": "hwm", "RssAnon:": "anon", "RssFile:": "file"}

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, {"rss": 0, "hwm": 0, "anon": 0, "file": 0}, False

    def run(self):
        while not self.done:
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    for line in f:
                        key = self.FIELDS.get(line.split(":")[0] + ":")
                        if key:
                            self.peak[key] = max(self.peak[key], int(line.split()[1]) // 1024)
            except OSError:
                pass
            time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kev", required=True)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--words", type=int, default=27600, help="words of each state (default 27,600)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32", help="kev serve --precision (a quantized bundle: int8)")
    ap.add_argument("--state-a-only", action="store_true",
                    help="stop after state A and its repeat (no state B, no SIGTERM)")
    ap.add_argument("--sigterm-after", type=float, default=120.0,
                    help="seconds into state B at which the server gets SIGTERM")
    ap.add_argument("--prefill-step", type=int, default=2048, help="kev serve --prefill-step")
    ap.add_argument("--log", default="long_state_replay.serve.log", help="the server's stderr")
    a = ap.parse_args()
    if a.words < 1 or a.sigterm_after < 0:
        raise SystemExit("--words must be positive and --sigterm-after not negative")

    with open(a.log, "w") as log:
        srv = subprocess.Popen([a.kev, "serve", "--bundle", a.bundle, "--port", "0", "--threads",
                                str(a.threads), "--precision", a.precision, "--prefill-step", str(a.prefill_step),
                                "--usage-details", "--decimals", "-1"], stdout=subprocess.PIPE,
                               stderr=log, text=True)
    sampler = MemorySampler(srv.pid)
    sampler.start()
    try:
        line = srv.stdout.readline()  # {"listening": URL, "model": ...} once loaded
        if not line:
            raise SystemExit(f"kev serve exited before listening (its stderr: {a.log})")
        port = int(json.loads(line)["listening"].rsplit(":", 1)[1])
        time.sleep(3)
        print("after loading", dict(sampler.peak), flush=True)
        first = post(port, request_body(1, a.words))
        print("state A:", first[0], first[2], "s", first[1][:600], "peak", dict(sampler.peak), flush=True)
        again = post(port, request_body(1, a.words))
        same = first[0] == again[0] == 200 and comparable(json.loads(again[1])) == comparable(json.loads(first[1]))
        print("state A again:", again[0], again[2], "s", "response identical but for latency and cached tokens" if same else "response DIFFERENT",
              again[1][-300:], flush=True)
        if a.state_a_only:
            print("peak", dict(sampler.peak), flush=True)
            return
        second = {}
        th = threading.Thread(target=lambda: second.update(r=post(port, request_body(2, a.words))))
        th.start()
        time.sleep(a.sigterm_after)
        t = time.time()
        srv.send_signal(signal.SIGTERM)
        rc = srv.wait()
        exit_s = round(time.time() - t, 2)
        th.join()
        status, body, seconds = second["r"]
        print("state B:", status, seconds, "s", body[:300], flush=True)
        print("SIGTERM -> exit", exit_s, "s, rc", rc, "peak", dict(sampler.peak), flush=True)
    finally:
        sampler.done = True
        if srv.poll() is None:
            srv.kill()


if __name__ == "__main__":
    main()
