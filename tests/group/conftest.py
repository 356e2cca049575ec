"""Make the group-coordinator test harness importable from the unit tests."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
