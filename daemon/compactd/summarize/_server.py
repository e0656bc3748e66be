"""What serves the summarizer endpoint, and the context a call will really get there.

A prompt longer than the server's context is not always refused: Ollama cuts it from the front and answers
(design.md §6.6), so compactd must size its chunks to the context the server will use, not to the one it was
told. Three kinds of server are told apart, by what each documents:

- **Ollama** answers ``GET /api/version``. The model's trained context is ``model_info["<arch>.context_length"]``
  of ``POST /api/show``; the context a request without ``options.num_ctx`` gets (every request on ``/v1``, which
  cannot set it) is the Modelfile's ``num_ctx`` (``parameters`` of ``/api/show``), else the one the loaded model
  runs with (``context_length`` of ``GET /api/ps``), else Ollama's default: 4,096 tokens below 24 GiB of VRAM,
  the smallest of its documented defaults. A request on the native ``/api/chat`` sets ``options.num_ctx``
  itself. Ollama reloads the model whenever a request's ``num_ctx`` differs from the loaded one (its scheduler
  compares the runner options), so compactd sends one value per endpoint, the one already loaded when that is
  large enough.
- **llama.cpp's llama-server** answers ``GET /props``; ``default_generation_settings.n_ctx`` is one slot's
  context (``n_ctx`` divided between the ``--parallel`` slots unless the KV cache is unified).
- **Anything else** (OpenAI, vLLM, LM Studio, a proxy): ``summarizer.context_tokens`` as configured.

The parsers are pure; :func:`detect` is the IO, under one short deadline, never sending the API key to
Ollama's native API (Ollama has no keys; a proxy in front of it that wants one makes it look like "other").
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any, Literal

import anyio
import httpx2

from compactd.datarecord import datarecord
from compactd.summarize._stream import BodyTooLarge, _cap_body, _json_dict

__all__ = [
    "OLLAMA_DEFAULT_CONTEXT",
    "Plan",
    "ServerInfo",
    "detect",
    "llamacpp_info",
    "loaded_context",
    "ollama_info",
    "plan_calls",
    "server_root",
]

log = logging.getLogger(__name__)

ServerKind = Literal["ollama", "llama.cpp", "openai-compatible"]
Api = Literal["openai", "ollama"]

# Ollama's context when neither the request, the Modelfile nor OLLAMA_CONTEXT_LENGTH sets one, on a machine
# with less than 24 GiB of VRAM (docs/context-length.mdx); larger machines get more, which only costs
# compactd smaller chunks than it could have had.
OLLAMA_DEFAULT_CONTEXT = 4096
# Ollama's and llama.cpp's own endpoints answer in milliseconds; a server that does not is treated as "other".
DETECT_DEADLINE_SECONDS = 10.0
DETECT_CONNECT_SECONDS = 3.0

_NUM_CTX = re.compile(r"(?m)^\s*num_ctx\s+(\d+)\s*$")


@datarecord(frozen=True, slots=True)
class ServerInfo:
    """What the server says about itself and the model (None: it did not say)."""

    kind: ServerKind = "openai-compatible"
    version: str | None = None
    model_context: int | None = None  # the model's trained context (Ollama's model_info)
    modelfile_context: int | None = None  # Ollama: PARAMETER num_ctx of the model's Modelfile
    loaded_context: int | None = None  # Ollama: the context the loaded model runs with (/api/ps)
    slot_context: int | None = None  # llama.cpp: one slot's context (/props)
    slots: int | None = None  # llama.cpp: total_slots (--parallel)
    problem: str | None = None  # why detection could not tell (the endpoint down, a timeout)

    def openai_context(self) -> tuple[int | None, str]:
        """The context a request through the OpenAI-compatible endpoint gets, and where that figure comes from."""
        if self.kind == "llama.cpp":
            if self.slot_context is None:
                return None, "llama.cpp's /props gave no n_ctx"
            slots = f" ({self.slots} slots)" if self.slots and self.slots > 1 else ""
            return self.slot_context, f"llama.cpp's /props: n_ctx per slot{slots}"
        if self.kind != "ollama":
            return None, "not reported by the server"
        if self.modelfile_context is not None:
            ctx, source = self.modelfile_context, "the Modelfile's num_ctx"
        elif self.loaded_context is not None:
            ctx, source = self.loaded_context, "the loaded model's context (/api/ps)"
        else:
            ctx, source = OLLAMA_DEFAULT_CONTEXT, "Ollama's default below 24 GiB of VRAM (model not loaded)"
        if self.model_context is not None and self.model_context < ctx:
            return self.model_context, "the model's trained context_length (/api/show)"
        return ctx, source


@datarecord(frozen=True, slots=True)
class Plan:
    """How calls go to this endpoint: the API, the context chunks are sized to, and (native Ollama) the
    ``num_ctx`` sent with every call."""

    api: Api
    context: int
    source: str
    num_ctx: int | None = None
    server_context: int | None = None  # what the server would use without compactd's num_ctx


def plan_calls(info: ServerInfo, *, api: str, configured: int, num_ctx_cap: int | None = None) -> Plan:
    """The API and context for ``info``: ``api`` is ``auto`` (native on Ollama), ``openai`` or ``ollama``;
    ``configured`` is ``summarizer.context_tokens``, the most compactd ever plans for; ``num_ctx_cap`` a number
    given as the deprecated ``ollama_num_ctx``."""
    server_context, source = info.openai_context()
    native = api == "ollama" or (api == "auto" and info.kind == "ollama")
    if not native:
        if server_context is not None and server_context < configured:
            return Plan("openai", server_context, source, server_context=server_context)
        return Plan("openai", configured, "summarizer.context_tokens", server_context=server_context)
    wanted = configured
    if num_ctx_cap is not None:
        wanted = min(wanted, num_ctx_cap)
    if info.model_context is not None:
        wanted = min(wanted, info.model_context)
    num_ctx = wanted
    loaded = info.loaded_context
    if (
        loaded is not None
        and loaded >= wanted
        and (info.model_context is None or loaded <= info.model_context)
    ):
        num_ctx = loaded  # what is loaded already: no reload
    if wanted < configured and info.model_context is not None and wanted == info.model_context:
        how = "the model's trained context_length (/api/show)"
    elif num_ctx_cap is not None and wanted == num_ctx_cap < configured:
        how = "summarizer.ollama_num_ctx"
    else:
        how = "summarizer.context_tokens"
    return Plan("ollama", wanted, how, num_ctx=num_ctx, server_context=server_context)


# --- parsing what the servers answer --------------------------------------------------------------------------


def _positive_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value <= 0 or value != int(value):
        return None
    return int(value)


def model_listed(model: str, names: tuple[str, ...]) -> bool:
    """Exact name, or Ollama's implicit ``:latest`` tag."""
    return model in names or (":" not in model and f"{model}:latest" in names)


