"""`kev export` through the real binary on synthetic checkpoints.

Oracles: torch (the merge, head.pt contents), hashlib (every digest), the Python json module
(tokenizer ids, config layer types). Nothing expected here comes from kev's own output.
"""
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

sys.path.insert(0, os.path.join(os.environ.get("KEV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")), "tests", "pylib"))
import exact_fp  # noqa: E402
import kevtest  # noqa: E402

MODULES = {
    "mlp": ["gate_proj", "up_proj", "down_proj"],
    "self_attn": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "linear_attn": ["in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"],
}
DELIMS = {"state": "<|fim_prefix|>", "question": "<|fim_middle|>", "option_open": "<|box_start|>",
          "option_close": "<|box_end|>", "decide": "<|fim_suffix|>"}


# ---------------------------------------------------------------- helpers

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def raw_tensors(path):
    """{name: (dtype, shape, raw bytes)} straight from the safetensors layout."""
    header, start = kevtest.read_safetensors_header(path)
    with open(path, "rb") as f:
        data = f.read()[start:]
    return {n: (i["dtype"], i["shape"], data[i["data_offsets"][0]:i["data_offsets"][1]])
            for n, i in header.items() if n != "__metadata__"}


def make_recipe(base, ckpt, path, model="kev-4b", targets=248, rank=16, alpha=32, drop=(), null=()):
    """A recipe pinning every file of base/ and checkpoint/ with hashlib digests."""
    def files(d, side):
        out = {}
        for name in sorted(os.listdir(d)):
            key = f"{side}/{name}"
            if key in drop:
                continue
            out[name] = None if key in null else sha256(os.path.join(d, name))
        return out
    recipe = {
        "format": "kev-4b-merged/1", "model": model,
        "base": {"repo": "Qwen/Qwen3.5-4B-Base", "revision": "1001bb4d826a52d1f399e183466143f4da7b741b",
                 "files": files(base, "base")},
        "checkpoint": {"repo": "jaredpalmer/kev-4b", "revision": "139fdd94f1b6a6ad80cc15e08fcb99cac885a101",
                       "files": files(ckpt, "checkpoint")},
        "reference": {"repo": "jaredpalmer/kev", "revision": "2074cc44"},
        "lora": {"rank": rank, "alpha": alpha, "targets": targets},
    }
    with open(path, "w") as f:
        json.dump(recipe, f, indent=2)
    return recipe


def expected_targets(config_path, adapter_config_path):
    with open(config_path) as f:
        tc = json.load(f)["text_config"]
    with open(adapter_config_path) as f:
        modules = json.load(f)["target_modules"]
    names = []
    for layer, kind in enumerate(tc["layer_types"]):
        fams = ["mlp", "self_attn"] if kind == "full_attention" else ["mlp", "linear_attn"]
        for fam in fams:
            for m in MODULES[fam]:
                if m in modules:
                    names.append(f"layers.{layer}.{fam}.{m}")
    return names


def no_output_left(out):
    parent, name = os.path.split(out)
    assert not os.path.exists(out), f"{out} exists after a refused export"
    left = glob.glob(os.path.join(parent, f".{name}.kev-staging.*"))
    assert not left, f"staging directories left behind: {left}"


def export(recipe, base, ckpt, out, check=False, env=None):
    return kevtest.run_kev("export", "--recipe", recipe, "--base", base, "--checkpoint", ckpt,
                           "--out", out, check=check, env=env)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    kevtest.run_kev("synth", "--out", root / "synth", "--seed", "7")
    base, ckpt = str(root / "synth" / "base"), str(root / "synth" / "checkpoint")
    recipe = str(root / "recipe.json")
    kevtest.run_kev("pin", "--model", "kev-4b", "--base", base, "--checkpoint", ckpt, "--out", recipe)
    out = str(root / "bundle")
    export(recipe, base, ckpt, out, check=True)
    return {"root": root, "base": base, "ckpt": ckpt, "recipe": recipe, "out": out}


def variant(synth, tmp_path, modify=None):
    """A copy of the synthetic inputs, modified, with a fresh hashlib recipe."""
    base, ckpt = str(tmp_path / "base"), str(tmp_path / "checkpoint")
    shutil.copytree(synth["base"], base)
    shutil.copytree(synth["ckpt"], ckpt)
    if modify:
        modify(base, ckpt)
    recipe = str(tmp_path / "recipe.json")
    make_recipe(base, ckpt, recipe)
    return recipe, base, ckpt, str(tmp_path / "out")


def refuse(synth, tmp_path, modify, *needles, code=None):
    recipe, base, ckpt, out = variant(synth, tmp_path, modify)
    proc = export(recipe, base, ckpt, out)
    assert proc.returncode != 0, "export should have refused"
    if code is not None:
        assert proc.returncode == code, proc.stderr
    for n in needles:
        assert n in proc.stderr, f"{n!r} not in: {proc.stderr}"
    no_output_left(out)
    return proc.stderr


def rewrite_adapter(ckpt, fn):
    path = os.path.join(ckpt, "adapter_model.safetensors")
    tensors = kevtest.read_safetensors(path)
    tensors = fn(dict(tensors))
    os.remove(path)
    kevtest.write_safetensors(path, tensors, {"format": "pt"})


