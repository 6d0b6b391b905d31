"""Full-weight checkpoints (Kev 1.0's Kev-27B v2 layout) through the real binary.

The full checkpoints here are written by this test, outside kev, the way upstream's full-weight
training publishes one (save_pretrained of the bf16 text model): config.json with the text
settings at the top level (model_type qwen3_5_text, dtype bfloat16), model.safetensors.index.json
and shards model-0000N-of-00002.safetensors whose tensors carry no prefix and are all BF16, the
tokenizer files, and head.pt saved by torch with weights "full", lora 0, weights_dtype "bf16".
The weights are a LoRA synth checkpoint merged here with torch (W + (B @ A) * alpha / r in fp32,
one rounding to bf16), so the full bundle must answer as the LoRA bundle kev merged itself.

- kev pin (no --base) -> kev export -> kev verify / kev score / kev serve on such a checkpoint;
  the bundle's shards are the checkpoint's files byte for byte, and the manifest's
  weights_sha256 is recomputed here from upstream's definition (sha256 over the sorted shards'
  "name:sha256\\n" lines).
- Every refusal upstream's loaders make (a head.pt whose "weights" disagrees with the files,
  another dtype, a prefixed, missing, extra or misshaped tensor, another config layout) is made
  by kev pin and by kev export, with nothing left at the output path.
Nothing expected here comes from kev's own output.
"""
import hashlib
import json
import os
import shutil
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import exact_fp  # noqa: E402
import kevtest  # noqa: E402
from kevtest import run_kev  # noqa: E402

SHAPE = "tiny-27b"  # Kev-27B's depth and layer kinds at tiny widths
REV = "0123456789abcdef0123456789abcdef01234567"
LM = "model.language_model."
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
STATE = {"ticket": "printer jams on page 2", "customer": "Grace", "tries": ["restart", "new toner"]}
QUESTIONS = {
    "route": {"type": "choice", "instructions": "Who handles it?",
              "criteria": {"hardware": "a technician visit", "software": None, "billing": ""}},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
    "mood": {"type": "score", "instructions": "Customer mood", "criteria": ["angry", "calm", "happy"]},
}
REQUESTS = [{"state": STATE, "questions": QUESTIONS},
            {"state": "short state", "questions": {"q": QUESTIONS["route"]}},
            {"state": {"a": 1, "b": [1, 2]}, "questions": {"m": QUESTIONS["mood"], "u": QUESTIONS["urgent"]}}]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tensors_of(directory):
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(kevtest.read_safetensors(directory / shard))
    return out


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
    """A LoRA synth checkpoint at Kev-27B's depth and kev's own bundle of it."""
    d = tmp_path_factory.mktemp("full-lora")
    synth, recipe, bundle = d / "synth", d / "recipe.json", d / "bundle"
    run_kev("synth", "--out", synth, "--shape", SHAPE, "--seed", "11", "--quiet")
    run_kev("pin", "--model", "kev-27b-v1-lora", "--base", synth / "base", "--checkpoint", synth / "checkpoint",
            "--out", recipe, "--base-revision", REV, "--checkpoint-revision", REV)
    run_kev("export", "--recipe", recipe, "--base", synth / "base", "--checkpoint", synth / "checkpoint",
            "--out", bundle, "--quiet")
    return synth, recipe, bundle


def torch_merged(synth):
    """The LoRA checkpoint's backbone merged by torch: {unprefixed name: bf16 tensor}."""
    base = tensors_of(synth / "base")
    adapter = kevtest.read_safetensors(synth / "checkpoint" / "adapter_model.safetensors")
    cfg = json.loads((synth / "checkpoint" / "adapter_config.json").read_text())
    scale = cfg["lora_alpha"] / cfg["r"]
    full = {}
    for name, w in base.items():
        if not name.startswith(LM):
            continue  # the vision tower and MTP are not part of the text model
        stem = name[len(LM):]
        a_name = "base_model.model." + stem[: -len(".weight")] + ".lora_A.weight"
        if a_name in adapter:
            b = adapter[a_name.replace(".lora_A.", ".lora_B.")]
            w = (w.float() + (b.float() @ adapter[a_name].float()) * scale).to(torch.bfloat16)
        full[stem] = w.to(torch.bfloat16)  # every tensor in the config's dtype
    return full


def bundle_weights(bundle):
    """A kev bundle's backbone, names without the multimodal prefix, as bf16 (its F32 vectors hold
    bf16-representable values, which the cast keeps exactly)."""
    out = {}
    for name, t in tensors_of(bundle).items():
        if name.startswith(LM):
            out[name[len(LM):]] = t.to(torch.bfloat16)
    return out


