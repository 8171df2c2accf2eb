"""A bounded verdict cache shared across requests: the verifier is frozen and greedy, so the same criterion on the
same response of the same prompt, asked of the same verifier by the same procedure, always gets the same verdict.

Keyed by a 16-byte SHA-256 of (verifier identity, prompt, response, criterion), never by request: the identity
(``verifier_identity``) holds the engine's model, dtype and fixed bias, and the verdict procedure (mode, prompt
wording, max tokens, structured). At most ``max_entries`` verdicts are held, the least recently used evicted first
(about 150 bytes each, whatever the texts' length). An unscorable verdict is never stored: it is asked again.

An optimisation only: ``verify(..., cache=...)`` answers exactly what it answers without it (tests/unit/
test_verdict_cache.py). Thread-safe.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Sequence

from dr_core.constants import UNSCORABLE
from dr_core.evaluator.items import Check

#: the engine settings that can change a verdict, read from ``engine.config`` where it has them
_IDENTITY_FIELDS = ("kind", "model", "dtype", "verdict_bias", "max_model_len")


def verifier_identity(engine, mode: str, style: str, max_tokens: int, structured: bool) -> str:
    """What a verdict depends on besides its check: the engine (model, dtype, fixed bias) and the procedure."""
    config = getattr(engine, "config", None)
    fields = {f: getattr(config, f, None) for f in _IDENTITY_FIELDS}
    procedure = {"mode": mode, "style": style, "max_tokens": max_tokens, "structured": structured}
    return json.dumps([getattr(engine, "model_name", None), fields, procedure], sort_keys=True, default=str)


class VerdictCache:
    """Verdicts (1 yes, 0 no) by verifier identity and check; ``hits`` and ``misses`` count the lookups."""

    def __init__(self, max_entries: int):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self.hits = self.misses = 0
        self._verdicts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._verdicts)

    @staticmethod
    def _key(identity: str, c: Check) -> bytes:
        return hashlib.sha256(json.dumps([identity, c.prompt, c.response, c.criterion]).encode()).digest()[:16]

    def lookup(self, identity: str, checks: Sequence[Check]) -> dict[Check, int]:
        """The verdicts held for these checks (a check not held is absent); each lookup a hit or a miss."""
        found: dict[Check, int] = {}
        with self._lock:
            for c in checks:
                key = self._key(identity, c)
                v = self._verdicts.get(key)
                if v is None:
                    self.misses += 1
                    continue
                self._verdicts.move_to_end(key)
                found[c] = v
                self.hits += 1
        return found

    def store(self, identity: str, verdicts: dict[Check, int | None]) -> None:
        """Hold these verdicts (unscorable ones are skipped), evicting the least recently used past the bound."""
        with self._lock:
            for c, v in verdicts.items():
                if v is UNSCORABLE:
                    continue
                key = self._key(identity, c)
                self._verdicts[key] = v
                self._verdicts.move_to_end(key)
            while len(self._verdicts) > self.max_entries:
                self._verdicts.popitem(last=False)
