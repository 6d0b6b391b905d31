#!/usr/bin/python3
"""Export benchmark: kev export vs a torch pipeline doing the same merge and write, vs the I/O
floor (read every input byte, write every output byte, fsync), in the same run.

  /usr/bin/python3 bench/export_bench.py --kev build/release/kev --work /tmp/kev-bench [--shape 4b]

Reports wall time, throughput (output GB/s) and peak RSS (wait4 ru_maxrss of each child) and
the ratios. The torch pipeline is what a user would write without kev: mmap each shard, for each
tensor either merge (W.float() + (B.float() @ A.float()) * scale).to(bfloat16) or keep it, write
the shard with a safetensors header, fsync; it hashes nothing (kev hashes inputs and outputs).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

TORCH_PIPELINE = r'''
import json, mmap, os, struct, sys, torch
base, ckpt, out = sys.argv[1:4]
torch.set_num_threads(os.cpu_count())
DT = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16, "I64": torch.int64}
def header(path):
    f = open(path, "rb"); n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n)); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return h, 8 + n, m
def tensor(m, start, info):
    b, e = info["data_offsets"]
    return torch.frombuffer(memoryview(m)[start + b:start + e], dtype=DT[info["dtype"]]).reshape(info["shape"])
ac = json.load(open(os.path.join(ckpt, "adapter_config.json")))
scale = ac["lora_alpha"] / ac["r"]
ah, astart, am = header(os.path.join(ckpt, "adapter_model.safetensors"))
index = json.load(open(os.path.join(base, "model.safetensors.index.json")))
os.makedirs(out)
for shard in sorted(set(index["weight_map"].values())):
    h, start, m = header(os.path.join(base, shard))
    names = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
    meta = {"__metadata__": h["__metadata__"]} if "__metadata__" in h else {}
    hdr = dict(meta); off = 0
    for k in names:
        n = h[k]["data_offsets"][1] - h[k]["data_offsets"][0]
        hdr[k] = {"dtype": h[k]["dtype"], "shape": h[k]["shape"], "data_offsets": [off, off + n]}; off += n
    text = json.dumps(hdr).encode(); text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out, shard), "wb") as f:
        f.write(struct.pack("<Q", len(text))); f.write(text)
        for k in names:
            t = tensor(m, start, h[k])
            stem = k[len("model.language_model."):-len(".weight")] if k.startswith("model.language_model.") else None
            a = ah.get(f"base_model.model.{stem}.lora_A.weight") if stem else None
            if a is not None:
                A = tensor(am, astart, a); B = tensor(am, astart, ah[f"base_model.model.{stem}.lora_B.weight"])
                t = (t.float() + (B.float() @ A.float()) * scale).to(torch.bfloat16)
            f.write(t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        f.flush(); os.fsync(f.fileno())
'''

IO_FLOOR = r'''
import os, sys
ins, outdir = sys.argv[1:-1], sys.argv[-1]
os.makedirs(outdir)
for i, p in enumerate(ins):
    with open(p, "rb") as src, open(os.path.join(outdir, f"{i}.bin"), "wb") as dst:
        while True:
            b = src.read(64 << 20)
            if not b: break
            dst.write(b)
        dst.flush(); os.fsync(dst.fileno())
'''


def run(cmd, env=None):
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.time() - t0
    out, err = p.stdout.read().decode(), p.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed: {err}")
    return dt, ru.ru_maxrss * 1024, out


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kev", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--shape", default="4b")
    ap.add_argument("--synth-args", default="", help="extra kev synth arguments (scaled shapes)")
    ap.add_argument("--skip-torch", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    synth = os.path.join(a.work, f"synth-{a.shape}")
    if not os.path.exists(synth):
        t, _, _ = run([a.kev, "synth", "--out", synth, "--shape", a.shape, *a.synth_args.split()])
        print(f"synth: {t:.1f} s")
    base, ckpt = os.path.join(synth, "base"), os.path.join(synth, "checkpoint")
    recipe = os.path.join(a.work, f"recipe-{a.shape}.json")
    if not os.path.exists(recipe) and not a.synth_args:
        # A tiny shape is no Kev size: `kev pin` is told its member (a real size is recognised).
        member = {"tiny": ["--model", "kev-4b"], "tiny-0.8b": ["--model", "kev-0.8b"]}.get(a.shape, [])
        run([a.kev, "pin", *member, "--base", base, "--checkpoint", ckpt, "--out", recipe])
    elif not os.path.exists(recipe):
        # A scaled shape (e.g. --layers 8) is no Kev size, so `kev pin` (which requires a family
        # member's inventory) refuses it: write its recipe here, every file pinned by hashlib.
        import hashlib
        with open(os.path.join(ckpt, "adapter_model.safetensors"), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            names = json.loads(f.read(n))

        def digests(d):
            out = {}
            for name in sorted(os.listdir(d)):
                h = hashlib.sha256()
                with open(os.path.join(d, name), "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 24), b""):
                        h.update(chunk)
                out[name] = h.hexdigest()
            return out
        r = {"format": "kev-4b-merged/1", "model": "kev-4b-scaled",
             "base": {"repo": "Qwen/Qwen3.5-4B-Base", "revision": "1001bb4d826a52d1f399e183466143f4da7b741b",
                      "files": digests(base)},
             "checkpoint": {"repo": "jaredpalmer/kev-4b", "revision": "139fdd94f1b6a6ad80cc15e08fcb99cac885a101",
                            "files": digests(ckpt)},
             "reference": {"repo": "jaredpalmer/kev", "revision": "2074cc44"},
             "lora": {"rank": 16, "alpha": 32, "targets": sum(k.endswith("lora_A.weight") for k in names)}}
        with open(recipe, "w") as f:
            json.dump(r, f, indent=2)
    inputs = [os.path.join(base, n) for n in sorted(os.listdir(base))] + \
             [os.path.join(ckpt, n) for n in sorted(os.listdir(ckpt))]
    in_bytes = sum(os.path.getsize(p) for p in inputs)
    for p in inputs:  # warm the page cache equally for everyone
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass
    results = {}

    out = os.path.join(a.work, "out-floor")
    shutil.rmtree(out, ignore_errors=True)
    t, rss, _ = run([sys.executable, "-c", IO_FLOOR, *inputs, out])
    results["io_floor"] = (t, rss, dir_bytes(out))
    shutil.rmtree(out)

    out = os.path.join(a.work, "out-kev")
    shutil.rmtree(out, ignore_errors=True)
    t, rss, _ = run([a.kev, "--quiet", "export", "--recipe", recipe, "--base", base, "--checkpoint", ckpt, "--out", out])
    results["kev_export"] = (t, rss, dir_bytes(out))
    shutil.rmtree(out)

    if not a.skip_torch:
        out = os.path.join(a.work, "out-torch")
        shutil.rmtree(out, ignore_errors=True)
        t, rss, _ = run([sys.executable, "-c", TORCH_PIPELINE, base, ckpt, out])
        results["torch_pipeline"] = (t, rss, dir_bytes(out))
        shutil.rmtree(out)

    print(f"inputs: {in_bytes / 1e9:.2f} GB ({a.shape} {a.synth_args})")
    print(f"{'pipeline':16} {'seconds':>8} {'out GB/s':>9} {'peak RSS MiB':>13}")
    for k, (t, rss, ob) in results.items():
        print(f"{k:16} {t:8.2f} {ob / t / 1e9:9.2f} {rss / 2**20:13.0f}")
    kt = results["kev_export"][0]
    if "torch_pipeline" in results:
        print(f"kev vs torch: {results['torch_pipeline'][0] / kt:.2f}x faster")
    print(f"kev vs I/O floor: {kt / results['io_floor'][0]:.2f}x the floor's time")
    print(json.dumps({k: {"seconds": v[0], "peak_rss_bytes": v[1], "output_bytes": v[2]} for k, v in results.items()}))


if __name__ == "__main__":
    main()
