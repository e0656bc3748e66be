"""The ``compactd`` command line: argument parsing and the subcommands (``cli``), ``doctor``, ``inspect`` /
``validate`` (``inspection``) and ``summarize`` (``provider``, OpenClaw's compaction provider). Commands sit on top
of every other layer and nothing imports them."""
