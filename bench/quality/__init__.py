"""What survives a compaction (issue 18): seeded sessions with an answer key, a model-free scorer, a runner.

    python -m bench.quality [--sessions N] [--tokens T] [--seed S] [--json]

:mod:`bench.quality.sessions` writes pi v3 coding-agent sessions whose facts (five categories, after the
public ``pi-openai-server-compaction`` benchmark) are spread over early, middle and late history, with
corrections and tasks whose state changes; :mod:`bench.quality.score` reads pi's view after a compaction and
counts the answers an agent could read off it, each only where it stands with what it belongs to;
:mod:`bench.quality.run` compacts with ``compactd compact`` (a subprocess) and reports per category.
"""
