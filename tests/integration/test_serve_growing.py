"""Growing states (issue 18), through the real binary: a state that continues from a saved point
of an earlier one (longest prefix of its token ids) gets bit for bit the response of a cold
server, one with no cache at all (`--cache-entries 0`), which computes every state from its
first token. Compared: the whole body but latency_ms and usage.cached_tokens (with its OpenAI-style copy
usage.input_tokens_details: what was reused). Replays: append-only growth (text and a structured state), a rewritten
tail, a state that shrinks then branches, two conversations interleaved (also batched together),
and eviction in the middle of a conversation under a small --cache-bytes; in fp32 and int8,
through /v1/systemone, /permute, /separate and `kev score --jsonl`.

Every server is started with --port 0 on 127.0.0.1 and always killed in teardown."""
import json
import os
import sys
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import ServeProcess, run_kev, synth_bundle  # noqa: E402
from kevconversations import CHOICE, NOUL, comparable, line, requests  # noqa: E402

TURNS = 9
SMALL_BYTES = 1_500_000  # a few saved points of these states on the tiny model
# Checkpoints every 32 tokens so that the short states here have several.
WARM_ARGS = ("--cache-entries", 64, "--cache-checkpoint-tokens", 32, "--max-state", 4096, "--usage-details")


def append_only(conv="a"):
    return ["\n".join(line(conv, i) for i in range(t + 1)) for t in range(TURNS)]


def structured():
    return [{"customer": "Ada", "plan": "pro", "events": [{"n": i, "text": line("s", i)} for i in range(t + 1)]}
            for t in range(TURNS)]


def rewritten_tail():
    moods = ["calm", "upset", "hopeful"]
    return ["\n".join(line("r", i) for i in range(t + 1)) + f"\nsummary: {t + 1} messages, mood {moods[t % 3]}"
            for t in range(TURNS)]


def shrink_then_branch():
    base = append_only("b")
    branch = [base[3] + "\n" + f"b branch {k}: a different reply number {k}." for k in range(3)]
    return base[:7] + [base[3], base[1]] + branch


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("growing"), "--seed", 9)[1]


@pytest.fixture(scope="module", params=["fp32", "int8"])
def servers(request, bundle):
    """{name: server}: cold (no cache), warm, warm batching (--max-batch 8), small (evicting)."""
    precision = ("--precision", request.param)
    specs = {"cold": ("--cache-entries", 0, "--max-state", 4096, "--usage-details"),
             "warm": WARM_ARGS,
             "batch": (*WARM_ARGS, "--max-batch", 8, "--max-inflight", 1, "--max-queue", 64),
             "small": (*WARM_ARGS, "--cache-bytes", SMALL_BYTES)}
    started = {}
    try:
        for name, args in specs.items():
            started[name] = ServeProcess(bundle, *args, *precision)
        yield started
    finally:
        for s in started.values():
            s.close()


def health(server):
    status, _, body = server.request("GET", "/health")
    assert status == 200
    return body["cache"]


def replay(servers, reqs, names=("warm", "small")):
    """Sends each request to the cold server and to each of `names`; asserts equal bodies and
    returns {name: [usage...]}, checking the byte bound of the small server after each."""
    usages = {n: [] for n in ("cold", *names)}
    for r in reqs:
        status, _, want = servers["cold"].score(r)
        assert status == 200, want
        assert want["usage"]["cached_tokens"] == 0
        usages["cold"].append(want["usage"])
        for n in names:
            status, _, got = servers[n].score(r)
            assert status == 200, got
            assert comparable(got) == comparable(want), (n, r["state"])
            usages[n].append(got["usage"])
        cache = health(servers["small"])
        assert cache["bytes"] <= SMALL_BYTES == cache["max_bytes"]
    return usages


def assert_grows_from_previous(usages):
    """Append-only: each turn continues from within 8 tokens (the tail point) of the last one."""
    for prev, cur in zip(usages, usages[1:]):
        assert prev["state_tokens"] - 8 <= cur["cached_tokens"] < cur["state_tokens"], (prev, cur)


def test_append_only_text(servers):
    u = replay(servers, requests(append_only()))
    assert_grows_from_previous(u["warm"])
    # The same state again (new questions) is reused whole.
    again = replay(servers, requests(append_only()[-1:], offset=1))
    assert again["warm"][0]["cached_tokens"] == again["warm"][0]["state_tokens"]


def test_append_only_structured(servers):
    u = replay(servers, requests(structured()))
    assert_grows_from_previous(u["warm"])


def test_rewritten_tail_reuses_what_precedes_it(servers):
    u = replay(servers, requests(rewritten_tail()))
    # The summary line (~20 tokens here) changes every turn. Once a state has left the one before
    # it (turn 2 on: no point is saved inside a state before its 64th token), each turn saves a
    # tail point that far plus 8 before its end, and the next turn continues from there: it
    # recomputes its new line, its summary and at most 8 + a few tokens more.
    for prev, cur in zip(u["warm"][2:], u["warm"][3:]):
        assert prev["state_tokens"] - 40 <= cur["cached_tokens"] < cur["state_tokens"], (prev, cur)
    assert sum(x["cached_tokens"] for x in u["small"]) > 0


