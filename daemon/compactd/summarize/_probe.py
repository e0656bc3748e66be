"""The endpoint probe for ``compactd doctor``: is the summarizer reachable, does it serve the model, and is the
context a call will really get there (:mod:`compactd.summarize._server`) at least ``summarizer.context_tokens``?"""

from __future__ import annotations

import anyio
import openai

from compactd.summarize._client import SummarizerClient
from compactd.summarize._server import DETECT_DEADLINE_SECONDS, Plan, ServerInfo, model_listed
from compactd.summarize._stream import BodyTooLarge
from compactd.summarize.outcomes import EndpointCheck, LLMError

# The server's own endpoints answer in milliseconds; ``doctor`` must not hang on a server that trickles.
PROBE_DEADLINE_SECONDS = DETECT_DEADLINE_SECONDS


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
    """Is the endpoint reachable, does it serve the model, which context will a call really get there, and is
    that at least ``summarizer.context_tokens``?"""
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
        present = model_listed(self.model, models)
        if not present:
            problems.append(
                f"{self._where} is not served (the endpoint lists "
                f"{', '.join(models[:10])}); fix summarizer.model or load the model"
            )
    else:
        notes.append("the endpoint lists no models; presence of the model could not be checked")
    self.plan = None  # ask afresh
    plan = await self.prepare()
    info = self.server
    assert info is not None
    configured = self.configured_context_tokens
    where = "/api/chat" if plan.api == "ollama" else "/v1/chat/completions"
    sent = f", options.num_ctx {plan.num_ctx} sent with every call" if plan.num_ctx is not None else ""
    notes.append(
        f"{info.kind} server{f' {info.version}' if info.version else ''}: calls go to {where} with a "
        f"{plan.context:,}-token context ({plan.source}{sent})"
    )
    if configured is not None and plan.context < configured:
        problems.extend(_small_context(self, info, plan, configured))
    return EndpointCheck(
        self._safe_url,
        self.model,
        reachable=True,
        models=models,
        model_present=present,
        server=info.kind,
        server_context_tokens=plan.server_context,
        api=plan.api,
        context_tokens=plan.context,
        context_source=plan.source,
        num_ctx=plan.num_ctx,
        problems=tuple(problems),
        notes=tuple(notes),
    )


def _small_context(self: SummarizerClient, info: ServerInfo, plan: Plan, configured: int) -> list[str]:
    """What to fix when a call gets less than ``summarizer.context_tokens`` (compactd sizes its chunks to the
    smaller context, so nothing is cut, but every chunk is smaller and a summary takes more calls)."""
    head = (
        f"{self._where} gives a call {plan.context:,} tokens ({plan.source}) but summarizer.context_tokens is "
        f"{configured:,}: compactd sizes its chunks to {plan.context:,} (more, smaller calls)."
    )
    if info.kind == "llama.cpp":
        slots = info.slots or 1
        return [
            f"{head} Start llama-server with -c {configured * slots} for its {slots} slot(s) (or fewer "
            f"--parallel slots), or set summarizer.context_tokens to {plan.context}"
        ]
    if info.kind == "ollama" and plan.api == "openai":
        return [
            f"{head} Set summarizer.api to auto (compactd then sets options.num_ctx on /api/chat), or set "
            f"OLLAMA_CONTEXT_LENGTH={configured} on the Ollama server (or PARAMETER num_ctx in a Modelfile)"
        ]
    if info.kind == "ollama" and info.model_context is not None and plan.context >= info.model_context:
        return []  # the model's own limit: nothing to fix on the server
    if info.kind == "ollama":
        return [f"{head} Remove summarizer.ollama_num_ctx (deprecated), which caps it"]
    return []
