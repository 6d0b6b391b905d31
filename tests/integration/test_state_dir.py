"""Saved points on disk (--state-dir), through the real binary: a conversation's next turn after a
restart continues from the files an earlier process left, and every answer is byte-identical to
a cold server's, one with no cache at all (`--cache-entries 0`), which computes every state from
its first token (compared as in test_serve_growing.py: the whole body but latency_ms and
usage.cached_tokens). usage.cached_tokens (--usage-details) shows that the reuse happened.

Proved here: a restart (SIGTERM's drain writes what is queued, no temporary file is left, a fresh
process restores every conversation; fp32 and int8); a corruption campaign (every file a lookup
reaches is damaged one way: truncated, a byte flipped in each header field, the ids, the payload
and the checksum, bytes appended, another bundle's file, the same point written under int8,
another point's file, garbage), each damaged file ignored, counted in
kev_state_disk_rejected_total, logged and removed, the answer still the cold one; two servers
writing the same points at once; a failing disk (KEV_FAULT_WRITE_AFTER_BYTES: saving pauses,
requests do not fail, nothing partial is left); `kev score --state-dir` across two invocations;
the directory's byte bound (--state-dir-bytes); foreign entries in the directory, left alone;
and files damaged in place while a server reads them.

Every server is started with --port 0 on 127.0.0.1 and always killed in teardown."""
import glob
import hashlib
import json
import os
import stat
import random
import re
import shutil
import signal
import struct
import sys
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import ServeProcess, run_kev, synth_bundle, wait_for  # noqa: E402
from kevconversations import MIXES, comparable, line, requests  # noqa: E402

# Checkpoints every 32 tokens so that the short states here have several (as test_serve_growing).
WARM_ARGS = ("--cache-entries", 64, "--cache-checkpoint-tokens", 32, "--max-state", 4096, "--usage-details")
COLD_ARGS = ("--cache-entries", 0, "--max-state", 4096, "--usage-details")
HEADER_BYTES = 72  # docs/saved-states.md: magic, version, byte order, count, payload, kind, 0, identity
MIN_STATE_DIR_BYTES = 1 << 20  # --state-dir-bytes' least value
DRAIN_LINE = re.compile(r"kev serve: wrote (\d+) of (\d+) queued saved points to --state-dir in \d+\.\d\d s")


# ---- conversations ----

def append_only(conv, turns):
    return ["\n".join(line(conv, i) for i in range(t + 1)) for t in range(turns)]


def rewritten_tail(conv, turns):
    moods = ["calm", "upset", "hopeful"]
    return ["\n".join(line(conv, i) for i in range(t + 1)) + f"\nsummary: {t + 1} messages, mood {moods[t % 3]}"
            for t in range(turns)]


def structured(conv, turns):
    return [json.dumps({"customer": conv, "plan": "pro",
                        "events": [{"n": i, "text": line(conv, i)} for i in range(t + 1)]})
            for t in range(turns)]


# ---- fixtures ----

@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("statedir"), "--seed", 9)[1]


@pytest.fixture(scope="module")
def other_bundle(tmp_path_factory):
    """Another model (another seed) with the same tokenizer: its points have the same file names."""
    return synth_bundle(tmp_path_factory.mktemp("statedir_other"), "--seed", 10)[1]


@pytest.fixture(scope="module")
def cold(bundle):
    """cold(precision) -> the oracle server of that precision (started on first use)."""
    started = {}

    def get(precision="fp32"):
        if precision not in started:
            started[precision] = ServeProcess(bundle, *COLD_ARGS, "--precision", precision)
        return started[precision]
    try:
        yield get
    finally:
        for s in started.values():
            s.close()


@pytest.fixture
def servers():
    """A list to append servers to; each is killed at the end of the test."""
    started = []
    try:
        yield started
    finally:
        for s in started:
            s.close()


# ---- helpers ----

def serve(started, bundle, state_dir, *args, env=None):
    s = ServeProcess(bundle, *WARM_ARGS, "--state-dir", state_dir, *args, env=env)
    started.append(s)
    return s


def check(server, cold_server, req):
    """Scores `req` on both; asserts 200 and the cold body; returns the server's body."""
    status, _, got = server.score(req)
    assert status == 200, got
    status, _, want = cold_server.score(req)
    assert status == 200, want
    assert want["usage"]["cached_tokens"] == 0
    assert comparable(got) == comparable(want), req["state"]
    return got


