"""How large one summarizer call may be: an output budget sized to its input, fitted into the call's timeout at
the endpoint's measured speed, which is remembered per endpoint in the state directory.

A small local model asked for 4,096 tokens writes 4,096 tokens, and a CPU server at 5-50 tokens/s then
overruns any sensible timeout. So each call asks for what its input needs (a chunk's summary is a fraction of
the chunk; a merge rewrites partial summaries), and when the endpoint's speed is known, a call's prompt and
answer must fit ``PACE_SHARE`` of the timeout: ``prompt_tokens / prompt_tps + max_tokens / output_tps``.

Speeds are measured from each streamed call (time to the first token ≈ prompt processing, then output tokens
per second; llama.cpp's own ``timings`` and Ollama's final-chunk durations, load time apart, when they come)
and kept in ``summarizer_speed.json``. Until an endpoint has been measured, calls are sized by their input and
the window only. The same file keeps the latest prompt an endpoint cut (:func:`prompt_was_cut`), which
``doctor`` reports.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compactd.commit.durable import write_atomic
from compactd.core.timestamps import iso_seconds
from compactd.datarecord import datarecord
from compactd.defaults import SAFETY_MARGIN
from compactd.state import STATE_DIR_MODE, dump_json, load_json

__all__ = [
    "CHUNK_OUTPUT_RATIO",
    "MAX_RISE",
    "MERGE_OUTPUT_RATIO",
    "MIN_PACED_OUTPUT_TOKENS",
    "OUTPUT_FLOOR_TOKENS",
    "PACE_SHARE",
    "PROMPT_ASCII_CHARS_PER_TOKEN",
    "PROMPT_OVERHEAD_TOKENS",
    "SPEED_FILE",
    "Pace",
    "Sample",
    "Speed",
    "SpeedMemory",
    "call_fit",
    "endpoint_key",
    "estimate_prompt_tokens",
    "largest",
    "observe",
    "output_budget",
    "prompt_was_cut",
]

logger = logging.getLogger(__name__)

SPEED_FILE = "summarizer_speed.json"
SPEED_FORMAT = 1

# --- algorithm constants (not configurable) ----------------------------------------------------------------
# Share of the timeout a call is planned to take: the rest absorbs a busy machine and a wrong estimate.
PACE_SHARE = 0.8
# A chunk's summary needs about a fifth of the chunk; a previous summary it folds in is rewritten whole.
CHUNK_OUTPUT_RATIO = 0.2
# A merge rewrites its partial summaries into one, dropping their overlap.
MERGE_OUTPUT_RATIO = 0.75
# Five headings with a few lines each and the identifiers: less than this is no structured summary.
OUTPUT_FLOOR_TOKENS = 512
# When the measured speed leaves less than the floor, a call still gets this much (its text is kept if the
# deadline hits; a call with no room at all would only waste the prompt).
MIN_PACED_OUTPUT_TOKENS = 128
# Conservative prompt estimate: English prose/JSON runs at 3.5-4.5 chars per token and non-ASCII text (CJK)
# close to one token per char (design.md §7.5), plus chat-template tokens.
PROMPT_ASCII_CHARS_PER_TOKEN = 3.5
PROMPT_OVERHEAD_TOKENS = 16
# A sample below these sizes measures connection overhead, not the model.
MEASURE_MIN_PROMPT_TOKENS = 64
MEASURE_MIN_OUTPUT_TOKENS = 8
MEASURE_MIN_SECONDS = 0.05
# Smoothing of successive samples; a faster sample moves the estimate at most this factor (a prompt the
# server had cached, a quality retry of the same chunk, looks many times faster than the model is).
SMOOTHING = 0.5
MAX_RISE = 2.0
# A server that reports fewer prompt tokens than this share of the estimate cut the prompt. The estimate runs
# high (3.5 chars a token where prose tokenizes at 4-4.5, so an uncut prompt reports 0.75-1 of it), while a cut
# keeps at most the context: Ollama's cut keeps about half of it (num_keep, then the newest tokens up to
# num_ctx - (num_ctx - num_keep) / 2), so a prompt cut by Ollama reports at most ~0.5 of what was sent.
CUT_SHARE = 0.6
# Below this many tokens sent, no verdict: chat-template and counting differences dominate.
CUT_MIN_SENT_TOKENS = 256


def estimate_prompt_tokens(system: str, user: str) -> int:
    """A deliberately high token estimate for a chat prompt (ASCII at 3.5 chars/token, other chars 1 each)."""
    text = system + user
    ascii_chars = len(text.encode("ascii", "ignore"))
    other = len(text) - ascii_chars
    return math.ceil(ascii_chars / PROMPT_ASCII_CHARS_PER_TOKEN) + other + PROMPT_OVERHEAD_TOKENS


def prompt_was_cut(reported: int, sent_estimate: int) -> bool:
    """Whether a server that reports ``reported`` prompt tokens for a prompt estimated at ``sent_estimate``
    answered from a cut prompt (Ollama cuts without an error and reports what it kept)."""
    return sent_estimate >= CUT_MIN_SENT_TOKENS and 0 <= reported < CUT_SHARE * sent_estimate


def output_budget(fresh_tokens: int, carried_tokens: int, *, ratio: float, cap: int) -> int:
    """``max_tokens`` for a call summarizing ``fresh_tokens`` of new text and carrying ``carried_tokens`` of
    earlier summary: ``clamp(carried + ratio × fresh, floor, cap)``."""
    cap = max(1, cap)
    wanted = carried_tokens + math.ceil(ratio * max(0, fresh_tokens))
    return max(min(OUTPUT_FLOOR_TOKENS, cap), min(cap, wanted))


# --- speed ---------------------------------------------------------------------------------------------------


@datarecord(frozen=True, slots=True)
class Speed:
    """An endpoint's measured speed in tokens per second (None: not measured yet)."""

    prompt_tps: float | None = None
    output_tps: float | None = None
    samples: int = 0
    updated: str | None = None

    def seconds(self, prompt_tokens: int, output_tokens: int) -> float:
        """The planned time of a call; a rate not measured counts nothing."""
        total = 0.0
        if self.prompt_tps:
            total += prompt_tokens / self.prompt_tps
        if self.output_tps:
            total += output_tokens / self.output_tps
        return total

    def describe(self) -> str:
        parts = []
        if self.prompt_tps:
            parts.append(f"{self.prompt_tps:,.0f} prompt tok/s")
        if self.output_tps:
            parts.append(f"{self.output_tps:,.1f} output tok/s")
        return ", ".join(parts) or "no speed"


