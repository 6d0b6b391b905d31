"""The Kev family (Kev-0.8B, 4B, 9B, 27B) through the real binary.

- Each shipped recipe's target count equals a derivation in Python from the member's published
  base config (dimensions below; sources in recipes/README.md), and the LoRA parameter count
  that derivation implies reproduces the trainable-parameter figures the model cards publish.
- kev synth -> kev pin --model M -> kev export -> kev verify for every member, on synthetic
  checkpoints with tiny widths at the member's real depth (the inventory depends only on depth,
  layer kinds and target_modules), and for Kev-0.8B also at full dimensions; the bundle's
  merged targets equal the derivation from the pinned config.json and adapter_config.json.
- A mismatched adapter or layout is refused by pin and by export, and a null revision is
  filled from a cache snapshot or --*-revision, or refused.
Nothing expected here comes from kev's own output.
"""
import hashlib
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.environ.get("KEV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")), "tests", "pylib"))
import kevtest  # noqa: E402

MODULES = {
    "mlp": ["gate_proj", "up_proj", "down_proj"],
    "self_attn": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "linear_attn": ["in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"],
}
ALL_MODULES = [m for ms in MODULES.values() for m in ms]

# Published text configs of the bases (recipes/README.md names the sources).
MEMBERS = {
    "kev-0.8b": dict(base="Qwen/Qwen3.5-0.8B-Base", ckpt="jaredpalmer/kev-0.8b", hidden=1024,
                     intermediate=3584, layers=24, heads=8, kv=2, lk=16, lv=16, targets=186,
                     shape="tiny-0.8b"),
    "kev-4b": dict(base="Qwen/Qwen3.5-4B-Base", ckpt="jaredpalmer/kev-4b", hidden=2560,
                   intermediate=9216, layers=32, heads=16, kv=4, lk=16, lv=32, targets=248, shape="tiny"),
    "kev-9b": dict(base="Qwen/Qwen3.5-9B-Base", ckpt="jaredpalmer/kev-9b", hidden=4096,
                   intermediate=12288, layers=32, heads=16, kv=4, lk=16, lv=32, targets=248, shape="tiny"),
    # Kev-27B's LoRA release (Hub tag v1-lora); Kev 1.0's Kev-27B is full weights
    # (test_full_weights.py).
    "kev-27b-v1-lora": dict(base="Qwen/Qwen3.8-27B", ckpt="jaredpalmer/kev-27b", hidden=5120,
                    intermediate=17408, layers=64, heads=24, kv=4, lk=16, lv=48, targets=496,
                    shape="tiny-27b"),
}
REV = "0123456789abcdef0123456789abcdef01234567"
# Kev 1.0's checkpoint revisions (REFERENCE.md section 1); the v1-lora tag's commit is not known.
RELEASE = {"kev-0.8b": "9a45d25eb2ab761841196625383fa1dff0e56c1e",
           "kev-4b": "139fdd94f1b6a6ad80cc15e08fcb99cac885a101",
           "kev-9b": "b5d8c18e44c60888d138b65cb6507ff0a5a448a0", "kev-27b-v1-lora": None}


