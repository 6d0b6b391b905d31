"""`kev pin` through the real binary: digests equal hashlib's; a Hugging Face cache snapshot
(snapshots/<rev>/<file> -> ../../blobs/<id>) gives repo and revision from the path and every
file is cross-checked against its blob name (SHA-256 for LFS files, git blob SHA-1 otherwise);
a corrupt blob is refused and no recipe is written."""
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
    proc = kevtest.run_kev("pin", "--base", synth / "base", "--checkpoint", synth / "checkpoint", "--out", out)
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
    proc = kevtest.run_kev("pin", "--base", synth / "base", "--checkpoint", synth / "checkpoint",
                           "--out", out, check=False)
    assert proc.returncode == 2 and out.read_text() == "keep"


def test_cache_snapshot_cross_checked(synth, tmp_path):
    base = make_cache(synth / "base", tmp_path / "hub", "Qwen/Qwen3.5-4B-Base", REV_BASE)
    ckpt = make_cache(synth / "checkpoint", tmp_path / "hub", "jaredpalmer/kev-4b", REV_CKPT)
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--base", base, "--checkpoint", ckpt, "--out", out)
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
    proc = kevtest.run_kev("pin", "--base", base, "--checkpoint", ckpt, "--out", out, check=False)
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
    proc = kevtest.run_kev("pin", "--base", base, "--checkpoint", ckpt, "--out", out, check=False)
    assert proc.returncode == 3 and "head.pt" in proc.stderr and "corrupt" in proc.stderr, proc.stderr
    assert not out.exists()


def test_write_failure_leaves_no_file(synth, tmp_path):
    """A recipe write that fails (a full disk, injected) leaves neither the recipe nor the
    temporary file behind."""
    out = tmp_path / "r.json"
    proc = kevtest.run_kev("pin", "--base", synth / "base", "--checkpoint", synth / "checkpoint",
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
    proc = kevtest.run_kev("pin", "--base", synth / "base", "--checkpoint", ckpt, "--out", out, check=False)
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
    proc = kevtest.run_kev("pin", "--base", synth / "base", "--checkpoint", ckpt, "--out", out, check=False)
    assert proc.returncode == 2, proc.stderr
    assert 'head.pt says weights="full" but the checkpoint holds neither' in proc.stderr, proc.stderr
    assert not out.exists()


def test_bf16_weights_dtype_pinned(synth, tmp_path):
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(synth / "checkpoint", ckpt)
    set_head_field(ckpt / "head.pt", "weights_dtype", "bf16")
    out = tmp_path / "r.json"
    kevtest.run_kev("pin", "--base", synth / "base", "--checkpoint", ckpt, "--out", out)
    assert json.loads(out.read_text())["checkpoint"]["files"]["head.pt"] == sha256(ckpt / "head.pt")
