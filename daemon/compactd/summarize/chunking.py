"""Split a span of messages into pieces a summarizer can take, never separating a tool call from its results.

Sizes are measured against the *summarizer's* window, with the seed's adaptive ratio and safety margin
(design.md §6.7): a small local summarizer often has far less room than the agent's model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from compactd.core.messages import role_of, tool_call_id, tool_calls
from compactd.core.tokens import estimate_tokens
from compactd.defaults import SAFETY_MARGIN

__all__ = [
    "BASE_CHUNK_RATIO",
    "Message",
    "call_groups",
    "chunk_by_max_tokens",
    "is_oversized",
    "max_chunk_tokens",
    "split_by_token_share",
]

Message = dict[str, Any]
Cost = Callable[[Message], int]

BASE_CHUNK_RATIO = 0.4  # share of the summarizer window one chunk may take
MIN_CHUNK_RATIO = 0.15  # floor for sessions of very large messages
SUMMARIZATION_OVERHEAD_TOKENS = 4_096  # instructions, previous summary and the answer itself
OVERSIZED_SHARE = 0.5  # a message above half the window cannot be summarized with anything else


def adaptive_chunk_ratio(messages: Sequence[Message], window: int, cost: Cost = estimate_tokens) -> float:
    """Large average messages shrink the chunk share, so a chunk still fits after the margin."""
    if not messages or window <= 0:
        return BASE_CHUNK_RATIO
    average = sum(cost(m) for m in messages) / len(messages)
    share = average * SAFETY_MARGIN / window
    if share > 0.1:
        return max(MIN_CHUNK_RATIO, BASE_CHUNK_RATIO - min(2 * share, 0.25))
    return BASE_CHUNK_RATIO


def max_chunk_tokens(
    messages: Sequence[Message], window: int, cost: Cost = estimate_tokens, *, overhead: int | None = None
) -> int:
    """The seed's chunk size: the adaptive share of the window less a fixed 4,096-token overhead.

    That overhead (instructions, previous summary, answer) leaves nothing of a small local window: 0.4 × 8,192
    is less than 4,096, and every call group would be a call of its own. When the caller knows the call's
    real ``overhead``, a chunk may take the window's share as long as the overhead still fits beside it.
    """
    share = math.floor(window * adaptive_chunk_ratio(messages, window, cost))
    seed = share - SUMMARIZATION_OVERHEAD_TOKENS
    if overhead is None:
        return max(1, seed)
    fits = math.floor(window / SAFETY_MARGIN) - overhead
    return max(1, seed, min(share, fits))


def is_oversized(message: Message, window: int, cost: Cost = estimate_tokens) -> bool:
    return cost(message) * SAFETY_MARGIN > OVERSIZED_SHARE * window


def call_groups(messages: Sequence[Message]) -> list[list[Message]]:
    """Atomic units: an assistant with tool calls together with the results that answer it."""
    groups: list[list[Message]] = []
    pending: set[str] = set()
    for message in messages:
        role = role_of(message)
        if role == "toolResult" and groups and pending:
            groups[-1].append(message)
            call_id = tool_call_id(message)
            if call_id is None:
                pending.clear()
            else:
                pending.discard(call_id)
            continue
        pending = set()
        groups.append([message])
        if role == "assistant" and message.get("stopReason") not in ("aborted", "error"):
            pending = {c["id"] for c in tool_calls(message)}
    return groups


def chunk_by_max_tokens(
    messages: Sequence[Message], max_tokens: int, cost: Cost = estimate_tokens
) -> list[list[Message]]:
    """Greedy chunks of at most ``max_tokens / 1.2``; a group larger than that is a chunk of its own."""
    limit = max(1, math.floor(max_tokens / SAFETY_MARGIN))
    chunks: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for group in call_groups(messages):
        group_size = sum(cost(m) for m in group)
        if current and size + group_size > limit:
            chunks.append(current)
            current, size = [], 0
        current.extend(group)
        size += group_size
        if size > limit:
            chunks.append(current)
            current, size = [], 0
    if current:
        chunks.append(current)
    return chunks


def split_by_token_share(
    messages: Sequence[Message], parts: int, cost: Cost = estimate_tokens
) -> list[list[Message]]:
    """About ``parts`` pieces of similar token share, cut only between call groups."""
    if not messages:
        return []
    parts = max(1, min(parts, len(messages)))
    groups = call_groups(messages)
    total = sum(cost(m) for m in messages)
    target = total / parts
    chunks: list[list[Message]] = []
    current: list[Message] = []
    size = 0
    for group in groups:
        group_size = sum(cost(m) for m in group)
        if current and len(chunks) < parts - 1 and size + group_size > target:
            chunks.append(current)
            current, size = [], 0
        current.extend(group)
        size += group_size
    if current:
        chunks.append(current)
    return chunks