def test_shrinking_and_branching_state(servers, bundle):
    reqs = requests(shrink_then_branch())
    replay(servers, reqs)  # exact on the shared servers, whatever their caches hold by now
    # Reuse on a fresh server (the shared ones are full: the ends that a longer state continued
    # from are evicted first there, by design).
    fresh = ServeProcess(bundle, *WARM_ARGS)
    try:
        warm = [fresh.score(r)[2]["usage"] for r in reqs]
    finally:
        fresh.close()
    assert warm[7]["cached_tokens"] == warm[7]["state_tokens"]  # base[3] again: its saved end
    assert warm[8]["cached_tokens"] == warm[8]["state_tokens"]  # base[1] again
    for k in range(9, 12):  # branches of base[3]: continue from its end (or tail point)
        assert warm[k]["cached_tokens"] >= warm[3]["state_tokens"] - 8


def test_two_conversations_interleaved_and_batched(servers):
    a, b = requests(append_only("x")), requests(rewritten_tail(), offset=2)
    interleaved = [r for pair in zip(a, b) for r in pair]
    u = replay(servers, interleaved)
    assert_grows_from_previous(u["warm"][0::2])
    # The next turns of three conversations sent at once to the batching server: each answer is
    # the cold one (the batch computes the states one after the other, then all rows in one pass).
    nxt = requests([append_only("x")[-1] + "\nx more", rewritten_tail()[-1] + " (final)",
                    append_only("y")[4]], offset=1)
    for r in interleaved:
        assert servers["batch"].score(r)[0] == 200
    got = {}
    threads = [threading.Thread(target=lambda i=i, r=r: got.__setitem__(i, servers["batch"].score(r)))
               for i, r in enumerate(nxt)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, r in enumerate(nxt):
        status, _, want = servers["cold"].score(r)
        assert got[i][0] == 200 == status
        assert comparable(got[i][2]) == comparable(want)
    assert got[0][2]["usage"]["cached_tokens"] > 0


def test_eviction_mid_conversation_stays_exact(servers):
    # Two long conversations against the small server: its points are evicted as they grow (the
    # byte bound is checked after every request inside replay); answers stay the cold ones.
    before = health(servers["small"])
    long_a = ["\n".join(line("e", i) * 3 for i in range(t + 1)) for t in range(TURNS)]
    reqs = [r for pair in zip(requests(long_a), requests(append_only("f"))) for r in pair]
    replay(servers, reqs, names=("small",))
    after = health(servers["small"])
    assert after["entries"] <= 64
    assert after["computed_tokens"] > before["computed_tokens"]


def test_health_accounts_reused_and_computed_tokens(bundle):
    server = ServeProcess(bundle, *WARM_ARGS)
    try:
        total = reused = 0
        for r in requests(append_only("h")):
            status, _, body = server.score(r)
            assert status == 200
            total += body["usage"]["state_tokens"]
            reused += body["usage"]["cached_tokens"]
        cache = health(server)
        assert cache["reused_tokens"] == reused > 0
        assert cache["computed_tokens"] == total - reused
        assert 0 < cache["bytes"] <= cache["max_bytes"]
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as m:
            samples = {smp.name: smp.value for f in text_string_to_metric_families(m.read().decode())
                       for smp in f.samples}
        assert samples["kev_prefix_reused_tokens_total"] == reused
        assert samples["kev_prefix_computed_tokens_total"] == total - reused
        assert samples["kev_cached_state_tokens_total"] == reused
        assert samples["kev_prefix_cache_bytes"] == cache["bytes"]
        assert samples["kev_prefix_cache_max_bytes"] == cache["max_bytes"]
    finally:
        server.close()


def test_permute_and_separate_on_a_grown_state(servers):
    states = append_only("p")
    for r in requests(states[:-1]):
        assert servers["warm"].score(r)[0] == 200
    req = {"state": states[-1], "questions": {"c": CHOICE, "n": NOUL}}
    for path, body in (("/v1/systemone/permute", {"request": req, "question": "c", "n_perm": 3}),
                       ("/v1/systemone/separate", req)):
        s1, _, want = servers["cold"].request("POST", path, body, {"Content-Type": "application/json"})
        s2, _, got = servers["warm"].request("POST", path, body, {"Content-Type": "application/json"})
        assert s1 == s2 == 200, (want, got)
        assert comparable(got) == comparable(want)


@pytest.mark.parametrize("precision", ["fp32", "int8", "w8a8"])
def test_score_jsonl_reuses_across_lines(bundle, precision):
    reqs = requests(append_only("j")) + requests(rewritten_tail(), offset=1)
    text = "".join(json.dumps(r) + "\n" for r in reqs)

    def stream(*extra):
        proc = run_kev("score", "--bundle", bundle, "--jsonl", "--precision", precision, "--usage-details", *extra,
                       input=text)
        return [json.loads(x) for x in proc.stdout.splitlines()]

    cold = stream("--cache-entries", "0")
    warm = stream("--cache-checkpoint-tokens", "32")
    assert len(cold) == len(warm) == len(reqs)
    for c, w in zip(cold, warm):
        assert c["usage"]["cached_tokens"] == 0
        assert comparable(w) == comparable(c)
    assert_grows_from_previous([w["usage"] for w in warm[:TURNS]])