def rewrite_json(path, fn):
    with open(path) as f:
        j = json.load(f)
    fn(j)
    with open(path, "w") as f:
        json.dump(j, f)


def rewrite_head(ckpt, fn):
    path = os.path.join(ckpt, "head.pt")
    d = torch.load(path)
    fn(d)
    torch.save(d, path)


# ---------------------------------------------------------------- the bundle

def test_pinned_recipe_matches_hashlib(synth):
    with open(synth["recipe"]) as f:
        r = json.load(f)
    for side, d in (("base", synth["base"]), ("checkpoint", synth["ckpt"])):
        assert set(r[side]["files"]) == set(os.listdir(d))
        for name, digest in r[side]["files"].items():
            assert digest == sha256(os.path.join(d, name)), name
    assert r["lora"] == {"rank": 16, "alpha": 32, "targets": 248}


def merge_inputs(synth):
    """(name, W bf16, B f32, A f32, merged bf16 from kev, scale) for every LoRA target."""
    with open(os.path.join(synth["ckpt"], "adapter_config.json")) as f:
        ac = json.load(f)
    scale = ac["lora_alpha"] / ac["r"]
    adapter = kevtest.read_safetensors(os.path.join(synth["ckpt"], "adapter_model.safetensors"))
    with open(os.path.join(synth["base"], "model.safetensors.index.json")) as f:
        wmap = json.load(f)["weight_map"]
    targets = expected_targets(os.path.join(synth["base"], "config.json"),
                               os.path.join(synth["ckpt"], "adapter_config.json"))
    assert len(targets) == 248
    base_cache, out_cache = {}, {}
    for stem in targets:
        name = f"model.language_model.{stem}.weight"
        shard = wmap[name]
        if shard not in base_cache:
            base_cache[shard] = kevtest.read_safetensors(os.path.join(synth["base"], shard))
            out_cache[shard] = kevtest.read_safetensors(os.path.join(synth["out"], shard))
        W = base_cache[shard][name]
        got = out_cache[shard][name]
        assert got.dtype == torch.bfloat16 and got.shape == W.shape
        assert not torch.equal(got.view(torch.int16), W.view(torch.int16)), f"{name} unchanged"
        yield (name, W, adapter[f"base_model.model.{stem}.lora_B.weight"],
               adapter[f"base_model.model.{stem}.lora_A.weight"], got, scale)


def test_merged_targets_follow_the_merge_contract_exactly(synth):
    """The merge contract (docs/bundle-format.md) evaluated without any BLAS: every element of
    every target by the vectorised exact-rounding form, and a seeded sample of each target also
    by exact rational arithmetic (two independent evaluations of the same rule)."""
    import random

    import numpy as np
    rng = random.Random(20261130)
    sampled = 0
    for name, W, B, A, got, scale in merge_inputs(synth):
        w_bits = W.view(torch.int16).numpy().view(np.uint16)
        got_bits = got.view(torch.int16).numpy().view(np.uint16)
        b, a = B.float().numpy(), A.float().numpy()
        want = exact_fp.merged_bf16_bits_array(w_bits, b, a, scale)
        bad = np.argwhere(want != got_bits)
        assert len(bad) == 0, f"{name}: {len(bad)} elements differ, first at {bad[0].tolist()}"
        rows, cols = W.shape
        for _ in range(8):
            i, j = rng.randrange(rows), rng.randrange(cols)
            exact = exact_fp.merged_bf16_bits(int(w_bits[i, j]), b[i].tolist(), a[:, j].tolist(),
                                              float(scale))
            assert int(got_bits[i, j]) == exact, f"{name}[{i},{j}]"
            sampled += 1
    assert sampled == 248 * 8


def torch_uses_the_contract_order(shapes):
    """Probe: does this machine's torch sgemm compute B @ A (K = r) as the contract's FMA chain?
    Random full-mantissa operands make any other summation order show within a few elements."""
    gen = torch.Generator().manual_seed(5)
    for out_f, r, in_f in shapes:
        B = torch.randn(out_f, r, generator=gen)
        A = torch.randn(r, in_f, generator=gen)
        P = (B @ A).tolist()
        Bl, Al = B.tolist(), A.t().tolist()
        for i in range(min(out_f, 8)):
            for j in range(min(in_f, 64)):
                acc = 0.0
                for b, a in zip(Bl[i], Al[j]):
                    acc = exact_fp.fma(b, a, acc)
                if acc != P[i][j]:
                    return False
    return True


def ordered(bits):
    """int16 BF16 patterns -> integers in the order of the values they encode (one ulp = 1)."""
    b = bits.to(torch.int32)
    return torch.where(b < 0, -(b & 0x7FFF), b)


