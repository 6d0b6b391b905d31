"""Scale-out through real processes: three `kev serve` replicas behind Debian's HAProxy with the
configuration of deploy/haproxy/kev-haproxy-cfg.py, on loopback ports.

(a) kill -9 of one replica under steady load: every request answered 200 (a 503 + Retry-After
    is retried by the client), each exactly once, with the answers one server gives;
(b) rolling restart (SIGTERM + drain, restart on the same port) of every replica under load:
    zero failed requests;
(c) affinity on X-Kev-State-Key: the prefix-cache hit rate over the replicas equals one
    server's on the same workload; without the header (round robin) it is the rate predicted
    from the rotation;
(d) answers (and refusals) through the balancer equal those of one server;
(e) growing conversations keyed by conversation keep reusing their previous turn's state.

Bounded in time; every process is stopped by its pid (kevcluster)."""
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevcluster import HAPROXY, HAPROXY_REASON, STATE_KEY, HAProxy, Load, Replica, request  # noqa: E402
from kevtest import KEV_BIN, SOURCE_DIR, run_kev, synth_bundle  # noqa: E402

pytestmark = pytest.mark.skipif(HAPROXY is None, reason=HAPROXY_REASON)

# Fast health checks so the tests are short; the shipped defaults are slower (1 s).
# Two failed checks (not one) so that a replica starved of CPU on a busy machine is not taken
# out by one late answer.
CHECKS = ("--check-inter", "200ms", "--fall", 2, "--rise", 1, "--nbthread", 1)
REPLICA_ARGS = ("--threads", 1, "--max-state", 512, "--usage-details")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("cluster"), "--seed", 11)[1]


def state_key(state):
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:32]


def template(i):
    """12 distinct requests of a few tens of ms each on the tiny model (several rows)."""
    opts = {f"option {k} for {i}": None for k in range(8)}
    state = {"customer": f"c{i}", "history": f"order {i} " + "the parcel arrived late again " * 4}
    return {"state": state, "questions": {
        "next": {"type": "choice", "instructions": "Next step?", "criteria": opts},
        "refund": {"type": "noul", "instructions": "Refund?"}}}


TEMPLATES = [template(i) for i in range(12)]


@pytest.fixture(scope="module")
def expected(bundle):
    """The answers of one process (`kev score`) for every template."""
    text = "".join(json.dumps(r) + "\n" for r in TEMPLATES)
    proc = run_kev("score", "--bundle", bundle, "--jsonl", "--max-state", 512, input=text)
    return [json.loads(line)["answers"] for line in proc.stdout.splitlines()]


class Cluster:
    def __init__(self, workdir, bundle, n=3, replica_args=(), gen_args=()):
        self.replicas, self.haproxy = [], None
        try:
            for _ in range(n):
                self.replicas.append(Replica(KEV_BIN, bundle, 0, (*REPLICA_ARGS, *replica_args)))
            self.haproxy = HAProxy(workdir, self.replicas, *CHECKS, *gen_args, source_dir=SOURCE_DIR)
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.haproxy:
            self.haproxy.close()
        for r in self.replicas:
            r.kill()


@pytest.fixture
def cluster_factory(tmp_path):
    made = []

    def make(*args, **kwargs):
        made.append(Cluster(str(tmp_path), *args, **kwargs))
        return made[-1]
    yield make
    for c in made:
        c.close()


def load_items(n, keyed=True):
    items = []
    for rid in range(n):
        req = TEMPLATES[rid % len(TEMPLATES)]
        items.append((rid, req, {STATE_KEY: state_key(req["state"])} if keyed else {}))
    return items


def check_all_answered(load, expected, sent):
    """Every request sent got exactly one final 200 with the answers of one server."""
    assert sorted(load.results) == list(range(sent)), "a request has no recorded answer"
    failures = {rid: r for rid, r in load.results.items() if isinstance(r, Exception) or r[0] != 200}
    assert not failures, f"{len(failures)} of {sent} requests failed: {list(failures.items())[:5]}"
    for rid, (_, _, body) in load.results.items():
        assert body["answers"] == expected[rid % len(TEMPLATES)], f"request {rid}: wrong answers"


