"""The one edge that talks to a model: any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp, Ollama),
and Ollama's native ``/api/chat`` where the server is Ollama.

Before its first call (and again every :data:`REDETECT_SECONDS`) the client asks the server what it is and which
context a call will really get there (:mod:`compactd.summarize._server`): the stages size chunks to that
context (:meth:`SummarizerClient.pace`), never to a larger configured one that the server would silently cut.
On Ollama (``summarizer.api: auto`` or ``ollama``) calls go to ``/api/chat`` with ``options.num_ctx`` and the
configured ``keep_alive``; everywhere else, and with ``api: openai``, to ``/v1/chat/completions``.

Every answer's reported prompt tokens are compared with what was sent: a count well below the estimate means
the server cut the prompt (Ollama does, from the front, without an error). Such an answer is never returned:
the call fails as ``context_overflow`` (``LLMError.cut``), the client's context drops to what the server kept,
and the stages re-chunk to it. The speed memory notes the cut, for ``doctor``.

The SDK's own retries are off (``max_retries=0``): its policy retries timeouts, which multiplies a read
timeout that may be minutes on a CPU server (design.md §7.5), and it cannot tell a context overflow
(split the input) from any other 400. Our policy: ``SUMMARIZER_RETRY_ATTEMPTS`` attempts with exponential
back-off and jitter, on connection errors and 408/409/429/≥500 only. Every failure surfaces as one
:class:`LLMError` whose ``kind`` tells the caller what to do next; the API key never appears in it or in logs.

Every request is bounded whatever the server does: the answer is streamed and read under one deadline from
connect to last byte (a read timeout alone lets a server that sends a byte a second hold a call for ever), and
every response body stops at a size derived from the call's output budget. What arrived before either bound
tripped is kept on the error (``partial_text``). Answer text is stripped of control characters.

Each streamed call's timing (time to the first token, then output tokens per second; the server's own timings
where it sends them) is folded into the endpoint's measured speed (:mod:`compactd.summarize.pace`), which
:meth:`SummarizerClient.pace` hands to the stages to size the next call.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import random
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, cast

import anyio
import httpx2
import openai
from openai.types.chat import ChatCompletion

from compactd.defaults import (
    SUMMARIZER_CONTEXT_TOKENS,
    SUMMARIZER_MAX_CONCURRENCY,
    SUMMARIZER_MAX_OUTPUT_TOKENS,
    SUMMARIZER_TIMEOUT_SECONDS,
)
from compactd.summarize import _native
from compactd.summarize._server import Plan, ServerInfo, detect, loaded_context, plan_calls, server_root
from compactd.summarize._stream import (
    BodyTooLarge,
    _Answer,
    _answer_text,
    _body_limit,
    _cap_body,
    _parse_body,
    _SilentStream,
    answer_limits,
)
from compactd.summarize.outcomes import (
    Completion,
    EndpointCheck,
    Kind,
    LLMError,
    RetryPolicy,
    classify,
    is_overflow_text,
    retry_after_seconds,
)
from compactd.summarize.pace import (
    Pace,
    Speed,
    SpeedMemory,
    endpoint_key,
    estimate_prompt_tokens,
    observe,
    prompt_was_cut,
)
from compactd.summarize.sanitize import escape_controls

logger = logging.getLogger(__name__)


# --- algorithm constants (not configurable) ----------------------------------------------------------------
# Establishing a loopback or LAN connection never legitimately takes longer; a dead host should fail fast.
CONNECT_TIMEOUT_SECONDS = 3.0
# Sending even a large prompt is quick; a stalled upload is a broken connection.
WRITE_TIMEOUT_SECONDS = 10.0
# Waiting for a free pooled connection; calls are serialised by the limiter, so this only trips on a bug.
POOL_TIMEOUT_SECONDS = 5.0
# Summaries should be faithful, not creative; 0 also makes local servers deterministic, which tests rely on.
DEFAULT_TEMPERATURE = 0.0
# A call with less room than this for the answer is pointless: it is refused as an overflow instead.
MIN_OUTPUT_TOKENS = 256
# Server messages quoted in errors are cut here: enough to diagnose, never a whole HTML page.
MAX_QUOTED_CHARS = 300
# What the server is and the context it gives is asked again after this long: an operator who raised
# OLLAMA_CONTEXT_LENGTH or restarted llama-server with another -c is followed without a compactd restart.
REDETECT_SECONDS = 600.0
APIS = ("auto", "openai", "ollama")


# --- the client -------------------------------------------------------------------------------------------

Sleep = Callable[[float], Awaitable[None]]


class SummarizerClient:
    """A chat-completions client with our retry policy, a shared concurrency limit and classified errors.

    ``limiter`` lets the service share one :class:`anyio.CapacityLimiter` between every client it builds (a
    reload builds a new client but must not double the concurrency); without one, the client owns a limiter of
    ``max_concurrency`` tokens. A call holds its token through its back-off sleeps: the endpoint is the scarce
    resource, and letting another call in during a 429 back-off would only feed the overload.

    ``context_tokens`` (None disables it) enables a preflight: a prompt whose conservative estimate leaves
    less than :data:`MIN_OUTPUT_TOKENS` of room is refused as ``context_overflow`` without a request, and
    ``max_tokens`` is lowered to the room left, since servers reject prompt + max_tokens > context.

    ``api`` is ``auto`` (Ollama's native API when the server is Ollama, else ``/v1``), ``openai`` or ``ollama``;
    ``keep_alive`` (Ollama's duration, None: the server's own ``OLLAMA_KEEP_ALIVE``) goes with native calls.
    ``context_tokens`` is the configured context; after :meth:`prepare` it is the one the server will really
    give a call, never more than configured. ``ollama_num_ctx`` (deprecated) caps the native ``num_ctx``; it is
    no longer sent to ``/v1``, where Ollama ignores it.

    ``speed_memory`` remembers the endpoint's measured speed (:mod:`compactd.summarize.pace`) across calls and
    restarts; without one the speed measured by this client's calls is kept in memory only. :meth:`pace` is
    what the stages size each call with.

    ``sleep`` and ``rng`` are injectable so tests can record the back-off schedule instead of waiting it out.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        timeout_seconds: float = SUMMARIZER_TIMEOUT_SECONDS,
        context_tokens: int | None = SUMMARIZER_CONTEXT_TOKENS,
        max_output_tokens: int = SUMMARIZER_MAX_OUTPUT_TOKENS,
        temperature: float | None = DEFAULT_TEMPERATURE,
        seed: int | None = None,
        ollama_num_ctx: int | None = None,
        api: str = "auto",
        keep_alive: str | float | None = None,
        max_concurrency: int = SUMMARIZER_MAX_CONCURRENCY,
        limiter: anyio.CapacityLimiter | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
        speed_memory: SpeedMemory | None = None,
    ) -> None:
        if not api_key:
            # The SDK would fall back to OPENAI_API_KEY; a local endpoint must never get the user's real key.
            raise ValueError(
                "api_key must be given explicitly (a placeholder such as 'sk-local' for local servers)"
            )
        if timeout_seconds <= 0 or max_output_tokens <= 0 or max_concurrency < 1:
            raise ValueError("timeout_seconds, max_output_tokens and max_concurrency must be positive")
        if api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, not {api!r}")
        # The SDK appends ``/chat/completions`` to base_url verbatim, after any query string; a query (an
        # ``?api-key=`` some gateways want) is therefore sent as the client's default query instead.
        parts = urllib.parse.urlsplit(base_url)
        query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        self.base_url = urllib.parse.urlunsplit(parts._replace(query="", fragment="")).rstrip("/")
        self.model = model
        self.timeout_seconds = timeout_seconds
        self.context_tokens = context_tokens
        self.configured_context_tokens = context_tokens
        self.api = api
        self.keep_alive = keep_alive
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.seed = seed
        self.ollama_num_ctx = ollama_num_ctx
        self.retry = retry or RetryPolicy()
        # How errors name the endpoint: credentials in the URL (user:password@host) are masked too.
        self._safe_url = re.sub(r"//[^/@]*@", "//***@", self.base_url)
        if query:  # named, never shown: a query value is as likely a key as not
            self._safe_url += "?" + "&".join(f"{name}=***" for name in query)
        self._where = f"{self._safe_url} model {model!r}"
        self._speed_memory = speed_memory
        self._speed_key = endpoint_key(self.base_url, model)
        self.speed: Speed | None = speed_memory.get(self._speed_key) if speed_memory is not None else None
        self.limiter = limiter if limiter is not None else anyio.CapacityLimiter(max_concurrency)
        # What the server is and how calls go there (prepare()); the least prompt a server has cut to.
        self.server: ServerInfo | None = None
        self.plan: Plan | None = None
        self._planned_at = -math.inf
        self._plan_lock = anyio.Lock()
        self.cut_context: int | None = None
        self._cut_plan: Plan | None = None
        self._native: httpx2.AsyncClient | None = None
        self._api_key = api_key
        self._sleep: Sleep = sleep or anyio.sleep
        self._rng = rng or random.Random()
        self._timeout = openai.Timeout(
            connect=CONNECT_TIMEOUT_SECONDS,
            read=timeout_seconds,
            write=WRITE_TIMEOUT_SECONDS,
            pool=POOL_TIMEOUT_SECONDS,
        )
        # An uncompressed answer is what the size cap counts: a small gzip body can inflate a thousandfold.
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key,
            max_retries=0,
            timeout=self._timeout,
            default_headers={"Accept-Encoding": "identity"},
            default_query=query or None,
            http_client=openai.DefaultAsyncHttpxClient(
                timeout=self._timeout, event_hooks={"response": [_cap_body]}
            ),
        )

    def __repr__(self) -> str:
        return f"SummarizerClient({self._where})"

    async def __aenter__(self) -> SummarizerClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._client.close()
        if self._native is not None:
            await self._native.aclose()

    # --- helpers -------------------------------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        text = text.replace(self._api_key, "***")
        return re.sub(r"(?i)(bearer\s+)\S+", r"\1***", text)

    def _quote(self, text: str) -> str:
        text = escape_controls(" ".join(self._redact(text).split()))
        return text if len(text) <= MAX_QUOTED_CHARS else text[: MAX_QUOTED_CHARS - 1] + "…"

    def _error(self, exc: BaseException, attempts: int) -> LLMError:
        """Our error for ``exc``, key redacted; the SDK exception is not chained (it may quote the key)."""
        kind = classify(exc)
        where = self._where
        if isinstance(exc, openai.APIStatusError):
            # The SDK keeps the inner ``error`` object (or Ollama's bare error string) as the body.
            body = exc.body
            server_says = exc.message
            if isinstance(body, dict) and isinstance(body.get("message"), str):
                server_says = body["message"]
            elif isinstance(body, str) and body.strip():
                server_says = body
            message = f"summarizer {kind}: HTTP {exc.status_code} from {where}: {self._quote(server_says)}"
            return LLMError(
                kind,
                message,
                status=exc.status_code,
                code=exc.code,
                error_type=exc.type,
                attempts=attempts,
                retry_after=retry_after_seconds(exc.response.headers),
            )
        if isinstance(exc, openai.APITimeoutError):
            message = f"summarizer timeout: no answer from {where} within {self.timeout_seconds:g} s"
        elif isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
            message = f"summarizer transient: cannot reach {where} ({self._quote(detail)})"
        elif isinstance(exc, json.JSONDecodeError):
            if kind == "empty":
                message = f"summarizer empty: {where} answered with an empty body"
            else:
                message = (
                    f"summarizer fatal: {where} answered with a body that is not JSON: {self._quote(exc.doc)}"
                )
        else:
            detail = f"{type(exc).__name__}: {self._quote(str(exc))}"
            message = f"summarizer fatal: unexpected answer from {where}: {detail}"
        return LLMError(kind, message, attempts=attempts)

    def _output_budget(self, system: str, user: str, requested: int) -> int:
        if self.context_tokens is None:
            return requested
        estimate = estimate_prompt_tokens(system, user)
        room = self.context_tokens - estimate
        if room < min(MIN_OUTPUT_TOKENS, requested):
            raise LLMError(
                "context_overflow",
                f"summarizer context_overflow: the prompt (about {estimate} tokens) leaves {room} of "
                f"{self.context_tokens} context tokens for the answer; no request sent",
                preflight=True,
                attempts=0,
            )
        return min(requested, room)

    def _to_completion(self, response: object, attempts: int, started: float, text_limit: int) -> Completion:
        """A whole (non-streamed) answer: a parsed ``ChatCompletion``, or the body text when it was none."""
        where = self._where
        if isinstance(response, str):
            if not response.strip():
                raise LLMError(
                    "empty", f"summarizer empty: {where} answered with an empty body", attempts=attempts
                )
            raise LLMError(
                "fatal",
                f"summarizer fatal: {where} answered with a body that is not a chat completion: "
                f"{self._quote(response)}",
                attempts=attempts,
            )
        if not isinstance(response, ChatCompletion):
            raise LLMError(
                "fatal",
                f"summarizer fatal: {where} answered with {type(response).__name__}",
                attempts=attempts,
            )
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raw = getattr(response, "model_extra", None) or {}
            raise LLMError(
                "fatal" if raw else "empty",
                f"summarizer {'fatal' if raw else 'empty'}: {where} answered without choices"
                + (f": {self._quote(json.dumps(raw, default=str))}" if raw else ""),
                attempts=attempts,
            )
        choice = choices[0]
        content = getattr(getattr(choice, "message", None), "content", None)
        usage = getattr(response, "usage", None)
        answer = _Answer(
            [content] if isinstance(content, str) else [],
            finish_reason=cast("str | None", getattr(choice, "finish_reason", None)),
            prompt_tokens=getattr(usage, "prompt_tokens", None) if usage is not None else None,
            completion_tokens=getattr(usage, "completion_tokens", None) if usage is not None else None,
            model=getattr(response, "model", None),
        )
        answer.chars = len(answer.text())
        return self._finish(answer, attempts, started, text_limit)

    def _finish(self, answer: _Answer, attempts: int, started: float, text_limit: int) -> Completion:
        where = self._where
        if answer.chars > text_limit:
            raise self._too_large(answer, attempts, chars=text_limit)
        text = answer.partial()
        if not text:
            kind: Kind = "length" if answer.finish_reason == "length" else "empty"
            reason = (
                "the model spent the whole output budget without producing text"
                if kind == "length"
                else f"the answer has no text (finish_reason {answer.finish_reason!r})"
            )
            raise LLMError(kind, f"summarizer {kind}: {where}: {reason}", attempts=attempts)
        return Completion(
            text=text,
            finish_reason=answer.finish_reason,
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens,
            latency_s=time.monotonic() - started,
            attempts=attempts,
            model=answer.model,
        )

    def _too_large(
        self, answer: _Answer, attempts: int, *, chars: int | None = None, body_bytes: int | None = None
    ) -> LLMError:
        """The cut-off error, at the text limit (``chars``) or at the body's byte limit."""
        limit = f"{chars} characters of text" if chars is not None else f"{body_bytes} bytes of body"
        text = answer.text()
        return LLMError(
            "too_large",
            f"summarizer too_large: the answer from {self._where} ran past {limit} "
            f"({answer.chars} characters of text received) and was cut off",
            attempts=attempts,
            partial_text=_answer_text(text[:chars] if chars is not None else text),
        )

    def _retry_delay(self, err: LLMError, retry: int) -> float | None:
        """Seconds to wait before retry number ``retry``, or None when the error must not be retried."""
        if err.kind != "transient" or retry >= self.retry.attempts:
            return None
        if err.retry_after is not None:
            return err.retry_after if err.retry_after <= self.retry.retry_after_max_seconds else None
        return self.retry.delay(retry, self._rng)

    def pace(self) -> Pace:
        """This endpoint's call deadline, measured speed and the context a call gets, for sizing the next call."""
        return Pace(self.timeout_seconds, self.speed, self.context_tokens if self.plan is not None else None)

    async def prepare(self) -> Plan:
        """Ask the server what it is and which context a call will get (again after :data:`REDETECT_SECONDS`);
        from then on :attr:`context_tokens` is that context and calls go to the API it implies."""
        if self.plan is not None and time.monotonic() - self._planned_at < REDETECT_SECONDS:
            return self.plan
        async with self._plan_lock:
            if self.plan is not None and time.monotonic() - self._planned_at < REDETECT_SECONDS:
                return self.plan
            info = await detect(self.base_url, self.model, self._api_key)
            configured = self.configured_context_tokens or SUMMARIZER_CONTEXT_TOKENS
            plan = plan_calls(info, api=self.api, configured=configured, num_ctx_cap=self.ollama_num_ctx)
            if plan != self.plan:
                sent = f", options.num_ctx {plan.num_ctx}" if plan.num_ctx is not None else ""
                logger.info(
                    "summarizer %s: %s server%s, calls to %s with a %d-token context (%s%s)",
                    self._where,
                    info.kind,
                    f" {info.version}" if info.version else "",
                    "/api/chat" if plan.api == "ollama" else "/v1/chat/completions",
                    plan.context,
                    plan.source,
                    sent,
                )
            if info.problem:
                logger.debug("summarizer %s: server detection: %s", self._where, info.problem)
            if self.cut_context is not None and plan != self._cut_plan:
                self.cut_context = None  # the server changed since it cut a prompt: believe it again
            self.server, self.plan, self._planned_at = info, plan, time.monotonic()
            if self.configured_context_tokens is not None:
                self.context_tokens = min(plan.context, self.cut_context or plan.context)
            return plan

    async def _cold(self, plan: Plan) -> bool:
        """Whether this call to Ollama's ``/v1`` will wait for the model to load (``/api/ps`` does not list it):
        its time to first token is then no prompt time. The native API reports the load apart."""
        if plan.api != "openai" or self.server is None or self.server.kind != "ollama":
            return False
        return await loaded_context(self.base_url, self.model) is None

    async def _check_cut(self, completion: Completion, prompt_estimate: int, attempt: int) -> None:
        """An answer the server built on a cut prompt is an overflow: dropped, and the context lowered to what
        the server kept, so the next chunks fit."""
        reported = completion.prompt_tokens
        if reported is None or not prompt_was_cut(reported, prompt_estimate):
            return
        self.cut_context = min(self.cut_context or reported, reported)
        self._cut_plan = self.plan
        if self.context_tokens is not None:
            self.context_tokens = min(self.context_tokens, self.cut_context)
        message = (
            f"summarizer context_overflow: {self._where} answered from {reported} prompt tokens of about "
            f"{prompt_estimate} sent: it cut the prompt without an error. The answer is dropped; calls are "
            f"now sized to {self.context_tokens or reported} tokens"
        )
        logger.warning("%s", message)
        if self._speed_memory is not None:
            note = functools.partial(self._speed_memory.note_cut, reported=reported, sent=prompt_estimate)
            await anyio.to_thread.run_sync(note, self._speed_key)
        raise LLMError("context_overflow", message, attempts=attempt, cut=True)

    async def _remember(self, answer: _Answer, prompt_estimate: int, *, complete: bool) -> None:
        """Fold this call's timing into the endpoint's speed, and write it down when it changed."""
        sample = answer.sample(prompt_estimate, ended=time.monotonic(), complete=complete)
        speed = observe(self.speed, sample) if sample is not None else None
        if speed is None or speed == self.speed:
            return
        self.speed = speed
        logger.debug("summarizer speed of %s: %s", self._where, speed.describe())
        if self._speed_memory is not None:
            await anyio.to_thread.run_sync(self._speed_memory.put, self._speed_key, speed)

    # --- calls ---------------------------------------------------------------------------------------------
    async def complete(self, system: str, user: str, *, max_tokens: int | None = None) -> Completion:
        """One summary: a system and a user message in, the answer text out, or an :class:`LLMError`.

        Each attempt has one deadline, ``timeout_seconds`` from connect to the answer's last byte, and reads
        at most :func:`answer_limits` of the output budget; the limiter wait and back-off sleeps are outside it.
        """
        plan = await self.prepare()
        requested = max_tokens if max_tokens is not None else self.max_output_tokens
        budget = self._output_budget(system, user, requested)
        params: dict[str, Any] = {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.seed is not None:
            params["seed"] = self.seed
        messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        text_limit, body_limit = answer_limits(budget)
        prompt_estimate = estimate_prompt_tokens(system, user)

        async def attempt_once(answer: _Answer, attempt: int, started: float, stream: bool) -> Completion:
            answer.sent_at = time.monotonic()
            streaming: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
            async with self._client.chat.completions.with_streaming_response.create(
                model=self.model,
                messages=messages,
                max_tokens=budget,
                **(streaming if stream else {"stream": False}),
                **params,
            ) as raw:
                response = raw.http_response
                try:
                    content_type = response.headers.get("content-type", "").lower()
                    if "text/event-stream" in content_type:
                        await self._read_events(response, answer, text_limit, attempt)
                        if stream and not answer.events:
                            raise _SilentStream
                        return self._finish(answer, attempt, started, text_limit)
                    body = await response.aread()
                    return self._to_completion(_parse_body(body, content_type), attempt, started, text_limit)
                except httpx2.TimeoutException as exc:
                    raise openai.APITimeoutError(request=response.request) from exc
                except httpx2.TransportError as exc:
                    raise openai.APIConnectionError(request=response.request) from exc
                finally:
                    with anyio.CancelScope(shield=True):  # a cut-off body closes the connection now
                        await response.aclose()

        async with self.limiter:
            started = time.monotonic()
            attempt = 0
            while True:
                attempt += 1
                answer = _Answer([])
                answer.cold = await self._cold(plan)
                err: LLMError | None = None
                completion: Completion | None = None
                token = _body_limit.set(body_limit)
                try:
                    with anyio.move_on_after(self.timeout_seconds) as deadline:
                        try:
                            try:
                                if plan.api == "ollama":
                                    body = _native.chat_body(
                                        self.model,
                                        system,
                                        user,
                                        max_tokens=budget,
                                        num_ctx=plan.num_ctx,
                                        keep_alive=self.keep_alive,
                                        temperature=self.temperature,
                                        seed=self.seed,
                                    )
                                    completion = await self._ask_ollama(
                                        body, answer, attempt, started, text_limit
                                    )
                                else:
                                    completion = await attempt_once(answer, attempt, started, True)
                            except _SilentStream:
                                completion = await self._unstreamed(attempt_once, answer, attempt, started)
                        except LLMError as exc:
                            err = exc
                        except BodyTooLarge:
                            err = self._too_large(answer, attempt, body_bytes=body_limit)
                        except (openai.OpenAIError, ValueError) as exc:
                            err = self._error(exc, attempt)
                finally:
                    _body_limit.reset(token)
                if completion is not None:
                    await self._remember(answer, prompt_estimate, complete=True)
                    await self._check_cut(completion, prompt_estimate, attempt)
                    return completion
                if deadline.cancelled_caught:
                    await self._remember(answer, prompt_estimate, complete=False)
                    err = LLMError(
                        "timeout",
                        f"summarizer timeout: the answer from {self._where} was not complete within "
                        f"{self.timeout_seconds:g} s ({answer.chars} characters received)",
                        attempts=attempt,
                    )
                assert err is not None
                err.attempts = attempt
                if not err.partial_text and answer.chars:
                    err.partial_text = answer.partial()
                delay = self._retry_delay(err, attempt)
                if delay is None:
                    raise err from None
                logger.warning(
                    "%s (attempt %d of %d); retrying in %.2f s",
                    err.message,
                    attempt,
                    self.retry.attempts,
                    delay,
                )
                await self._sleep(delay)

    async def _ask_ollama(
        self, body: dict[str, Any], answer: _Answer, attempt: int, started: float, text_limit: int
    ) -> Completion:
        """One streamed ``/api/chat`` call (the API key is not sent: Ollama has none)."""
        if self._native is None:
            self._native = httpx2.AsyncClient(
                base_url=server_root(self.base_url),
                timeout=httpx2.Timeout(
                    self.timeout_seconds,
                    connect=CONNECT_TIMEOUT_SECONDS,
                    write=WRITE_TIMEOUT_SECONDS,
                    pool=POOL_TIMEOUT_SECONDS,
                ),
                headers={"Accept-Encoding": "identity"},
                event_hooks={"response": [_cap_body]},
            )
        answer.native = True
        answer.sent_at = time.monotonic()
        request = self._native.build_request("POST", "/api/chat", json=body)
        try:
            response = await self._native.send(request, stream=True)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=request) from exc
        except httpx2.TransportError as exc:
            raise openai.APIConnectionError(request=request) from exc
        try:
            if response.status_code != 200:
                raise _native.status_error(
                    response, await response.aread(), self._where, attempt, self._quote
                )
            done = False

            def on_line(line: bytes) -> bool:
                nonlocal done
                answer.events += 1
                try:
                    event = json.loads(line)
                except ValueError:
                    raise LLMError(
                        "fatal",
                        f"summarizer fatal: {self._where} streamed a line that is not JSON: "
                        f"{self._quote(line[:MAX_QUOTED_CHARS].decode('utf-8', 'replace'))}",
                        attempts=attempt,
                    ) from None
                if not isinstance(event, dict):
                    return False
                if event.get("error"):
                    raise self._stream_error(event["error"], attempt)
                content, done = _native.take_chunk(event, answer)
                if content:
                    answer.add(content)
                    if answer.chars > text_limit:
                        raise self._too_large(answer, attempt, chars=text_limit)
                return done

            await _native.read_lines(response, on_line)
            if not done:
                raise LLMError(
                    "transient",
                    f"summarizer transient: the stream from {self._where} ended before its final chunk "
                    f"({answer.chars} characters received)",
                    attempts=attempt,
                )
            return self._finish(answer, attempt, started, text_limit)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=request) from exc
        except httpx2.TransportError as exc:
            raise openai.APIConnectionError(request=request) from exc
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _unstreamed(
        self,
        attempt_once: Callable[[_Answer, int, float, bool], Awaitable[Completion]],
        answer: _Answer,
        attempt: int,
        started: float,
    ) -> Completion:
        """The same request without streaming, after a stream that ended without an event: llama-cpp-python
        fails a streamed prompt over its context after its 200, with an empty body, but says why when asked
        without streaming. It drops the connection it failed on, which the pool may hand out once more at
        once: a connection error then gets one more try, on a new connection."""
        logger.info("%s streamed nothing; asking once more without streaming", self._where)
        try:
            return await attempt_once(answer, attempt, started, False)
        except openai.APIConnectionError:
            return await attempt_once(answer, attempt, started, False)

    async def _read_events(
        self, response: httpx2.Response, answer: _Answer, text_limit: int, attempt: int
    ) -> None:
        """Accumulate a server-sent event stream into ``answer`` until ``[DONE]`` or the end of the body.

        Lines are split without decoding the body as a whole; a line longer than the body limit never gets
        that far (the body cap stops it first).
        """
        pending: list[bytes] = []
        data: list[bytes] = []
        async for chunk in response.aiter_bytes():
            pending.append(chunk)
            if b"\n" not in chunk:
                continue
            lines = b"".join(pending).split(b"\n")
            pending = [lines.pop()]
            for line in lines:
                if self._event_line(line.rstrip(b"\r"), data, answer, text_limit, attempt):
                    return
        tail = b"".join(pending).rstrip(b"\r")
        if tail and self._event_line(tail, data, answer, text_limit, attempt):
            return
        self._event_line(b"", data, answer, text_limit, attempt)

    def _event_line(
        self, line: bytes, data: list[bytes], answer: _Answer, text_limit: int, attempt: int
    ) -> bool:
        """One SSE line: a ``data:`` field is kept, a blank line dispatches the event. True at ``[DONE]``."""
        if line:
            name, _, value = line.partition(b":")
            if name == b"data":
                data.append(value[1:] if value.startswith(b" ") else value)
            return False  # comments (": ping"), event:, id: and retry: fields carry nothing we use
        if not data:
            return False
        payload = b"\n".join(data)
        data.clear()
        answer.events += 1
        if payload.strip() == b"[DONE]":
            return True
        try:
            event = json.loads(payload)
        except ValueError:
            raise LLMError(
                "fatal",
                f"summarizer fatal: {self._where} streamed an event that is not JSON: "
                f"{self._quote(payload[:MAX_QUOTED_CHARS].decode('utf-8', 'replace'))}",
                attempts=attempt,
            ) from None
        if not isinstance(event, dict):
            return False
        if event.get("error"):
            raise self._stream_error(event["error"], attempt)
        choices = event.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(delta, dict) and any(
                isinstance(delta.get(k), str) and delta[k]
                for k in ("content", "reasoning_content", "reasoning")
            ):
                answer.tick()
            if isinstance(content, str) and content:
                answer.add(content)
                if answer.chars > text_limit:
                    raise self._too_large(answer, attempt, chars=text_limit)
            if isinstance(choice.get("finish_reason"), str):
                answer.finish_reason = choice["finish_reason"]
        usage = event.get("usage")
        if isinstance(usage, dict):
            for key in ("prompt_tokens", "completion_tokens"):
                count = usage.get(key)
                if isinstance(count, int) and not isinstance(count, bool):
                    setattr(answer, key, count)
        if isinstance(event.get("model"), str):
            answer.model = event["model"]
        if isinstance(event.get("timings"), dict):
            answer.timings = event["timings"]
        return False

    def _stream_error(self, error: object, attempt: int) -> LLMError:
        """An error the server reported inside the stream (after the 200): overflow, or a fatal answer."""
        message = error.get("message") if isinstance(error, dict) else error
        text = message if isinstance(message, str) else json.dumps(error, default=str)
        whole = text + " " + json.dumps(error, default=str, ensure_ascii=False)
        kind: Kind = "context_overflow" if is_overflow_text(whole) else "fatal"
        return LLMError(
            kind,
            f"summarizer {kind}: {self._where} reported an error in its stream: {self._quote(text)}",
            attempts=attempt,
        )

    async def list_models(self) -> list[str]:
        """The model ids the endpoint lists (one attempt under the call deadline: this is for diagnostics)."""
        from compactd.summarize import _probe

        return await _probe.list_models(self)

    async def check(self) -> EndpointCheck:
        """Is the endpoint reachable, does it serve the model, and (Ollama) is its context large enough?"""
        from compactd.summarize import _probe

        return await _probe.check(self)
