"""Hypothesis settings shared by the property tests that write their examples to disk."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# Each example writes files (tmp_path is reused across examples: the tests clear what they write).
ON_DISK = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
