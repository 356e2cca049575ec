"""``python -m coordinator`` is ``kgc``."""

from coordinator.cli import main

raise SystemExit(main())
