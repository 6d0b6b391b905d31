#!/usr/bin/python3
"""Oracle for the pointer head: the reference PointerHead semantics evaluated with torch.

The reference class (Kev's kev/model.py) builds two nn.Linear(d, dp) layers `q` and `k`, a
scale 1/sqrt(dp), and in eval mode divides the logits by its fitted temperature:
    z = (k(h_opts) @ q(h_decide)) * scale;  z / temperature in eval mode
`RefPointerHead` below rebuilds exactly that structure (our own code). Raw logits are z with
temperature 1.0; probabilities are softmax(z / T) in eval mode. A float64 evaluation of the same
formula is the second reference.

Deterministic inputs (stored by rule, not by value):
  * hidden states: rows are numbered consecutively over the whole request (question 0's decide
    is row 0, its K0 options rows 1..K0, then question 1's decide, ...); feature i of row r is
    float32(((i*37 + r*19) % 101 - 50) / 50), i.e. in [-1, 1].
  * questions with 1, 2, 7, 31 and 255 options; d = 2560, p = 256.
  * weights: torch.Generator seeded with SEED, drawn in the order q.weight, q.bias, k.weight,
    k.bias; weights U(-a, a) with a = 3/sqrt(d) (keys/queries of unit scale, so logits spread
    over a few units), biases U(-1, 1) (large, so a dropped bias cannot pass).
  * temperature 2.406050072164233 (Kev-4B's fitted value).

`python3 head_oracle.py --out DIR` writes DIR/head.pt (torch.save, the released head.pt layout),
DIR/head.safetensors + DIR/kev_export.json (a minimal bundle written independently of kev),
DIR/request.json (the `kev head` input), DIR/reference.json (full-precision references) and
DIR/pointer_head_oracle.json, the committed fixture (fixtures/head/), which CI regenerates and
requires byte-identical. The fixture holds the float64 reference to 10 significant digits and
SHA-256 digests of the weight and input bytes; torch's float32 values are not in it because
BLAS summation order may differ between CPUs (they are in reference.json and gated each run).
"""
import argparse
import collections
import hashlib
import json
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import kevtest  # noqa: E402

D, P = 2560, 256
SEED = 31337
TEMPERATURE = 2.406050072164233
CASES = [1, 2, 7, 31, 255]
RULE = "feature i of row r = float32(((i*37 + r*19) % 101 - 50) / 50); rows consecutive over the request"


class RefPointerHead(nn.Module):
    """The reference PointerHead structure: q, k = nn.Linear(d, dp) each; scale 1/sqrt(dp)."""

    def __init__(self, d, dp=256):
        super().__init__()
        self.q, self.k = nn.Linear(d, dp), nn.Linear(d, dp)
        self.scale = 1 / math.sqrt(dp)
        self.temperature = 1.0

    def forward(self, h_decide, h_opts):
        z = (self.k(h_opts) @ self.q(h_decide)) * self.scale
        return z if self.training or self.temperature == 1.0 else z / self.temperature


def hidden_rows(first_row, count, d=D):
    rows = torch.arange(first_row, first_row + count, dtype=torch.int64)[:, None]
    i = torch.arange(d, dtype=torch.int64)[None, :]
    v = ((i * 37 + rows * 19) % 101).to(torch.float64)
    return ((v - 50) / 50).to(torch.float32)


def questions(cases=CASES, d=D):
    """[(decide [d], options [K, d])] following the row rule."""
    out, row = [], 0
    for k in cases:
        out.append((hidden_rows(row, 1, d)[0], hidden_rows(row + 1, k, d)))
        row += 1 + k
    return out


def build_head(d=D, p=P, seed=SEED):
    torch.manual_seed(0)  # nn.Linear's own init is overwritten below; seeded only for tidiness
    head = RefPointerHead(d, p)
    g = torch.Generator().manual_seed(seed)
    a = 3 / math.sqrt(d)
    with torch.no_grad():
        head.q.weight.copy_((torch.rand(p, d, generator=g, dtype=torch.float64) * 2 - 1) * a)
        head.q.bias.copy_(torch.rand(p, generator=g, dtype=torch.float64) * 2 - 1)
        head.k.weight.copy_((torch.rand(p, d, generator=g, dtype=torch.float64) * 2 - 1) * a)
        head.k.bias.copy_(torch.rand(p, generator=g, dtype=torch.float64) * 2 - 1)
    return head


