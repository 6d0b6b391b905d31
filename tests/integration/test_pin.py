"""`kev pin` through the real binary: digests equal hashlib's; a Hugging Face cache snapshot
(snapshots/<rev>/<file> -> ../../blobs/<id>) gives repo and revision from the path and every
file is cross-checked against its blob name (SHA-256 for LFS files, git blob SHA-1 otherwise);
a corrupt blob is refused and no recipe is written. Without --model, pin tells the family member
from the checkpoint's form and its backbone's config.json where that is one member, and asks for
--model where it is not (kev synth's tiny shapes: a member's depth, tiny widths)."""
import hashlib
import json
import os
import shutil
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.environ.get("KEV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")), "tests", "pylib"))
import kevtest  # noqa: E402

REV_BASE = "a" * 40
REV_CKPT = "0123456789abcdef0123456789abcdef01234567"
# The tiny synthetic checkpoint has Kev-4B's (and Kev-9B's) depth but tiny widths, so it is no
# member's: the tests that pin it name the member.
KEV_4B = ("--model", "kev-4b")

# The bases' published text configs (recipes/README.md names the sources): what pin must tell
# each member by, stated here rather than read from kev.
PUBLISHED = {
    "Qwen3.5-0.8B": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24, num_attention_heads=8,
                         num_key_value_heads=2, linear_num_key_heads=16, linear_num_value_heads=16),
    "Qwen3.5-4B": dict(hidden_size=2560, intermediate_size=9216, num_hidden_layers=32, num_attention_heads=16,
                       num_key_value_heads=4, linear_num_key_heads=16, linear_num_value_heads=32),
    "Qwen3.5-9B": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=16,
                       num_key_value_heads=4, linear_num_key_heads=16, linear_num_value_heads=32),
    "Qwen3.8-27B": dict(hidden_size=5120, intermediate_size=17408, num_hidden_layers=64, num_attention_heads=24,
                        num_key_value_heads=4, linear_num_key_heads=16, linear_num_value_heads=48),
}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("pin")
    kevtest.run_kev("synth", "--out", root / "synth")
    return root / "synth"


def make_cache(src, cache_root, repo, rev):
    """Lays src out like huggingface_hub's cache: LFS-like files (safetensors, .pt) as SHA-256
    blobs, the rest as git blob SHA-1 blobs."""
    repo_dir = cache_root / ("models--" + repo.replace("/", "--"))
    blobs, snap = repo_dir / "blobs", repo_dir / "snapshots" / rev
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for name in os.listdir(src):
        data = (src / name).read_bytes()
        lfs = name.endswith((".safetensors", ".pt"))
        blob = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
        (blobs / blob).write_bytes(data)
        os.symlink(f"../../blobs/{blob}", snap / name)
    return snap


def test_plain_directories(synth, tmp_path):
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *KEV_4B, "--base", synth / "base", "--checkpoint", synth / "checkpoint", "--out", out)
    r = json.loads(out.read_text())
    assert r["format"] == "kev-4b-merged/1" and r["model"] == "kev-4b"
    assert r["base"]["revision"] == "1001bb4d826a52d1f399e183466143f4da7b741b"
    for side in ("base", "checkpoint"):
        assert set(r[side]["files"]) == set(os.listdir(synth / side))
        for name, digest in r[side]["files"].items():
            assert digest == sha256(synth / side / name)
    assert "0 cross-checked" in proc.stdout


def test_existing_recipe_not_overwritten(synth, tmp_path):
    out = tmp_path / "r.json"
    out.write_text("keep")
    for model in (KEV_4B, ()):  # refused before anything else, --model or not
        proc = kevtest.run_kev("pin", *model, "--base", synth / "base", "--checkpoint", synth / "checkpoint",
                               "--out", out, check=False)
        assert proc.returncode == 2 and "already exists" in proc.stderr and out.read_text() == "keep"


