"""Shared fixtures: pi's real loader (node), the OpenAI-compatible stub server, the real small model."""

pytest_plugins = [
    "tests.support.pi",
    "tests.support.llm_server",
    "tests.support.real_model",
    "tests.support.openclaw",
]