def write_full(synth, out, weights, mutate=None):
    """Writes the full-weight layout under `out` (a new directory); mutate(weights, config, head)
    may change anything first. Returns out."""
    out.mkdir(parents=True)
    weights = dict(weights)
    config = json.loads((synth / "base" / "config.json").read_text())["text_config"]
    config = {"architectures": ["Qwen3_5TextModel"], **config, "dtype": "bfloat16"}
    head = torch.load(synth / "checkpoint" / "head.pt")
    head.update(weights="full", lora=0, weights_dtype="bf16", base="Qwen/Qwen3.8-27B")
    if mutate:
        mutate(weights, config, head)
    names = sorted(weights)
    half = len(names) // 2
    weight_map = {}
    for shard, part in zip(SHARDS, (names[:half], names[half:])):
        kevtest.write_safetensors(out / shard, {n: weights[n] for n in part}, {"format": "pt"})
        weight_map.update({n: shard for n in part})
    total = sum(t.numel() * t.element_size() for t in weights.values())
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(synth / "base" / name, out / name)
    torch.save(head, out / "head.pt")
    return out


def pin_export(ck, d, *pin_extra):
    recipe, bundle = d / "full-recipe.json", d / "full-bundle"
    run_kev("pin", "--model", "kev-27b", "--checkpoint", ck, "--out", recipe, *pin_extra)
    run_kev("export", "--recipe", recipe, "--checkpoint", ck, "--out", bundle, "--quiet")
    return recipe, bundle


def score(bundle, *extra):
    text = "".join(json.dumps(r) + "\n" for r in REQUESTS)
    proc = run_kev("score", "--bundle", bundle, "--jsonl", *extra, input=text)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def without_latency(bodies):
    return [{k: v for k, v in b.items() if k != "latency_ms"} for b in bodies]


@pytest.fixture(scope="module")
def full(lora, tmp_path_factory):
    """The torch-merged full checkpoint, pinned and exported: (checkpoint, recipe, bundle)."""
    synth = lora[0]
    d = tmp_path_factory.mktemp("full")
    ck = write_full(synth, d / "checkpoint", torch_merged(synth))
    recipe, bundle = pin_export(ck, d)
    return ck, recipe, bundle


def test_synth_lora_small_f32_tensors_are_bf16_exact(lora):
    # What lets a full checkpoint (every tensor bf16) carry the LoRA base's F32 A_log / GDN norm.
    base = tensors_of(lora[0] / "base")
    small = [t for n, t in base.items() if n.endswith(("A_log", "linear_attn.norm.weight"))]
    assert small and all(t.dtype == torch.float32 for t in small)
    assert all(torch.equal(t.to(torch.bfloat16).float(), t) for t in small)


def lora_factors(synth):
    """{unprefixed target name: (B, A)} of the LoRA checkpoint, and its scale alpha / r."""
    adapter = kevtest.read_safetensors(synth / "checkpoint" / "adapter_model.safetensors")
    cfg = json.loads((synth / "checkpoint" / "adapter_config.json").read_text())
    out = {}
    for name, a in adapter.items():
        if name.endswith(".lora_A.weight"):
            stem = name[len("base_model.model."):-len(".lora_A.weight")]
            out[stem + ".weight"] = (adapter[name.replace(".lora_A.", ".lora_B.")], a)
    return out, cfg["lora_alpha"] / cfg["r"]


def test_torch_merge_matches_kevs_merge_within_two_orders(lora):
    """Which bytes the full checkpoint carries: torch's merge next to kev's (bundle-format.md,
    "Next to torch": equal where torch's sgemm sums as the merge contract does; elsewhere a few
    elements apart, each within what two summation orders of B @ A can give, which is one BF16
    ulp except where W + ... cancels: 2 ulps at one element on an Intel Xeon). Tensors the LoRA
    does not touch are identical."""
    mine, kevs = torch_merged(lora[0]), bundle_weights(lora[2])
    factors, scale = lora_factors(lora[0])
    assert set(mine) == set(kevs) and set(factors) <= set(mine) and factors
    differing = 0
    for name, t in mine.items():
        if name not in factors:
            assert torch.equal(t.view(torch.int16), kevs[name].view(torch.int16)), name
            continue
        B, A = factors[name]
        bound = exact_fp.merge_orders_bound(t, kevs[name], B, A, scale)
        assert not bool(((t.double() - kevs[name].double()).abs() > bound).any()), name
        differing += int((t.view(torch.int16) != kevs[name].view(torch.int16)).sum())
    total = sum(t.numel() for t in mine.values())
    print(f"torch merge vs kev merge: {differing} of {total} elements differ")
    assert differing <= total * 1e-4


