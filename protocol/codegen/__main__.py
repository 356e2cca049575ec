"""Run the generator: ``python -m protocol.codegen [--check]``."""

from __future__ import annotations

import sys

from protocol.codegen.cli import main

sys.exit(main())
