"""Independent Python implementation of the upstream Kev request -> record -> token layout rules
(kev/api.py render/option_text/to_record and kev/encoding.py user_tokens/encode/rows_of), with
token ids from the transformers.js oracle (tests/oracle/js/tokenize.cjs), never from kev.

Usage from tests: `reference_encode(requests, tokenizer_json, max_state, max_row, truncate)`
returns, per request, either {"error": message-prefix} or the expected `kev encode` fields.
"""
import json
import os
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL = ["<|fim_prefix|>", "<|fim_middle|>", "<|box_start|>", "<|box_end|>", "<|fim_suffix|>"]
_SPECIAL_RE = re.compile(r"<\|([A-Za-z0-9_]+)\|>")


def render(v, indent=0):
    pad = "  " * indent
    if v is None:
        return ""
    if isinstance(v, (str, int, float, bool)):
        return str(v)
    if isinstance(v, list):
        return "\n".join(f"{pad}- {render(x, indent + 1).lstrip()}" for x in v)
    return "\n".join(f"{pad}{k}:\n{render(x, indent + 1)}" if isinstance(x, (dict, list)) else f"{pad}{k}: {render(x)}"
                     for k, x in v.items())


def option_text(name, desc):
    return name if desc is None or desc == "" else f"{name}: {render(desc)}"


def to_record(req):
    qs, meta = [], []
    for qid, q in req["questions"].items():
        t = q["type"]
        if t == "noul":
            c = q.get("criteria") or {}
            opts, keys = [option_text("no", c.get("false")), option_text("yes", c.get("true"))], ["false", "true"]
        elif t == "choice":
            opts, keys = [option_text(k, v) for k, v in q["criteria"].items()], list(q["criteria"])
        else:
            opts, keys = [render(x) for x in q["criteria"]], [str(i) for i in range(len(q["criteria"]))]
        qs.append({"instr": render(q.get("instructions")), "options": opts})
        meta.append({"id": qid, "type": t, "keys": keys})
    return {"state": render(req["state"]), "questions": qs}, meta


def escape(text):
    return _SPECIAL_RE.sub("<\u00a6\\1\u00a6>", text)


def oracle_ids(strings, tokenizer_json):
    """{string: ids} from transformers.js; one node process for all strings."""
    uniq = sorted(set(strings))
    if not uniq:
        return {}
    data = "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in uniq).encode()
    out = subprocess.run(["node", os.path.join(HERE, "js", "tokenize.cjs"), "--tokenizer", tokenizer_json],
                         input=data, capture_output=True, check=True, timeout=600).stdout.decode().splitlines()
    assert len(out) == len(uniq)
    return {s: json.loads(l) for s, l in zip(uniq, out)}


def special_ids(tokenizer_json):
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    by_content = {a["content"]: a["id"] for a in tj["added_tokens"]}
    return [by_content[s] for s in SPECIAL]


def encode(rec, ids_of, delims, max_state, max_row, truncate):
    st, q_id, o_id, c_id, d_id = delims
    state_tokens = ids_of[escape(rec["state"])]
    if not truncate and len(state_tokens) + 1 > max_state:
        return {"error": f"state is {len(state_tokens) + 1:,} tokens, over the {max_state:,}-token limit "
                         "(the <state> token included): shorten the document or split it across requests"}
    S = [st] + state_tokens[: max_state - 1]
    ids, seg, pos = list(S), [0] * len(S), list(range(len(S)))
    decide_idx, opt_idx, rows = [], [], []
    for k, q in enumerate(rec["questions"], start=1):
        instr = [q_id] + ids_of[escape(q["instr"])]
        spans = [[o_id] + ids_of[escape(o)] + [c_id] for o in q["options"]]
        br = instr + [t for sp in spans for t in sp] + [d_id]
        if len(br) > max_row - len(S):
            return {"error": f"branch too long: {len(br)} tokens with a {len(S)}-token state (row limit {max_row})"}
        base = len(ids)
        ends, cursor = [], len(instr)
        for sp in spans:
            cursor += len(sp)
            ends.append(cursor - 1)
        ids += br
        seg += [k] * len(br)
        pos += list(range(len(S), len(S) + len(br)))
        decide_idx.append(base + len(br) - 1)
        opt_idx.append([base + e for e in ends])
        rows.append({"ids": S + br, "decide": len(S) + len(br) - 1, "options": [len(S) + e for e in ends]})
    return {"ids": ids, "positions": pos, "segments": seg, "decide_index": decide_idx, "option_index": opt_idx,
            "state_length": len(S), "state_tokens": len(state_tokens) + 1,
            "truncated": len(state_tokens) + 1 > max_state, "rows": rows}


def reference_encode(requests, tokenizer_json, max_state, max_row, truncate):
    records = [to_record(r) for r in requests]
    texts = []
    for rec, _ in records:
        texts.append(escape(rec["state"]))
        for q in rec["questions"]:
            texts.append(escape(q["instr"]))
            texts += [escape(o) for o in q["options"]]
    ids_of = oracle_ids(texts, tokenizer_json)
    ids_of.setdefault("", [])
    delims = special_ids(tokenizer_json)
    out = []
    for rec, meta in records:
        e = encode(rec, ids_of, delims, max_state, max_row, truncate)
        if "error" not in e:
            e["questions"] = [{"id": m["id"], "type": m["type"], "keys": m["keys"], "options": q["options"],
                               "instructions": q["instr"]} for m, q in zip(meta, rec["questions"])]
        out.append(e)
    return out