def test_merged_targets_match_torch(synth):
    """Against torch's own merge on this machine. Torch's sgemm picks its accumulation order per
    CPU: where the probe shows it uses the contract's order, every element must be identical;
    elsewhere at most 1e-4 of them different, each within what two float32 evaluations of the
    same formula can differ by (exact_fp.merge_orders_bound): one BF16 ulp, plus the rounding error of
    two summation orders of B @ A, which W + ... can leave larger than an ulp where it cancels
    (seen on an Intel Xeon with AVX-512: 2 ulps at one element)."""
    inputs = list(merge_inputs(synth))
    strict = torch_uses_the_contract_order(sorted({(B.shape[0], B.shape[1], A.shape[1])
                                                   for _, _, B, A, _, _ in inputs}))
    differing = total = 0
    for name, W, B, A, got, scale in inputs:
        want = (W.float() + (B.float() @ A.float()) * scale).to(torch.bfloat16)
        diff = (ordered(got.view(torch.int16)) - ordered(want.view(torch.int16))).abs()
        if strict:
            assert int(diff.max()) == 0, f"{name}: torch uses the contract order here, yet differs"
        far = (got.double() - want.double()).abs() > exact_fp.merge_orders_bound(got, want, B, A, scale)
        assert not bool(far.any()), f"{name}: beyond two float32 orders' bound from torch"
        differing += int((diff != 0).sum())
        total += diff.numel()
    print(f"torch order probe: {'contract order' if strict else 'another order'}; "
          f"{differing} of {total} merged elements differ from torch")
    assert differing <= 1e-4 * total


def test_untouched_tensors_byte_identical_and_same_shards(synth):
    with open(os.path.join(synth["base"], "model.safetensors.index.json")) as f:
        base_index = json.load(f)
    with open(os.path.join(synth["out"], "model.safetensors.index.json")) as f:
        out_index = json.load(f)
    assert out_index["weight_map"] == base_index["weight_map"]
    shards = sorted(set(base_index["weight_map"].values()))
    assert len(shards) == 2
    merged = {f"model.language_model.{s}.weight" for s in expected_targets(
        os.path.join(synth["base"], "config.json"), os.path.join(synth["ckpt"], "adapter_config.json"))}
    total = 0
    kinds = set()
    for shard in shards:
        b, o = raw_tensors(os.path.join(synth["base"], shard)), raw_tensors(os.path.join(synth["out"], shard))
        assert set(b) == set(o), shard
        for name, (dt, shape, raw) in b.items():
            total += len(raw)
            assert o[name][0] == dt and o[name][1] == shape, name
            if name not in merged:
                assert o[name][2] == raw, f"{name} changed"
                kinds.add(dt)
    assert out_index["metadata"]["total_size"] == total
    assert "F32" in kinds  # A_log / GDN norm.weight were copied byte for byte
    assert any(n.startswith("model.visual.") for n in base_index["weight_map"])
    assert any(n.startswith("mtp.") for n in base_index["weight_map"])


def test_copied_files_head_and_manifest(synth):
    out, base, ckpt = synth["out"], synth["base"], synth["ckpt"]
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(base, name), "rb") as a, open(os.path.join(out, name), "rb") as b:
            assert a.read() == b.read(), name
    head_pt = torch.load(os.path.join(ckpt, "head.pt"))
    head = kevtest.read_safetensors(os.path.join(out, "head.safetensors"))
    assert list(head) == ["q.weight", "q.bias", "k.weight", "k.bias"]
    for k, v in head_pt["head"].items():
        assert head[k].dtype == torch.float32 and torch.equal(head[k], v), k
    with open(os.path.join(out, "kev_export.json")) as f:
        m = json.load(f)
    assert set(m) == {"format", "model", "base", "checkpoint", "reference", "inputs", "outputs",
                      "merged_targets", "lora", "dtypes", "dimensions", "temperature", "delimiters",
                      "producer", "checkpoint_fields", "weights", "weights_sha256"}
    # upstream's provenance of a LoRA checkpoint: the adapter file's SHA-256
    assert m["weights"] == "lora"
    with open(os.path.join(ckpt, "adapter_model.safetensors"), "rb") as f:
        assert m["weights_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert m["checkpoint_fields"] == {k: head_pt[k] for k in (
        "option_isolation", "special_embeddings", "weights", "weights_dtype")} | {
        "multimodal": False, "quantization": None, "trainable_token_indices": None}
    assert m["format"] == "kev-4b-merged/1" and m["model"] == "kev-4b"
    assert m["base"] == {"repo": "Qwen/Qwen3.5-4B-Base", "revision": "1001bb4d826a52d1f399e183466143f4da7b741b"}
    assert m["checkpoint"]["revision"] == "139fdd94f1b6a6ad80cc15e08fcb99cac885a101"
    assert m["reference"] == {"repo": "jaredpalmer/kev", "revision": "2074cc44"}
    want_inputs = {f"base/{n}": sha256(os.path.join(base, n)) for n in os.listdir(base)}
    want_inputs.update({f"checkpoint/{n}": sha256(os.path.join(ckpt, n)) for n in os.listdir(ckpt)})
    assert m["inputs"] == want_inputs
    files = set(os.listdir(out)) - {"kev_export.json"}
    assert m["outputs"] == {n: sha256(os.path.join(out, n)) for n in files}
    assert m["merged_targets"] == sorted(f"model.language_model.{s}.weight" for s in expected_targets(
        os.path.join(base, "config.json"), os.path.join(ckpt, "adapter_config.json")))
    assert m["lora"] == {"rank": 16, "alpha": 32, "scale": 2.0}
    with open(os.path.join(base, "config.json")) as f:
        tc = json.load(f)["text_config"]
    assert m["dimensions"] == {"hidden": tc["hidden_size"], "layers": tc["num_hidden_layers"],
                               "pointer": head_pt["head"]["q.weight"].shape[0]}
    assert m["temperature"] == head_pt["temperature"]
    with open(os.path.join(base, "tokenizer.json")) as f:
        added = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    assert m["delimiters"] == {k: added[v] for k, v in DELIMS.items()}
    assert m["producer"]["name"] == "kev-native"
    assert m["dtypes"]["head"] == "F32" and m["dtypes"]["merged_targets"] == "BF16"


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.parametrize("isa", ["portable", "avx2", "avx512"])
def test_every_merge_kernel_gives_the_same_bundle(synth, tmp_path, isa):
    """Reproducible bundles: each merge path this CPU runs writes the same bytes (manifest
    output hashes) as the default export."""
    flags = cpu_flags()
    needs = {"portable": set(), "avx2": {"avx2", "fma"},
             "avx512": {"avx2", "fma", "avx512f", "avx512bw", "avx512vl"}}[isa]
    if not needs <= flags:
        pytest.skip(f"this CPU has no {isa} (flags lack {sorted(needs - flags)})")
    out = str(tmp_path / "out")
    proc = kevtest.run_kev("export", "--recipe", synth["recipe"], "--base", synth["base"],
                           "--checkpoint", synth["ckpt"], "--out", out, "--json",
                           env={"KEV_MERGE_ISA": isa})
    assert json.loads(proc.stdout)["merge_isa"] == isa
    with open(os.path.join(synth["out"], "kev_export.json")) as f:
        want = json.load(f)["outputs"]
    with open(os.path.join(out, "kev_export.json")) as f:
        assert json.load(f)["outputs"] == want
    for name in want:
        assert sha256(os.path.join(out, name)) == want[name]


