"""A stand-in for the two `transformers` entry points llama.cpp's convert_hf_to_gguf.py calls
(AutoConfig, AutoTokenizer), for machines without transformers (Debian has no package; PyPI is
not used here). Used only by bench/llama_peer/convert.py, only for the peer benchmark.

- AutoConfig.from_pretrained raises, so the converter falls back to reading config.json itself
  (its own documented fallback).
- AutoTokenizer.from_pretrained reads tokenizer.json: the BPE vocabulary plus added tokens. It
  does not tokenize: encode() maps an added token's text to its id (all the converter needs to
  normalise added tokens); convert.py names the pre-tokenizer ("qwen35") directly instead of
  having it recognised from a hash of encode()'s output.
"""
import json
import os


class AutoConfig:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise OSError("transformers shim: no AutoConfig; read config.json")


class _Added:
    def __init__(self, entry):
        self.content = entry["content"]
        self.special = bool(entry.get("special", False))
        self.normalized = bool(entry.get("normalized", False))


class _Tokenizer:
    def __init__(self, directory):
        with open(os.path.join(directory, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        self.vocab = dict(tj["model"]["vocab"])
        self.added_tokens_decoder = {}
        for entry in tj.get("added_tokens", []):
            self.vocab[entry["content"]] = entry["id"]
            self.added_tokens_decoder[entry["id"]] = _Added(entry)
        self._by_id = {i: t for t, i in self.vocab.items()}

    def get_added_vocab(self):
        return {a.content: i for i, a in self.added_tokens_decoder.items()}

    def encode(self, text, add_special_tokens=False):
        if text in self.vocab:
            return [self.vocab[text]]
        raise NotImplementedError("transformers shim: encode() only maps single tokens")

    def decode(self, ids):
        return "".join(self._by_id[i] for i in ids)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(directory, *args, **kwargs):
        return _Tokenizer(directory)