@datarecord(frozen=True, slots=True)
class Sample:
    """One call's timing. ``prompt_bound``: no token came before the deadline, so the prompt rate is at most
    ``prompt_tokens / prompt_seconds``."""

    prompt_tokens: int | None = None
    prompt_seconds: float | None = None
    output_tokens: int | None = None
    output_seconds: float | None = None
    prompt_bound: bool = False


def _rate(tokens: int | None, seconds: float | None, min_tokens: int) -> float | None:
    if tokens is None or seconds is None or tokens < min_tokens or seconds < MEASURE_MIN_SECONDS:
        return None
    return tokens / seconds


def _blend(old: float | None, new: float | None) -> float | None:
    if new is None or not math.isfinite(new) or new <= 0:
        return old
    if old is None:
        return new
    return min(old * MAX_RISE, old + SMOOTHING * (new - old))


def observe(previous: Speed | None, sample: Sample, *, now: datetime | None = None) -> Speed | None:
    """The speed after one more sample (unchanged when the sample measured nothing)."""
    old = previous or Speed()
    prompt = _rate(sample.prompt_tokens, sample.prompt_seconds, MEASURE_MIN_PROMPT_TOKENS)
    output = _rate(sample.output_tokens, sample.output_seconds, MEASURE_MIN_OUTPUT_TOKENS)
    if sample.prompt_bound:
        # Nothing arrived within the deadline: the model is at most this fast, whatever was measured before.
        prompt_tps = prompt if old.prompt_tps is None or prompt is None else min(old.prompt_tps, prompt)
    else:
        prompt_tps = _blend(old.prompt_tps, prompt)
    output_tps = _blend(old.output_tps, output)
    if prompt_tps == old.prompt_tps and output_tps == old.output_tps:
        return previous
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return Speed(prompt_tps, output_tps, old.samples + 1, iso_seconds(moment, zulu=True))