def test_unknown_isa_is_refused(synth, tmp_path):
    out = str(tmp_path / "out")
    proc = export(synth["recipe"], synth["base"], synth["ckpt"], out, env={"KEV_ISA": "avx9"})
    assert proc.returncode == 2 and "KEV_ISA=avx9" in proc.stderr, proc.stderr
    no_output_left(out)


def test_verify_passes(synth):
    proc = kevtest.run_kev("verify", synth["out"])
    assert "OK" in proc.stdout


def test_verify_refuses_a_manifest_with_a_duplicate_key(synth, tmp_path):
    """A second "outputs" after the real one would make a lenient reader check the attacker's
    list only: verify reads the manifest with the strict reader, as every bundle reader does."""
    copy = tmp_path / "dup"
    shutil.copytree(synth["out"], copy)
    path = copy / "kev_export.json"
    text = path.read_text()
    assert text.rstrip().endswith("}")
    path.write_text(text.rstrip()[:-1] + ', "outputs": {}}\n')
    proc = kevtest.run_kev("verify", str(copy), check=False)
    assert proc.returncode == 3 and "duplicate" in proc.stderr, proc.stderr


# ---------------------------------------------------------------- refusals

def test_existing_output_refused(synth, tmp_path):
    out = tmp_path / "exists"
    out.mkdir()
    proc = export(synth["recipe"], synth["base"], synth["ckpt"], str(out))
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert os.listdir(out) == []


def test_shipped_recipe_has_null_hashes_and_is_refused(synth, tmp_path):
    shipped = os.path.join(kevtest.SOURCE_DIR, "recipes", "kev-4b.json")
    with open(shipped) as f:
        r = json.load(f)
    assert r["base"]["revision"] == "1001bb4d826a52d1f399e183466143f4da7b741b"
    assert r["checkpoint"]["revision"] == "139fdd94f1b6a6ad80cc15e08fcb99cac885a101"
    assert all(v is None for side in ("base", "checkpoint") for v in r[side]["files"].values())
    out = str(tmp_path / "out")
    proc = export(shipped, synth["base"], synth["ckpt"], out)
    assert proc.returncode == 2 and "kev pin" in proc.stderr and "null" in proc.stderr
    no_output_left(out)


def test_unpinned_file_refused(synth, tmp_path):
    base, ckpt = synth["base"], synth["ckpt"]
    recipe, out = str(tmp_path / "r.json"), str(tmp_path / "out")
    make_recipe(base, ckpt, recipe, null=("checkpoint/head.pt",))
    proc = export(recipe, base, ckpt, out)
    assert proc.returncode == 2 and "checkpoint/head.pt" in proc.stderr and "kev pin" in proc.stderr
    no_output_left(out)


def test_shard_missing_from_recipe_refused(synth, tmp_path):
    base, ckpt = synth["base"], synth["ckpt"]
    shard = sorted(n for n in os.listdir(base) if n.endswith(".safetensors"))[1]
    recipe, out = str(tmp_path / "r.json"), str(tmp_path / "out")
    make_recipe(base, ckpt, recipe, drop=(f"base/{shard}",))
    proc = export(recipe, base, ckpt, out)
    assert proc.returncode == 2 and shard in proc.stderr and "not pin" in proc.stderr
    no_output_left(out)


