"""The ``kgc`` command: ``kgc serve`` runs the server; other subcommands operate on one.

How this works: argparse subcommands; each returns an exit status. Errors a user can cause
(bad flags, bad settings, an unreachable server) end in one line on stderr, never a
traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys

from coordinator import config


def setup_logging(level: str, fmt: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.app import run

    settings = config.load(args)
    setup_logging(settings.log_level, settings.log_format)
    run(settings)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgc", description="kgc: a Kafka group coordinator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server", description="Run the kgc server. Every setting is shown with its Kafka property name, environment variable and default.")
    config.add_arguments(serve)
    serve.set_defaults(func=cmd_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
