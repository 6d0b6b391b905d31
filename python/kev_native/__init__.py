"""kev_native: Kev decision models scored in-process by kev's native library.

    import kev_native
    model = kev_native.Model("/path/to/bundle")          # an export bundle (kev export)
    answer = model.system_one({"state": ..., "questions": {...}})

A request is a dict (serialised with json.dumps) or JSON text; an answer is what `kev serve`
returns for it: system_one_json() gives the very bytes (`kev score` prints the same line), the
other methods that body parsed. Refusals raise a subclass of kev_native.Error carrying kev's one
sentence and its kind, exit_code and http_status. Computing releases the GIL: a Model may be
shared by several threads. docs/python.md has the whole API.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Tuple, Union

from . import _core
from ._core import (
    BadInputError,
    Error,
    IntegrityError,
    InternalError,
    InterruptError,
    IoError,
    OverloadError,
    UnsupportedError,
)

__version__: str = _core.__version__
__all__ = [
    "Model", "Error", "BadInputError", "IntegrityError", "IoError", "UnsupportedError",
    "OverloadError", "InterruptError", "InternalError", "__version__",
]

Request = Union[str, bytes, Mapping[str, Any]]


def _body(request: Request) -> Union[str, bytes]:
    if isinstance(request, str):
        return request
    if isinstance(request, (bytes, bytearray)):
        return bytes(request)  # as received: kev's decoder judges its UTF-8
    if isinstance(request, Mapping):
        return json.dumps(request)
    raise TypeError(f"a request is a dict or JSON text, not {type(request).__name__}")


class Model:
    """One export bundle, loaded once; scores System One requests as `kev score` does."""

    def __init__(self, bundle: str, precision: str = "fp32", threads: Optional[int] = None,
                 temperature: Optional[float] = None, *, decimals: int = 4,
                 truncate: bool = False, date_facts: bool = False,
                 usage_details: bool = False, state_dir: Optional[str] = None) -> None:
        self._core = _core.Model(str(bundle), precision, threads, temperature, decimals,
                                 truncate, date_facts, usage_details,
                                 None if state_dir is None else str(state_dir))

    @property
    def hidden(self) -> int:
        """The backbone's hidden size d."""
        return self._core.hidden

    @property
    def temperature(self) -> float:
        """The calibration temperature in use (the bundle's, or the one given)."""
        return self._core.temperature

    def system_one_json(self, request: Request) -> str:
        """POST /v1/systemone: the answer's JSON text, byte for byte kev serve's body."""
        return self._core.system_one_json(_body(request))

    def system_one(self, request: Request) -> dict:
        """POST /v1/systemone: the answer as a dict."""
        return json.loads(self.system_one_json(request))

    def permute_json(self, request: Request) -> str:
        """POST /v1/systemone/permute ({"request", "question", "n_perm", "seed"}): the answer's
        JSON text."""
        return self._core.permute_json(_body(request))

    def permute(self, request: Request) -> dict:
        """POST /v1/systemone/permute: the answer as a dict."""
        return json.loads(self.permute_json(request))

    def separate_json(self, request: Request) -> str:
        """POST /v1/systemone/separate: the answer's JSON text."""
        return self._core.separate_json(_body(request))

    def separate(self, request: Request) -> dict:
        """POST /v1/systemone/separate: the answer as a dict."""
        return json.loads(self.separate_json(request))

    def score_many(self, requests: Iterable[Request], *,
                   errors: str = "raise") -> Iterator[Union[dict, Error]]:
        """Answers of requests (a list or any iterable, read lazily) in order, each as soon as it
        is computed. errors="raise" stops at the first refusal; errors="return" yields the
        kev_native.Error in that request's place and goes on (as `kev score --jsonl` does)."""
        if errors not in ("raise", "return"):
            raise ValueError(f'errors must be "raise" or "return", not {errors!r}')
        for request in requests:
            try:
                answer = self.system_one(request)
            except Error as e:
                if errors == "raise":
                    raise
                yield e
                continue
            yield answer

    def forward(self, rows: Sequence[Sequence[int]],
                prefix: Optional[Sequence[int]] = None) -> list:
        """Final-normed hidden states, one float32 numpy array [len(row), hidden] per row; each
        row continues `prefix` (token ids) on its own, as `kev forward` does."""
        return self._core.forward([list(r) for r in rows],
                                  None if prefix is None else list(prefix))

    def head(self, hidden: Any) -> Tuple[Any, Any]:
        """Pointer head of one question: hidden [1 + K, d] (the decide state, then each option's)
        -> (raw logits [K], probabilities [K] = softmax(logits / temperature)), float32 numpy."""
        return self._core.head(hidden)