def test_missing_pinned_file_refused(synth, tmp_path):
    def modify(base, ckpt):
        pass
    recipe, base, ckpt, out = variant(synth, tmp_path, modify)
    os.remove(os.path.join(ckpt, "head.pt"))
    proc = export(recipe, base, ckpt, out)
    assert proc.returncode == 4 and "checkpoint/head.pt" in proc.stderr and "missing" in proc.stderr
    no_output_left(out)


@pytest.mark.parametrize("victim", ["base/config.json", "checkpoint/adapter_model.safetensors",
                                    "checkpoint/head.pt", "base/model.safetensors.index.json"])
def test_wrong_hash_is_refused_before_any_parse(synth, tmp_path, victim):
    """The file is replaced by garbage that would fail to parse (or, for head.pt, a pickle that
    would run code). The pin is the original digest: kev must report the hash, never a parse
    error, and nothing may run."""
    recipe, base, ckpt, out = variant(synth, tmp_path)
    side, name = victim.split("/")
    path = os.path.join(base if side == "base" else ckpt, name)
    pinned = sha256(path)
    marker = tmp_path / "pwned"
    if name == "head.pt":
        write_malicious_head(path, marker)
    else:
        with open(path, "wb") as f:
            f.write(b"\xff\x00 not json, not safetensors" * 3)
    actual = sha256(path)
    proc = export(recipe, base, ckpt, out)
    assert proc.returncode == 3, proc.stderr
    assert victim in proc.stderr and pinned in proc.stderr and actual in proc.stderr
    assert "JSON" not in proc.stderr and "header" not in proc.stderr and "pickle" not in proc.stderr
    assert not marker.exists()
    no_output_left(out)


class _Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def write_malicious_head(path, marker):
    d = torch.load(path)
    d["args"] = _Evil(marker)
    os.remove(path)
    torch.save(d, path)


def test_malicious_head_pickle_refused_without_running(synth, tmp_path):
    marker = tmp_path / "pwned"
    err = refuse(synth, tmp_path, lambda b, c: write_malicious_head(os.path.join(c, "head.pt"), marker),
                 "head.pt", code=2)
    assert "system" in err
    assert not marker.exists()


def test_nan_head_refused(synth, tmp_path):
    def mod(b, c):
        def f(d):
            d["head"]["q.weight"][3, 5] = float("nan")
        rewrite_head(c, f)
    refuse(synth, tmp_path, mod, "q.weight", "finite", code=2)


@pytest.mark.parametrize("t", [0.0, -1.0, float("inf")])
def test_bad_temperature_refused(synth, tmp_path, t):
    def mod(b, c):
        rewrite_head(c, lambda d: d.__setitem__("temperature", t))
    refuse(synth, tmp_path, mod, "temperature", code=2)


def test_head_shape_inconsistent_with_hidden_refused(synth, tmp_path):
    def mod(b, c):
        def f(d):
            d["head"]["k.weight"] = d["head"]["k.weight"][:, :-1].contiguous()
        rewrite_head(c, f)
    refuse(synth, tmp_path, mod, "k.weight", "shape", code=2)


def _first_target(ckpt):
    return "base_model.model.layers.0.linear_attn.in_proj_qkv"


def test_missing_pair_refused(synth, tmp_path):
    def mod(b, c):
        def f(t):
            del t[_first_target(c) + ".lora_A.weight"]
            return t
        rewrite_adapter(c, f)
    refuse(synth, tmp_path, mod, "missing", "layers.0.linear_attn.in_proj_qkv.lora_A", code=2)


def test_extra_tensor_refused(synth, tmp_path):
    def mod(b, c):
        def f(t):
            t["base_model.model.layers.0.mlp.gate_proj.lora_C.weight"] = torch.zeros(2, 2)
            return t
        rewrite_adapter(c, f)
    refuse(synth, tmp_path, mod, "unexpected", "lora_C", code=2)


def test_same_count_wrong_target_refused(synth, tmp_path):
    """Layer 3 is full attention: an in_proj_qkv adapter there is not a target, and layer 0's is
    then missing. Same number of tensors, wrong inventory."""
    def mod(b, c):
        def f(t):
            for ab in ("lora_A", "lora_B"):
                t[f"base_model.model.layers.3.linear_attn.in_proj_qkv.{ab}.weight"] = t.pop(
                    f"base_model.model.layers.0.linear_attn.in_proj_qkv.{ab}.weight")
            return t
        rewrite_adapter(c, f)
    err = refuse(synth, tmp_path, mod, "missing", "unexpected", "layers.3.linear_attn.in_proj_qkv", code=2)
    assert "layers.0.linear_attn.in_proj_qkv" in err


def test_bad_shape_refused(synth, tmp_path):
    def mod(b, c):
        def f(t):
            k = "base_model.model.layers.5.mlp.down_proj.lora_A.weight"
            t[k] = t[k][:, :-1].contiguous()
            return t
        rewrite_adapter(c, f)
    refuse(synth, tmp_path, mod, "layers.5.mlp.down_proj.lora_A", "shape", code=2)


def test_wrong_dtype_refused(synth, tmp_path):
    def mod(b, c):
        def f(t):
            k = "base_model.model.layers.2.mlp.up_proj.lora_B.weight"
            t[k] = t[k].to(torch.bfloat16)
            return t
        rewrite_adapter(c, f)
    refuse(synth, tmp_path, mod, "layers.2.mlp.up_proj.lora_B", "BF16", code=2)


