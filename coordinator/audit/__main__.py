"""``python -m coordinator.audit`` (also the file to hand to ``spark-submit``)."""

import sys

from coordinator.audit.cli import main

if __name__ == "__main__":
    sys.exit(main())