def metrics(server):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as m:
        return {smp.name: smp.value for f in text_string_to_metric_families(m.read().decode()) for smp in f.samples}


def health(server):
    status, _, body = server.request("GET", "/health")
    assert status == 200 and body["status"] == "ok", body
    return body


def settle(server, timeout=30):
    """Waits until the server has no saved point queued or being written; returns its metrics."""
    assert wait_for(lambda: metrics(server)["kev_state_disk_pending"] == 0, timeout, 0.02), metrics(server)
    return metrics(server)


def stop(server, timeout=60):
    """SIGTERM, then the exit: asserts exit 0 and the drain's line (every queued point written);
    returns the server's stderr."""
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout) == 0, server.stderr()
    log = server.stderr()
    drained = DRAIN_LINE.findall(log)
    assert len(drained) == 1, log
    assert drained[0][0] == drained[0][1], log
    return log


def identity_dir(root, bundle, precision):
    """DIR/<identity> of a bundle and precision, found by its identity.txt (the bundle's manifest
    SHA-256 and the precision in words)."""
    with open(os.path.join(bundle, "kev_export.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    found = []
    for sub in sorted(os.listdir(root)):
        about = os.path.join(root, sub, "identity.txt")
        if os.path.isfile(about):
            text = open(about).read()
            if f"\nbundle {digest}\n" in text and f"; precision {precision};" in text:
                found.append(os.path.join(root, sub))
    assert len(found) == 1, (root, os.listdir(root))
    return found[0]


def points(directory):
    """{name: path} of the state files in one identity directory."""
    return {os.path.basename(p): p for p in glob.glob(os.path.join(directory, "*.kvs"))}


def fnv1a(ids):
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def assert_whole(root):
    """Every entry under root's identity directories is a whole state file (no temporary file):
    its header's count, size and ids agree with its name and its size (docs/saved-states.md)."""
    n_files = 0
    for sub in os.listdir(root):
        directory = os.path.join(root, sub)
        identity = hashlib.sha256(open(os.path.join(directory, "identity.txt"), "rb").read()).digest()
        assert identity[:8].hex() == sub
        for name in os.listdir(directory):
            assert not name.startswith(".tmp-"), (directory, name)
            if name == "identity.txt":
                continue
            m = re.fullmatch(r"(\d+)-([0-9a-f]{16})\.kvs", name)
            assert m, name
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read()
            magic, version, bom, count, payload, kind, zero = struct.unpack_from("<8sIIQQII", data)
            assert (magic, version, bom, zero) == (b"KEVSTATE", 1, 0x01020304, 0), name
            assert count == int(m.group(1)) and kind in (0, 1, 2), name
            assert data[40:72] == identity, name
            assert len(data) == HEADER_BYTES + 4 * count + payload + 8, name
            ids = struct.unpack_from(f"<{count}i", data, HEADER_BYTES)
            assert f"{fnv1a(ids):016x}" == m.group(2), name
            n_files += 1
    return n_files


# ---- 1. restart ----

@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_restart_continues_from_disk(bundle, cold, servers, tmp_path, precision):
    turns = 5
    convs = {"a": requests(append_only("a", turns + 1)), "r": requests(rewritten_tail("r", turns + 1), 1),
             "s": requests(structured("s", turns + 1), 2)}
    oracle = cold(precision)
    root = str(tmp_path / "states")
    a = serve(servers, bundle, root, "--precision", precision)
    for k in range(turns):  # interleaved, as conversations arrive
        for reqs in convs.values():
            check(a, oracle, reqs[k])
    log = stop(a)
    assert "kev state-dir:" not in log  # nothing ignored, nothing failed
    assert assert_whole(root) >= 2 * len(convs)
    identity = identity_dir(root, bundle, precision)
    written = points(identity)

    # What a process that never stopped reuses (its memory holds checkpoints as well).
    memory = ServeProcess(bundle, *WARM_ARGS, "--precision", precision)
    servers.append(memory)
    for k in range(turns):
        for reqs in convs.values():
            assert memory.score(reqs[k])[0] == 200
    b = serve(servers, bundle, root, "--precision", precision)
    for name, reqs in convs.items():
        got = check(b, oracle, reqs[turns])
        usage = got["usage"]
        assert 0 < usage["cached_tokens"] < usage["state_tokens"], (name, usage)
        assert usage["input_tokens_details"]["cached_tokens"] == usage["cached_tokens"]
        # The disk gives what memory would have (the ends and tail points that these turns
        # continue from; checkpoints, kept in memory only, are not longer here).
        assert usage["cached_tokens"] == memory.score(reqs[turns])[2]["usage"]["cached_tokens"], name
        if name == "a":  # appended text: from the last turn's end (or its tail point, 8 before it)
            prev = oracle.score(reqs[turns - 1])[2]["usage"]["state_tokens"]
            assert usage["cached_tokens"] >= prev - 8, (name, usage, prev)
    m = metrics(b)
    assert m["kev_state_disk_hits_total"] >= len(convs)
    assert m["kev_state_disk_rejected_total"] == 0
    assert m["kev_state_disk_read_bytes_total"] > 0
    assert m["kev_prefix_reused_tokens_total"] > 0
    disk = health(b)["state_dir"]
    assert disk["hits"] == m["kev_state_disk_hits_total"] and disk["rejected"] == 0
    assert set(written) <= set(points(identity))  # restored files stay
    stop(b)
    assert_whole(root)


# ---- 2. corruption campaign ----

def flip(data, at, mask=0x5A):
    out = bytearray(data)
    out[at % len(out)] ^= mask
    return bytes(out)


def ids_end(data):
    return HEADER_BYTES + 4 * struct.unpack_from("<Q", data, 16)[0]


GARBAGE = random.Random(20261205)
DAMAGES = {
    "empty": lambda d, x: b"",
    "header only": lambda d, x: d[:HEADER_BYTES],
    "header and 8 bytes": lambda d, x: d[:HEADER_BYTES + 8],
    "a third": lambda d, x: d[:len(d) // 3],
    "cut in the payload": lambda d, x: d[:len(d) - 4096],
    "trailer missing": lambda d, x: d[:-8],
    "trailer cut": lambda d, x: d[:-1],
    "magic": lambda d, x: flip(d, 0),
    "version": lambda d, x: flip(d, 8, 0x01),
    "byte order": lambda d, x: flip(d, 12),
    "token count": lambda d, x: flip(d, 16, 0x01),
    "payload size": lambda d, x: flip(d, 24, 0x04),
    "kind": lambda d, x: flip(d, 32, 0x01),  # another valid kind: only the checksum sees it
    "reserved": lambda d, x: flip(d, 36),
    "identity": lambda d, x: flip(d, 71),
    "ids": lambda d, x: flip(d, HEADER_BYTES + 4 * 5),
    "payload first byte": lambda d, x: flip(d, ids_end(d)),
    "payload middle": lambda d, x: flip(d, len(d) // 2, 0x01),
    "payload last byte": lambda d, x: flip(d, len(d) - 9, 0x80),
    "checksum": lambda d, x: flip(d, len(d) - 1),
    "appended": lambda d, x: d + b"\0" * 8,
    "payload zeroed": lambda d, x: d[:ids_end(d)] + bytes(len(d) - ids_end(d)),
    "another bundle": lambda d, x: x["other"],
    "int8 point": lambda d, x: x["int8"],
    "another point": lambda d, x: x["sibling"],
    "garbage": lambda d, x: GARBAGE.randbytes(len(d)),
    "short garbage": lambda d, x: GARBAGE.randbytes(100),
}


def test_damaged_files_are_ignored_counted_and_removed(bundle, other_bundle, cold, servers, tmp_path):
    turns = 3
    names = list(DAMAGES)
    convs = [requests(append_only(f"c{j}", turns + 1), j) for j in range(len(names))]
    oracle = cold("fp32")
    root = str(tmp_path / "states")
    a = serve(servers, bundle, root)
    for reqs in convs:
        for r in reqs[:turns]:
            assert a.score(r)[0] == 200
    # The same points in the same directory by the int8 mode and by another bundle.
    needs = {"int8 point": (bundle, ("--precision", "int8")), "another bundle": (other_bundle, ())}
    for damage, (b, args) in needs.items():
        w = serve(servers, b, root, *args)
        for r in convs[names.index(damage)][:turns]:
            assert w.score(r)[0] == 200
        stop(w)
    stop(a)
    assert_whole(root)
    identity = identity_dir(root, bundle, "fp32")
    foreign = {"int8 point": points(identity_dir(root, bundle, "int8")),
               "another bundle": points(identity_dir(root, other_bundle, "fp32"))}
    assert len(os.listdir(root)) == 3
    before = points(identity)

    # Which file each conversation's next turn restores: a probe on a copy, its files' times set
    # back (a read refreshes the time of the file it restores).
    probe_root = str(tmp_path / "probe")
    shutil.copytree(root, probe_root)
    probe_dir = identity_dir(probe_root, bundle, "fp32")
    old = time.time() - 1000
    for p in points(probe_dir).values():
        os.utime(p, (old, old))
    probe = serve(servers, bundle, probe_root)
    targets, restored = [], []
    for reqs in convs:
        got = check(probe, oracle, reqs[turns])
        read = [n for n, p in points(probe_dir).items() if n in before and os.stat(p).st_mtime > old + 500]
        assert len(read) == 1, read
        assert got["usage"]["cached_tokens"] == int(read[0].split("-")[0])
        targets.append(read[0])
        restored.append(got["usage"]["cached_tokens"])
        for p in points(probe_dir).values():
            os.utime(p, (old, old))
    assert len(set(targets)) == len(targets)
    probe.close()

    originals = {}
    for name in targets:
        with open(before[name], "rb") as f:
            originals[name] = f.read()
    for j, (damage, name) in enumerate(zip(names, targets)):
        path, data = before[name], originals[name]
        ctx = {"sibling": originals[targets[j - 1]]}  # another conversation's point
        if damage in foreign:
            assert name in foreign[damage], (damage, name)  # same ids, same name
            ctx["other" if damage == "another bundle" else "int8"] = open(foreign[damage][name], "rb").read()
        damaged = DAMAGES[damage](data, ctx)
        assert damaged != data, damage
        with open(path, "wb") as f:
            f.write(damaged)

    b = serve(servers, bundle, root)
    for j, reqs in enumerate(convs):
        got = check(b, oracle, reqs[turns])
        # The damaged point refused, the next one down restored.
        assert 0 < got["usage"]["cached_tokens"] < restored[j], (names[j], got["usage"], restored[j])
    m = metrics(b)
    assert m["kev_state_disk_rejected_total"] == len(names)
    assert m["kev_state_disk_hits_total"] == len(names)
    assert health(b)["state_dir"]["rejected"] == len(names)
    log = b.stderr()
    for damage, name in zip(names, targets):
        assert f"kev state-dir: ignored {before[name]}: " in log, (damage, log)
        assert not os.path.exists(before[name]), damage
    assert log.count("kev state-dir: ignored ") == len(names)
    # Still healthy, and now it computes the damaged points again.
    for reqs in convs[:3]:
        check(b, oracle, reqs[turns - 1])
    settle(b)
    stop(b)
    assert_whole(root)


# ---- 3. concurrent writers ----

def test_two_servers_writing_the_same_points(bundle, cold, servers, tmp_path):
    turns = 5
    convs = [requests(append_only(f"w{j}", turns + 1), j) for j in range(3)] + \
            [requests(rewritten_tail("wr", turns + 1), 1)]
    oracle = cold("fp32")
    root = str(tmp_path / "states")
    writers = [serve(servers, bundle, root) for _ in range(2)]
    results, errors = {}, []

    def run(w, j):
        try:
            for k in range(turns):
                results[(w, j, k)] = writers[w].score(convs[j][k])
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=run, args=(w, j)) for j in range(len(convs)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 2 * len(convs) * turns, errors
    for (w, j, k), (status, _, got) in results.items():
        assert status == 200, got
        want = oracle.score(convs[j][k])[2]
        assert comparable(got) == comparable(want), (w, j, k)
    for w in writers:
        assert metrics(w)["kev_state_disk_rejected_total"] == 0
        stop(w)
    assert assert_whole(root) >= 2 * len(convs)

    third = serve(servers, bundle, root)
    for reqs in convs:
        got = check(third, oracle, reqs[turns])
        assert got["usage"]["cached_tokens"] > 0
    m = metrics(third)
    assert m["kev_state_disk_hits_total"] >= len(convs)
    assert m["kev_state_disk_rejected_total"] == 0
    stop(third)
    assert_whole(root)


def test_drain_out_of_time_leaves_nothing_partial(bundle, cold, servers, tmp_path):
    # --state-drain-timeout 0: what is still queued at the end is dropped, the file being written
    # abandoned; whatever is on disk then is whole, and a restart uses it.
    oracle = cold("fp32")
    root = str(tmp_path / "states")
    s = serve(servers, bundle, root, "--state-drain-timeout", 0)
    convs = [requests(append_only(f"d{j}", 5), j) for j in range(4)]
    done = []
    threads = [threading.Thread(target=lambda reqs=reqs: done.extend(s.score(r)[0] for r in reqs[:4]))
               for reqs in convs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert done == [200] * 16
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(60) == 0
    (wrote, queued), = DRAIN_LINE.findall(s.stderr())
    assert int(wrote) <= int(queued)
    assert_whole(root)
    b = serve(servers, bundle, root)
    for reqs in convs:
        check(b, oracle, reqs[4])
    assert metrics(b)["kev_state_disk_rejected_total"] == 0


# ---- 4. a failing disk ----

def test_write_failures_pause_saving_and_never_fail_a_request(bundle, cold, servers, tmp_path):
    oracle = cold("fp32")
    root = str(tmp_path / "states")
    env = dict(os.environ, KEV_FAULT_WRITE_AFTER_BYTES="1000")
    f = serve(servers, bundle, root, env=env)
    reqs = requests(append_only("f", 5))
    usages = [check(f, oracle, r)["usage"] for r in reqs]
    assert all(u["cached_tokens"] > 0 for u in usages[1:])  # served from memory meanwhile
    assert wait_for(lambda: metrics(f)["kev_state_disk_write_errors_total"] >= 1, 30, 0.02)
    m = settle(f)
    assert m["kev_state_disk_writes_total"] == 0
    assert "kev state-dir: saving paused for 30 s" in f.stderr(), f.stderr()
    # Paused: new points are not even tried.
    errors = m["kev_state_disk_write_errors_total"]
    for r in requests(append_only("g", 3)):
        check(f, oracle, r)
    m = settle(f)
    assert m["kev_state_disk_write_errors_total"] == errors and m["kev_state_disk_writes_total"] == 0
    assert health(f)["state_dir"]["write_errors"] == errors
    stop(f)
    identity = identity_dir(root, bundle, "fp32")
    assert sorted(os.listdir(identity)) == ["identity.txt"]  # nothing partial, nothing temporary

    # A disk that fills after a few files: those are whole, and a restart continues from them.
    root2 = str(tmp_path / "states2")
    g = serve(servers, bundle, root2, env=dict(os.environ, KEV_FAULT_WRITE_AFTER_BYTES="450000"))
    reqs = requests(append_only("h", 6))
    for r in reqs[:5]:
        check(g, oracle, r)
    m = settle(g)
    assert m["kev_state_disk_writes_total"] >= 1 and m["kev_state_disk_write_errors_total"] >= 1, m
    assert "kev state-dir: saving paused" in g.stderr()
    stop(g)
    assert assert_whole(root2) == m["kev_state_disk_writes_total"]
    b = serve(servers, bundle, root2)
    got = check(b, oracle, reqs[5])
    assert got["usage"]["cached_tokens"] > 0
    assert metrics(b)["kev_state_disk_rejected_total"] == 0


# ---- 5. kev score ----

def test_score_command_continues_across_invocations(bundle, tmp_path):
    root = str(tmp_path / "states")
    reqs = requests(append_only("k", 4))

    def score(req, *extra):
        proc = run_kev("score", "--bundle", bundle, "--usage-details", *extra, input=json.dumps(req))
        return json.loads(proc.stdout), proc.stderr

    warm = ("--cache-checkpoint-tokens", "32", "--state-dir", root)
    first, log = score(reqs[2], *warm)
    assert first["usage"]["cached_tokens"] == 0 and "kev state-dir:" not in log
    assert assert_whole(root) >= 2  # written before the process ended
    second, log = score(reqs[3], *warm)
    assert 0 < second["usage"]["cached_tokens"] < second["usage"]["state_tokens"], second["usage"]
    want, _ = score(reqs[3], "--cache-entries", "0")
    assert want["usage"]["cached_tokens"] == 0
    assert comparable(second) == comparable(want)
    # The very same state again: restored whole.
    again, _ = score(reqs[3], *warm)
    assert again["usage"]["cached_tokens"] == again["usage"]["state_tokens"]
    assert comparable(again) == comparable(want)
    assert_whole(root)



@pytest.mark.parametrize("precision,variable", [("int8", "KEV_INT8_CLASSES"), ("bf16", "KEV_BF16_CLASSES")])
def test_states_of_another_selection_are_not_continued(bundle, tmp_path, precision, variable):
    """Which projections a fast mode reduces changes its bits, so it is part of a state's
    identity: a state saved under another selection is never continued from."""
    root = str(tmp_path / "states")
    req = json.dumps(requests(append_only("sel", 2))[1])
    warm = ("--usage-details", "--cache-checkpoint-tokens", "32", "--state-dir", root, "--precision", precision)
    run_kev("score", "--bundle", bundle, *warm, input=req, env={variable: "all"})
    assert assert_whole(root) >= 1
    got = json.loads(run_kev("score", "--bundle", bundle, *warm, input=req).stdout)
    assert got["usage"]["cached_tokens"] == 0, got["usage"]
    want = json.loads(run_kev("score", "--bundle", bundle, "--usage-details", "--cache-entries", "0",
                              "--precision", precision, input=req).stdout)
    assert comparable(got) == comparable(want)
    # Both selections' states are kept, each under its own identity.
    identities = [open(os.path.join(root, d, "identity.txt")).read() for d in sorted(os.listdir(root))
                  if os.path.isfile(os.path.join(root, d, "identity.txt"))]
    assert len(identities) == 2 and sum("; reduced all" in t for t in identities) == 1, identities


# ---- 6. the byte bound ----

def test_directory_stays_within_its_byte_bound(bundle, cold, servers, tmp_path):
    oracle = cold("fp32")
    root = str(tmp_path / "states")
    s = serve(servers, bundle, root, "--state-dir-bytes", MIN_STATE_DIR_BYTES)
    reqs = [r for j in range(8) for r in requests(rewritten_tail(f"b{j}", 4), j)[2:]]
    for r in reqs:
        check(s, oracle, r)
    m = settle(s)
    assert m["kev_state_disk_writes_total"] >= len(reqs)
    assert m["kev_state_disk_written_bytes_total"] > 3 * MIN_STATE_DIR_BYTES
    assert m["kev_state_disk_evictions_total"] > 0
    on_disk = sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "*", "*.kvs")))
    assert 0 < on_disk <= MIN_STATE_DIR_BYTES
    assert m["kev_state_disk_bytes"] == on_disk
    stop(s)
    assert_whole(root)
    assert sum(os.path.getsize(p) for p in glob.glob(os.path.join(root, "*", "*.kvs"))) <= MIN_STATE_DIR_BYTES
    # What is left is the most recently used and still usable: after a restart, the last
    # conversation's next turn continues from it.
    b = serve(servers, bundle, root, "--state-dir-bytes", MIN_STATE_DIR_BYTES)
    last = requests(rewritten_tail("b7", 5), 7)[4]
    assert check(b, oracle, last)["usage"]["cached_tokens"] > 0
    assert metrics(b)["kev_state_disk_hits_total"] == 1


# ---- 7. foreign entries ----

def test_foreign_entries_are_left_alone(bundle, cold, servers, tmp_path):
    turns = 4
    reqs = requests(append_only("g", turns + 1))
    oracle = cold("fp32")
    root = str(tmp_path / "states")
    a = serve(servers, bundle, root)
    for r in reqs[:turns]:
        assert a.score(r)[0] == 200
    stop(a)
    identity = identity_dir(root, bundle, "fp32")
    files = points(identity)
    by_count = sorted(files, key=lambda n: int(n.split("-")[0]))
    longest, other = by_count[-1], by_count[0]
    data = open(files[other], "rb").read()
    # The longest point (the one the next turn would continue from) becomes a directory.
    os.remove(files[longest])
    os.mkdir(files[longest])
    with open(os.path.join(files[longest], "inside"), "w") as f:
        f.write("not kev's\n")
    # The next longest becomes a FIFO: opening it for reading must not wait for a writer.
    assert len(by_count) >= 3, by_count
    fifo = by_count[-2]
    os.remove(files[fifo])
    os.mkfifo(files[fifo])
    count, digest = other.split("-")
    stale = time.time() - 7200
    foreign = {
        os.path.join(root, "notes.txt"): b"an operator's notes\n",
        os.path.join(root, other): data,  # a state file outside any identity directory
        os.path.join(identity, "notes.txt"): b"more notes\n",
        os.path.join(identity, f"{count}-{digest.upper()}"): data,  # bad hex (upper case)
        os.path.join(identity, f"{count}-{digest[:10]}zz{digest[12:]}"): data,  # bad hex
        os.path.join(identity, f"{count}-{digest[:-5]}.kvs.bak"): data,
        os.path.join(identity, ".tmp-1-0-" + other): data,  # a live writer's temporary file
    }
    for path, content in foreign.items():
        with open(path, "wb") as f:
            f.write(content)
    with open(os.path.join(identity, ".tmp-2-0-" + other), "wb") as f:  # a writer dead 2 h ago
        f.write(data)
    os.utime(os.path.join(identity, ".tmp-2-0-" + other), (stale, stale))
    os.makedirs(os.path.join(root, "0123456789abcdef"))  # an identity directory of nothing here
    foreign[os.path.join(root, "0123456789abcdef", other)] = b"x"
    with open(os.path.join(root, "0123456789abcdef", other), "wb") as f:
        f.write(b"x")

    b = serve(servers, bundle, root)
    # The stale temporary file goes (the writer's first budget pass), nothing else.
    assert wait_for(lambda: not os.path.exists(os.path.join(identity, ".tmp-2-0-" + other)), 30, 0.02)
    got = check(b, oracle, reqs[turns])
    assert 0 < got["usage"]["cached_tokens"] < int(fifo.split("-")[0]), got["usage"]
    m = metrics(b)
    assert m["kev_state_disk_hits_total"] == 1
    # The directory and the FIFO are not files kev wrote: passed over, not counted as rejected;
    # nothing else is even looked at.
    assert m["kev_state_disk_rejected_total"] == 0
    health(b)
    settle(b)
    for path, content in foreign.items():
        assert open(path, "rb").read() == content, path
    assert os.path.isdir(files[longest]) and os.listdir(files[longest]) == ["inside"]
    assert stat.S_ISFIFO(os.stat(files[fifo]).st_mode)
    stop(b)


# ---- 8. damage while serving ----

def test_damage_while_serving_never_gives_a_wrong_answer(bundle, cold, servers, tmp_path):
    """A thread damages the directory's files in place (flips, truncations, appended bytes) while a server with a one-entry memory cache (so nearly every turn looks on disk)
    scores interleaved conversations: every answer is the cold one, the server stays healthy."""
    oracle = cold("fp32")
    root = str(tmp_path / "states")
    s = ServeProcess(bundle, "--cache-entries", 1, "--cache-checkpoint-tokens", 32, "--max-state", 4096,
                     "--usage-details", "--state-dir", root)
    servers.append(s)
    convs = [append_only(c, 7) for c in "pqr"]
    stop_flag = threading.Event()
    damaged = [0]

    def damage():
        # Each new file, as soon as it appears, is damaged in place with probability 1/2 (a flipped
        # bit, a truncation or appended bytes), and damaged again now and then after that.
        rng = random.Random(3)
        seen, hit = set(), []
        while not stop_flag.is_set():
            for path in glob.glob(os.path.join(root, "*", "*.kvs")):
                if path not in seen:
                    seen.add(path)
                    if rng.random() < 0.5:
                        hit.append(path)
                    else:
                        continue
                elif path not in hit or rng.random() > 0.05:
                    continue
                try:
                    size = os.path.getsize(path)
                    how = rng.randrange(3)
                    if how == 0 and size:
                        with open(path, "r+b") as f:
                            f.seek(rng.randrange(size))
                            b = f.read(1)
                            f.seek(-1, os.SEEK_CUR)
                            f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
                    elif how == 1:
                        os.truncate(path, rng.randrange(size + 1))
                    else:
                        with open(path, "ab") as f:
                            f.write(b"\0" * rng.randrange(1, 64))
                    damaged[0] += 1
                except OSError:
                    pass  # removed meanwhile (rejected by the server)
            time.sleep(0.002)

    t = threading.Thread(target=damage)
    t.start()
    try:
        for turn in range(7):
            for conv in convs:
                check(s, oracle, {"state": conv[turn], "questions": MIXES[turn % len(MIXES)]})
    finally:
        stop_flag.set()
        t.join()
    m = metrics(s)
    assert damaged[0] > 0
    # Lookups happened (the memory cache holds one point): whole files were used, damaged ones
    # refused.
    assert m["kev_state_disk_hits_total"] > 0 and m["kev_state_disk_rejected_total"] > 0, m
    health(s)
    stop(s)