def test_dora_tensor_refused(synth, tmp_path):
    def mod(b, c):
        def f(t):
            t["base_model.model.layers.0.mlp.gate_proj.lora_magnitude_vector"] = torch.ones(4)
            return t
        rewrite_adapter(c, f)
    refuse(synth, tmp_path, mod, "DoRA", code=5)


@pytest.mark.parametrize("key,value,needle", [
    ("use_dora", True, "DoRA"),
    ("use_rslora", True, "rsLoRA"),
    ("fan_in_fan_out", True, "fan_in_fan_out"),
    ("bias", "all", "bias"),
    ("modules_to_save", ["score"], "modules_to_save"),
    ("target_modules", "all-linear", "target_modules"),
])
def test_unsupported_adapter_config_refused(synth, tmp_path, key, value, needle):
    def mod(b, c):
        rewrite_json(os.path.join(c, "adapter_config.json"), lambda j: j.__setitem__(key, value))
    refuse(synth, tmp_path, mod, needle, "adapter_config.json", code=5)


@pytest.mark.parametrize("key,value,needle", [
    ("trainable_token_indices", [248060, 248061, 248049], "[248060,248061,248049]"),
    ("trainable_token_indices", {"embed_tokens": [248060]}, "trainable_token_indices"),
    ("lora_bias", True, "lora_bias"),
    ("exclude_modules", ["out_proj"], "exclude_modules"),
    ("target_parameters", ["mlp.experts.gate_up_proj"], "target_parameters"),
    ("layers_to_transform", [0, 1], "layers_to_transform"),
    ("layer_replication", [[0, 16], [8, 32]], "layer_replication"),
    ("rank_pattern", {"q_proj": 8}, "rank_pattern"),
    ("alpha_pattern", {"q_proj": 64}, "alpha_pattern"),
    ("alora_invocation_tokens", [1, 2], "alora_invocation_tokens"),
    ("use_qalora", True, "QALoRA"),
    ("init_lora_weights", "pissa", "PiSSA"),
    ("init_lora_weights", "olora", "modified base"),
    ("peft_type", "LOHA", "peft_type"),
    ("use_future_feature", True, "use_future_feature"),
    ("future_block", {"k": 1}, "future_block"),
])
def test_more_unsupported_adapter_config_refused(synth, tmp_path, key, value, needle):
    """PEFT settings that change what the adapter does at inference, and keys kev does not know
    at a value other than "off": refused by name (exit 5), nothing written."""
    def mod(b, c):
        rewrite_json(os.path.join(c, "adapter_config.json"), lambda j: j.__setitem__(key, value))
    err = refuse(synth, tmp_path, mod, needle, "adapter_config.json", f'"{key}"', code=5)
    assert err.count("\n") == 1, err


def test_adapter_config_keys_at_their_off_value_and_provenance_accepted(synth, tmp_path):
    """What a newer PEFT writes for a plain LoRA (new features left off, its version) exports
    to the same bytes as the default checkpoint."""
    def mod(b, c):
        def f(j):
            j.update({"trainable_token_indices": None, "lora_bias": False, "exclude_modules": None,
                      "target_parameters": None, "layer_replication": None, "megatron_config": None,
                      "use_future_feature": False, "future_list": [], "future_map": {},
                      "peft_version": "0.21.0", "init_lora_weights": "gaussian", "eva_config": None})
        rewrite_json(os.path.join(c, "adapter_config.json"), f)
    recipe, base, ckpt, out = variant(synth, tmp_path, mod)
    export(recipe, base, ckpt, out, check=True)
    assert_same_outputs(synth["out"], out)


# ---------------------------------------------------------------- head.pt's inference fields

def assert_same_outputs(want_bundle, got_bundle):
    """Every bundle file but the manifest byte-identical (the manifest's digests checked too)."""
    with open(os.path.join(want_bundle, "kev_export.json")) as f:
        want = json.load(f)["outputs"]
    with open(os.path.join(got_bundle, "kev_export.json")) as f:
        got = json.load(f)["outputs"]
    assert got == want
    assert set(os.listdir(got_bundle)) == set(want) | {"kev_export.json"}
    for name in want:
        assert sha256(os.path.join(got_bundle, name)) == want[name], name


# (key, value set in head.pt, how the refusal shows the value)
HEAD_FIELD_REFUSALS = [
    ("option_isolation", True, "True"),
    ("option_isolation", 1, "1"),
    ("option_isolation", None, "None"),
    ("special_embeddings", True, "True"),
    ("weights", "merged", '"merged"'),
    ("weights_dtype", "int4", '"int4"'),
    ("weights_dtype", "fp16", '"fp16"'),
    ("multimodal", True, "True"),
    ("quantization", {"method": "awq", "bits": 4, "group_size": 128},
     '{"method": "awq", "bits": 4, "group_size": 128}'),
    ("quantization", {}, "{}"),
    ("quantization", {f"layer{i}": 4 for i in range(20)}, "a dict"),
    ("rope_scaling", {"type": "yarn", "factor": 4.0}, '{"type": "yarn", "factor": 4.0}'),
    ("pooling", "mean", '"mean"'),
]


