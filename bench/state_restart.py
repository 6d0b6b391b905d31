#!/usr/bin/python3
"""Saved states on disk (`kev serve --state-dir`): what a restarted replica pays to continue a
conversation from disk, against a replica that kept it in memory and one that recomputes it.

    /usr/bin/python3 bench/state_restart.py [--kev build/ci/kev] [--work /tmp/kev-state-restart]
        [--replicas 3] [--conversations 6] [--warm-turns 3] [--restore 0.8b:8192]
        [--json results.json]

A. Rolling restart. --replicas `kev serve --state-dir SHARED` processes, plus one control
   replica (`--state-dir` of its own, never restarted). Each of --conversations conversations
   belongs to a replica by a hash of its name (affinity) and grows turn by turn (a line of
   --append-words words a turn, after a first state of --first-words + c * --step-words words:
   several hundred to a few thousand tokens at 0.8B dimensions). Turns 0 .. T-2 go to both the
   replica and the control; then the replicas restart one after the other: each gets its
   conversations' turn T-1 (also sent to the control first), then SIGTERM at once (its drain
   writes what is still queued), then a new process on the same directory. Drain: seconds from
   SIGTERM to exit, the server's "wrote X of Y queued saved points" line, bytes of the files that
   appeared meanwhile. Then turn T of each conversation, one request at a time:
     disk: on its restarted replica (continues from turn T-1's point on disk);
     mem:  on the control (turn T-1 in memory; interleaved with disk, conversation by conversation);
     cold: after a second rolling restart without --state-dir (computes the whole state).
   Per request: latency, the server's CPU seconds (utime + stime of that process from /proc; one
   request at a time, so the CPU is attributable) at the response and once its saved points are
   written (pending 0 in /health: the whole cost of the turn). Every disk and mem answer is
   compared byte for byte with the cold one (latency and cached-token counts aside); the warm
   turns' answers of the replicas with the control's.
B. Restore of one long state, per --restore SHAPE:TOKENS: a server with --state-dir computes the
   state (one noul question): cold, then SIGTERM at once (its drain writes what is still queued:
   seconds to exit, the drain's line, the files then on disk); a fresh server on the same directory answers the same request
   (restores the whole state from disk), then again (memory). File size = bytes restored
   (/metrics); restore GB/s = size / (restore latency - memory latency). The file was just written,
   so it is read from the page cache (warm), not from the device.

Bundles: synthetic (kev synth --shape S -> pin -> export, benchlib.synth_bundle) under --work,
reused when already there. Prints a table; --json writes everything. Linux only.
"""
import argparse
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

from benchlib import comparable, synth_bundle

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
WORDS = ("order refund parcel courier invoice address delay warehouse label tracking customer agent "
         "replacement discount voucher payment card status shipped returned damaged missing weekend "
         "priority ticket reply confirm cancel schedule the a was and to of late box door monday").split()
QUESTIONS = {"next": {"type": "choice", "instructions": "What should the agent do next?",
                      "criteria": {"continue": "keep going", "escalate": "hand to a human", "stop": None}},
             "risk": {"type": "noul", "instructions": "Is the customer at risk of leaving?"}}
