"""The Python module kev_native (python/) against the real `kev` binary and independent oracles:
its answers are `kev score`'s and `kev serve`'s bytes for the same bundle and requests; several
Python threads scoring at once get the answers one thread gets; SIGINT during a long score_many
raises KeyboardInterrupt promptly; refusals raise the exception class of kev's exit code with
kev's sentence; forward() is `kev forward`'s hidden states and head() the pointer-head formula
evaluated in float64 here.

The module is imported from the build tree: <dir of KEV_BIN>/python (python/CMakeLists.txt)."""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import KEV_BIN, ServeProcess, forward, read_safetensors, run_kev, synth_bundle  # noqa: E402

MODULE_DIR = os.path.join(os.path.dirname(os.path.abspath(KEV_BIN)), "python")
if not os.path.isdir(os.path.join(MODULE_DIR, "kev_native")):
    pytest.skip(f"kev_native not built in {MODULE_DIR} (KEV_PYTHON_MODULE=OFF: no pybind11)",
                allow_module_level=True)
sys.path.insert(0, MODULE_DIR)
import kev_native  # noqa: E402

STATE = {"customer": "Ada", "cart": ["tea", "scones"], "note": "asked about delivery"}
QUESTIONS = {
    "next": {"type": "choice", "instructions": "Next step?", "criteria": {"ship": "confirm", "refund": None}},
    "upsell": {"type": "noul", "instructions": "Offer a discount?"},
    "mood": {"type": "score", "instructions": "Satisfaction", "criteria": ["angry", "neutral", "happy"]},
}
REQUESTS = [
    {"state": STATE, "questions": QUESTIONS},
    {"state": STATE, "questions": {"next": QUESTIONS["next"]}},  # the cached state again
    {"state": "a plain text state about a parcel", "questions": QUESTIONS},
    {"state": {"customer": "Ada", "cart": ["tea"]}, "questions": {"mood": QUESTIONS["mood"]}},
]
# exit code of `kev` -> the module's class (include/kev/core/error.h)
CLASS_OF_EXIT = {2: "BadInputError", 3: "IntegrityError", 4: "IoError", 5: "UnsupportedError",
                 6: "OverloadError", 130: "InterruptError", 70: "InternalError"}


def no_latency(text):
    """latency_ms is the one field measured, not computed: equal bytes everywhere else."""
    return re.sub(r'"latency_ms":[-0-9.eE+]+', '"latency_ms":0', text)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("pymod"), "--seed", 5)[1]


@pytest.fixture(scope="module")
def model(bundle):
    return kev_native.Model(bundle)


def kev_score_lines(bundle, requests, *flags):
    text = "".join(json.dumps(r) + "\n" for r in requests)
    proc = run_kev("score", "--bundle", bundle, "--jsonl", *flags, input=text)
    return proc.stdout.splitlines()


@pytest.mark.parametrize("decimals", [4, -1])
def test_answers_are_kev_score_bytes(bundle, decimals):
    model = kev_native.Model(bundle, decimals=decimals, usage_details=True)
    expected = kev_score_lines(bundle, REQUESTS, "--decimals", str(decimals), "--usage-details")
    got = [model.system_one_json(json.dumps(r)) for r in REQUESTS]
    assert len(expected) == len(REQUESTS)
    assert [no_latency(g) for g in got] == [no_latency(e) for e in expected]
    assert json.loads(got[1])["usage"]["cached_tokens"] > 0  # through the prefix cache, as kev's
    # The dict form is that text parsed; a dict request is that request.
    again = kev_native.Model(bundle, decimals=decimals, usage_details=True)
    for r, g in zip(REQUESTS, got):
        answer = again.system_one(r)
        answer["latency_ms"] = 0
        assert answer == json.loads(no_latency(g))


def test_precision_threads_temperature_as_kev_score(bundle):
    model = kev_native.Model(bundle, precision="bf16", threads=1, temperature=2.5)
    expected = kev_score_lines(bundle, REQUESTS[:1], "--precision", "bf16", "--threads", "1",
                               "--temperature", "2.5")
    assert no_latency(model.system_one_json(json.dumps(REQUESTS[0]))) == no_latency(expected[0])
    assert model.temperature == 2.5


