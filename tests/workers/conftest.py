"""kgc.workers: a node of several worker processes, tested with real processes and clients.

Helpers shared by these tests live in ``workerskit.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