def replicas_seen(load):
    return {r[1].get("x-kev-replica") for r in load.results.values() if not isinstance(r, Exception)}


def test_kill_9_one_replica_under_load_loses_nothing(bundle, expected, cluster_factory):
    c = cluster_factory(bundle)
    total = 240
    load = Load(c.haproxy.port, load_items(total), workers=4).start()
    try:
        end = time.monotonic() + 60
        while load.done < 40 and time.monotonic() < end:
            time.sleep(0.01)
        victim = c.replicas[1]
        served = victim.health()["cache"]
        assert served["hits"] + served["misses"] > 0, "the victim served nothing before the kill"
        victim.proc.kill()  # SIGKILL: no draining, in-flight requests on it are cut
        killed_at = load.done
        assert killed_at < total - 40, "the load ended too soon to be under load at the kill"
        c.haproxy.wait_status({"r2": "DOWN"}, timeout=10)
        load.join(timeout=120)
    finally:
        load.stop()
    rows = c.haproxy.stat_rows()
    print(f"\nkill -9: {total} requests, killed after {killed_at}; HAProxy retries "
          f"{ {k: v['wretr'] for k, v in rows.items()} }, redispatches { {k: v['wredis'] for k, v in rows.items()} }, "
          f"client 503 retries {load.retried_503}")
    check_all_answered(load, expected, total)
    after = [load.results[rid][1]["x-kev-replica"] for rid in range(killed_at + 20, total)]
    assert "r2" not in after and set(after) == {"r1", "r3"}


def test_rolling_restart_under_load_zero_failures(bundle, expected, cluster_factory):
    c = cluster_factory(bundle, replica_args=("--drain-delay", 1))
    load = Load(c.haproxy.port, load_items(100000), workers=4).start()
    restarted = []
    try:
        for i, r in enumerate(c.replicas, 1):
            before = load.done
            assert r.terminate(timeout=60) == 0  # drains (not ready for 1 s), then exits 0
            c.haproxy.wait_status({f"r{i}": "DOWN"}, timeout=5)
            r.start()  # same port
            c.haproxy.wait_status({f"r{i}": "UP"}, timeout=10)
            restarted.append(load.done - before)
        time.sleep(0.5)  # the last restarted replica takes load too
    finally:
        load.stop()
    load.join(timeout=120)
    sent = len(load.results)
    rows = c.haproxy.stat_rows()
    print(f"\nrolling restart: {sent} requests, answered during each restart {restarted}; HAProxy retries "
          f"{ {k: v['wretr'] for k, v in rows.items()} }, client 503 retries {load.retried_503}")
    assert all(n > 0 for n in restarted), f"requests answered during each restart: {restarted}"
    check_all_answered(load, expected, sent)
    assert replicas_seen(load) == {"r1", "r2", "r3"}


def hit_rate_delta(replicas, before):
    after = [r.health()["cache"] for r in replicas]
    hits = sum(a["hits"] - b["hits"] for a, b in zip(after, before))
    misses = sum(a["misses"] - b["misses"] for a, b in zip(after, before))
    return hits, misses


