"""``python -m compactd`` is the ``compactd`` command."""

from compactd.commands.cli import run_as_process

run_as_process()