def test_state_dir_is_shared_with_kev_score(bundle, tmp_path):
    """A saved point `kev score --state-dir` wrote is continued by the module (and one the module
    wrote by `kev score`): cached_tokens from the disk, the answer a cold `kev score` gives."""
    state = "\n".join(f"turn {i}: the customer asked where order {i * 7} is." for i in range(12))
    first = {"state": state, "questions": REQUESTS[0]["questions"]}
    grown = {"state": state + "\nturn 12: and the refund?", "questions": REQUESTS[0]["questions"]}
    grown_again = {"state": grown["state"] + "\nturn 13: thanks.", "questions": REQUESTS[0]["questions"]}
    d = str(tmp_path / "states")
    kev_score_lines(bundle, [first], "--state-dir", d)
    model = kev_native.Model(bundle, usage_details=True, state_dir=d)
    body = model.system_one(grown)
    assert body["usage"]["cached_tokens"] > 0
    del model  # writes what it queued
    cold = kev_score_lines(bundle, [grown, grown_again])
    assert body["answers"] == json.loads(cold[0])["answers"]
    again = json.loads(kev_score_lines(bundle, [grown_again], "--state-dir", d, "--usage-details")[0])
    assert again["usage"]["cached_tokens"] >= body["usage"]["state_tokens"] - 8
    assert again["answers"] == json.loads(cold[1])["answers"]
    with pytest.raises(kev_native.Error):
        kev_native.Model(bundle, state_dir="")


def raw_post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def test_answers_are_kev_serve_bytes(bundle):
    """system_one, permute and separate: the bodies `kev serve` answers (a fresh server and a
    fresh model each see the same requests in the same order, so the caches agree too)."""
    model = kev_native.Model(bundle)
    calls = [("/v1/systemone", model.system_one_json, REQUESTS[0]),
             ("/v1/systemone/permute", model.permute_json, {"request": REQUESTS[0], "question": "next", "n_perm": 3, "seed": 7}),
             ("/v1/systemone/separate", model.separate_json, REQUESTS[2]),
             ("/v1/systemone", model.system_one_json, REQUESTS[3])]
    server = ServeProcess(bundle)
    try:
        for path, method, req in calls:
            body = json.dumps(req)
            status, expected = raw_post(server.port, path, body)
            assert status == 200, expected
            assert no_latency(method(body)) == no_latency(expected), path
        # A refusal: the same sentence as the server's 400 body.
        status, expected = raw_post(server.port, "/v1/systemone", "{not json")
        assert status == 400
        with pytest.raises(kev_native.BadInputError) as e:
            model.system_one_json("{not json")
        assert str(e.value) == json.loads(expected)["detail"]
        assert e.value.http_status == 400 and e.value.exit_code == 2
    finally:
        server.close()


def test_score_many_streams_in_order(bundle):
    first = kev_native.Model(bundle)  # fresh, as the one below: the same cache hits
    expected = [no_latency(first.system_one_json(json.dumps(r))) for r in REQUESTS]
    model = kev_native.Model(bundle)
    seen = []

    def requests():  # an iterable read lazily: each answer arrives before the next is read
        for r in REQUESTS:
            seen.append(r)
            yield r

    for i, answer in enumerate(model.score_many(requests())):
        assert len(seen) == i + 1
        answer["latency_ms"] = 0
        assert answer == json.loads(expected[i])
    bad = list(model.score_many([REQUESTS[0], "[1]", REQUESTS[1]], errors="return"))
    assert isinstance(bad[1], kev_native.BadInputError) and isinstance(bad[2], dict)
    with pytest.raises(kev_native.BadInputError):
        list(model.score_many([REQUESTS[0], "[1]", REQUESTS[1]]))


def test_threads_get_the_answers_of_one_thread(bundle):
    model = kev_native.Model(bundle, decimals=-1)

    def answers_only(text):
        out = json.loads(text)
        return out["answers"], out["usage"]["input_tokens"], out["usage"]["output_tokens"]

    alone = [answers_only(kev_native.Model(bundle, decimals=-1).system_one_json(json.dumps(r)))
             for r in REQUESTS]
    results, errors = {}, []
    start = threading.Barrier(6)

    def worker(t):
        try:
            start.wait()
            for round_ in range(3):
                for i in ([0, 1, 2, 3] if t % 2 else [3, 2, 1, 0]):
                    results[(t, round_, i)] = answers_only(model.system_one_json(json.dumps(REQUESTS[i])))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors
    assert len(results) == 6 * 3 * 4
    for (t, round_, i), got in results.items():
        assert got == alone[i], (t, round_, i)


def test_the_gil_is_released_while_scoring(model):
    """A Python thread keeps running while another thread is inside system_one."""
    ticks, done = [], threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    big = {"state": {"log": ["event %d happened at the depot" % i for i in range(200)]}, "questions": QUESTIONS}
    t = threading.Thread(target=ticker)
    t.start()
    try:
        begin = time.monotonic()
        model.system_one_json(json.dumps(big))
        end = time.monotonic()
    finally:
        done.set()
        t.join()
    inside = [x for x in ticks if begin < x < end]
    assert end - begin > 0.05, "the request is too short to tell"
    assert len(inside) >= 5


