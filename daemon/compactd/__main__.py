"""``python -m compactd`` is the ``compactd`` command."""

from compactd.commands.cli import main

raise SystemExit(main())