def published_text_config(m):
    return {"hidden_size": m["hidden"], "intermediate_size": m["intermediate"],
            "num_hidden_layers": m["layers"], "num_attention_heads": m["heads"],
            "num_key_value_heads": m["kv"], "head_dim": 256, "linear_num_key_heads": m["lk"],
            "linear_num_value_heads": m["lv"], "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "layer_types": ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(m["layers"])]}


def derive(tc, modules):
    """[(stem, out, in)] of every LoRA target: mlp on every layer, self_attn on full-attention
    layers, linear_attn on the others, each module only where target_modules names it."""
    h, hd = tc["hidden_size"], tc.get("head_dim", tc["hidden_size"] // tc["num_attention_heads"])
    key = tc["linear_num_key_heads"] * tc["linear_key_head_dim"]
    value = tc["linear_num_value_heads"] * tc["linear_value_head_dim"]
    shapes = {
        "gate_proj": (tc["intermediate_size"], h), "up_proj": (tc["intermediate_size"], h),
        "down_proj": (h, tc["intermediate_size"]),
        "q_proj": (2 * tc["num_attention_heads"] * hd, h), "k_proj": (tc["num_key_value_heads"] * hd, h),
        "v_proj": (tc["num_key_value_heads"] * hd, h), "o_proj": (h, tc["num_attention_heads"] * hd),
        "in_proj_qkv": (2 * key + value, h), "in_proj_z": (value, h),
        "in_proj_a": (tc["linear_num_value_heads"], h), "in_proj_b": (tc["linear_num_value_heads"], h),
        "out_proj": (h, value),
    }
    out = []
    for layer, kind in enumerate(tc["layer_types"]):
        for fam in ("mlp", "self_attn") if kind == "full_attention" else ("mlp", "linear_attn"):
            out += [(f"layers.{layer}.{fam}.{m}",) + shapes[m] for m in MODULES[fam] if m in modules]
    return out


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def load(path):
    with open(path) as f:
        return json.load(f)


# ---------------------------------------------------------------- recipes vs published configs

@pytest.mark.parametrize("model", sorted(MEMBERS))
def test_shipped_recipe_count_follows_the_published_config(model):
    m = MEMBERS[model]
    r = load(os.path.join(kevtest.SOURCE_DIR, "recipes", f"{model}.json"))
    targets = derive(published_text_config(m), ALL_MODULES)
    assert len(targets) == m["targets"] == r["lora"]["targets"]
    assert r["model"] == model and r["base"]["repo"] == m["base"] and r["checkpoint"]["repo"] == m["ckpt"]
    assert r["lora"]["rank"] == 16 and r["lora"]["alpha"] == 32
    assert all(v is None for side in ("base", "checkpoint") for v in r[side]["files"].values())
    assert r["checkpoint"]["revision"] == RELEASE[model]
    if model == "kev-4b":
        assert r["base"]["revision"] == "1001bb4d826a52d1f399e183466143f4da7b741b"
    else:  # no full commit confirmed: null, filled by kev pin
        assert r["base"]["revision"] is None


@pytest.mark.parametrize("model,card_millions", [("kev-0.8b", 11.3), ("kev-9b", 45.4)])
def test_inventory_reproduces_the_model_cards_parameter_count(model, card_millions):
    """The cards give trainable parameters (LoRA r=16 on every target + the pointer head:
    q and k, Linear(hidden, 256) with bias): an independent check of dims and inventory."""
    m = MEMBERS[model]
    lora = sum(16 * (o + i) for _, o, i in derive(published_text_config(m), ALL_MODULES))
    head = 2 * (256 * m["hidden"] + 256)
    assert round((lora + head) / 1e6, 1) == card_millions


# ---------------------------------------------------------------- synth -> pin -> export -> verify

def revision_flags(model):
    return [] if model == "kev-4b" else ["--base-revision", REV, "--checkpoint-revision", REV]


def round_trip(tmp, model, shape):
    synth = tmp / "synth"
    kevtest.run_kev("synth", "--out", synth, "--shape", shape, "--quiet", "--seed", "3")
    recipe, bundle = tmp / "recipe.json", tmp / "bundle"
    kevtest.run_kev("pin", "--model", model, "--base", synth / "base", "--checkpoint",
                    synth / "checkpoint", "--out", recipe, *revision_flags(model))
    kevtest.run_kev("export", "--recipe", recipe, "--base", synth / "base", "--checkpoint",
                    synth / "checkpoint", "--out", bundle, "--quiet")
    kevtest.run_kev("verify", bundle)
    tc = load(synth / "base" / "config.json")["text_config"]
    modules = load(synth / "checkpoint" / "adapter_config.json")["target_modules"]
    want = derive(tc, modules)
    manifest = load(bundle / "kev_export.json")
    assert manifest["model"] == model
    # Kev-27B was trained on a bf16 backbone (head.pt weights_dtype "bf16"), the others in fp32;
    # the manifest records what head.pt says.
    head = torch.load(synth / "checkpoint" / "head.pt")
    assert head["weights_dtype"] == ("bf16" if model == "kev-27b-v1-lora" else "fp32")
    assert manifest["checkpoint_fields"]["weights_dtype"] == head["weights_dtype"]
    assert manifest["merged_targets"] == sorted(f"model.language_model.{s}.weight" for s, _, _ in want)
    r = load(recipe)
    assert r["lora"]["targets"] == len(want) == MEMBERS[model]["targets"]
    if model != "kev-4b":
        assert r["base"]["revision"] == REV == manifest["base"]["revision"]
    for side in ("base", "checkpoint"):
        for name, digest in r[side]["files"].items():
            assert digest == sha256(synth / side / name)
    # every merged base weight has the shape the config implies
    index = load(bundle / "model.safetensors.index.json")["weight_map"]
    headers = {}
    for stem, o, i in want:
        name = f"model.language_model.{stem}.weight"
        shard = index[name]
        if shard not in headers:
            headers[shard] = kevtest.read_safetensors_header(bundle / shard)[0]
        assert headers[shard][name]["shape"] == [o, i], name
    return synth, bundle


@pytest.mark.parametrize("model", sorted(MEMBERS))
def test_round_trip_at_each_members_depth(model, tmp_path):
    round_trip(tmp_path, model, MEMBERS[model]["shape"])


def test_round_trip_kev08b_full_dimensions(tmp_path):
    """Qwen3.5-0.8B dimensions (the `kev synth --shape 0.8b` checkpoint the benchmarks use)."""
    synth, bundle = round_trip(tmp_path, "kev-0.8b", "0.8b")
    tc = load(bundle / "config.json")["text_config"]
    assert (tc["hidden_size"], tc["num_hidden_layers"]) == (1024, 24)


# ---------------------------------------------------------------- refusals

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("family")
    for shape in ("tiny-0.8b", "tiny"):
        kevtest.run_kev("synth", "--out", root / shape, "--shape", shape, "--quiet")
    return root


def test_pin_refuses_a_layout_of_another_member(small, tmp_path):
    out = tmp_path / "r.json"
    s = small / "tiny-0.8b"
    proc = kevtest.run_kev("pin", "--model", "kev-4b", "--base", s / "base", "--checkpoint", s / "checkpoint",
                           "--out", out, check=False)
    assert proc.returncode == 2, proc.stderr
    for needle in ("186", "248", "72 MLP, 24 attention, 90 GDN", "--model kev-0.8b"):
        assert needle in proc.stderr, proc.stderr
    assert not out.exists()
    # Without --model: tiny widths are no member's, and the member of its depth is named.
    proc = kevtest.run_kev("pin", "--base", s / "base", "--checkpoint", s / "checkpoint", "--out", out,
                           check=False)
    assert proc.returncode == 2 and "cannot tell the family member" in proc.stderr, proc.stderr
    assert "--model kev-0.8b" in proc.stderr and "--model kev-4b" not in proc.stderr, proc.stderr
    assert not out.exists()
    s = small / "tiny"
    proc = kevtest.run_kev("pin", "--model", "kev-27b-v1-lora", "--base", s / "base", "--checkpoint",
                           s / "checkpoint", "--out", out, *revision_flags("kev-27b-v1-lora"), check=False)
    assert proc.returncode == 2 and "496" in proc.stderr and "--model kev-4b or --model kev-9b" in proc.stderr
    assert not out.exists()


def test_null_revision_needs_a_snapshot_or_a_flag(small, tmp_path):
    out = tmp_path / "r.json"
    s = small / "tiny"
    proc = kevtest.run_kev("pin", "--model", "kev-9b", "--base", s / "base", "--checkpoint", s / "checkpoint",
                           "--out", out, check=False)
    assert proc.returncode == 2 and "Qwen/Qwen3.5-9B-Base" in proc.stderr and "--base-revision" in proc.stderr
    assert not out.exists()
    proc = kevtest.run_kev("pin", "--model", "kev-9b", "--base", s / "base", "--checkpoint", s / "checkpoint",
                           "--out", out, "--base-revision", "68c46c4b", check=False)
    assert proc.returncode == 2 and "40-digit" in proc.stderr and not out.exists()


def test_null_revision_filled_from_a_cache_snapshot(small, tmp_path):
    s = small / "tiny"
    snaps = {}
    for side, repo in (("base", "Qwen/Qwen3.5-9B-Base"), ("checkpoint", "jaredpalmer/kev-9b")):
        snap = tmp_path / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots" / (REV if side == "base" else "f" * 40)
        blobs = snap.parent.parent / "blobs"
        snap.mkdir(parents=True)
        blobs.mkdir(exist_ok=True)
        for name in os.listdir(s / side):
            data = (s / side / name).read_bytes()
            blob = hashlib.sha256(data).hexdigest() if name.endswith((".safetensors", ".pt")) else \
                hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            (blobs / blob).write_bytes(data)
            os.symlink(f"../../blobs/{blob}", snap / name)
        snaps[side] = snap
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--model", "kev-9b", "--base", snaps["base"], "--checkpoint", snaps["checkpoint"],
                           "--out", out)
    r = load(out)
    assert r["base"]["revision"] == REV and r["checkpoint"]["revision"] == "f" * 40
    assert "68c46c4b" in proc.stderr  # not the revision the Kev-9B card names: a note, not a refusal
    assert r["lora"]["targets"] == 248


def hashed_recipe(model, base, ckpt, path, targets):
    files = {side: {n: sha256(os.path.join(d, n)) for n in sorted(os.listdir(d))}
             for side, d in (("base", base), ("checkpoint", ckpt))}
    m = MEMBERS[model]
    r = {"format": "kev-4b-merged/1", "model": model,
         "base": {"repo": m["base"], "revision": REV, "files": files["base"]},
         "checkpoint": {"repo": m["ckpt"], "revision": REV, "files": files["checkpoint"]},
         "reference": {"repo": "jaredpalmer/kev", "revision": "0771e6d1"},
         "lora": {"rank": 16, "alpha": 32, "targets": targets}}
    with open(path, "w") as f:
        json.dump(r, f)


@pytest.mark.parametrize("model,shape,targets,drop,needles", [
    # an adapter naming fewer modules: its inventory is not the recipe's
    ("kev-0.8b", "tiny-0.8b", 186, "in_proj_a", ["168", "186"]),
    # the recipe agrees with the adapter, but the member's release has all twelve projections
    ("kev-0.8b", "tiny-0.8b", 168, "in_proj_a", ["168", "186", "Kev-0.8B"]),
    # a Kev-4B-depth adapter exported under a Kev-27B recipe
    ("kev-27b-v1-lora", "tiny", 248, None, ["248", "496", "Kev-27B"]),
])
def test_export_refuses_a_mismatched_adapter(small, tmp_path, model, shape, targets, drop, needles):
    import shutil
    base, ckpt = tmp_path / "base", tmp_path / "checkpoint"
    shutil.copytree(small / shape / "base", base)
    shutil.copytree(small / shape / "checkpoint", ckpt)
    if drop:
        cfg = load(ckpt / "adapter_config.json")
        cfg["target_modules"] = [m for m in cfg["target_modules"] if m != drop]
        with open(ckpt / "adapter_config.json", "w") as f:
            json.dump(cfg, f)
    recipe, out = tmp_path / "recipe.json", tmp_path / "out"
    hashed_recipe(model, base, ckpt, recipe, targets)
    proc = kevtest.run_kev("export", "--recipe", recipe, "--base", base, "--checkpoint", ckpt, "--out", out,
                           check=False)
    assert proc.returncode == 2, proc.stderr
    for n in needles:
        assert n in proc.stderr, proc.stderr
    assert not out.exists()


def test_export_refuses_an_adapter_missing_a_pair(small, tmp_path):
    import shutil
    base, ckpt = tmp_path / "base", tmp_path / "checkpoint"
    shutil.copytree(small / "tiny-0.8b" / "base", base)
    shutil.copytree(small / "tiny-0.8b" / "checkpoint", ckpt)
    path = ckpt / "adapter_model.safetensors"
    tensors = dict(kevtest.read_safetensors(path))
    del tensors["base_model.model.layers.3.self_attn.v_proj.lora_B.weight"]
    os.remove(path)
    kevtest.write_safetensors(path, tensors, {"format": "pt"})
    recipe, out = tmp_path / "recipe.json", tmp_path / "out"
    hashed_recipe("kev-0.8b", base, ckpt, recipe, 186)
    proc = kevtest.run_kev("export", "--recipe", recipe, "--base", base, "--checkpoint", ckpt, "--out", out,
                           check=False)
    assert proc.returncode == 2 and "186 LoRA targets" in proc.stderr and "layers.3.self_attn.v_proj" in proc.stderr
    assert not out.exists()