def test_affinity_keeps_the_single_server_hit_rate(bundle, cluster_factory):
    states, rounds = 8, 6  # 8 states (3 does not divide 8), each 6 times, round after round
    def workload(tag):
        reqs = [{"state": f"{tag} state {s} " + "account history line " * 6,
                 "questions": {"q": {"type": "noul", "instructions": "Escalate?"}}} for s in range(states)]
        return [reqs[s] for _ in range(rounds) for s in range(states)]

    def run(port, reqs, keyed):
        items = [(i, r, {STATE_KEY: state_key(r["state"])} if keyed else {}) for i, r in enumerate(reqs)]
        load = Load(port, items, workers=1).start()  # sequential: the rotation is predictable
        load.join(timeout=120)
        bad = {i: r for i, r in load.results.items() if isinstance(r, Exception) or r[0] != 200}
        assert not bad, f"{len(bad)} failed: {list(bad.items())[:3]}"
        return load

    # One server, fresh cache: each state misses once, then hits.
    single = Replica(KEV_BIN, bundle, 0, (*REPLICA_ARGS, "--cache-entries", 16))
    try:
        before = [single.health()["cache"]]
        run(single.port, workload("single"), keyed=False)
        s_hits, s_misses = hit_rate_delta([single], before)
    finally:
        single.kill()
    assert (s_hits, s_misses) == (states * (rounds - 1), states)

    c = cluster_factory(bundle, replica_args=("--cache-entries", 16))
    before = [r.health()["cache"] for r in c.replicas]
    keyed = run(c.haproxy.port, workload("keyed"), keyed=True)
    k_hits, k_misses = hit_rate_delta(c.replicas, before)
    # Affinity: every request of a state went to one replica, so the rate is one server's.
    assert (k_hits, k_misses) == (s_hits, s_misses)
    for s in range(states):
        assert len({keyed.results[r * states + s][1]["x-kev-replica"] for r in range(rounds)}) == 1
    assert len(replicas_seen(keyed)) >= 2, "8 keys all hashed to one replica"

    # Without the header (same balancer) HAProxy falls back to a rotation along its hash ring:
    # each state misses once on every replica it reaches, so the misses are the distinct
    # (state, replica) pairs of the routing HAProxy reported, and more than with the header.
    before = [r.health()["cache"] for r in c.replicas]
    plain = run(c.haproxy.port, workload("plain"), keyed=False)
    p_hits, p_misses = hit_rate_delta(c.replicas, before)
    pairs = {(i % states, res[1]["x-kev-replica"]) for i, res in plain.results.items()}
    assert (p_hits, p_misses) == (states * rounds - len(pairs), len(pairs))
    assert p_misses > k_misses

    # Round robin (--affinity none): request n goes to replica (n + offset) mod 3, so state s
    # (at n = 8 r + s) visits replicas (2 r + s + offset) mod 3: all 3 within 3 rounds. Each
    # state misses once per replica: 3 misses of 6, a hit rate of exactly 1/2, predicted here
    # without looking at the routing.
    rr = HAProxy(c.haproxy.sock.rsplit("/", 1)[0], c.replicas, *CHECKS, "--affinity", "none",
                 source_dir=SOURCE_DIR)
    try:
        before = [r.health()["cache"] for r in c.replicas]
        run(rr.port, workload("rr"), keyed=True)  # the header is ignored by round robin
        r_hits, r_misses = hit_rate_delta(c.replicas, before)
    finally:
        rr.close()
    assert (r_hits, r_misses) == (states * (rounds - 3), states * 3)
    print(f"\nprefix-cache hit rate, {states} states x {rounds}: one server {s_hits / (states * rounds):.3f}, "
          f"3 replicas with X-Kev-State-Key {k_hits / (states * rounds):.3f}, without it "
          f"{p_hits / (states * rounds):.3f}, round robin {r_hits / (states * rounds):.3f}")


