"""``kgc users add|delete|list``: SCRAM users of a data directory, offline.

How this works: these commands edit the data directory's credential file
(``coordinator.security.credentials.LocalCredentialStore``) directly, for the first admin
before the server ever starts, as Kafka's ``kafka-storage format --add-scram`` does. They
take the data directory's lock first (``storage.local.manager.DataDirLock``, the one
``kgc serve`` holds while it runs), so they refuse to run beside a live kgc, whose copy
would not see the change and whose next change would undo it; a running server is changed
online with AlterUserScramCredentials instead (e.g. confluent-kafka's
``alter_user_scram_credentials``). The password is read from ``--password``, from
``--password-file``, or else from stdin (prompted without echo on a terminal); only its
salted, hashed form is stored. In cluster mode the credentials live in the database:
use the online API there.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path
from typing import Any

from coordinator.security.credentials import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    LocalCredentialStore,
    ScramChange,
    scram_credential,
)
from coordinator.tools.commands.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from coordinator.tools.output import Output, show
from storage.local.manager import DataDirError, DataDirLock

DEFAULT_DATA_DIR = "./kgc-data"


def _data_dir(args: argparse.Namespace, create: bool) -> Path | None:
    path = Path(args.data_dir)
    if not path.is_dir():
        if not create:
            print(f"kgc: error: data directory {path} does not exist", file=sys.stderr)
            return None
        path.mkdir(parents=True)
    return path


def _locked(data_dir: Path) -> DataDirLock | None:
    try:
        return DataDirLock.acquire(data_dir)
    except DataDirError as exc:
        print(
            f"kgc: error: {exc}; stop it first, or change users of a running kgc with "
            "AlterUserScramCredentials",
            file=sys.stderr,
        )
        return None


def _password(args: argparse.Namespace) -> str | None:
    if args.password is not None:
        return str(args.password)
    if args.password_file is not None:
        text = Path(args.password_file).read_text()
        return text[:-1] if text.endswith("\n") else text
    if sys.stdin.isatty():
        return getpass.getpass(f"password for {args.user}: ")
    line = sys.stdin.readline()
    return line[:-1] if line.endswith("\n") else line


def cmd_users_add(args: argparse.Namespace) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        print(
            f"kgc: error: --iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS} "
            "(Kafka refuses others)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not args.user:
        print("kgc: error: the user name must not be empty", file=sys.stderr)
        return EXIT_USAGE
    password = _password(args)
    if not password:
        print("kgc: error: empty password", file=sys.stderr)
        return EXIT_USAGE
    data_dir = _data_dir(args, create=True)
    if data_dir is None:
        return EXIT_ERROR
    lock = _locked(data_dir)
    if lock is None:
        return EXIT_ERROR
    try:
        store = LocalCredentialStore.in_data_dir(data_dir)
        replaced = store.get(args.user, args.mechanism) is not None
        cred = scram_credential(args.mechanism, password, iterations=args.iterations)
        store.apply([ScramChange(args.user, args.mechanism, cred)])
    finally:
        lock.release()
    verb = "updated" if replaced else "added"
    print(
        f"{verb} {args.mechanism} credential of user '{args.user}' in {data_dir}", file=sys.stderr
    )
    return EXIT_OK


def cmd_users_delete(args: argparse.Namespace) -> int:
    data_dir = _data_dir(args, create=False)
    if data_dir is None:
        return EXIT_ERROR
    lock = _locked(data_dir)
    if lock is None:
        return EXIT_ERROR
    try:
        store = LocalCredentialStore.in_data_dir(data_dir)
        mechanisms = (
            [args.mechanism]
            if args.mechanism
            else [c.mechanism for c in store.users().get(args.user, [])]
        )
        changes = [ScramChange(args.user, m) for m in mechanisms]
        missing = store.apply(changes) if changes else {0}
    finally:
        lock.release()
    if missing:
        what = f"a {args.mechanism} credential" if args.mechanism else "credentials"
        print(f"kgc: error: user '{args.user}' has no {what}", file=sys.stderr)
        return EXIT_ERROR
    print(f"deleted {', '.join(mechanisms)} of user '{args.user}'", file=sys.stderr)
    return EXIT_OK


def cmd_users_list(args: argparse.Namespace) -> int:
    data_dir = _data_dir(args, create=False)
    if data_dir is None:
        return EXIT_ERROR
    lock = _locked(data_dir)
    if lock is None:
        return EXIT_ERROR
    try:
        users = LocalCredentialStore.in_data_dir(data_dir).users()
    finally:
        lock.release()
    rows = [[u, c.mechanism, c.iterations] for u, creds in users.items() for c in creds]
    show(Output(args), ["USER", "MECHANISM", "ITERATIONS"], rows)
    return EXIT_OK


def _run(func: Any) -> Any:
    """One line and exit 1 for failures a user can cause (an unreadable file, a full disk)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except (OSError, ValueError) as exc:
            print(f"kgc: error: {exc}", file=sys.stderr)
            return EXIT_ERROR

    return run


def add_commands(sub: Any) -> None:
    users = sub.add_parser(
        "users",
        help="SCRAM users of a data directory (offline; online: AlterUserScramCredentials)",
        description=__doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else None,
    ).add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        metavar="DIR",
        default=os.environ.get("KGC_DATA_DIR", DEFAULT_DATA_DIR),
        help=f"the kgc data directory (env KGC_DATA_DIR; default {DEFAULT_DATA_DIR})",
    )
    mechanisms = sorted(MECHANISM_TYPES)

    add = users.add_parser(
        "add", parents=[common], help="add a user, or set a new password for one"
    )
    add.add_argument("user")
    add.add_argument("--mechanism", choices=mechanisms, default="SCRAM-SHA-512")
    secret = add.add_mutually_exclusive_group()
    secret.add_argument("--password", help="the password (else --password-file, or stdin)")
    secret.add_argument("--password-file", metavar="FILE", help="read the password from FILE")
    add.add_argument(
        "--iterations",
        type=int,
        default=MIN_ITERATIONS,
        help=f"SCRAM iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} (default {MIN_ITERATIONS})",
    )
    add.set_defaults(func=_run(cmd_users_add))

    delete = users.add_parser("delete", parents=[common], help="delete a user's credentials")
    delete.add_argument("user")
    delete.add_argument(
        "--mechanism", choices=mechanisms, default=None, help="only this one (default: all)"
    )
    delete.set_defaults(func=_run(cmd_users_delete))

    lst = users.add_parser("list", parents=[common], help="list users, mechanisms, iterations")
    lst.add_argument("--output", choices=("table", "json"), default="table")
    lst.set_defaults(func=_run(cmd_users_list))