def head_state(head):
    """OrderedDict q.weight, q.bias, k.weight, k.bias (F32, contiguous), as the checkpoint stores."""
    return collections.OrderedDict((k, v.detach().clone().contiguous()) for k, v in head.state_dict().items())


def reference(head, qs, temperature=TEMPERATURE):
    """Per question: torch float32 raw logits and probabilities, and the float64 formula."""
    out = []
    sd = {k: v.to(torch.float64) for k, v in head.state_dict().items()}
    for decide, options in qs:
        with torch.no_grad():
            head.temperature = 1.0
            head.eval()
            raw = head(decide, options)
            head.temperature = temperature
            probs = torch.softmax(head(decide, options), dim=-1)
            head.temperature = 1.0
            qd = sd["q.weight"] @ decide.to(torch.float64) + sd["q.bias"]
            kd = options.to(torch.float64) @ sd["k.weight"].T + sd["k.bias"]
            raw64 = (kd @ qd) / math.sqrt(qd.numel())
            probs64 = torch.softmax(raw64 / temperature, dim=-1)
        out.append({"logits32": raw.tolist(), "probs32": probs.tolist(),
                    "logits64": raw64.tolist(), "probs64": probs64.tolist()})
    return out


def head_checkpoint(head, temperature=TEMPERATURE):
    """The released head.pt dict layout (REFERENCE.md section 2)."""
    return {
        "base": "Qwen/Qwen3.5-4B-Base",
        "base_revision": "1001bb4d826a52d1f399e183466143f4da7b741b",
        "head": head_state(head),
        "lora": 16,
        "head_dim": head.q.out_features,
        "option_isolation": False,
        "special_embeddings": False,
        "weights_dtype": "fp32",
        "weights": "lora",
        "temperature": temperature,
        "holdout": [],
        "args": {"lr": 0.0002, "epochs": 1, "oracle": "kev-native head_oracle.py"},
        "suite_sha256": "0" * 64,
        "init_source": "kev-native head oracle (deterministic weights, seed %d)" % SEED,
        "temperature_fit": {"method": "fixed", "value": temperature},
    }


def sha256_tensors(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def fixture_text(head, qs, ref):
    fixture = {
        "what": "pointer head oracle (tests/oracle/head_oracle.py); regenerate with --fixture",
        "rule": RULE, "d": D, "p": P, "seed": SEED, "temperature": TEMPERATURE, "cases": CASES,
        "weights_sha256": sha256_tensors(list(head_state(head).values())),
        "inputs_sha256": sha256_tensors([t for q in qs for t in q]),
        "reference_float64": [{"logits": ["%.10g" % x for x in r["logits64"]],
                               "probabilities": ["%.10g" % x for x in r["probs64"]]} for r in ref],
    }
    return json.dumps(fixture, indent=1) + "\n"


def request_json(qs):
    return json.dumps({"questions": [{"decide": dec.tolist(), "options": opts.tolist()} for dec, opts in qs]})


def write_all(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    head = build_head()
    qs = questions()
    ref = reference(head, qs)
    torch.save(head_checkpoint(head), os.path.join(out_dir, "head.pt"))
    kevtest.write_safetensors(os.path.join(out_dir, "head.safetensors"), head_state(head), {"format": "pt"})
    with open(os.path.join(out_dir, "kev_export.json"), "w") as f:
        json.dump({"temperature": TEMPERATURE, "dimensions": {"hidden": D, "pointer": P}}, f)
    with open(os.path.join(out_dir, "request.json"), "w") as f:
        f.write(request_json(qs))
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(ref, f)
    with open(os.path.join(out_dir, "pointer_head_oracle.json"), "w") as f:
        f.write(fixture_text(head, qs, ref))
    return head, qs, ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory for head.pt, bundle files, request and references")
    ap.add_argument("--fixture", help="write only the committed fixture to this path")
    args = ap.parse_args()
    if args.fixture:
        head, qs = build_head(), questions()
        with open(args.fixture, "w") as f:
            f.write(fixture_text(head, qs, reference(head, qs)))
    if args.out:
        write_all(args.out)
    if not (args.out or args.fixture):
        ap.error("give --out and/or --fixture")


if __name__ == "__main__":
    main()
