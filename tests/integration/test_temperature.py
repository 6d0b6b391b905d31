"""The calibration temperature override (`--temperature` / KEV_TEMPERATURE) in `kev score` and
`kev serve`: probabilities at T are softmax(z / T), so p_T = normalise(p_1 ** (1 / T)) must hold
(float64 here) against kev's own answers at T = 1; the flag wins over the variable; malformed
values are refused; the server reports the temperature in use in /v1/models and /health."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import SOURCE_DIR, ServeProcess, run_kev, synth_bundle  # noqa: E402

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "typed-decisions.jsonl")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return synth_bundle(tmp_path_factory.mktemp("temperature"), "--seed", 8)[1]


def dists(bundle, *args, env=None):
    out = run_kev("score", "--bundle", bundle, "--jsonl", "--decimals", "-1", *args, input=open(EXAMPLE).read(),
                  env=env).stdout
    res = []
    for line in out.splitlines():
        for a in json.loads(line)["answers"].values():
            res.append(np.array([1 - a["noul"], a["noul"]] if a["type"] == "noul" else list(a["probabilities"].values())))
    return res


def test_probabilities_follow_the_temperature(bundle):
    raw = dists(bundle, "--temperature", "1")
    for t in (0.5, 3.0):
        got = dists(bundle, "--temperature", str(t))
        for p1, pt in zip(raw, got, strict=True):
            want = p1 ** (1.0 / t)
            want /= want.sum()
            assert np.max(np.abs(pt - want)) < 5e-6
    manifest = json.load(open(os.path.join(bundle, "kev_export.json")))
    default = dists(bundle)
    bundle_t = dists(bundle, "--temperature", repr(manifest["temperature"]))
    assert all(np.array_equal(a, b) for a, b in zip(default, bundle_t))
    assert not all(np.array_equal(a, b) for a, b in zip(default, raw))


def test_environment_and_flag(bundle):
    flag = dists(bundle, "--temperature", "0.75")
    assert all(np.array_equal(a, b) for a, b in zip(flag, dists(bundle, env={"KEV_TEMPERATURE": "0.75"})))
    # The flag wins over the variable.
    assert all(np.array_equal(a, b)
               for a, b in zip(flag, dists(bundle, "--temperature", "0.75", env={"KEV_TEMPERATURE": "9"})))
    for bad in ("abc", "0", "-1", "inf", "nan", "1.5x", "1e7", "0x1p-1"):  # 1e7: over --temperature's maximum
        proc = run_kev("score", "--bundle", bundle, input=open(EXAMPLE).readline(), check=False,
                       env={"KEV_TEMPERATURE": bad})
        assert proc.returncode == 2 and "KEV_TEMPERATURE must be a finite number > 0" in proc.stderr, (bad, proc.stderr)
        proc = run_kev("score", "--bundle", bundle, "--temperature", bad, input="{}", check=False)
        assert proc.returncode != 0 and "--temperature" in proc.stderr, bad


def test_serve_reports_the_temperature(bundle, monkeypatch):
    manifest = json.load(open(os.path.join(bundle, "kev_export.json")))
    monkeypatch.setenv("KEV_TEMPERATURE", "0.625")
    server = ServeProcess(bundle)
    try:
        status, _, models = server.request("GET", "/v1/models")
        assert status == 200
        for card in models["models"]:
            assert card["temperature"] == 0.625
            assert card["bundle_temperature"] == manifest["temperature"]
            assert card["description"].endswith("at temperature 0.62")  # {:.2f} as upstream
        status, _, health = server.request("GET", "/health")
        assert status == 200 and health["temperature"] == 0.625
        req = json.loads(open(EXAMPLE).readline())
        status, _, body = server.score(req)
        want = json.loads(run_kev("score", "--bundle", bundle, "--temperature", "0.625", input=json.dumps(req)).stdout)
        assert status == 200 and body["answers"] == want["answers"]
    finally:
        server.close()
    monkeypatch.delenv("KEV_TEMPERATURE")
    server = ServeProcess(bundle)
    try:
        assert server.request("GET", "/health")[2]["temperature"] == manifest["temperature"]
    finally:
        server.close()