INTERRUPT_SCRIPT = textwrap.dedent("""
    import itertools, json, sys, time
    sys.path.insert(0, sys.argv[1])
    import kev_native
    model = kev_native.Model(sys.argv[2])
    def requests():  # endless, each state new: only an interrupt ends it
        for i in itertools.count():
            yield {"state": {"ticket": i, "log": ["line %d of ticket %d" % (j, i) for j in range(60)]},
                   "questions": {"q": {"type": "noul", "instructions": "Escalate?"}}}
    n = 0
    try:
        for answer in model.score_many(requests()):
            n += 1
            print("answer", n, flush=True)
    except KeyboardInterrupt:
        print("interrupted", n, time.monotonic(), flush=True)
        sys.exit(0)
    print("finished", n, flush=True)
    sys.exit(1)
""")


def test_sigint_during_score_many_raises_keyboard_interrupt(bundle, tmp_path):
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), MODULE_DIR, bundle], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        answers = 0
        while answers < 3:
            line = proc.stdout.readline()
            assert line.startswith("answer"), (line, proc.stderr.read() if not line else "")
            answers += 1
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    last = [l for l in out.splitlines() if l.strip()][-1].split()
    assert proc.returncode == 0 and last[0] == "interrupted", (out, err)
    assert int(last[1]) >= 3
    assert float(last[2]) - sent < 5.0  # promptly: within one request, not at the end of the stream


def test_errors_map_to_kev_exit_codes(bundle, tmp_path):
    cases = []
    # A request kev refuses (422): the message is the one `kev score` prints.
    bad_request = json.dumps({"state": STATE, "questions": {"q": {"type": "choice", "instructions": "x",
                                                                  "criteria": {}}}})
    cases.append((lambda: kev_native.Model(bundle).system_one_json(bad_request), ["--bundle", bundle], bad_request))
    # A missing bundle, and a bundle whose head does not match its manifest's hash.
    missing = str(tmp_path / "no-such-bundle")
    cases.append((lambda: kev_native.Model(missing), ["--bundle", missing], json.dumps(REQUESTS[0])))
    tampered = tmp_path / "tampered"
    shutil.copytree(bundle, tampered)
    head = tampered / "head.safetensors"
    data = bytearray(head.read_bytes())
    data[-1] ^= 0x40
    head.write_bytes(bytes(data))
    cases.append((lambda: kev_native.Model(str(tampered)), ["--bundle", str(tampered)], json.dumps(REQUESTS[0])))
    seen_codes = set()
    for call, flags, body in cases:
        proc = run_kev("score", *flags, input=body, check=False)
        assert proc.returncode in CLASS_OF_EXIT, proc.stderr
        cls = getattr(kev_native, CLASS_OF_EXIT[proc.returncode])
        assert issubclass(cls, kev_native.Error)
        with pytest.raises(cls) as e:
            call()
        assert e.value.exit_code == proc.returncode
        assert proc.stderr.strip() == f"kev score: {e.value}"
        seen_codes.add(proc.returncode)
    assert {2, 3} <= seen_codes
    # Arguments the module checks as the command line does.
    with pytest.raises(kev_native.BadInputError, match="precision"):
        kev_native.Model(bundle, precision="fp16")
    with pytest.raises(kev_native.BadInputError, match="temperature"):
        kev_native.Model(bundle, temperature=0.0)
    with pytest.raises(TypeError):
        kev_native.Model(bundle).system_one(42)


def test_forward_is_kev_forward(model, bundle, tmp_path):
    prefix = [3, 17, 29, 4]
    rows = [[5, 6, 7], [11], [40, 41]]
    got = model.forward(rows, prefix=prefix)
    payload = {"prefix": prefix, "rows": [{"ids": r} for r in rows]}
    expected = forward(bundle, tmp_path, payload)
    assert len(got) == len(rows)
    for i, r in enumerate(rows):
        want = expected[f"row.{i}"].numpy()
        assert got[i].dtype == np.float32 and got[i].shape == (len(r), model.hidden)
        assert np.array_equal(got[i], want)
    with pytest.raises(kev_native.BadInputError, match="outside the vocabulary"):
        model.forward([[10 ** 9]])


def test_head_is_the_pointer_head_formula(model, bundle):
    w = {k: v.double().numpy() for k, v in read_safetensors(os.path.join(bundle, "head.safetensors")).items()}
    rng = np.random.default_rng(11)
    hidden = rng.standard_normal((4, model.hidden)).astype(np.float32)  # decide + 3 options
    logits, probs = model.head(hidden)
    h = hidden.astype(np.float64)
    q = w["q.weight"] @ h[0] + w["q.bias"]
    k = h[1:] @ w["k.weight"].T + w["k.bias"]
    want = k @ q / np.sqrt(w["q.weight"].shape[0])
    z = want / model.temperature
    want_p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    assert logits.dtype == np.float32 and logits.shape == (3,)
    np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(probs, want_p, rtol=1e-4, atol=1e-6)
    with pytest.raises(kev_native.BadInputError, match="hidden must be"):
        model.head(hidden[:, :-1])
