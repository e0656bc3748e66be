"""Regular expressions compiled on first use.

A pattern compiled at import is paid by every command that loads its module, whether or not it matches it
(0.05-0.3 ms each: ``once --dry-run`` compiled 14 it never matched, about 10M instructions). One made by
:func:`lazy_pattern` is compiled by the first command that uses it: ``_NAME = lazy_pattern(r"...")`` at module
level, then ``_NAME().match(text)`` where it is used (after the first, a call a cache answers: about 50 ns).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import AnyStr

__all__ = ["lazy_pattern"]


def lazy_pattern(source: AnyStr, flags: int = 0) -> Callable[[], re.Pattern[AnyStr]]:
    """``re.compile(source, flags)``, made by the first call and returned by every call."""
    return functools.cache(functools.partial(re.compile, source, flags))