# --- fitting a call into its timeout -------------------------------------------------------------------------


@datarecord(frozen=True, slots=True)
class Pace:
    """A call's time limit, what is known of the endpoint's speed, and the context a call gets there (None: not
    asked yet; the configured window applies)."""

    timeout_seconds: float
    speed: Speed | None = None
    window: int | None = None

    @property
    def budget_seconds(self) -> float:
        return PACE_SHARE * self.timeout_seconds

    def fits(self, prompt_tokens: int, output_tokens: int) -> bool:
        return self.speed is None or self.speed.seconds(prompt_tokens, output_tokens) <= self.budget_seconds

    def output_room(self, prompt_tokens: int) -> int | None:
        """Output tokens a call with this prompt can afford (None: no output speed measured, no limit)."""
        if self.speed is None or not self.speed.output_tps:
            return None
        left = self.budget_seconds - self.speed.seconds(prompt_tokens, 0)
        return max(0, math.floor(left * self.speed.output_tps))

    def largest_fitting(self, limit: int, call: Callable[[int], tuple[int, int]]) -> int:
        """The largest ``n ≤ limit`` whose call (``call(n)`` → prompt tokens, output tokens) fits; 0 when none
        does. ``call`` must grow with ``n``."""
        if self.speed is None:
            return max(0, limit)
        return largest(limit, lambda n: self.fits(*call(n)))


def largest(limit: int, holds: Callable[[int], bool]) -> int:
    """The largest ``n`` in ``[0, limit]`` for which ``holds`` (true up to some point, false after); 0 when it
    holds nowhere."""
    if limit <= 0:
        return 0
    if holds(limit):
        return limit
    low, high = 0, limit  # holds(high) is false; holds(low) is true or low is 0
    while high - low > 1:
        middle = (low + high) // 2
        if holds(middle):
            low = middle
        else:
            high = middle
    return low


@datarecord(frozen=True, slots=True)
class Fit:
    """What one fresh chunk summary can hold at a pace: ``prompt`` and ``output`` tokens, whether the window
    (rather than the timeout) is what limits it, and whether even a minimal call fits the timeout."""

    prompt: int
    output: int
    window_bound: bool
    minimal_fits: bool
    minimal_seconds: float


def call_fit(pace: Pace, *, window: int, prompt_overhead: int, output_cap: int) -> Fit:
    """The largest chunk-summary call (instructions of ``prompt_overhead`` tokens, a fresh chunk, its output
    budget) that fits both the window (with the safety margin) and the pace."""

    def call(fresh: int) -> tuple[int, int]:
        return prompt_overhead + fresh, output_budget(fresh, 0, ratio=CHUNK_OUTPUT_RATIO, cap=output_cap)

    def in_window(fresh: int) -> bool:
        prompt, output = call(fresh)
        return prompt * SAFETY_MARGIN + output <= window

    by_window = largest(window, in_window)
    fresh = pace.largest_fitting(by_window, call)
    prompt, output = call(fresh)
    minimal = call(0)
    seconds = pace.speed.seconds(*minimal) if pace.speed is not None else 0.0
    if not pace.fits(*minimal):
        room = pace.output_room(prompt_overhead) or 0
        return Fit(prompt_overhead, room, False, False, seconds)
    return Fit(prompt, output, fresh == by_window, True, seconds)


# --- memory --------------------------------------------------------------------------------------------------


