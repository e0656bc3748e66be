"""pi's own compaction settings (``compaction.reserveTokens``, ``keepRecentTokens``, ``modelOverrides`` in its
``settings.json``), which are a pi session's thresholds when the user has set them (design.md §6.14).

pi resolves each setting through the model's override (``modelOverrides["<provider>/<model>"]``), then the
ordinary setting, then its default; compactd takes the first two and keeps its own configuration where the user
set neither. The file is read when the configuration is loaded (at start and on reload), bounded, without following a
symlink, and a value pi itself would refuse (not a non-negative safe integer) is ignored with a problem noted.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

import orjson

from compactd.datarecord import datarecord

__all__ = ["PI_PACKAGES", "PiCompaction", "find_pi", "pi_agent_dir", "read_pi_compaction"]

SETTINGS_MAX_BYTES = 1 << 20
_SAFE_MAX = 2**53 - 1
_FIELDS = (("reserveTokens", "reserve_tokens"), ("keepRecentTokens", "keep_recent_tokens"))


@datarecord(frozen=True, slots=True, rare=True)
class PiCompaction:
    """What the user set in pi's ``settings.json`` (None where they set nothing), and where it was read."""

    source: str
    reserve_tokens: int | None = None
    keep_recent_tokens: int | None = None
    overrides: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # "provider/model" → set fields
    problems: tuple[str, ...] = ()

    def for_model(self, provider: str | None, model: str | None) -> tuple[int | None, int | None]:
        """(reserveTokens, keepRecentTokens) for this model as pi resolves them, None where nothing is set."""
        override: Mapping[str, int] = {}
        if provider is not None and model is not None:
            override = self.overrides.get(f"{provider}/{model}", {})
        return (
            override.get("reserve_tokens", self.reserve_tokens),
            override.get("keep_recent_tokens", self.keep_recent_tokens),
        )

    @property
    def empty(self) -> bool:
        return self.reserve_tokens is None and self.keep_recent_tokens is None and not self.overrides


def pi_agent_dir(env: Mapping[str, str] | None = None) -> Path:
    """pi's agent directory: ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``."""
    env = os.environ if env is None else env
    configured = env.get("PI_CODING_AGENT_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".pi" / "agent"


def _setting(value: Any, where: str, problems: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _SAFE_MAX:
        return value
    problems.append(f"{where} is {value!r}: pi wants a non-negative safe integer; ignored")
    return None


def read_pi_compaction(agent_dir: Path) -> PiCompaction | None:
    """The compaction settings in ``<agent_dir>/settings.json``; None when there is no such file."""
    path = agent_dir / "settings.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return PiCompaction(str(path), problems=(f"cannot read it: {exc.strerror or exc}",))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return PiCompaction(str(path), problems=("not a regular file",))
        if st.st_size > SETTINGS_MAX_BYTES:
            return PiCompaction(str(path), problems=(f"larger than {SETTINGS_MAX_BYTES} bytes",))
        data = os.read(fd, SETTINGS_MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        settings = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return PiCompaction(str(path), problems=(f"not JSON: {exc}",))
    compaction = settings.get("compaction") if isinstance(settings, dict) else None
    if not isinstance(compaction, dict):
        return PiCompaction(str(path))
    problems: list[str] = []
    ordinary = {ours: _setting(compaction.get(key), f"compaction.{key}", problems) for key, ours in _FIELDS}
    overrides: dict[str, dict[str, int]] = {}
    raw = compaction.get("modelOverrides")
    for model_key, entry in raw.items() if isinstance(raw, dict) else ():
        if not isinstance(entry, dict):
            problems.append(f'compaction.modelOverrides["{model_key}"] is not an object; ignored')
            continue
        where = f'compaction.modelOverrides["{model_key}"]'
        values = {ours: _setting(entry.get(key), f"{where}.{key}", problems) for key, ours in _FIELDS}
        overrides[model_key] = {k: v for k, v in values.items() if v is not None}
    return PiCompaction(
        str(path),
        reserve_tokens=ordinary["reserve_tokens"],
        keep_recent_tokens=ordinary["keep_recent_tokens"],
        overrides=overrides,
        problems=tuple(problems),
    )


PI_PACKAGES = ("@earendil-works/pi-coding-agent", "@mariozechner/pi-coding-agent")


def find_pi(env: Mapping[str, str] | None = None) -> tuple[str, str, str] | None:
    """(package, version, executable) of the ``pi`` on ``PATH``, read from the ``package.json`` above the
    executable's real path; None when there is none or it is not one of pi's packages."""
    import shutil  # here: only ``doctor`` looks for pi (argparse no longer loads shutil for every command)

    env = os.environ if env is None else env
    found = shutil.which("pi", path=env.get("PATH"))
    if found is None:
        return None
    real = Path(os.path.realpath(found))
    for folder in list(real.parents)[:6]:
        manifest = folder / "package.json"
        try:
            if manifest.stat().st_size > SETTINGS_MAX_BYTES:
                continue
            data = orjson.loads(manifest.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if isinstance(data, dict) and data.get("name") in PI_PACKAGES:
            return str(data["name"]), str(data.get("version")), found
    return None