def test_cache_snapshot_cross_checked(synth, tmp_path):
    base = make_cache(synth / "base", tmp_path / "hub", "Qwen/Qwen3.5-4B-Base", REV_BASE)
    ckpt = make_cache(synth / "checkpoint", tmp_path / "hub", "jaredpalmer/kev-4b", REV_CKPT)
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *KEV_4B, "--base", base, "--checkpoint", ckpt, "--out", out)
    n = len(os.listdir(base)) + len(os.listdir(ckpt))
    assert f"pinned {n} files" in proc.stdout and f"({n} cross-checked" in proc.stdout
    r = json.loads(out.read_text())
    assert r["base"]["repo"] == "Qwen/Qwen3.5-4B-Base" and r["base"]["revision"] == REV_BASE
    assert r["checkpoint"]["repo"] == "jaredpalmer/kev-4b" and r["checkpoint"]["revision"] == REV_CKPT
    assert "release revision" in proc.stderr  # the snapshot is not the released revision
    for name, digest in r["checkpoint"]["files"].items():
        assert digest == sha256(synth / "checkpoint" / name)


@pytest.mark.parametrize("victim", ["adapter_model.safetensors", "adapter_config.json", "head.pt"])
def test_corrupt_cache_blob_refused(synth, tmp_path, victim):
    base = make_cache(synth / "base", tmp_path / "hub", "Qwen/Qwen3.5-4B-Base", REV_BASE)
    ckpt = make_cache(synth / "checkpoint", tmp_path / "hub", "jaredpalmer/kev-4b", REV_CKPT)
    blob = os.path.realpath(ckpt / victim)
    data = bytearray(open(blob, "rb").read())
    data[len(data) // 2] ^= 0x20
    with open(blob, "wb") as f:
        f.write(data)
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *KEV_4B, "--base", base, "--checkpoint", ckpt, "--out", out, check=False)
    assert proc.returncode == 3 and victim in proc.stderr and os.path.basename(blob) in proc.stderr
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if "kev-pin" in p]


def test_corrupt_head_pt_blob_is_reported_as_corrupt_download(synth, tmp_path):
    """head.pt is read before hashing (for its fields); one whose zip structure is damaged is
    still reported by the cache cross-check (exit 3), not as a parse error."""
    base = make_cache(synth / "base", tmp_path / "hub", "Qwen/Qwen3.5-4B-Base", REV_BASE)
    ckpt = make_cache(synth / "checkpoint", tmp_path / "hub", "jaredpalmer/kev-4b", REV_CKPT)
    blob = os.path.realpath(ckpt / "head.pt")
    data = bytearray(open(blob, "rb").read())
    data[0:4] = b"JUNK"
    with open(blob, "wb") as f:
        f.write(data)
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *KEV_4B, "--base", base, "--checkpoint", ckpt, "--out", out, check=False)
    assert proc.returncode == 3 and "head.pt" in proc.stderr and "corrupt" in proc.stderr, proc.stderr
    assert not out.exists()


def test_write_failure_leaves_no_file(synth, tmp_path):
    """A recipe write that fails (a full disk, injected) leaves neither the recipe nor the
    temporary file behind."""
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *KEV_4B, "--base", synth / "base", "--checkpoint", synth / "checkpoint",
                           "--out", out, check=False, env={"KEV_FAULT_WRITE_AFTER_BYTES": "10"})
    assert proc.returncode == 4 and "No space left" in proc.stderr, proc.stderr
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def set_head_field(path, key, value):
    d = torch.load(path)
    d[key] = value
    os.remove(path)
    torch.save(d, path)


