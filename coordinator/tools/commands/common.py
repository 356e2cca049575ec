"""What every operator command shares: options, exit codes, the admin connection.

How this works: ``common_options`` is the parent parser of every operator subcommand
(``--bootstrap-server``, ``--output``, ``--timeout``); ``leaf`` registers one subcommand
with them and marks it as an operator command, which ``tools.cli`` runs through
``run_admin`` so every failure ends in one line and one of the exit codes below.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from coordinator.tools.admin import Admin

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

Command = Callable[[argparse.Namespace], int]


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=os.environ.get("KGC_BOOTSTRAP_SERVER", DEFAULT_BOOTSTRAP),
        help=f"server to talk to (env KGC_BOOTSTRAP_SERVER; default {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="table for people (default), json for scripts",
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="per-request timeout (default 10; 5 for health)",
    )
    return common


def leaf(
    common: argparse.ArgumentParser, parent: Any, name: str, func: Command, help: str
) -> argparse.ArgumentParser:
    """Register the operator subcommand ``name`` under ``parent`` (a subparsers object)."""
    p: argparse.ArgumentParser = parent.add_parser(
        name, parents=[common], help=help, description=help
    )
    p.set_defaults(func=func, admin=True)
    return p


def admin_for(args: argparse.Namespace) -> Admin:
    return Admin(args.bootstrap_server, timeout=args.timeout or 10.0)
