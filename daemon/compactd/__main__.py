"""``python -m compactd`` is the ``compactd`` command."""

from compactd.cli import main

raise SystemExit(main())
