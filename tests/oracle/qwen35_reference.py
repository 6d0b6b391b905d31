"""Float64 torch reference of the Qwen3.5 text forward, written from the math (REFERENCE.md
section 7, checked against the upstream Qwen3.5 modelling code). Shares nothing with the C++.

Also writes small synthetic model directories in the released layout (config.json with
text_config, two BF16 shards + model.safetensors.index.json, language tensors prefixed
`model.language_model.`, plus a few visual/mtp tensors that must be ignored).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
import kevtest  # noqa: E402

TINY = dict(hidden=64, intermediate=96, layers=4, heads=4, kv_heads=2, head_dim=16,
            lin_k_heads=2, lin_v_heads=4, lin_k_dim=8, lin_v_dim=8, vocab=320, conv=4,
            theta=10000000.0, rotary_factor=0.25, eps=1e-6)


def text_config(d):
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(d["layers"])]
    return {
        "model_type": "qwen3_5_text", "hidden_size": d["hidden"], "intermediate_size": d["intermediate"],
        "num_hidden_layers": d["layers"], "num_attention_heads": d["heads"],
        "num_key_value_heads": d["kv_heads"], "head_dim": d["head_dim"],
        "linear_num_key_heads": d["lin_k_heads"], "linear_num_value_heads": d["lin_v_heads"],
        "linear_key_head_dim": d["lin_k_dim"], "linear_value_head_dim": d["lin_v_dim"],
        "linear_conv_kernel_dim": d["conv"], "layer_types": layer_types, "full_attention_interval": 4,
        "rms_norm_eps": d["eps"], "vocab_size": d["vocab"], "tie_word_embeddings": True,
        "attn_output_gate": True, "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": d["theta"],
                            "partial_rotary_factor": d["rotary_factor"]},
        "max_position_embeddings": 262144, "dtype": "bfloat16",
    }


def make_weights(d, seed):
    """{relative name: tensor} with the value ranges of `kev synth`."""
    g = torch.Generator().manual_seed(seed)

    def u(shape, lo, hi):
        return torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo

    def lin(out, inp):
        return (u((out, inp), -1, 1) / math.sqrt(inp)).to(torch.bfloat16)

    def norm(n):
        return u((n,), -0.1, 0.1).to(torch.bfloat16)

    H, I = d["hidden"], d["intermediate"]
    w = {"embed_tokens.weight": u((d["vocab"], H), -1, 1).to(torch.bfloat16), "norm.weight": norm(H)}
    conv_dim = 2 * d["lin_k_heads"] * d["lin_k_dim"] + d["lin_v_heads"] * d["lin_v_dim"]
    vt = d["lin_v_heads"] * d["lin_v_dim"]
    for l in range(d["layers"]):
        p = f"layers.{l}."
        w[p + "input_layernorm.weight"] = norm(H)
        w[p + "post_attention_layernorm.weight"] = norm(H)
        w[p + "mlp.gate_proj.weight"] = lin(I, H)
        w[p + "mlp.up_proj.weight"] = lin(I, H)
        w[p + "mlp.down_proj.weight"] = lin(H, I)
        if (l + 1) % 4 == 0:
            a, hd = p + "self_attn.", d["head_dim"]
            w[a + "q_proj.weight"] = lin(d["heads"] * hd * 2, H)
            w[a + "k_proj.weight"] = lin(d["kv_heads"] * hd, H)
            w[a + "v_proj.weight"] = lin(d["kv_heads"] * hd, H)
            w[a + "o_proj.weight"] = lin(H, d["heads"] * hd)
            w[a + "q_norm.weight"] = norm(hd)
            w[a + "k_norm.weight"] = norm(hd)
        else:
            a, lv = p + "linear_attn.", d["lin_v_heads"]
            w[a + "in_proj_qkv.weight"] = lin(conv_dim, H)
            w[a + "in_proj_z.weight"] = lin(vt, H)
            w[a + "in_proj_a.weight"] = lin(lv, H)
            w[a + "in_proj_b.weight"] = lin(lv, H)
            w[a + "out_proj.weight"] = lin(H, vt)
            w[a + "conv1d.weight"] = u((conv_dim, 1, d["conv"]), -0.5, 0.5).to(torch.bfloat16)
            w[a + "A_log"] = torch.log(u((lv,), 1, 16)).to(torch.float32)
            w[a + "dt_bias"] = u((lv,), -0.5, 0.5).to(torch.bfloat16)
            w[a + "norm.weight"] = u((d["lin_v_dim"],), 0.9, 1.1).to(torch.float32)
    return w


def write_model_dir(path, d, seed=1, prefix="model.language_model.", shards=2, mutate=None):
    """Writes a model directory. `mutate(full_name_dict)` may edit tensors before writing."""
    os.makedirs(path, exist_ok=True)
    rel = make_weights(d, seed)
    named = {prefix + k: v for k, v in rel.items()}
    named["model.visual.patch_embed.proj.weight"] = torch.zeros(4, 3, dtype=torch.bfloat16)
    named["mtp.fc.weight"] = torch.zeros(2, 2, dtype=torch.bfloat16)
    if mutate:
        mutate(named)
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "tie_word_embeddings": True, "text_config": text_config(d),
           "vision_config": {"depth": 1, "hidden_size": 16}}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    names = list(named)
    if shards == 1:
        kevtest.write_safetensors(os.path.join(path, "model.safetensors"), named)
        return path
    half = len(names) // 2
    parts = [names[:half], names[half:]]
    weight_map, total = {}, 0
    for i, part in enumerate(parts):
        fname = f"model.safetensors-{i + 1:05d}-of-00002.safetensors"
        kevtest.write_safetensors(os.path.join(path, fname), {n: named[n] for n in part})
        for n in part:
            weight_map[n] = fname
            total += named[n].numel() * named[n].element_size()
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    return path


def load_model_dir(path, dtype=torch.float64):
    """(text_config dict, {relative name: tensor of `dtype`}) read independently of the C++."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    tc = cfg.get("text_config", cfg)
    tensors = {}
    index = os.path.join(path, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    for fname in files:
        tensors.update(kevtest.read_safetensors(os.path.join(path, fname)))
    for prefix in ("model.language_model.", "model.", ""):
        if prefix + "embed_tokens.weight" in tensors:
            break
    w = {k[len(prefix):]: v.to(dtype) for k, v in tensors.items() if k.startswith(prefix)}
    return tc, w


class Reference:
    """forward(ids, positions) -> [n, hidden] float64 final-normed hidden states of one causal sequence."""

    def __init__(self, tc, w):
        self.c, self.w = tc, w
        rp = tc.get("rope_parameters", tc)
        self.theta = float(rp["rope_theta"])
        self.rot = int(tc["head_dim"] * rp.get("partial_rotary_factor", 1.0))
        self.eps = tc["rms_norm_eps"]
        self.dtype = w.dtype if hasattr(w, "rows") else w["embed_tokens.weight"].dtype

    def rmsnorm(self, x, w, plus_one=True):
        y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps)
        return y * ((1.0 + w) if plus_one else w)

    def rope(self, x, pos):  # x [T, heads, hd]
        half = self.rot // 2
        inv = self.theta ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / self.rot)
        ang = pos[:, None].to(torch.float64) * inv[None, :]
        c, s = torch.cos(ang)[:, None, :].to(self.dtype), torch.sin(ang)[:, None, :].to(self.dtype)
        x = x.clone()
        x1, x2 = x[..., :half].clone(), x[..., half:self.rot].clone()
        x[..., :half] = x1 * c - x2 * s
        x[..., half:self.rot] = x2 * c + x1 * s
        return x

    def attention(self, p, x, pos):
        c, T = self.c, x.shape[0]
        nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        qg = (x @ self.w[p + "q_proj.weight"].T).view(T, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = (x @ self.w[p + "k_proj.weight"].T).view(T, nkv, hd)
        v = (x @ self.w[p + "v_proj.weight"].T).view(T, nkv, hd)
        q = self.rope(self.rmsnorm(q, self.w[p + "q_norm.weight"]), pos)
        k = self.rope(self.rmsnorm(k, self.w[p + "k_norm.weight"]), pos)
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        o = torch.einsum("hts,shd->thd", att, v)
        o = o * torch.sigmoid(gate)
        return o.reshape(T, nh * hd) @ self.w[p + "o_proj.weight"].T

    def gdn(self, p, x):
        c, T = self.c, x.shape[0]
        lk, lv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"],
                          c["linear_key_head_dim"], c["linear_value_head_dim"])
        K = c["linear_conv_kernel_dim"]
        mixed = x @ self.w[p + "in_proj_qkv.weight"].T  # [T, C]
        cw = self.w[p + "conv1d.weight"][:, 0, :]        # [C, K]
        padded = torch.cat([torch.zeros(K - 1, mixed.shape[1], dtype=self.dtype), mixed], 0)
        conv = torch.zeros_like(mixed)
        for j in range(K):
            conv += padded[j:j + T] * cw[:, j]
        conv = conv * torch.sigmoid(conv)
        q = conv[:, :lk * dk].view(T, lk, dk)
        k = conv[:, lk * dk:2 * lk * dk].view(T, lk, dk)
        v = conv[:, 2 * lk * dk:].view(T, lv, dv)
        z = (x @ self.w[p + "in_proj_z.weight"].T).view(T, lv, dv)
        beta = torch.sigmoid(x @ self.w[p + "in_proj_b.weight"].T)
        a = x @ self.w[p + "in_proj_a.weight"].T
        g = -torch.exp(self.w[p + "A_log"]) * torch.nn.functional.softplus(a + self.w[p + "dt_bias"])
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        rep = lv // lk
        q = q.repeat_interleave(rep, dim=1)
        k = k.repeat_interleave(rep, dim=1)
        S = torch.zeros(lv, dk, dv, dtype=self.dtype)
        out = torch.zeros(T, lv, dv, dtype=self.dtype)
        for t in range(T):
            S = S * torch.exp(g[t])[:, None, None]
            m = torch.einsum("hkv,hk->hv", S, k[t])
            delta = beta[t][:, None] * (v[t] - m)
            S = S + k[t][:, :, None] * delta[:, None, :]
            out[t] = torch.einsum("hkv,hk->hv", S, q[t])
        o = self.rmsnorm(out, self.w[p + "norm.weight"], plus_one=False)
        o = o * (z * torch.sigmoid(z))
        return o.reshape(T, lv * dv) @ self.w[p + "out_proj.weight"].T

    def forward(self, ids, positions):
        c = self.c
        index = torch.tensor(ids, dtype=torch.long)
        # A WidenOnUse (score_reference.py) widens only these rows of the embedding.
        x = self.w.rows("embed_tokens.weight", index) if hasattr(self.w, "rows") else self.w["embed_tokens.weight"][index]
        pos = torch.tensor(positions, dtype=torch.long)
        for l in range(c["num_hidden_layers"]):
            p = f"layers.{l}."
            h = self.rmsnorm(x, self.w[p + "input_layernorm.weight"])
            if c["layer_types"][l] == "full_attention":
                x = x + self.attention(p + "self_attn.", h, pos)
            else:
                x = x + self.gdn(p + "linear_attn.", h)
            h = self.rmsnorm(x, self.w[p + "post_attention_layernorm.weight"])
            gate = h @ self.w[p + "mlp.gate_proj.weight"].T
            up = h @ self.w[p + "mlp.up_proj.weight"].T
            x = x + (gate * torch.sigmoid(gate) * up) @ self.w[p + "mlp.down_proj.weight"].T
        return self.rmsnorm(x, self.w["norm.weight"])
