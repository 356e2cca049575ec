"""The ``kgc`` command: ``kgc serve`` runs the server; other subcommands operate on one.

How this works: argparse subcommands; each returns an exit status. Errors a user can cause
(bad flags, bad settings, an unreachable server) end in one line on stderr, never a
traceback.

The operator commands (``groups``, ``offsets``, ``topics``, ``health``; one module per
family in ``tools.commands``) speak the plain Kafka protocol through ``tools.admin``, so
they work against kgc and any Kafka-compatible broker (``--bootstrap-server``). They print
rich tables for people and, with ``--output json``, JSON for scripts. Exit codes: 0 ok, 1
the server answered with an error or the group/topic does not exist, 2 bad usage, 3 the
server could not be reached. Every one of them takes Kafka's ``--command-config
client.properties`` for TLS and SASL listeners (``tools.commands.common``). ``kgc audit`` runs the offsets audit (``coordinator.audit``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from coordinator import config
from coordinator.tools.admin import AdminError, Unreachable
from coordinator.tools.client import ClientConfigError
from coordinator.tools.commands import acls, cluster, groups, health, offsets, topics, users
from coordinator.tools.commands.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    common_options,
)
from storage.postgres import StartupRefused


def setup_logging(level: str, fmt: str) -> None:
    from coordinator.logs import setup_logging as setup

    setup(level, fmt)


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.app import run

    try:
        settings = config.load(args)
    except OSError as exc:  # e.g. the --config file cannot be read
        print(
            f"kgc: error: cannot read configuration: {exc.strerror or exc}: {exc.filename}",
            file=sys.stderr,
        )
        return EXIT_ERROR
    setup_logging(settings.kgc_log_level, settings.kgc_log_format)
    config.log_startup(settings)  # ignored/unknown/deprecated names, the effective settings
    try:
        run(settings)
    except StartupRefused as exc:  # cluster mode: the database says this node cannot start
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # the port is taken, the data directory is not writable, ...
        logging.getLogger("kgc").debug("start-up failed", exc_info=True)
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def add_admin_commands(sub: Any) -> None:
    """``groups``, ``offsets``, ``topics``, ``cluster`` and ``health``: operate a running server."""
    common = common_options()
    for family in (groups, offsets, topics, cluster, health, acls):
        family.add_commands(sub, common)


def cmd_audit(args: argparse.Namespace) -> int:
    """``kgc audit``: the Spark offsets audit (pyspark is imported only here, lazily)."""
    from coordinator.audit.cli import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgc", description="kgc: a Kafka group coordinator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the server",
        description="Run the kgc server. Every setting is shown with its Kafka property name, environment variable and default.",
    )
    config.add_arguments(serve)
    serve.set_defaults(func=cmd_serve)
    add_admin_commands(sub)
    users.add_commands(sub)  # offline, against a data directory
    audit = sub.add_parser(
        "audit",
        help="audit an offsets log with Spark (needs kgc[audit])",
        description="Audit a kgc data directory's __consumer_offsets log with Apache Spark: "
        "lag, Burrow status and integrity/lifecycle findings as Parquet or JSON tables.",
    )
    from coordinator.audit.cli import add_arguments as add_audit_arguments

    add_audit_arguments(audit)
    audit.set_defaults(func=cmd_audit)
    return parser


def run_admin(args: argparse.Namespace) -> int:
    """Run an operator command, turning every failure into one line and an exit code."""
    try:
        return int(args.func(args))
    except ClientConfigError as exc:  # --command-config: a setting that cannot be used
        print(f"kgc: error: --command-config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except AdminError as exc:
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Unreachable as exc:
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except BrokenPipeError:
        return EXIT_OK  # `kgc ... | head`
    except Exception as exc:
        print(f"kgc: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "admin", False):
            return run_admin(args)
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