@pytest.mark.parametrize("key,value,shown", HEAD_FIELD_REFUSALS)
def test_unsupported_head_field_refused(synth, tmp_path, key, value, shown):
    """Each inference field kev does not implement, and a key it does not know: exit 5, one
    sentence naming head.pt, the key, its value and what kev supports; nothing at --out and no
    staging directory."""
    def mod(b, c):
        rewrite_head(c, lambda d: d.__setitem__(key, value))
    err = refuse(synth, tmp_path, mod, "head.pt", f'"{key}" ', shown, code=5)
    assert err.startswith("kev export: ") and err.count("\n") == 1, err
    assert ("supports only" in err) if key in {k for k, _, _ in HEAD_FIELD_REFUSALS[:-2]} else (
        "provenance: args, holdout" in err)


def test_special_embeddings_checkpoint_refused_by_its_field(synth, tmp_path):
    """A trained-delimiter checkpoint as upstream writes it: special_embeddings in head.pt,
    trainable_token_indices in the adapter config and the token rows in the adapter file. The
    refusal names the field, not the extra tensor a later check would see."""
    def mod(b, c):
        rewrite_head(c, lambda d: d.__setitem__("special_embeddings", True))
        rewrite_json(os.path.join(c, "adapter_config.json"),
                     lambda j: j.__setitem__("trainable_token_indices", [248060, 248061, 248049, 248050, 248062]))
        def f(t):
            t["base_model.model.embed_tokens.token_adapter.trainable_tokens_delta"] = torch.zeros(5, 64)
            return t
        rewrite_adapter(c, f)
    err = refuse(synth, tmp_path, mod, "head.pt", '"special_embeddings" is True', code=5)
    assert "token_adapter" not in err


@pytest.mark.parametrize("value,needle", [(16, "head_dim is 16"), ("32", "head_dim is a str")])
def test_head_dim_other_than_pointer_refused(synth, tmp_path, value, needle):
    def mod(b, c):
        rewrite_head(c, lambda d: d.__setitem__("head_dim", value))
    refuse(synth, tmp_path, mod, "head.pt", needle, code=2)


def test_lora_field_other_than_adapter_rank_refused(synth, tmp_path):
    def mod(b, c):
        rewrite_head(c, lambda d: d.__setitem__("lora", 8))
    refuse(synth, tmp_path, mod, "head.pt", '"lora" 8', "r 16", code=2)


def test_defaults_absent_and_provenance_keys_accepted(synth, tmp_path):
    """Fields left out take upstream's defaults; provenance keys (any content) are accepted; the
    bundle files are byte-identical to the default checkpoint's and the manifest records the
    defaults."""
    def mod(b, c):
        def f(d):
            for k in ("option_isolation", "special_embeddings", "weights", "weights_dtype",
                      "holdout", "suite_sha256", "lora", "base_revision"):
                del d[k]
            d["snapshot"] = {"step": 120, "steps": 400, "epoch": 0.3}
            d["init_source"] = None
            d["temperature_fit"] = {"rows": "dev.jsonl", "n": 24, "value": d["temperature"]}
            d["multimodal"] = False
            d["quantization"] = None
        rewrite_head(c, f)
    recipe, base, ckpt, out = variant(synth, tmp_path, mod)
    export(recipe, base, ckpt, out, check=True)
    assert_same_outputs(synth["out"], out)
    with open(os.path.join(out, "kev_export.json")) as f:
        assert json.load(f)["checkpoint_fields"] == {
            "option_isolation": False, "special_embeddings": False, "weights": "lora",
            "weights_dtype": "fp32", "multimodal": False, "quantization": None,
            "trainable_token_indices": None}


def test_bf16_weights_dtype_is_merged_as_upstream_serves_it(synth, tmp_path):
    """weights_dtype "bf16" (Kev-27B: a backbone trained in bf16). Upstream's serving path loads
    the base in bf16 and folds the fp32 adapter in place (PEFT merge: W += (B @ A) * scale on the
    bf16 weight). In torch that in-place add is one rounding of f32(W) + delta: bit for bit the
    fp32 path's merge-then-cast, for the same product. So the bundle's files are the fp32
    checkpoint's, byte for byte (whose merge test_merged_targets_* check against the contract
    and torch), and the manifest records "bf16"."""
    for name, W, B, A, got, scale in merge_inputs(synth):
        delta = (B.float() @ A.float()) * scale
        in_place = W.clone()
        in_place += delta  # the bf16 model's merge
        cast = (W.float() + delta).to(torch.bfloat16)  # the fp32 model's merge, then the cast
        assert torch.equal(in_place.view(torch.int16), cast.view(torch.int16)), name
    def mod(b, c):
        rewrite_head(c, lambda d: d.__setitem__("weights_dtype", "bf16"))
    recipe, base, ckpt, out = variant(synth, tmp_path, mod)
    export(recipe, base, ckpt, out, check=True)
    assert_same_outputs(synth["out"], out)
    with open(os.path.join(out, "kev_export.json")) as f:
        assert json.load(f)["checkpoint_fields"]["weights_dtype"] == "bf16"
    kevtest.run_kev("verify", out)


