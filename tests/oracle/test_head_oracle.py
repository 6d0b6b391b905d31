"""`kev head` against the torch reference PointerHead (tests/oracle/head_oracle.py).

Gates (frozen): |logit - ref| <= 1e-4 + 1e-5*|ref|, |prob - ref| <= 1e-5, against torch's
float32 reference and against the float64 formula. The head reaches kev two ways: a
head.safetensors written here in Python, and the real path (kev synth -> head.pt replaced by
the oracle's torch.save -> kev pin -> kev export). Run with -s to see the observed maxima.
"""
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
import head_oracle  # noqa: E402
import kevtest  # noqa: E402

FIXTURE = os.path.join(HERE, "fixtures", "head", "pointer_head_oracle.json")
ISAS = ["auto", "portable", "avx2", "avx512"]


def logit_gate(ref):
    return 1e-4 + 1e-5 * abs(ref)


PROB_GATE = 1e-5


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("head_oracle"))
    head, qs, ref = head_oracle.write_all(out)
    return {"dir": out, "head": head, "qs": qs, "ref": ref}


def run_head(bundle, request_text, isa="auto", check=True):
    return kevtest.run_kev("head", "--bundle", bundle, "--isa", isa, input=request_text, check=check)


def compare(result, ref, label):
    """Asserts the gates against torch float32 and float64; returns the observed maxima."""
    got = json.loads(result)["questions"]
    assert len(got) == len(ref)
    m = {"logit32": 0.0, "prob32": 0.0, "logit64": 0.0, "prob64": 0.0}
    for qi, (g, r) in enumerate(zip(got, ref)):
        assert len(g["logits"]) == len(r["logits32"]) == len(g["probabilities"])
        for i, x in enumerate(g["logits"]):
            for key, refv in (("logit32", r["logits32"][i]), ("logit64", r["logits64"][i])):
                err = abs(x - refv)
                assert err <= logit_gate(refv), f"{label} q{qi} option {i}: logit {x} vs {refv} ({key})"
                m[key] = max(m[key], err)
        for i, x in enumerate(g["probabilities"]):
            for key, refv in (("prob32", r["probs32"][i]), ("prob64", r["probs64"][i])):
                err = abs(x - refv)
                assert err <= PROB_GATE, f"{label} q{qi} option {i}: prob {x} vs {refv} ({key})"
                m[key] = max(m[key], err)
        assert abs(math.fsum(g["probabilities"]) - 1) < 1e-5
    print(f"\n{label}: max |logit-torch32| {m['logit32']:.3g}, |prob-torch32| {m['prob32']:.3g}, "
          f"|logit-f64| {m['logit64']:.3g}, |prob-f64| {m['prob64']:.3g}")
    return m


def test_fixture_regenerates_byte_identical(tmp_path):
    path = tmp_path / "pointer_head_oracle.json"
    subprocess.run([sys.executable, os.path.join(HERE, "head_oracle.py"), "--fixture", str(path)], check=True)
    with open(FIXTURE, "rb") as f:
        committed = f.read()
    assert path.read_bytes() == committed, "the oracle changed: regenerate fixtures/head with --fixture and review"


def test_reference_class_semantics(oracle):
    """The oracle itself: eval-mode temperature, and agreement of torch float32 with float64."""
    head, qs, ref = oracle["head"], oracle["qs"], oracle["ref"]
    decide, options = qs[2]
    head.eval()
    head.temperature = 2.0
    with torch.no_grad():
        assert torch.allclose(head(decide, options) * 2.0, torch.tensor(ref[2]["logits32"]), atol=1e-6)
        head.train()
        assert torch.equal(head(decide, options), torch.tensor(ref[2]["logits32"]))
    head.temperature = 1.0
    head.eval()
    with open(FIXTURE) as f:
        fixture = json.load(f)
    for r, fr in zip(ref, fixture["reference_float64"]):
        for x, y in zip(r["logits32"], fr["logits"]):
            assert abs(x - float(y)) <= logit_gate(float(y))