@pytest.mark.parametrize("key,value,needle", [
    ("option_isolation", True, '"option_isolation" is True'),
    ("special_embeddings", True, '"special_embeddings" is True'),
    ("weights", "merged", '"weights" is "merged"'),
    ("weights_dtype", "int4", '"weights_dtype" is "int4"'),
    ("multimodal", True, '"multimodal" is True'),
    ("quantization", {"bits": 4}, '"quantization" is {"bits": 4}'),
    ("head_norm", "layer", 'key "head_norm" ("layer")'),
    ("trainable_token_indices", [248060], '"trainable_token_indices" is [248060]'),
])
def test_unsupported_checkpoint_field_refused(synth, tmp_path, key, value, needle):
    """kev pin writes a recipe only for a checkpoint kev export can run: a head.pt field (or an
    adapter setting) kev does not implement is refused with exit 5 and one sentence naming it;
    no recipe and no temporary file are left."""
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(synth / "checkpoint", ckpt)
    if key == "trainable_token_indices":
        with open(ckpt / "adapter_config.json") as f:
            j = json.load(f)
        j[key] = value
        with open(ckpt / "adapter_config.json", "w") as f:
            json.dump(j, f)
    else:
        set_head_field(ckpt / "head.pt", key, value)
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *KEV_4B, "--base", synth / "base", "--checkpoint", ckpt, "--out", out, check=False)
    assert proc.returncode == 5, proc.stderr
    assert needle in proc.stderr and proc.stderr.startswith("kev pin: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if "kev-pin" in p]


def test_full_weight_head_without_its_files_refused_by_its_field(synth, tmp_path):
    """A head.pt that says "full" beside neither an adapter nor backbone weights: the refusal
    names head.pt's "weights" and what the files hold, not a missing adapter file (full-weight
    checkpoints themselves: test_full_weights.py)."""
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(synth / "checkpoint", ckpt)
    os.remove(ckpt / "adapter_config.json")
    os.remove(ckpt / "adapter_model.safetensors")
    d = torch.load(ckpt / "head.pt")
    d.update(weights="full", lora=0, weights_dtype="bf16")
    os.remove(ckpt / "head.pt")
    torch.save(d, ckpt / "head.pt")
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *KEV_4B, "--base", synth / "base", "--checkpoint", ckpt, "--out", out, check=False)
    assert proc.returncode == 2, proc.stderr
    assert 'head.pt says weights="full" but the checkpoint holds neither' in proc.stderr, proc.stderr
    assert not out.exists()
    # Without --model there is no form to tell the member by: refused, naming what is missing.
    proc = kevtest.run_kev("pin", "--base", synth / "base", "--checkpoint", ckpt, "--out", out, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "holds neither adapter_config.json" in proc.stderr and "--model" in proc.stderr, proc.stderr
    assert not out.exists()


def test_bf16_weights_dtype_pinned(synth, tmp_path):
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(synth / "checkpoint", ckpt)
    set_head_field(ckpt / "head.pt", "weights_dtype", "bf16")
    out = tmp_path / "r.json"
    kevtest.run_kev("pin", *KEV_4B, "--base", synth / "base", "--checkpoint", ckpt, "--out", out)
    assert json.loads(out.read_text())["checkpoint"]["files"]["head.pt"] == sha256(ckpt / "head.pt")


# ---------------------------------------------------------------- the member, told or asked for

@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """kev synth's tiny shapes at Kev-0.8B's and Kev-27B's depths, and Kev-27B's as full weights."""
    root = tmp_path_factory.mktemp("shapes")
    for name, args in (("tiny-0.8b", ()), ("tiny-27b", ()), ("tiny-27b-full", ("--form", "full"))):
        kevtest.run_kev("synth", "--out", root / name, "--shape", name.replace("-full", ""), "--quiet", *args)
    return root


@pytest.fixture(scope="module")
def synth08(tmp_path_factory):
    """kev synth --shape 0.8b: Qwen3.5-0.8B's dimensions (1.5 GB)."""
    root = tmp_path_factory.mktemp("pin08")
    kevtest.run_kev("synth", "--out", root / "synth", "--shape", "0.8b", "--quiet")
    return root / "synth"


def with_published_config(src, dst, published):
    """A copy of a tiny synthetic checkpoint (src: base + checkpoint, or a full-weight checkpoint)
    whose backbone config.json has a base's published sizes. pin checks an adapter's inventory
    against the config (depth and layer kinds), not the shards' shapes, so the tiny shards pin."""
    shutil.copytree(src, dst, symlinks=True)
    path = dst / "base" / "config.json" if (dst / "base").exists() else dst / "config.json"
    config = json.loads(path.read_text())
    text = config["text_config"] if "text_config" in config else config
    text.update(PUBLISHED[published], head_dim=256, linear_key_head_dim=128, linear_value_head_dim=128)
    path.write_text(json.dumps(config, indent=2))
    return dst


def no_leftovers(directory):
    assert not [p for p in os.listdir(directory) if "kev-pin" in p]


def test_member_told_from_a_real_member_shape(synth08, tmp_path):
    """kev synth --shape 0.8b pinned without --model is Kev-0.8B: the recipe is that member's and
    stderr says which member was taken from what."""
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--base", synth08 / "base", "--checkpoint", synth08 / "checkpoint", "--out", out,
                           "--base-revision", REV_BASE)
    r = json.loads(out.read_text())
    assert r["model"] == "kev-0.8b" and r["lora"]["targets"] == 186
    assert r["base"]["repo"] == "Qwen/Qwen3.5-0.8B-Base" and r["checkpoint"]["repo"] == "jaredpalmer/kev-0.8b"
    assert r["checkpoint"]["revision"] == "9a45d25eb2ab761841196625383fa1dff0e56c1e"  # Kev 1.0's release
    assert ("kev pin: kev-0.8b (a LoRA adapter on a base of 24 layers, hidden size 1024) from the base's "
            "config.json\n") in proc.stderr, proc.stderr
    for side in ("base", "checkpoint"):
        for name, digest in r[side]["files"].items():
            assert digest == sha256(synth08 / side / name)


