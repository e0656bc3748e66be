"""The endpoint probe for ``compactd doctor``: is the summarizer reachable, does it serve the model, and
(Ollama) is the context it serves the model with at least ``summarizer.context_tokens``?"""

from __future__ import annotations

import re

import anyio
import httpx2
import openai

from compactd.summarize._client import CONNECT_TIMEOUT_SECONDS, SummarizerClient
from compactd.summarize._stream import BodyTooLarge, _cap_body, _json_dict
from compactd.summarize.outcomes import EndpointCheck, LLMError

# Ollama's native endpoints answer in milliseconds; ``doctor`` must not hang on a server that trickles.
PROBE_DEADLINE_SECONDS = 15.0


async def list_models(self: SummarizerClient) -> list[str]:
    """The model ids the endpoint lists (one attempt under the call deadline: this is for diagnostics)."""
    with anyio.move_on_after(self.timeout_seconds):
        try:
            page = await self._client.models.list()
            return [m.id for m in page.data if isinstance(getattr(m, "id", None), str)]
        except (openai.OpenAIError, ValueError) as exc:
            raise self._error(exc, 1) from None
        except BodyTooLarge as exc:
            raise LLMError("fatal", f"summarizer fatal: {self._where}: /models: {exc}") from None
        except (AttributeError, TypeError) as exc:
            raise LLMError(
                "fatal",
                f"summarizer fatal: {self._where}: /models did not answer with a model list ({exc})",
            ) from None
    raise LLMError(
        "timeout",
        f"summarizer timeout: /models of {self._where} did not answer within {self.timeout_seconds:g} s",
    )


async def check(self: SummarizerClient) -> EndpointCheck:
    """Is the endpoint reachable, does it serve the model, and (Ollama) is its context large enough?"""
    try:
        models = tuple(await list_models(self))
    except LLMError as err:
        return EndpointCheck(
            self._safe_url,
            self.model,
            reachable=False,
            problems=(f"{err.message}; check summarizer.base_url",),
        )
    problems: list[str] = []
    notes: list[str] = []
    present: bool | None = None
    if models:
        present = _model_listed(self.model, models)
        if not present:
            problems.append(
                f"{self._where} is not served (the endpoint lists "
                f"{', '.join(models[:10])}); fix summarizer.model or load the model"
            )
    else:
        notes.append("the endpoint lists no models; presence of the model could not be checked")
    server = "openai-compatible"
    server_ctx: int | None = None
    is_ollama, server_ctx = await _probe_ollama(self)
    if is_ollama:
        server = "ollama"
        notes.append(
            "Ollama's OpenAI-compatible endpoint ignores a per-request num_ctx: set "
            "OLLAMA_CONTEXT_LENGTH on the server (or PARAMETER num_ctx in a Modelfile)"
        )
        if self.context_tokens is not None and server_ctx is not None and server_ctx < self.context_tokens:
            problems.append(
                f"Ollama serves {self.model!r} with a {server_ctx}-token context but "
                f"summarizer.context_tokens is {self.context_tokens}: Ollama silently drops the oldest "
                f"part of longer prompts. Set OLLAMA_CONTEXT_LENGTH={self.context_tokens} on the Ollama "
                "server, or lower "
                f"summarizer.context_tokens to {server_ctx}"
            )
        elif server_ctx is None:
            notes.append(
                "could not read Ollama's context size for the model (not loaded?): make sure "
                "OLLAMA_CONTEXT_LENGTH is at least summarizer.context_tokens"
            )
    return EndpointCheck(
        self._safe_url,
        self.model,
        reachable=True,
        models=models,
        model_present=present,
        server=server,
        server_context_tokens=server_ctx,
        problems=tuple(problems),
        notes=tuple(notes),
    )


async def _probe_ollama(self: SummarizerClient) -> tuple[bool, int | None]:
    """(is it Ollama, its effective ``num_ctx`` for the model when it says).

    Uses Ollama's native API beside ``/v1`` (``/api/version``, ``/api/show``, ``/api/ps``); the API key is
    not sent there.
    """
    try:
        with anyio.fail_after(PROBE_DEADLINE_SECONDS):
            return await _ask_ollama(self)
    except (httpx2.HTTPError, BodyTooLarge, TimeoutError):
        return False, None


async def _ask_ollama(self: SummarizerClient) -> tuple[bool, int | None]:
    root = self.base_url.removesuffix("/v1")
    timeout = httpx2.Timeout(CONNECT_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
    hooks = {"response": [_cap_body]}  # bodies capped like the summarizer's
    async with httpx2.AsyncClient(base_url=root, timeout=timeout, event_hooks=hooks) as http:
        version = await http.get("/api/version")
        if version.status_code != 200 or "version" not in _json_dict(version):
            return False, None
        show = _json_dict(await http.post("/api/show", json={"model": self.model}))
        match = re.search(r"(?m)^\s*num_ctx\s+(\d+)", str(show.get("parameters", "")))
        if match:
            return True, int(match.group(1))
        ps = _json_dict(await http.get("/api/ps"))
        for entry in ps.get("models", []) if isinstance(ps.get("models"), list) else []:
            if isinstance(entry, dict) and _model_listed(self.model, (str(entry.get("name", "")),)):
                ctx = entry.get("context_length")
                if isinstance(ctx, int):
                    return True, ctx
        return True, None


def _model_listed(model: str, ids: tuple[str, ...]) -> bool:
    """Exact id, or Ollama's implicit ``:latest`` tag."""
    return model in ids or (":" not in model and f"{model}:latest" in ids)
