"""Growing conversations for the tests of saved points (test_serve_growing.py, test_state_dir.py):
the questions each turn asks, a turn's line of text, the requests of a list of states, and the
comparison of a warm answer with a cold server's (the whole body but what measures time or says
what was reused)."""
import json

CHOICE = {"type": "choice", "instructions": "Next step?", "criteria": {"ship": "confirm", "refund": None, "wait": ""}}
NOUL = {"type": "noul", "instructions": "Escalate?"}
SCORE = {"type": "score", "instructions": "Mood", "criteria": ["angry", "neutral", "happy"]}
MIXES = [{"c": CHOICE, "n": NOUL}, {"s": SCORE}, {"n": NOUL, "s": SCORE, "c": CHOICE}]


def line(conv, i):
    return f"{conv} turn {i}: the customer wrote about order {i * 7} and asked when it ships."


def requests(states, offset=0):
    """One request per state, the question mixes taken in turn from `offset`."""
    return [{"state": s, "questions": MIXES[(i + offset) % len(MIXES)]} for i, s in enumerate(states)]


def comparable(body):
    """The body without latency_ms and usage.cached_tokens (with its copy
    usage.input_tokens_details): what a warm and a cold server must agree on byte for byte."""
    body = json.loads(json.dumps(body))
    body.pop("latency_ms", None)
    if isinstance(body.get("usage"), dict):
        body["usage"].pop("cached_tokens", None)
        body["usage"].pop("input_tokens_details", None)
    for run in body.get("runs", []):
        run.pop("latency_ms", None)
    return json.dumps(body, sort_keys=True)
