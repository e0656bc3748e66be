"""The nesting check's scans of every byte (:func:`compactd.core.reader.opening_bytes`), recorded: how many, over
how many bytes, in which thread; for the tests of when a lean reading makes its checks."""

from __future__ import annotations

import threading

import pytest
from compactd.core import reader


class OpeningScans:
    """Each call of ``opening_bytes`` from now on (``monkeypatch``'s scope): its bytes' size and its thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        self.threads: list[int] = []
        original = reader.opening_bytes

        def recording(data: bytes) -> bytes:
            self.sizes.append(len(data))
            self.threads.append(threading.get_ident())
            return original(data)

        monkeypatch.setattr(reader, "opening_bytes", recording)
