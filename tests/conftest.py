"""Shared fixtures: pi's real loader (node), the OpenAI-compatible stub server, the real small model."""

import atexit
import os
import shutil
import tempfile

pytest_plugins = [
    "tests.support.pi",
    "tests.support.llm_server",
    "tests.support.real_model",
    "tests.support.openclaw",
]

# compactd takes pi's own compaction settings from pi's agent directory (design.md §6.14): the suite must not
# depend on a developer's ~/.pi/agent/settings.json, so it points at an empty one unless a test says otherwise.
if "PI_CODING_AGENT_DIR" not in os.environ:
    os.environ["PI_CODING_AGENT_DIR"] = tempfile.mkdtemp(prefix="compactd-tests-pi-agent-")
    atexit.register(shutil.rmtree, os.environ["PI_CODING_AGENT_DIR"], ignore_errors=True)