def test_full_bundle_answers_exactly_as_the_lora_bundle(lora, tmp_path):
    """The same weights in the full form: a full checkpoint holding exactly the LoRA bundle's
    merged weights answers byte for byte as the LoRA bundle, at every digit."""
    synth, _, lora_bundle = lora
    ck = write_full(synth, tmp_path / "checkpoint", bundle_weights(lora_bundle))
    _, bundle = pin_export(ck, tmp_path)
    for extra in ((), ("--decimals", "-1")):
        assert without_latency(score(bundle, *extra)) == without_latency(score(lora_bundle, *extra))


def test_torch_merged_full_checkpoint_answers_as_the_lora_bundle(lora, full):
    """The judge's recipe: merged by torch outside kev, exported, answered as a user sees it."""
    if all(torch.equal(a.view(torch.int16), b.view(torch.int16))
           for a, b in zip(*(dict(sorted(w.items())).values()
                             for w in (torch_merged(lora[0]), bundle_weights(lora[2]))))):
        digits = [(), ("--decimals", "-1")]  # identical weights: identical at every digit
    else:  # torch summed B @ A in another order here: a few weights an ulp or two apart
        # This random tiny-width, 64-layer model amplifies them to ~1e-3 in probability (Intel
        # Xeon with AVX-512: at most 1.0e-3), so the answers agree in form, choice and
        # tokens, and in every number within 5e-3.
        got, want = without_latency(score(full[2])), without_latency(score(lora[2]))
        assert_close_answers(got, want, 5e-3)
        return
    for extra in digits:
        assert without_latency(score(full[2], *extra)) == without_latency(score(lora[2], *extra))