def test_python_written_bundle_meets_gates_on_every_isa(oracle):
    with open(os.path.join(oracle["dir"], "request.json")) as f:
        request = f.read()
    outputs = {}
    for isa in ISAS:
        proc = run_head(oracle["dir"], request, isa, check=False)
        if proc.returncode == 5 and isa in ("avx2", "avx512"):
            print(f"\n{isa}: not supported by this CPU ({proc.stderr.strip()})")
            continue
        assert proc.returncode == 0, proc.stderr
        compare(proc.stdout, oracle["ref"], f"python bundle, isa {isa}")
        outputs[isa] = proc.stdout
    assert {"auto", "portable"} <= set(outputs)
    assert len(set(outputs.values())) == 1, "ISA variants disagree (they must be bit-identical)"


def test_exported_bundle_meets_gates(oracle, tmp_path):
    """The real path: torch.save head.pt in a synthetic checkpoint, pinned and exported by kev."""
    synth = tmp_path / "synth"
    kevtest.run_kev("synth", "--out", synth, "--hidden", 2560, "--pointer", 256, "--quiet")
    shutil.copyfile(os.path.join(oracle["dir"], "head.pt"), synth / "checkpoint" / "head.pt")
    recipe = tmp_path / "recipe.json"
    kevtest.run_kev("pin", "--model", "kev-4b", "--base", synth / "base", "--checkpoint", synth / "checkpoint",
                    "--out", recipe)
    bundle = tmp_path / "bundle"
    kevtest.run_kev("export", "--recipe", recipe, "--base", synth / "base", "--checkpoint", synth / "checkpoint",
                    "--out", bundle, "--quiet")
    # The exported head holds exactly the torch tensors, bit for bit, and the temperature.
    exported = kevtest.read_safetensors(bundle / "head.safetensors")
    state = head_oracle.head_state(oracle["head"])
    assert list(sorted(exported)) == sorted(state)
    for name, t in state.items():
        assert exported[name].dtype == torch.float32 and torch.equal(exported[name], t), name
    with open(bundle / "kev_export.json") as f:
        assert json.load(f)["temperature"] == head_oracle.TEMPERATURE
    with open(os.path.join(oracle["dir"], "request.json")) as f:
        request = f.read()
    compare(run_head(bundle, request).stdout, oracle["ref"], "exported bundle")


# --- behaviour of the command on a small head ---

@pytest.fixture(scope="module")
def small_bundle(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("small_head"))
    head = head_oracle.build_head(d=24, p=8, seed=5)
    kevtest.write_safetensors(os.path.join(out, "head.safetensors"), head_oracle.head_state(head))
    with open(os.path.join(out, "kev_export.json"), "w") as f:
        json.dump({"temperature": 1.7}, f)
    return {"dir": out, "head": head}


def small_request(cases, d=24):
    return {"questions": [{"decide": dec.tolist(), "options": opt.tolist()}
                          for dec, opt in head_oracle.questions(cases, d)]}


def test_permuting_options_permutes_outputs(small_bundle):
    req = small_request([9])
    out1 = json.loads(run_head(small_bundle["dir"], json.dumps(req)).stdout)["questions"][0]
    perm = [4, 0, 8, 2, 6, 1, 3, 7, 5]
    req2 = json.loads(json.dumps(req))
    req2["questions"][0]["options"] = [req["questions"][0]["options"][j] for j in perm]
    out2 = json.loads(run_head(small_bundle["dir"], json.dumps(req2)).stdout)["questions"][0]
    assert out2["logits"] == [out1["logits"][j] for j in perm]
    for i, j in enumerate(perm):
        assert abs(out2["probabilities"][i] - out1["probabilities"][j]) <= 1e-7


def test_batch_equals_one_at_a_time_and_questions_are_not_normalised_together(small_bundle):
    cases = [3, 1, 12, 5, 2, 7, 9, 4, 6, 11]
    req = small_request(cases)
    batch = json.loads(run_head(small_bundle["dir"], json.dumps(req)).stdout)["questions"]
    for q, expected in zip(req["questions"], batch):
        one = json.loads(run_head(small_bundle["dir"], json.dumps({"questions": [q]})).stdout)["questions"][0]
        assert one == expected  # bit-identical floats (shortest round-trip text)
        assert abs(math.fsum(one["probabilities"]) - 1) < 1e-6