@pytest.mark.parametrize("shape,published,model,repo", [
    ("tiny-0.8b", "Qwen3.5-0.8B", "kev-0.8b", "Qwen/Qwen3.5-0.8B-Base"),
    ("tiny", "Qwen3.5-4B", "kev-4b", "Qwen/Qwen3.5-4B-Base"),
    ("tiny", "Qwen3.5-9B", "kev-9b", "Qwen/Qwen3.5-9B-Base"),
    # Kev-27B's base under an adapter: the LoRA release (Hub tag v1-lora), not Kev 1.0's full weights
    ("tiny-27b", "Qwen3.8-27B", "kev-27b-v1-lora", "Qwen/Qwen3.8-27B"),
])
def test_member_told_from_its_bases_published_config(synth, shapes, tmp_path, shape, published, model, repo):
    src = synth if shape == "tiny" else shapes / shape
    s = with_published_config(src, tmp_path / "s", published)
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--base", s / "base", "--checkpoint", s / "checkpoint", "--out", out,
                           "--base-revision", REV_BASE, "--checkpoint-revision", REV_CKPT)
    r = json.loads(out.read_text())
    assert r["model"] == model and r["base"]["repo"] == repo, r
    layers, hidden = PUBLISHED[published]["num_hidden_layers"], PUBLISHED[published]["hidden_size"]
    assert f"kev pin: {model} (a LoRA adapter on a base of {layers} layers, hidden size {hidden})" in proc.stderr


def test_full_weights_of_kev27b_sizes_are_kev27b(shapes, tmp_path):
    """Full weights whose config.json has Qwen3.8-27B's sizes are Kev 1.0's Kev-27B: pin goes on
    to check the shards against that config, and refuses the tiny ones by shape (not for want of
    --model)."""
    ck = with_published_config(shapes / "tiny-27b-full" / "checkpoint", tmp_path / "ck", "Qwen3.8-27B")
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--checkpoint", ck, "--out", out, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "embed_tokens.weight has shape" in proc.stderr and ", 5120]" in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("shape,needle,model", [
    ("tiny", "pass --model kev-4b or --model kev-9b (the members of its depth)", "kev-4b"),
    ("tiny-0.8b", "pass --model kev-0.8b (the member of its depth)", "kev-0.8b"),
    ("tiny-27b-full", "pass --model kev-27b (the member of its depth)", "kev-27b"),
])
def test_no_member_is_asked_for(synth, shapes, tmp_path, shape, needle, model):
    """kev synth's tiny shapes have a member's depth but not its sizes: without --model pin refuses
    with one sentence naming the candidates and --model, and writes nothing; with it, it pins."""
    s = synth if shape == "tiny" else shapes / shape
    full = shape.endswith("-full")
    dirs = ("--checkpoint", s / "checkpoint") if full else ("--base", s / "base", "--checkpoint", s / "checkpoint")
    config = s / "checkpoint" / "config.json" if full else s / "base" / "config.json"
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *dirs, "--out", out, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"kev pin: cannot tell the family member from {config} ("), proc.stderr
    assert needle in proc.stderr, proc.stderr
    assert not out.exists()
    no_leftovers(tmp_path)
    revisions = () if model in ("kev-4b", "kev-27b") else ("--base-revision", REV_BASE)
    proc = kevtest.run_kev("pin", "--model", model, *dirs, "--out", out, *revisions)
    assert json.loads(out.read_text())["model"] == model
    assert "kev pin: kev-" not in proc.stderr  # nothing was told: --model named it