def endpoint_key(base_url: str, model: str) -> str:
    """The endpoint's name in the speed file: its URL without credentials or query, and the model."""
    url = re.sub(r"//[^/@]*@", "//", base_url).split("?", 1)[0].split("#", 1)[0].rstrip("/")
    return f"{url} {model}"


def _speed_from(doc: object) -> Speed | None:
    if not isinstance(doc, dict):
        return None

    def rate(name: str) -> float | None:
        value = doc.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if math.isfinite(value) and value > 0 else None

    prompt, output = rate("prompt_tps"), rate("output_tps")
    if prompt is None and output is None:
        return None
    samples = doc.get("samples")
    updated = doc.get("updated")
    return Speed(
        prompt,
        output,
        samples if isinstance(samples, int) and not isinstance(samples, bool) and samples > 0 else 1,
        updated if isinstance(updated, str) else None,
    )


class SpeedMemory:
    """``summarizer_speed.json`` in the state directory: endpoint key → measured speed.

    Every update re-reads the file and replaces it atomically, so two processes (the daemon and a
    ``compactd compact``) lose at most a sample to each other, never the file. An unreadable file counts as
    empty and is replaced by the next update; a failed write is logged, never an error of the summary.
    """

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = Path(state_dir) / SPEED_FILE

    def _read(self) -> dict[str, Any]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            logger.warning("summarizer speed: cannot read %s: %s", self.path, exc.strerror or exc)
            return {}
        try:
            doc = load_json(raw)
        except ValueError:
            logger.warning("summarizer speed: %s is not JSON; it will be replaced", self.path)
            return {}
        if not isinstance(doc, dict) or doc.get("format") != SPEED_FORMAT:
            return {}
        endpoints = doc.get("endpoints")
        return dict(endpoints) if isinstance(endpoints, dict) else {}

    def all(self) -> dict[str, Speed]:
        found = {}
        for key, entry in self._read().items():
            speed = _speed_from(entry)
            if isinstance(key, str) and speed is not None:
                found[key] = speed
        return found

    def get(self, key: str) -> Speed | None:
        return self.all().get(key)

    def put(self, key: str, speed: Speed) -> None:
        endpoints = self._read()
        entry = endpoints.get(key)
        endpoints[key] = {
            **(entry if isinstance(entry, dict) else {}),
            "prompt_tps": round(speed.prompt_tps, 2) if speed.prompt_tps else None,
            "output_tps": round(speed.output_tps, 2) if speed.output_tps else None,
            "samples": speed.samples,
            "updated": speed.updated or iso_seconds(zulu=True),
        }
        self._write(endpoints)

    def note_cut(self, key: str, *, reported: int, sent: int) -> None:
        """The endpoint answered from ``reported`` prompt tokens of about ``sent``: it cut the prompt."""
        endpoints = self._read()
        entry = endpoints.get(key)
        entry = dict(entry) if isinstance(entry, dict) else {}
        previous = entry.get("cut")
        count = previous.get("count") if isinstance(previous, dict) else None
        entry["cut"] = {
            "reported": reported,
            "sent": sent,
            "count": (count if isinstance(count, int) and not isinstance(count, bool) else 0) + 1,
            "at": iso_seconds(zulu=True),
        }
        endpoints[key] = entry
        self._write(endpoints)

    def cut(self, key: str) -> dict[str, Any] | None:
        """The latest cut prompt noted for the endpoint: ``reported``, ``sent``, ``count``, ``at``."""
        entry = self._read().get(key)
        found = entry.get("cut") if isinstance(entry, dict) else None
        return dict(found) if isinstance(found, dict) else None

    def _write(self, endpoints: dict[str, Any]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=STATE_DIR_MODE)
            write_atomic(self.path, dump_json({"format": SPEED_FORMAT, "endpoints": endpoints}))
        except OSError as exc:
            logger.warning("summarizer speed: cannot write %s: %s", self.path, exc.strerror or exc)
