"""Exit codes of every ``kgc`` command, one table (docs/operating.md, "Fix a group").

How this works: constants only, importable without the protocol codecs, so ``kgc audit``
(``coordinator.audit.cli``) uses the same table as the operator commands. Bad usage is 2
everywhere, as argparse itself exits; the audit's "problems found" code is distinct from it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1  # the server answered with an error, a group/topic does not exist, could not run
EXIT_USAGE = 2  # a flag, a value, or a file named on the command line that cannot be used
EXIT_UNREACHABLE = 3  # no connection to the server
EXIT_FINDINGS = 4  # kgc audit: a finding at or above --fail-on
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