def ollama_info(
    version: Mapping[str, Any], show: Mapping[str, Any], ps: Mapping[str, Any], model: str
) -> ServerInfo:
    """Ollama's answers to ``/api/version``, ``/api/show`` and ``/api/ps`` for ``model``."""
    model_info = show.get("model_info")
    model_context = None
    if isinstance(model_info, Mapping):
        arch = model_info.get("general.architecture")
        if isinstance(arch, str):
            model_context = _positive_int(model_info.get(f"{arch}.context_length"))
        if model_context is None:  # an architecture key missing: any <arch>.context_length
            found = [_positive_int(v) for k, v in model_info.items() if str(k).endswith(".context_length")]
            model_context = next((v for v in found if v is not None), None)
    parameters = show.get("parameters")
    match = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    modelfile = int(match.group(1)) if match and int(match.group(1)) > 0 else None
    loaded = None
    models = ps.get("models")
    for entry in models if isinstance(models, list) else []:
        if not isinstance(entry, Mapping):
            continue
        names = tuple(str(entry.get(k, "")) for k in ("name", "model"))
        if model_listed(model, names):
            loaded = _positive_int(entry.get("context_length"))
            break
    raw_version = version.get("version")
    return ServerInfo(
        "ollama",
        raw_version if isinstance(raw_version, str) else None,
        model_context=model_context,
        modelfile_context=modelfile,
        loaded_context=loaded,
    )


def llamacpp_info(props: Mapping[str, Any]) -> ServerInfo | None:
    """llama-server's ``/props``, or None when it is not one."""
    settings = props.get("default_generation_settings")
    if not isinstance(settings, Mapping):
        return None
    n_ctx = _positive_int(settings.get("n_ctx"))
    if n_ctx is None:
        return None
    build = props.get("build_info")
    return ServerInfo(
        "llama.cpp",
        build if isinstance(build, str) else None,
        slot_context=n_ctx,
        slots=_positive_int(props.get("total_slots")),
    )


# --- asking ------------------------------------------------------------------------------------------------


def server_root(base_url: str) -> str:
    """The server's root: the base URL without its ``/v1`` (where Ollama's and llama.cpp's own API live)."""
    return base_url.rstrip("/").removesuffix("/v1")


async def detect(base_url: str, model: str, api_key: str | None) -> ServerInfo:
    """Ask the server what it is (never raises: a server that does not answer is "other", with a problem)."""
    try:
        with anyio.fail_after(DETECT_DEADLINE_SECONDS):
            return await _ask(server_root(base_url), model, api_key)
    except TimeoutError:
        return ServerInfo(problem=f"no answer within {DETECT_DEADLINE_SECONDS:g} s")
    except (httpx2.HTTPError, BodyTooLarge) as exc:
        return ServerInfo(problem=f"{type(exc).__name__}: {exc}"[:200])


async def _ask(root: str, model: str, api_key: str | None) -> ServerInfo:
    timeout = httpx2.Timeout(DETECT_CONNECT_SECONDS, connect=DETECT_CONNECT_SECONDS)
    hooks = {"response": [_cap_body]}  # bodies capped like the summarizer's
    async with httpx2.AsyncClient(base_url=root, timeout=timeout, event_hooks=hooks) as http:
        version = await http.get("/api/version")
        if version.status_code == 200 and isinstance(_json_dict(version).get("version"), str):
            show = await http.post("/api/show", json={"model": model})
            ps = await http.get("/api/ps")
            return ollama_info(
                _json_dict(version),
                _json_dict(show) if show.status_code == 200 else {},
                _json_dict(ps) if ps.status_code == 200 else {},
                model,
            )
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        props = await http.get("/props", headers=headers)
        if props.status_code == 200:
            info = llamacpp_info(_json_dict(props))
            if info is not None:
                return info
        return ServerInfo()


async def loaded_context(base_url: str, model: str) -> int | None:
    """The context ``model`` is loaded with on an Ollama server right now (``/api/ps``); None when it is not
    loaded or the server does not say: the next call will load it first."""
    try:
        with anyio.fail_after(DETECT_CONNECT_SECONDS):
            timeout = httpx2.Timeout(DETECT_CONNECT_SECONDS)
            async with httpx2.AsyncClient(timeout=timeout, event_hooks={"response": [_cap_body]}) as http:
                ps = await http.get(server_root(base_url) + "/api/ps")
    except (TimeoutError, httpx2.HTTPError, BodyTooLarge):
        return None
    return ollama_info({}, {}, _json_dict(ps) if ps.status_code == 200 else {}, model).loaded_context
