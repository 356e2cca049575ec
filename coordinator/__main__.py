"""``python -m coordinator`` is ``kgc``."""

from coordinator.tools.cli import main

raise SystemExit(main())
