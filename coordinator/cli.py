"""The ``kgc`` command: ``kgc serve`` runs the server; other subcommands operate on one.

How this works: argparse subcommands; each returns an exit status. This module sits above
everything it dispatches to (the server, the operator commands of ``coordinator.tools``, the
audit of ``coordinator.audit``), which know nothing of each other. Errors a user can cause
(bad flags, bad settings, an unreachable server) end in one line on stderr, never a
traceback.

The operator commands (``groups``, ``offsets``, ``topics``, ``cluster``, ``health``,
``acls``; one module per family in ``tools.commands``) speak the plain Kafka protocol
through ``tools.admin``, so they work against kgc and any Kafka-compatible broker
(``--bootstrap-server``). They print rich tables for people and, with ``--output json``,
JSON for scripts. Every one of them takes Kafka's ``--command-config client.properties``
for TLS and SASL listeners (``tools.commands.common``). ``kgc audit`` runs the offsets audit
(``coordinator.audit``).

Exit codes, the same for every command (docs/operating.md, "Fix a group"): 0 ok; 1 the
server answered with an error, the group/topic does not exist, or the command could not run;
2 bad usage (a flag, a value, or a file named on the command line that cannot be used); 3 the
server could not be reached; 4 ``kgc audit`` found problems at or above ``--fail-on``; 130
interrupted.

Imports are lazy: ``kgc audit`` and ``kgc --version`` are dispatched before the server's
configuration model and the protocol codecs are imported (about half a second), so a bad
audit argument is reported at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from coordinator.tools.exits import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)


def version() -> str:
    """The installed distribution's version (``pyproject.toml`` in a source checkout)."""
    from importlib import metadata

    try:
        return metadata.version("kgc")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def compiled_modules() -> list[str]:
    """kgc's modules that run compiled (the optional mypyc build, setup.py), by name.

    A module is compiled when an extension file sits beside its ``.py``: Python imports the
    extension first. Found without importing them, so ``kgc --version`` stays fast.
    """
    from importlib.machinery import EXTENSION_SUFFIXES
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for package in ("protocol", "storage", "coordinator"):
        for suffix in EXTENSION_SUFFIXES:
            for ext in (root / package).rglob(f"*{suffix}"):
                source = ext.with_name(ext.name[: -len(suffix)] + ".py")
                if source.exists():
                    found.append(".".join(source.relative_to(root).with_suffix("").parts))
    return sorted(set(found))


def version_line() -> str:
    """``kgc --version``: the version, and how many modules run compiled if any do."""
    compiled = compiled_modules()
    line = f"kgc {version()}"
    return f"{line} (mypyc: {len(compiled)} modules compiled)" if compiled else line


def setup_logging(level: str, fmt: str) -> None:
    from coordinator.logs import setup_logging as setup

    setup(level, fmt)


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator import config
    from coordinator.security.settings_check import check_settings
    from storage.postgres import StartupRefused

    try:
        settings = config.load(args)
        check_settings(settings)  # super.users, principal mapping rules: the security layer's
    except OSError as exc:  # the --config file cannot be read: bad usage
        print(
            f"kgc: error: cannot read configuration: {exc.strerror or exc}: {exc.filename}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except SystemExit as exc:  # one line per invalid setting: bad usage
        if isinstance(exc.code, str):
            print("\n".join(f"kgc: error: {ln}" for ln in exc.code.splitlines()), file=sys.stderr)
            return EXIT_USAGE
        raise
    # kgc's own log settings (kgc.log.level/format; log.level/format are their old names)
    setup_logging(settings.kgc_log_level, settings.kgc_log_format)
    config.log_startup(settings)  # ignored/unknown/deprecated names, the effective settings
    try:
        if settings.kgc_workers > 1:  # a supervisor of worker processes (node/workers)
            from coordinator.node.workers.supervisor import supervise

            supervise(settings)
        else:
            from coordinator.node.run import run

            run(settings)
    except StartupRefused as exc:  # cluster mode: the database says this node cannot start
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # the port is taken, the data directory is not writable, ...
        logging.getLogger("kgc").debug("start-up failed", exc_info=True)
        # A timeout has no message of its own: never an empty line.
        print(f"kgc: error: {exc or type(exc).__name__}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def add_admin_commands(sub: Any) -> None:
    """``groups``, ``offsets``, ``topics``, ``cluster``, ``health``, ``acls``: operate a server."""
    from coordinator.tools.commands import (
        acls,
        cluster,
        groups,
        health,
        history,
        offsets,
        topics,
        translate,
    )
    from coordinator.tools.commands.common import common_options

    common = common_options()
    made = {
        family: family.add_commands(sub, common)
        for family in (groups, offsets, topics, cluster, health, acls)
    }
    # a group's kept history: under ``kgc offsets`` and ``kgc groups``
    history.add_offset_commands(common, made[offsets])
    history.add_group_commands(common, made[groups])
    translate.add_commands(common, made[offsets])


def cmd_audit(args: argparse.Namespace) -> int:
    """``kgc audit``: the Spark offsets audit (pyspark is imported only here, lazily)."""
    from coordinator.audit.cli import run

    return run(args)


def add_audit_command(sub: Any) -> None:
    from coordinator.audit.cli import DESCRIPTION, add_arguments

    audit = sub.add_parser(
        "audit",
        help="audit an offsets log with Spark (needs kgc[audit])",
        description=DESCRIPTION,
    )
    add_arguments(audit)
    audit.set_defaults(func=cmd_audit)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``kgc`` parser; ``only="audit"`` registers that subcommand alone (fast start)."""
    parser = argparse.ArgumentParser(prog="kgc", description="kgc: a Kafka group coordinator")
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    if only == "audit":
        add_audit_command(sub)
        return parser
    from coordinator import config
    from coordinator.tools.commands import users

    serve = sub.add_parser(
        "serve",
        help="run the server",
        description="Run the kgc server. Every setting is shown with its Kafka property name, environment variable and default.",
    )
    config.add_arguments(serve)
    serve.set_defaults(func=cmd_serve)
    add_admin_commands(sub)
    users.add_commands(sub)  # offline, against a data directory
    add_audit_command(sub)
    return parser


def run_admin(args: argparse.Namespace) -> int:
    """Run an operator command, turning every failure into one line and an exit code."""
    from coordinator.tools.admin import AdminError, Unreachable, UsageError
    from coordinator.tools.client import ClientConfigError

    try:
        return int(args.func(args))
    except ClientConfigError as exc:  # --command-config: a setting that cannot be used
        print(f"kgc: error: --command-config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:  # bad usage found only when the command runs
        print(f"kgc: error: {exc}", file=sys.stderr)
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


def _command_of(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (its first word that is not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = _command_of(argv)
    # `kgc audit` and `kgc --version` need none of the other commands' imports
    fast = command == "audit" or (command is None and "--version" in argv)
    parser = build_parser(only="audit" if fast else None)
    args = parser.parse_args(argv)
    try:
        if getattr(args, "admin", False):
            return run_admin(args)
        return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
