"""The fault suite: every fault a hostile operator or a failing disk can inflict.

Fast cases run with the README's test command; crash loops and long soaks are marked
``slow``. Helpers shared by these tests live in ``faultkit.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