@pytest.mark.parametrize("key,value", [("r", 8), ("lora_alpha", 16)])
def test_rank_alpha_mismatch_refused(synth, tmp_path, key, value):
    def mod(b, c):
        rewrite_json(os.path.join(c, "adapter_config.json"), lambda j: j.__setitem__(key, value))
    refuse(synth, tmp_path, mod, "adapter_config.json", "rank", "alpha", code=2)


def test_target_modules_subset_refused_for_kev4b(synth, tmp_path):
    def mod(b, c):
        rewrite_json(os.path.join(c, "adapter_config.json"),
                     lambda j: j.__setitem__("target_modules", [m for m in j["target_modules"] if m != "in_proj_a"]))
    refuse(synth, tmp_path, mod, "248", code=2)


def rewrite_base_tensor(base, name, fn):
    """Replaces one tensor in whichever base shard holds it (the index is unchanged)."""
    with open(os.path.join(base, "model.safetensors.index.json")) as f:
        shard = os.path.join(base, json.load(f)["weight_map"][name])
    tensors = dict(kevtest.read_safetensors(shard))
    tensors[name] = fn(tensors[name])
    os.remove(shard)
    kevtest.write_safetensors(shard, tensors, {"format": "pt"})


def test_zero_width_target_refused(synth, tmp_path):
    """A pinned base whose target weight is [out, 0] (and a matching [r, 0] lora_A) is
    consistent with the LoRA shapes but not with config.json: refused before any output."""
    stem = "layers.1.mlp.gate_proj"

    def mod(b, c):
        rewrite_base_tensor(b, f"model.language_model.{stem}.weight",
                            lambda t: torch.zeros(t.shape[0], 0, dtype=torch.bfloat16))
        def f(t):
            t[f"base_model.model.{stem}.lora_A.weight"] = torch.zeros(16, 0)
            return t
        rewrite_adapter(c, f)
    err = refuse(synth, tmp_path, mod, stem, "config.json", code=2)
    assert "internal" not in err.lower()


def test_base_shape_other_than_config_refused(synth, tmp_path):
    """A target weight one column narrower than hidden_size, with LoRA factors to match."""
    stem = "layers.3.self_attn.o_proj"

    def mod(b, c):
        rewrite_base_tensor(b, f"model.language_model.{stem}.weight",
                            lambda t: t[:, :-1].contiguous())
        def f(t):
            k = f"base_model.model.{stem}.lora_A.weight"
            t[k] = t[k][:, :-1].contiguous()
            return t
        rewrite_adapter(c, f)
    refuse(synth, tmp_path, mod, stem, "shape", "config.json", code=2)


# ---------------------------------------------------------------- faults and signals

def test_write_failure_after_first_shard(synth, tmp_path):
    shards = sorted(n for n in os.listdir(synth["out"]) if n.endswith(".safetensors") and n != "head.safetensors")
    first = os.path.getsize(os.path.join(synth["out"], shards[0]))
    out = str(tmp_path / "out")
    proc = export(synth["recipe"], synth["base"], synth["ckpt"], out,
                  env={"KEV_FAULT_WRITE_AFTER_BYTES": str(first + 4096)})
    assert proc.returncode == 4 and "No space left" in proc.stderr, proc.stderr
    no_output_left(out)


@pytest.fixture(scope="module")
def big_synth(tmp_path_factory):
    """Large enough that export takes a noticeable time (signals are sent mid-export)."""
    root = tmp_path_factory.mktemp("export_big")
    kevtest.run_kev("synth", "--out", root / "synth", "--hidden", "512", "--intermediate", "2048")
    base, ckpt = str(root / "synth" / "base"), str(root / "synth" / "checkpoint")
    recipe = str(root / "recipe.json")
    make_recipe(base, ckpt, recipe)
    return {"root": root, "base": base, "ckpt": ckpt, "recipe": recipe}


def start_and_wait_for_staging(big, out):
    proc = subprocess.Popen([kevtest.KEV_BIN, "export", "--recipe", big["recipe"], "--base", big["base"],
                             "--checkpoint", big["ckpt"], "--out", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent, name = os.path.split(out)
    deadline = time.time() + 120
    while time.time() < deadline:
        staging = glob.glob(os.path.join(parent, f".{name}.kev-staging.*"))
        # Wait until the first shard file is being written: the export is mid-stream.
        if staging and glob.glob(os.path.join(staging[0], "*.safetensors")):
            return proc, staging[0]
        if proc.poll() is not None:
            break
        time.sleep(0.002)
    proc.kill()
    raise AssertionError(f"export never reached the shard-writing stage: {proc.communicate()}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_export_leaves_nothing(big_synth, tmp_path, sig):
    out = str(tmp_path / "out")
    proc, _ = start_and_wait_for_staging(big_synth, out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    no_output_left(out)


def test_stale_staging_of_killed_run_does_not_block(big_synth, tmp_path):
    out = str(tmp_path / "out")
    proc, staging = start_and_wait_for_staging(big_synth, out)
    proc.kill()
    proc.communicate()
    assert os.path.isdir(staging)  # SIGKILL leaves it behind
    export(big_synth["recipe"], big_synth["base"], big_synth["ckpt"], out, check=True)
    assert not os.path.exists(staging)
    kevtest.run_kev("verify", out)