def test_lora_checkpoint_without_base_asks_for_base(synth, tmp_path):
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--checkpoint", synth / "checkpoint", "--out", out, check=False)
    assert proc.returncode == 2 and "a LoRA checkpoint: --base" in proc.stderr and proc.stderr.count("\n") == 1
    assert not out.exists()


def test_explicit_model_wins_with_a_note(synth, tmp_path):
    """--model names the member even where the config is exactly another's (a note says so)."""
    s = with_published_config(synth, tmp_path / "s", "Qwen3.5-4B")
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--model", "kev-9b", "--base", s / "base", "--checkpoint", s / "checkpoint",
                           "--out", out, "--base-revision", REV_BASE)
    assert json.loads(out.read_text())["model"] == "kev-9b"
    assert "kev pin: note: " in proc.stderr and "is kev-4b's base (32 layers, hidden size 2560), not kev-9b's" in proc.stderr


def test_wrong_model_is_refused_naming_the_fix(shapes, tmp_path):
    """An explicit --model of another form is refused as before, with the sentence naming the fix."""
    s = shapes / "tiny-27b-full"
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", *KEV_4B, "--base", s / "checkpoint", "--checkpoint", s / "checkpoint",
                           "--out", out, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "a full-weight checkpoint, but Kev-4B (kev-4b) is a LoRA adapter" in proc.stderr, proc.stderr
    assert "Kev 1.0's full-weight Kev-27B is --model kev-27b" in proc.stderr, proc.stderr
    assert not out.exists()


def test_corrupt_config_blob_is_reported_before_it_is_parsed(synth, tmp_path):
    """The config.json the member is told from is hashed and cross-checked first: a damaged cache
    blob is a corrupt download (exit 3), not a parse error or a wrong member."""
    s = with_published_config(synth, tmp_path / "s", "Qwen3.5-4B")
    base = make_cache(s / "base", tmp_path / "hub", "Qwen/Qwen3.5-4B-Base", REV_BASE)
    ckpt = make_cache(s / "checkpoint", tmp_path / "hub", "jaredpalmer/kev-4b", REV_CKPT)
    blob = os.path.realpath(base / "config.json")
    data = bytearray(open(blob, "rb").read())
    data[0:4] = b"JUNK"
    with open(blob, "wb") as f:
        f.write(data)
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--base", base, "--checkpoint", ckpt, "--out", out, check=False)
    assert proc.returncode == 3 and "config.json" in proc.stderr and "corrupt" in proc.stderr, proc.stderr
    assert not out.exists()
    # intact, the same snapshot pins as Kev-4B, every file cross-checked
    blob_ok = hashlib.sha1(b"blob %d\0" % len((s / "base" / "config.json").read_bytes())
                           + (s / "base" / "config.json").read_bytes()).hexdigest()
    assert os.path.basename(blob) == blob_ok
    with open(blob, "wb") as f:
        f.write((s / "base" / "config.json").read_bytes())
    proc = kevtest.run_kev("pin", "--base", base, "--checkpoint", ckpt, "--out", out)
    n = len(os.listdir(base)) + len(os.listdir(ckpt))
    assert json.loads(out.read_text())["model"] == "kev-4b" and f"({n} cross-checked" in proc.stdout
