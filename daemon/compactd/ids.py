"""Entry ids as pi makes them (``generateId``: 8 lowercase hex characters), unique within one file."""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["fresh_id"]


def fresh_id(taken: Iterable[str] | set[str], *, reserve: bool = False) -> str:
    """An 8-hex id not in ``taken``; with ``reserve`` (``taken`` a set) it is added, so the next call differs."""
    used = taken if isinstance(taken, set) else set(taken)
    while True:
        candidate = os.urandom(4).hex()  # ``secrets.token_hex(4)``, without loading hashlib and hmac
        if candidate not in used:
            if reserve:
                used.add(candidate)
            return candidate