ONE_QUESTION = {"late": {"type": "noul", "instructions": "Was the parcel late?"}}
POINT_FILE = re.compile(r"^\d+-[0-9a-f]{16}\.kvs$")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def cpu_seconds(pid):
    """utime + stime of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """One `kev serve` process on port 0; its stderr in a log file."""

    def __init__(self, kev, bundle, name, logdir, state_dir=None, threads=2, extra=()):
        self.name, self.state_dir = name, state_dir
        self.log_path = os.path.join(logdir, f"{name}.{int(time.time() * 1000)}.log")
        args = [kev, "serve", "--bundle", bundle, "--port", "0", "--threads", str(threads),
                "--usage-details", *extra]
        if state_dir:
            args += ["--state-dir", state_dir]
        t = time.perf_counter()
        with open(self.log_path, "w") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{name}: kev serve exited before listening (log: {self.log_path})")
        self.start_s = time.perf_counter() - t
        self.port = int(json.loads(line)["listening"].rsplit(":", 1)[1])

    def _conn(self, timeout):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path):
        c = self._conn(60)
        try:
            c.request("GET", path)
            data = c.getresponse().read().decode()
        finally:
            c.close()
        return json.loads(data) if path != "/metrics" else data

    def metrics(self):
        out = {}
        for line in self.get("/metrics").splitlines():
            if line.startswith("kev_state_disk_"):
                k, v = line.split()
                out[k] = float(v)
        return out

    def post(self, body, wait=True):
        """(latency s, body, CPU s at the response, CPU s once its saved points are written; without
        `wait`, CPU s at the response again and the writes left queued)."""
        cpu0 = cpu_seconds(self.proc.pid)
        c = self._conn(7200)
        try:
            t = time.perf_counter()
            c.request("POST", "/v1/systemone", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            dt = time.perf_counter() - t
        finally:
            c.close()
        if r.status != 200:
            raise RuntimeError(f"{self.name}: HTTP {r.status}: {data[:300]!r}")
        cpu1 = cpu_seconds(self.proc.pid)
        if not wait:
            return dt, json.loads(data), cpu1 - cpu0, cpu1 - cpu0
        self.wait_written()
        return dt, json.loads(data), cpu1 - cpu0, cpu_seconds(self.proc.pid) - cpu0

    def wait_written(self, timeout=600):
        if not self.state_dir:
            return
        t = time.time()
        while self.get("/health")["state_dir"]["pending"] and time.time() - t < timeout:
            time.sleep(0.02)

    def stop(self):
        """SIGTERM; returns (seconds to exit, the drain's "wrote ..." line or None)."""
        t = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(600)
        dt = time.perf_counter() - t
        self.proc.stdout.close()
        with open(self.log_path) as f:
            wrote = [l.strip() for l in f if "queued saved points" in l]
        return dt, (wrote[-1] if wrote else None)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def point_files(state_dir):
    """{path: bytes} of the finished point files under a --state-dir (every identity)."""
    out = {}
    for root, _, files in os.walk(state_dir):
        for f in files:
            if POINT_FILE.match(f):
                p = os.path.join(root, f)
                try:
                    out[p] = os.path.getsize(p)
                except OSError:
                    pass
    return out


def bundle_for(kev, work, shape):
    d = os.path.join(work, f"bundle-{shape}")
    if not os.path.isfile(os.path.join(d, "bundle", "kev_export.json")):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        log(f"synth {shape} bundle under {d} ...")
        synth_bundle(kev, d, shape=shape)
    return os.path.join(d, "bundle")


def conversation(c, turns, first_words, step_words, append_words):
    """The request of each turn 0..turns of conversation c: a growing trace."""
    r = random.Random(1000 + c)
    lines = [" ".join(r.choice(WORDS) for _ in range(first_words + c * step_words))]
    out = []
    for t in range(turns + 1):
        if t:
            lines.append(f"turn {t}: tool_{(c + t) % 5} returned {(c * 31 + t * 37) % 1000} items; " +
                         " ".join(r.choice(WORDS) for _ in range(append_words)) + ".")
        out.append({"state": f"conversation {c}\n" + "\n".join(lines), "questions": QUESTIONS})
    return out


def replica_of(name, replicas):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % replicas


def ratio(a, b):
    return round(a / b, 3) if b else None


def part_a(a, bundle, logdir, mismatches):
    shared, control_dir = os.path.join(a.work, "shared"), os.path.join(a.work, "control")
    for d in (shared, control_dir):
        shutil.rmtree(d, ignore_errors=True)
    T = a.warm_turns
    convs = [conversation(c, T, a.first_words, a.step_words, a.append_words) for c in range(a.conversations)]
    owner = [replica_of(f"conversation-{c}", a.replicas) for c in range(a.conversations)]
    log(f"A: {a.conversations} conversations on {a.replicas} replicas, owners {owner}")
    srv = lambda r, d=shared: Server(a.kev, bundle, f"replica{r}", logdir, d, a.threads, a.serve_args)
    replicas = [srv(r) for r in range(a.replicas)]
    control = Server(a.kev, bundle, "control", logdir, control_dir, a.threads, a.serve_args)
    everyone = [control] + replicas
    res = {"owners": owner, "turns": [], "restarts": [], "cold_restarts": [], "measured": []}
    try:
        def warm(c, t, last=False):
            # The last warm turn: the control first, then the replica, whose writes stay queued
            # for the SIGTERM that follows (its drain writes them).
            lc, bc, cc, _ = control.post(convs[c][t])
            lr, br, cr, _ = replicas[owner[c]].post(convs[c][t], wait=not last)
            if comparable(br) != comparable(bc):
                mismatches.append(f"A warm conversation {c} turn {t}: replica != control")
            u = br["usage"]
            res["turns"].append({"conversation": c, "turn": t, "state_tokens": u["state_tokens"],
                                 "cached_tokens": u["cached_tokens"], "replica_s": round(lr, 3),
                                 "control_s": round(lc, 3)})
            log(f"  warm c{c} t{t}: state {u['state_tokens']} reused {u['cached_tokens']}, {lr:.2f} s")

        t0 = time.perf_counter()
        for t in range(T - 1):
            for c in range(a.conversations):
                warm(c, t)
        # Rolling restart: each replica's last warm turn, then SIGTERM at once, then a new process.
        for r in range(a.replicas):
            for c in range(a.conversations):
                if owner[c] == r:
                    warm(c, T - 1, last=True)
            before = point_files(shared)
            m = replicas[r].metrics()
            drain_s, line = replicas[r].stop()
            after = point_files(shared)
            new = {p: s for p, s in after.items() if p not in before}
            replicas[r] = srv(r)
            res["restarts"].append({"replica": r, "pending_at_sigterm": m.get("kev_state_disk_pending"),
                                    "sigterm_to_exit_s": round(drain_s, 3), "drain_line": line,
                                    "files_written_in_drain": len(new), "bytes_written_in_drain": sum(new.values()),
                                    "new_process_ready_s": round(replicas[r].start_s, 2)})
            log(f"  restart replica {r}: exit {drain_s:.2f} s after SIGTERM, {line}, "
                f"{len(new)} files / {sum(new.values()) / 2**20:.1f} MiB in the drain, ready {replicas[r].start_s:.1f} s")
        res["warm_wall_s"] = round(time.perf_counter() - t0, 1)
        # Turn T: disk (restarted replica) and mem (control), interleaved conversation by conversation.
        rows = [{"conversation": c, "replica": owner[c]} for c in range(a.conversations)]
        answers = [{} for _ in range(a.conversations)]
        for c in range(a.conversations):
            for cond, s in (("disk", replicas[owner[c]]), ("mem", control)):
                m0 = s.metrics()
                lat, body, cpu, cpu_all = s.post(convs[c][T])
                m1 = s.metrics()
                answers[c][cond] = comparable(body)
                rows[c][cond] = {"latency_s": round(lat, 3), "cpu_s": round(cpu, 2), "cpu_with_writes_s": round(cpu_all, 2),
                                 "state_tokens": body["usage"]["state_tokens"],
                                 "cached_tokens": body["usage"]["cached_tokens"],
                                 "disk_hits": m1["kev_state_disk_hits_total"] - m0["kev_state_disk_hits_total"],
                                 "bytes_restored": m1["kev_state_disk_read_bytes_total"] - m0["kev_state_disk_read_bytes_total"],
                                 "bytes_written": m1["kev_state_disk_written_bytes_total"] - m0["kev_state_disk_written_bytes_total"]}
                log(f"  turn {T} c{c} {cond}: {lat:.2f} s, CPU {cpu:.2f} / {cpu_all:.2f} s, "
                    f"reused {body['usage']['cached_tokens']} of {body['usage']['state_tokens']}")
        # Cold: the same rolling restart without --state-dir.
        for r in range(a.replicas):
            drain_s, line = replicas[r].stop()
            replicas[r] = srv(r, None)
            res["cold_restarts"].append({"replica": r, "sigterm_to_exit_s": round(drain_s, 3), "drain_line": line})
        for c in range(a.conversations):
            lat, body, cpu, _ = replicas[owner[c]].post(convs[c][T])
            answers[c]["cold"] = comparable(body)
            rows[c]["cold"] = {"latency_s": round(lat, 3), "cpu_s": round(cpu, 2), "cpu_with_writes_s": round(cpu, 2),
                               "state_tokens": body["usage"]["state_tokens"], "cached_tokens": body["usage"]["cached_tokens"]}
            log(f"  turn {T} c{c} cold: {lat:.2f} s, CPU {cpu:.2f} s")
            for cond in ("disk", "mem"):
                same = answers[c][cond] == answers[c]["cold"]
                rows[c][f"{cond}_identical_to_cold"] = same
                if not same:
                    mismatches.append(f"A turn {T} conversation {c}: {cond} != cold")
        res["measured"] = rows
    finally:
        for s in everyone + replicas:
            s.kill()
    tot = {cond: {k: sum(r[cond][k] for r in rows) for k in ("latency_s", "cpu_s", "cpu_with_writes_s")}
           for cond in ("disk", "mem", "cold")}
    per = lambda k, x, y: sorted(ratio(r[x][k], r[y][k]) for r in rows)
    res["summary"] = {
        "totals": {c: {k: round(v, 2) for k, v in d.items()} for c, d in tot.items()},
        "disk_over_mem_cpu_with_writes": ratio(tot["disk"]["cpu_with_writes_s"], tot["mem"]["cpu_with_writes_s"]),
        "disk_over_mem_cpu_at_response": ratio(tot["disk"]["cpu_s"], tot["mem"]["cpu_s"]),
        "disk_over_mem_latency": ratio(tot["disk"]["latency_s"], tot["mem"]["latency_s"]),
        "cold_over_disk_cpu": ratio(tot["cold"]["cpu_s"], tot["disk"]["cpu_with_writes_s"]),
        "cold_over_disk_latency": ratio(tot["cold"]["latency_s"], tot["disk"]["latency_s"]),
        "per_conversation_disk_over_mem_cpu_with_writes": per("cpu_with_writes_s", "disk", "mem"),
        "per_conversation_cold_over_disk_latency": per("latency_s", "cold", "disk"),
        "state_tokens_at_restart": [r["disk"]["cached_tokens"] for r in rows],
        "state_tokens_turn_T": [r["disk"]["state_tokens"] for r in rows],
        "bytes_restored": sum(r["disk"]["bytes_restored"] for r in rows),
        "goal_disk_over_mem_cpu": 1.2,
    }
    return res


def part_b(a, logdir, mismatches):
    out = []
    for spec in a.restore.split(","):
        if not spec:
            continue
        shape, tokens = spec.split(":")
        tokens = int(tokens)
        bundle = bundle_for(a.kev, a.work, shape)
        d = os.path.join(a.work, f"restore-{shape}-{tokens}")
        shutil.rmtree(d, ignore_errors=True)
        r = random.Random(tokens)
        words = int(tokens / a.tokens_per_word)
        body = {"state": " ".join(r.choice(WORDS) for _ in range(words)), "questions": ONE_QUESTION}
        row = {"shape": shape, "target_tokens": tokens}
        log(f"B: {shape}, ~{tokens} tokens: cold compute ...")
        s = Server(a.kev, bundle, f"restore-{shape}-{tokens}-a", logdir, d, a.threads, a.serve_args)
        try:
            # SIGTERM right after the answer: the drain writes what is still queued.
            lat, cold, cpu, _ = s.post(body, wait=False)
            m = s.metrics()
            exit_s, line = s.stop()
            files = point_files(d)
            row.update(state_tokens=cold["usage"]["state_tokens"], cold_s=round(lat, 2), cold_cpu_s=round(cpu, 2),
                       pending_at_sigterm=int(m["kev_state_disk_pending"]),
                       written_before_sigterm=int(m["kev_state_disk_written_bytes_total"]),
                       points_dropped=int(m["kev_state_disk_dropped_total"]),
                       files_after_exit=len(files), bytes_after_exit=sum(files.values()),
                       first_exit_s=round(exit_s, 2), drain_line=line)
        finally:
            s.kill()
        s = Server(a.kev, bundle, f"restore-{shape}-{tokens}-b", logdir, d, a.threads, a.serve_args)
        try:
            row["fresh_ready_s"] = round(s.start_s, 2)
            lat, disk, cpu, _ = s.post(body)
            m = s.metrics()
            lat2, mem, cpu2, _ = s.post(body)
            row.update(restore_s=round(lat, 3), restore_cpu_s=round(cpu, 2), mem_s=round(lat2, 3), mem_cpu_s=round(cpu2, 2),
                       restored_tokens=disk["usage"]["cached_tokens"], file_bytes=int(m["kev_state_disk_read_bytes_total"]),
                       disk_hits=int(m["kev_state_disk_hits_total"]))
            net = lat - lat2
            row["restore_net_s"] = round(net, 3)
            row["restore_GBps"] = round(row["file_bytes"] / net / 1e9, 2) if net > 0 else None
            row["cold_over_restore"] = ratio(row["cold_s"], lat)
            row["page_cache"] = "warm (the file was just written)"
            for name, b in (("restore", disk), ("mem", mem)):
                same = comparable(b) == comparable(cold)
                row[f"{name}_identical_to_cold"] = same
                if not same:
                    mismatches.append(f"B {shape} {tokens}: {name} != cold")
            s.stop()
        finally:
            s.kill()
        if not a.keep_files:
            shutil.rmtree(d, ignore_errors=True)
        log(f"  {json.dumps(row)}")
        out.append(row)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kev", default=os.path.join(ROOT, "build", "ci", "kev"))
    ap.add_argument("--work", default="/tmp/kev-state-restart", help="bundles, state dirs, logs (bundles reused)")
    ap.add_argument("--shape", default="0.8b", help="dims of part A's bundle")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--conversations", type=int, default=6)
    ap.add_argument("--warm-turns", type=int, default=3, help="turns before the restart (T >= 1)")
    ap.add_argument("--first-words", type=int, default=160, help="words of conversation 0's first state")
    ap.add_argument("--step-words", type=int, default=60, help="more words in each next conversation's first state")
    ap.add_argument("--append-words", type=int, default=55, help="words a turn appends")
    ap.add_argument("--restore", default="0.8b:8192",
                    help="part B, comma list of SHAPE:TOKENS (e.g. 0.8b:8192,0.8b:32768,4b:8192); '' skips it")
    ap.add_argument("--tokens-per-word", type=float, default=3.35, help="to size part B's states")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--serve-args", default="", help="extra `kev serve` flags, space-separated")
    ap.add_argument("--parts", default="A,B")
    ap.add_argument("--keep-files", action="store_true", help="keep part B's state files")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.warm_turns < 1 or a.replicas < 1 or a.conversations < 1:
        raise SystemExit("--warm-turns, --replicas and --conversations must be at least 1")
    a.kev = os.path.abspath(a.kev)
    a.serve_args = a.serve_args.split()
    os.makedirs(a.work, exist_ok=True)
    logdir = os.path.join(a.work, "logs")
    os.makedirs(logdir, exist_ok=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    meta = {"commit": commit + (" (uncommitted changes)" if dirty else ""),
            "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
            "kev_cpu": json.loads(subprocess.run([a.kev, "cpu"], capture_output=True, text=True).stdout),
            "cores": os.cpu_count(), "threads": a.threads, "loadavg_start": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "args": {k: v for k, v in vars(a).items() if k != "kev"}}
    mismatches, results = [], {"meta": meta}
    t0 = time.perf_counter()
    if "A" in a.parts:
        results["rolling_restart"] = part_a(a, bundle_for(a.kev, a.work, a.shape), logdir, mismatches)
    if "B" in a.parts:
        results["restore"] = part_b(a, logdir, mismatches)
    meta["loadavg_end"] = os.getloadavg()
    meta["wall_s"] = round(time.perf_counter() - t0, 1)
    results["mismatches"] = mismatches
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)

    print(f"CPU: {meta['cpu_model']}, {meta['cores']} cores, kev cpu gemm {meta['kev_cpu']['kernels']['gemm']}; "
          f"commit {meta['commit']}; threads {a.threads}; load average {meta['loadavg_start'][0]:.1f} -> "
          f"{meta['loadavg_end'][0]:.1f}; {meta['wall_s']} s")
    if "rolling_restart" in results:
        A = results["rolling_restart"]
        s = A["summary"]
        print(f"\nA. rolling restart: {a.replicas} replicas, {a.conversations} conversations, restart after "
              f"{a.warm_turns} turns; states at restart {min(s['state_tokens_at_restart'])}-{max(s['state_tokens_at_restart'])} tokens")
        print("condition | latency s (sum) | server CPU s at response | CPU s with its writes")
        for cond in ("disk", "mem", "cold"):
            t = s["totals"][cond]
            print(f"{cond:9} | {t['latency_s']:15.2f} | {t['cpu_s']:24.2f} | {t['cpu_with_writes_s']:.2f}")
        print(f"disk / mem CPU (with writes) {s['disk_over_mem_cpu_with_writes']} (at response "
              f"{s['disk_over_mem_cpu_at_response']}; goal <= 1.2); per conversation "
              f"{s['per_conversation_disk_over_mem_cpu_with_writes']}")
        print(f"disk / mem latency {s['disk_over_mem_latency']}; cold / disk latency {s['cold_over_disk_latency']}, "
              f"CPU {s['cold_over_disk_cpu']}")
        for r in A["restarts"]:
            print(f"restart replica {r['replica']}: pending at SIGTERM {r['pending_at_sigterm']:.0f}, exit "
                  f"{r['sigterm_to_exit_s']} s, drain {r['files_written_in_drain']} files "
                  f"{r['bytes_written_in_drain'] / 2**20:.1f} MiB ({r['drain_line']}), new ready {r['new_process_ready_s']} s")
    if results.get("restore"):
        print("\nB. restore | tokens | file MiB | cold s | restore s | memory s | restore - memory s | GB/s | cold / restore")
        for r in results["restore"]:
            print(f"{r['shape']:9} | {r['state_tokens']} | {r['file_bytes'] / 2**20:.0f} | {r['cold_s']} | {r['restore_s']} | "
                  f"{r['mem_s']} | {r['restore_net_s']} | {r['restore_GBps']} | {r['cold_over_restore']}")
        for r in results["restore"]:
            if "pending_at_sigterm" in r:
                print(f"{r['shape']} {r['state_tokens']}: SIGTERM after the cold answer: {r['pending_at_sigterm']} points "
                      f"queued, exit {r['first_exit_s']} s ({r['drain_line']}), {r['files_after_exit']} files "
                      f"{r['bytes_after_exit'] / 2**20:.0f} MiB, {r['points_dropped']} dropped")
    print(f"\nanswers differing from a cold server's: {len(mismatches)}" + (f": {mismatches}" if mismatches else ""))
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
