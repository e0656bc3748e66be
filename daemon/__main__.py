"""``python -m daemon`` is the ``compactd`` command."""

from daemon.cli import main

raise SystemExit(main())
