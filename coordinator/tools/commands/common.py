"""What every operator command shares: options, exit codes, the admin connection.

How this works: ``common_options`` is the parent parser of every operator subcommand
(``--bootstrap-server``, ``--command-config``, ``--output``, ``--timeout``); ``leaf``
registers one subcommand with them and marks it as an operator command, which ``coordinator.cli``
runs through ``run_admin`` so every failure ends in one line and one of the exit codes below.

``--command-config FILE`` is Kafka's tools' option: a ``client.properties`` with the
security settings of the listener talked to (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.*``; see ``tools.client``). It is read when the command runs,
so a file that cannot be used ends in one line and exit 2 like any other bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.tools.admin import Admin
from coordinator.tools.client import ClientSecurity
from coordinator.tools.exits import EXIT_ERROR as EXIT_ERROR  # the command modules' table
from coordinator.tools.exits import EXIT_OK as EXIT_OK
from coordinator.tools.exits import EXIT_UNREACHABLE as EXIT_UNREACHABLE
from coordinator.tools.exits import EXIT_USAGE as EXIT_USAGE

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
        "--command-config",
        metavar="FILE",
        type=Path,
        default=os.environ.get("KGC_COMMAND_CONFIG") or None,
        help="client.properties with the listener's security settings: security.protocol, "
        "sasl.mechanism, sasl.jaas.config (or sasl.username/sasl.password), ssl.* "
        "(env KGC_COMMAND_CONFIG; default: PLAINTEXT)",
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


def client_security(args: argparse.Namespace) -> ClientSecurity:
    """The ``--command-config`` file's settings (PLAINTEXT without one).

    Raises ``ClientConfigError`` (exit 2). Security settings the client does not use are
    named on stderr, as Kafka's clients warn about unused configurations.
    """
    path = getattr(args, "command_config", None)
    if path is None:
        return ClientSecurity()
    security = ClientSecurity.load(path)
    if security.unused:
        print(
            f"kgc: warning: {path}: not used by kgc's client: {', '.join(security.unused)}",
            file=sys.stderr,
        )
    return security


def admin_for(args: argparse.Namespace, default_timeout: float = 10.0) -> Admin:
    return Admin(
        args.bootstrap_server,
        timeout=args.timeout or default_timeout,
        security=client_security(args),
    )