def assert_close_answers(got, want, tol, path="answers"):
    """Same structure and strings (and every usage count but output_tokens, which counts the
    printed digits), numbers within tol."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), path
        for k in want:
            if k != "output_tokens":
                assert_close_answers(got[k], want[k], tol, f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close_answers(g, w, tol, f"{path}[{i}]")
    elif isinstance(want, float):
        assert isinstance(got, (int, float)) and abs(got - want) <= tol, (path, got, want)
    else:
        assert got == want, (path, got, want)


def test_bundle_keeps_the_checkpoint_bytes_and_records_the_form(full):
    ck, recipe, bundle = full
    m = json.loads((bundle / "kev_export.json").read_text())
    assert m["weights"] == "full"
    assert m["checkpoint_fields"]["weights"] == "full" and m["checkpoint_fields"]["weights_dtype"] == "bf16"
    assert "merged_targets" not in m and "lora" not in m
    assert m["dtypes"] == {"weights": "BF16", "head": "F32"}
    lines = "".join(f"{name}:{sha256(ck / name)}\n" for name in sorted(SHARDS))
    assert m["weights_sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    for name in SHARDS + ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"]:
        assert (bundle / name).read_bytes() == (ck / name).read_bytes(), name
        assert m["outputs"][name] == m["inputs"]["checkpoint/" + name] == sha256(ck / name)
    assert m["inputs"]["checkpoint/head.pt"] == sha256(ck / "head.pt")
    assert sorted(os.listdir(bundle)) == sorted(SHARDS + ["config.json", "tokenizer.json", "tokenizer_config.json",
                                                          "model.safetensors.index.json", "head.safetensors",
                                                          "kev_export.json"])
    r = json.loads(recipe.read_text())
    assert r["weights"] == "full" and "lora" not in r and "files" not in r["base"]
    assert r["checkpoint"]["revision"] == "ef78cc8a34d5f426fb229c52089db189218cfe5c"
    assert r["checkpoint"]["files"] == {n: sha256(ck / n) for n in os.listdir(ck)}


def test_lora_bundle_records_its_form(lora):
    m = json.loads((lora[2] / "kev_export.json").read_text())
    assert m["weights"] == "lora"
    assert m["weights_sha256"] == sha256(lora[0] / "checkpoint" / "adapter_model.safetensors")


def test_verify_full_bundle(full, tmp_path):
    out = run_kev("verify", full[2])
    assert out.returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(full[2], copy)
    with open(copy / SHARDS[1], "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    proc = run_kev("verify", copy, check=False)
    assert proc.returncode == 3 and SHARDS[1] in proc.stderr, proc.stderr


def test_serve_answers_from_full_bundle(full):
    want = without_latency(score(full[2]))
    server = kevtest.ServeProcess(full[2])
    try:
        for req, expected in zip(REQUESTS, want):
            status, _, body = server.score(req)
            assert status == 200, body
            assert body["answers"] == expected["answers"]
        status, _, models = server.request("GET", "/v1/models")
        assert status == 200
    finally:
        server.close()


# ---- refusals: nothing is written ---------------------------------------------------------------

def drop(name):
    return lambda w, c, h: w.pop(name)


def retype(name, dtype):
    return lambda w, c, h: w.__setitem__(name, w[name].to(dtype))


def rename(old, new):
    return lambda w, c, h: w.__setitem__(new, w.pop(old))


def reshape(name, shape):
    return lambda w, c, h: w.__setitem__(name, w[name].reshape(shape))


def set_config(key, value):
    return lambda w, c, h: c.__setitem__(key, value)


def set_head(key, value):
    return lambda w, c, h: h.__setitem__(key, value)


def add(name, shape):
    return lambda w, c, h: w.__setitem__(name, torch.zeros(shape, dtype=torch.bfloat16))


def nest_config(w, c, h):
    text = dict(c)
    c.clear()
    c.update({"model_type": "qwen3_5", "text_config": text})


CONV = "layers.0.linear_attn.conv1d.weight"
REFUSALS = [
    # (id, mutate, exit code, needle)
    ("a_log_f32", retype("layers.0.linear_attn.A_log", torch.float32), 5, "layers.0.linear_attn.A_log is F32"),
    ("norm_f32", retype("norm.weight", torch.float32), 5, "norm.weight is F32"),
    ("matrix_f16", retype("layers.5.mlp.up_proj.weight", torch.float16), 5, "layers.5.mlp.up_proj.weight is F16"),
    ("prefixed", rename("layers.2.mlp.down_proj.weight", "model.layers.2.mlp.down_proj.weight"), 2,
     'carries the prefix "model."'),
    ("prefixed_lm", rename("embed_tokens.weight", LM + "embed_tokens.weight"), 2,
     'carries the prefix "model.language_model."'),
    ("missing", drop("layers.3.self_attn.k_norm.weight"), 2, "first: layers.3.self_attn.k_norm.weight"),
    ("extra_lm_head", add("lm_head.weight", [8, 64]), 2, "lm_head.weight is not part of"),
    ("extra_layer", add("layers.64.input_layernorm.weight", [64]), 2, "layers.64.input_layernorm.weight is not part of"),
    ("conv_2d", lambda w, c, h: w.__setitem__(CONV, w[CONV].reshape(w[CONV].shape[0], -1)), 2,
     "[channels, 1, width]"),
    ("misshaped", lambda w, c, h: w.__setitem__("layers.1.mlp.gate_proj.weight",
                                                w["layers.1.mlp.gate_proj.weight"][:-1]), 2,
     "layers.1.mlp.gate_proj.weight has shape"),
    ("config_dtype", set_config("dtype", "float32"), 5, '"dtype" is "float32"'),
    ("config_nested", nest_config, 5, "no text_config"),
    ("head_fp32", set_head("weights_dtype", "fp32"), 5, 'weights_dtype" "fp32"'),
    ("head_lora", set_head("weights", "lora"), 2, 'weights="lora" but the checkpoint holds backbone weights'),
    ("head_rank", set_head("lora", 16), 2, '"lora" is 16'),
]


def nothing_at(*paths):
    for p in paths:
        assert not os.path.exists(p), p
        siblings = os.listdir(os.path.dirname(p))
        assert not [s for s in siblings if os.path.basename(p) in s and s != os.path.basename(p)], siblings


def hand_recipe(ck, path):
    """A full recipe written here, pinning every file of `ck` by its SHA-256."""
    files = {n: sha256(ck / n) for n in os.listdir(ck)}
    path.write_text(json.dumps({
        "format": "kev-4b-merged/1", "model": "kev-27b", "weights": "full",
        "base": {"repo": "Qwen/Qwen3.8-27B", "revision": None},
        "checkpoint": {"repo": "jaredpalmer/kev-27b", "revision": REV, "files": files},
        "reference": {"repo": "jaredpalmer/kev", "revision": "0771e6d1"}}))
    return path


@pytest.mark.parametrize("case,mutate,code,needle", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_by_pin_and_export(lora, full, tmp_path, case, mutate, code, needle):
    ck = write_full(lora[0], tmp_path / "checkpoint", bundle_weights(lora[2]), mutate)
    recipe, bundle = tmp_path / "recipe.json", tmp_path / "bundle"
    proc = run_kev("pin", "--model", "kev-27b", "--checkpoint", ck, "--out", recipe, check=False)
    assert proc.returncode == code and needle in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # one sentence
    nothing_at(recipe)
    proc = run_kev("export", "--recipe", hand_recipe(ck, tmp_path / "hand.json"), "--checkpoint", ck,
                   "--out", bundle, check=False)
    assert proc.returncode == code and needle in proc.stderr, proc.stderr
    nothing_at(bundle)


def test_head_full_next_to_adapter_files_is_refused(lora, tmp_path):
    synth = lora[0]
    ck = tmp_path / "checkpoint"
    shutil.copytree(synth / "checkpoint", ck)
    head = torch.load(ck / "head.pt")
    head.update(weights="full", lora=0, weights_dtype="bf16")
    torch.save(head, ck / "head.pt")
    recipe, bundle = tmp_path / "recipe.json", tmp_path / "bundle"
    proc = run_kev("pin", "--model", "kev-27b-v1-lora", "--base", synth / "base", "--checkpoint", ck,
                   "--out", recipe, "--base-revision", REV, "--checkpoint-revision", REV, check=False)
    assert proc.returncode == 2 and 'weights="full" but the checkpoint holds an adapter' in proc.stderr, proc.stderr
    nothing_at(recipe)
    proc = run_kev("pin", "--model", "kev-27b", "--checkpoint", ck, "--out", recipe, check=False)
    assert proc.returncode == 2 and "holds adapter_config.json" in proc.stderr, proc.stderr
    nothing_at(recipe)
    # export under a LoRA recipe that pins these very files (edited by hand)
    r = json.loads(lora[1].read_text())
    r["checkpoint"]["files"]["head.pt"] = sha256(ck / "head.pt")
    (tmp_path / "lora.json").write_text(json.dumps(r))
    proc = run_kev("export", "--recipe", tmp_path / "lora.json", "--base", synth / "base", "--checkpoint", ck,
                   "--out", bundle, check=False)
    assert proc.returncode == 2 and 'weights="full" but the checkpoint holds an adapter' in proc.stderr, proc.stderr
    nothing_at(bundle)


def test_full_weights_next_to_adapter_files_are_refused(lora, full, tmp_path):
    ck = write_full(lora[0], tmp_path / "checkpoint", bundle_weights(lora[2]))
    shutil.copy(lora[0] / "checkpoint" / "adapter_config.json", ck / "adapter_config.json")
    recipe, bundle = tmp_path / "recipe.json", tmp_path / "bundle"
    proc = run_kev("pin", "--model", "kev-27b", "--checkpoint", ck, "--out", recipe, check=False)
    assert proc.returncode == 2 and "holds adapter_config.json" in proc.stderr, proc.stderr
    nothing_at(recipe)
    proc = run_kev("export", "--recipe", full[1], "--checkpoint", ck, "--out", bundle, check=False)
    assert proc.returncode == 2 and "holds adapter_config.json" in proc.stderr, proc.stderr
    nothing_at(bundle)


def test_an_unindexed_shard_is_refused(lora, full, tmp_path):
    ck = write_full(lora[0], tmp_path / "checkpoint", bundle_weights(lora[2]))
    shutil.copy(ck / SHARDS[0], ck / "model-00003-of-00003.safetensors")
    proc = run_kev("pin", "--model", "kev-27b", "--checkpoint", ck, "--out", tmp_path / "r.json", check=False)
    assert proc.returncode == 2 and "model-00003-of-00003.safetensors is not named" in proc.stderr, proc.stderr
    nothing_at(tmp_path / "r.json")


def test_full_checkpoint_under_a_lora_member_is_refused(full, tmp_path):
    proc = run_kev("pin", "--model", "kev-27b-v1-lora", "--base", full[0], "--checkpoint", full[0],
                   "--out", tmp_path / "r.json", "--base-revision", REV, "--checkpoint-revision", REV, check=False)
    assert proc.returncode == 2 and "--model kev-27b" in proc.stderr, proc.stderr
    nothing_at(tmp_path / "r.json")


def test_a_changed_shard_is_refused_by_export(full, tmp_path):
    ck = tmp_path / "checkpoint"
    shutil.copytree(full[0], ck)
    with open(ck / SHARDS[0], "r+b") as f:
        f.seek(-2, os.SEEK_END)
        f.write(b"\x00\x01")
    proc = run_kev("export", "--recipe", full[1], "--checkpoint", ck, "--out", tmp_path / "b", check=False)
    assert proc.returncode == 3 and SHARDS[0] in proc.stderr, proc.stderr
    nothing_at(tmp_path / "b")


def test_synth_full_form_is_the_released_layout(tmp_path):
    out = tmp_path / "s"
    run_kev("synth", "--out", out, "--shape", SHAPE, "--form", "full", "--quiet")
    ck = out / "checkpoint"
    assert sorted(os.listdir(out)) == ["checkpoint"]
    assert sorted(os.listdir(ck)) == sorted(SHARDS + ["config.json", "head.pt", "model.safetensors.index.json",
                                                      "tokenizer.json", "tokenizer_config.json"])
    cfg = json.loads((ck / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and cfg["dtype"] == "bfloat16" and "text_config" not in cfg
    head = torch.load(ck / "head.pt")
    assert (head["weights"], head["lora"], head["weights_dtype"]) == ("full", 0, "bf16")
    weights = tensors_of(ck)
    assert all(t.dtype == torch.bfloat16 for t in weights.values())
    assert not [n for n in weights if n.startswith(("model.", "lm_head", "mtp", "visual"))]
    assert {"embed_tokens.weight", "norm.weight", "layers.63.mlp.down_proj.weight"} <= set(weights)
    assert weights[CONV].dim() == 3 and weights[CONV].shape[1] == 1
    # kev's own layout passes kev's checks and runs
    _, bundle = pin_export(ck, tmp_path)
    run_kev("verify", bundle)
    assert len(score(bundle)) == len(REQUESTS)


def test_a_write_failure_mid_copy_leaves_nothing(full, tmp_path):
    """A disk that fills up in the second shard: exit 4, no bundle and no staging directory."""
    ck, recipe, _ = full
    out = tmp_path / "bundle"
    first = os.path.getsize(ck / SHARDS[0])
    proc = run_kev("export", "--recipe", recipe, "--checkpoint", ck, "--out", out, check=False,
                   env={"KEV_FAULT_WRITE_AFTER_BYTES": str(first + 4096)})
    assert proc.returncode == 4 and "No space left" in proc.stderr, proc.stderr
    assert os.listdir(tmp_path) == []


def test_a_depth_prefix_is_pinned_only_under_the_test_hook(tmp_path):
    """KEV_PIN_DEPTH_PREFIX (test builds): the first 8 of Kev-27B's 64 layers pin and export, with
    a note, and the bundle keeps the checkpoint's shards; without the hook, or at a depth that
    is not whole periods of four, the prefix is refused as another layout."""
    for layers in (8, 6):
        run_kev("synth", "--out", tmp_path / f"s{layers}", "--shape", SHAPE, "--layers", str(layers),
                "--form", "full", "--quiet")
    ck = tmp_path / "s8" / "checkpoint"
    plain = run_kev("pin", "--model", "kev-27b", "--checkpoint", ck, "--out", tmp_path / "r.json", check=False)
    assert plain.returncode == 2 and "has 8 layers of another layout" in plain.stderr, plain.stderr
    nothing_at(tmp_path / "r.json")
    hook = {"KEV_PIN_DEPTH_PREFIX": "1"}
    odd = run_kev("pin", "--model", "kev-27b", "--checkpoint", tmp_path / "s6" / "checkpoint",
                  "--out", tmp_path / "r.json", check=False, env=hook)
    assert odd.returncode == 2 and "has 6 layers of another layout" in odd.stderr, odd.stderr
    nothing_at(tmp_path / "r.json")
    pinned = run_kev("pin", "--model", "kev-27b", "--checkpoint", ck, "--out", tmp_path / "r.json", env=hook)
    assert "the first 8 of Kev-27B's 64 layers" in pinned.stdout + pinned.stderr
    run_kev("export", "--recipe", tmp_path / "r.json", "--checkpoint", ck, "--out", tmp_path / "b", "--quiet",
            env=hook)
    for shard in SHARDS:
        assert sha256(tmp_path / "b" / shard) == sha256(ck / shard)
    run_kev("verify", tmp_path / "b")
    assert len(score(tmp_path / "b")) == len(REQUESTS)
