#!/usr/bin/env python3
"""Watches one `kev serve` start on a fixed loopback port: what /health/ready, /health/live and
/v1/systemone answer from the first accepted connection until ready (docs/deploy.md).

    /usr/bin/python3 bench/replica_loading.py --kev build/release/kev --bundle BUNDLE

Prints each change as (seconds since start, ready status, ready body status, /v1 status,
/v1 Retry-After, live status). A tiny bundle loads in milliseconds and may go straight to
ready; a 0.8B-dimension one shows "loading" for a while (longer with a cold page cache)."""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "pylib"))
from kevcluster import free_port, request  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kev", required=True)
    p.add_argument("--bundle", required=True)
    a = p.parse_args()
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen([a.kev, "serve", "--bundle", a.bundle, "--port", str(port), "--quiet"],
                            stdout=subprocess.PIPE, text=True)
    seen = []
    try:
        while time.monotonic() - t0 < 300:
            try:
                st, _, body = request(port, "GET", "/health/ready", timeout=5)
                v1 = request(port, "POST", "/v1/systemone", {"state": "x", "questions": {}}, timeout=5)
                entry = (st, body.get("status"), v1[0], v1[1].get("retry-after"),
                         request(port, "GET", "/health/live", timeout=5)[0])
            except OSError:
                entry = "connection refused"
            if not seen or seen[-1][1] != entry:
                seen.append((round(time.monotonic() - t0, 3), entry))
            if entry != "connection refused" and entry[0] == 200:
                break
            time.sleep(0.01)
        for s in seen:
            print(*s)
        print("listening line:", proc.stdout.readline().strip(), "at", round(time.monotonic() - t0, 3), "s")
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