def test_output_is_shortest_round_trip_float32(small_bundle):
    """Each number is the shortest text of its float32 (so it parses back to the same float), and
    the text is not truncated (values need up to 9 significant digits)."""
    import re
    import numpy as np
    proc = run_head(small_bundle["dir"], json.dumps(small_request([40, 40])))
    texts = re.findall(r"-?[0-9][0-9.eE+-]*", proc.stdout)
    assert len(texts) == 160
    digits = []
    for s in texts:
        f = np.float32(float(s))
        assert float(np.format_float_scientific(f, unique=True)) == float(s), s
        digits.append(len(re.sub(r"^-?0*\.?0*|[eE].*$|\.", "", s)))
    assert max(digits) >= 8, digits


@pytest.mark.parametrize("mutate, message", [
    (lambda r: "{not json", "not valid JSON"),
    (lambda r: "[]", "\"questions\" array"),
    (lambda r: {"questions": [{"decide": r["questions"][0]["decide"], "options": []}]}, "0 options"),
    (lambda r: {"questions": [{"decide": r["questions"][0]["decide"],
                               "options": [r["questions"][0]["options"][0]] * 256}]}, "256 options"),
    (lambda r: {"questions": [{"decide": r["questions"][0]["decide"][:-1],
                               "options": r["questions"][0]["options"]}]}, "hidden size is 24"),
    (lambda r: {"questions": [{"decide": r["questions"][0]["decide"],
                               "options": [r["questions"][0]["options"][0] + [0.5]]}]}, "option 0 has 25 values"),
    (lambda r: {"questions": [{"decide": ["1"] * 24, "options": r["questions"][0]["options"]}]}, "not a number"),
    (lambda r: {"questions": [{"decide": [True] * 24, "options": r["questions"][0]["options"]}]}, "not a number"),
    (lambda r: {"questions": [{"decide": r["questions"][0]["decide"], "options": "x"}]}, "array of vectors"),
    (lambda r: {"questions": [{"decide": r["questions"][0]["decide"]}]}, "\"options\""),
    (lambda r: '{"questions": [{"decide": [NaN], "options": [[1]]}]}', "not valid JSON"),
    (lambda r: '{"questions": [{"decide": [' + ",".join(["1e39"] * 24) + '], "options": [[' + ",".join(["1"] * 24) + ']]}]}',
     "not a finite float"),
])
def test_bad_input_is_refused(small_bundle, mutate, message):
    req = mutate(small_request([3]))
    text = req if isinstance(req, str) else json.dumps(req)
    proc = run_head(small_bundle["dir"], text, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("manifest, message", [
    ({"temperature": 0}, "finite number > 0"),
    ({"temperature": -1.5}, "finite number > 0"),
    ({}, "\"temperature\" is missing"),
    ({"temperature": "2"}, "not a number"),
])
def test_bad_temperature_is_refused(small_bundle, tmp_path, manifest, message):
    shutil.copyfile(os.path.join(small_bundle["dir"], "head.safetensors"), tmp_path / "head.safetensors")
    with open(tmp_path / "kev_export.json", "w") as f:
        json.dump(manifest, f)
    proc = run_head(tmp_path, json.dumps(small_request([2])), check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_bad_head_tensors_are_refused(small_bundle, tmp_path):
    state = head_oracle.head_state(small_bundle["head"])
    cases = [
        ({k: v for k, v in state.items() if k != "k.bias"}, "tensor k.bias is missing"),
        ({**state, "extra": torch.zeros(1)}, "unexpected tensor extra"),
        ({**state, "q.weight": state["q.weight"].to(torch.bfloat16)}, "tensor q.weight is BF16"),
        ({**state, "q.bias": state["q.bias"][:-1].clone()}, "tensor q.bias has shape [7]"),
        ({**state, "k.weight": state["k.weight"].clone().fill_(float("nan"))}, "tensor k.weight holds a non-finite"),
    ]
    for i, (tensors, message) in enumerate(cases):
        d = tmp_path / str(i)
        d.mkdir()
        kevtest.write_safetensors(d / "head.safetensors", tensors)
        with open(d / "kev_export.json", "w") as f:
            json.dump({"temperature": 1.0}, f)
        proc = run_head(d, json.dumps(small_request([2])), check=False)
        assert proc.returncode == 2 and message in proc.stderr, (message, proc.stderr)