def test_growing_conversations_keep_their_reuse_through_the_balancer(bundle, cluster_factory):
    """(e) Growing states keyed by their conversation: every turn of a conversation reaches one
    replica, continues from the turn before (usage.cached_tokens), and answers as a cold server."""
    convs, turns = 4, 5

    def state(conv, turn):
        return {"customer": f"c{conv}", "history": [f"turn {t}: conversation {conv} asked about order {t * 7}"
                                                    for t in range(turn + 1)]}

    questions = {"refund": {"type": "noul", "instructions": "Refund?"}}
    c = cluster_factory(bundle)
    cold = Replica(KEV_BIN, bundle, 0, (*REPLICA_ARGS, "--cache-entries", 0))
    try:
        replica_of, last = {}, {}
        for turn in range(turns):
            for conv in range(convs):
                body = {"state": state(conv, turn), "questions": questions}
                status, hdrs, got = request(c.haproxy.port, "POST", "/v1/systemone", body,
                                            {"Content-Type": "application/json", STATE_KEY: f"conversation-{conv}"})
                assert status == 200, got
                assert replica_of.setdefault(conv, hdrs["x-kev-replica"]) == hdrs["x-kev-replica"]
                status, _, want = request(cold.port, "POST", "/v1/systemone", body,
                                          {"Content-Type": "application/json"})
                assert status == 200 and want["usage"]["cached_tokens"] == 0
                assert got["answers"] == want["answers"]
                u = got["usage"]
                reuse = ("cached_tokens", "input_tokens_details")
                assert {k: v for k, v in u.items() if k not in reuse} == \
                    {k: v for k, v in want["usage"].items() if k not in reuse}
                if turn > 0:  # continued from within 8 tokens (the tail point) of the turn before
                    assert u["cached_tokens"] >= last[conv] - 8, (conv, turn, u, last[conv])
                last[conv] = u["state_tokens"]
    finally:
        cold.kill()
    assert len(set(replica_of.values())) >= 2, "4 conversations all hashed to one replica"


def test_answers_through_the_balancer_equal_one_server(bundle, expected, cluster_factory):
    c = cluster_factory(bundle, replica_args=("--max-body", 65536), gen_args=("--max-body", 65536))
    direct = c.replicas[0].port
    for i, req in enumerate(TEMPLATES):
        for headers in ({}, {STATE_KEY: state_key(req["state"])}):
            via = request(c.haproxy.port, "POST", "/v1/systemone", req, headers)
            one = request(direct, "POST", "/v1/systemone", req)
            assert via[0] == one[0] == 200
            assert via[2]["answers"] == one[2]["answers"] == expected[i]
            assert via[2]["usage"]["input_tokens"] == one[2]["usage"]["input_tokens"]
    # Refusals pass through unchanged and are not retried into something else.
    bad = [{"state": "x", "questions": {"q": {"type": "nope"}}},              # 422
           {"model": "other", "state": "x", "questions": {}},                 # 422
           "{not json"]                                                       # 400
    for body in bad:
        via = request(c.haproxy.port, "POST", "/v1/systemone", body)
        one = request(direct, "POST", "/v1/systemone", body)
        assert (via[0], via[2]) == (one[0], one[2]) and via[0] in (400, 422)
    # A body over the limit: 413 with the server's sentence, from HAProxy or the replica alike.
    big = json.dumps({"state": "y" * 70000, "questions": {}})
    via = request(c.haproxy.port, "POST", "/v1/systemone", big)
    one = request(direct, "POST", "/v1/systemone", big)
    assert via[0] == one[0] == 413 and via[2] == one[2]
    assert request(c.haproxy.port, "GET", "/health/ready")[0] == 200


def test_shipped_example_config_is_current_and_valid():
    """deploy/haproxy/example-3-replicas.cfg is exactly what the generator writes for the
    arguments on its first line, and HAProxy accepts it."""
    path = os.path.join(SOURCE_DIR, "deploy", "haproxy", "example-3-replicas.cfg")
    with open(path) as f:
        text = f.read()
    prefix = "# Generated by deploy/haproxy/kev-haproxy-cfg.py "
    assert text.startswith(prefix)
    args = text.splitlines()[0][len(prefix):].split()
    gen = os.path.join(SOURCE_DIR, "deploy", "haproxy", "kev-haproxy-cfg.py")
    out = subprocess.run([sys.executable, gen, *args], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout == text, "regenerate the example: the generator changed"
    check = subprocess.run([HAPROXY, "-c", "-q", "-f", path], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
