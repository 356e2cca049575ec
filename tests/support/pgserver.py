"""A real PostgreSQL server for tests, started from Debian's binaries in a temporary directory.

How this works: ``PgServer(base_dir).start()`` runs ``initdb`` (trust auth, ``--no-sync``)
into ``base_dir/data`` and ``pg_ctl start`` on a free loopback port with the socket in the
same directory. PostgreSQL refuses to run as root, and CI runs as root: then every command
runs as the ``postgres`` system user (created by Debian's package) through ``runuser``, and
the directory is handed to that user. ``url`` is the ``postgresql://`` URL kgc takes as
``storage.url``. ``stop(mode)`` / ``restart()`` / ``kill()`` are the fault injections
(``pg_ctl stop -m fast|immediate``, SIGKILL of the postmaster).

``fsync`` stays on: the durability tests need the database's own promise. The binaries are
looked up in ``PG_BIN`` (environment), then ``/usr/lib/postgresql/<n>/bin`` (the newest);
``available()`` says whether any is installed, and ``.ci/run`` installs Debian's
``postgresql`` package on a fresh machine.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["PgServer", "available", "pg_bin"]


def pg_bin() -> Path | None:
    env = os.environ.get("PG_BIN")
    if env and (Path(env) / "initdb").exists():
        return Path(env)
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = sorted(
            (p for p in root.iterdir() if (p / "bin" / "initdb").exists()),
            key=lambda p: int(p.name) if p.name.isdigit() else 0,
        )
        if versions:
            return versions[-1] / "bin"
    return None


def available() -> bool:
    return pg_bin() is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    def __init__(self, base_dir: Path, *, port: int | None = None) -> None:
        binaries = pg_bin()
        if binaries is None:
            raise RuntimeError("no PostgreSQL binaries (install Debian's postgresql package)")
        self.bin = binaries
        self.base = Path(base_dir)
        self.data = self.base / "data"
        self.logfile = self.base / "postgres.log"
        self.port = port or _free_port()
        self.user = "kgc"
        self.database = "kgc"
        self._as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(a) for a in args]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    def _chown(self) -> None:
        if self._as_root:
            pw = pwd.getpwnam("postgres")
            for path in [self.base, *self.base.rglob("*")]:
                with contextlib.suppress(FileNotFoundError):
                    os.chown(path, pw.pw_uid, pw.pw_gid)

    def start(self) -> PgServer:
        self.base.mkdir(parents=True, exist_ok=True)
        fresh = not (self.data / "PG_VERSION").exists()
        if fresh:
            self._chown()
            self._run(
                self.bin / "initdb",
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            )
        self._pg_ctl_start()
        if fresh:
            self.psql("postgres", f"CREATE ROLE {self.user} LOGIN SUPERUSER")
            self.psql("postgres", f"CREATE DATABASE {self.database} OWNER {self.user}")
        return self

    def _pg_ctl_start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 "
            "-c max_connections=200 -c shared_buffers=128MB -c max_wal_size=2GB "
            "-c idle_in_transaction_session_timeout=10s"
        )
        self._chown()
        self._run(
            self.bin / "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.logfile),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        )

    def psql(self, database: str, sql: str) -> str:
        out = self._run(
            self.bin / "psql",
            "-h",
            str(self.base),
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-Atc",
            sql,
        )
        return out.stdout

    def stop(self, mode: str = "fast") -> None:
        self._run(self.bin / "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self._pg_ctl_start()

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster (its backends exit when they notice)."""
        pid = self.postmaster_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)

    def reset(self) -> None:
        """Drop and recreate the test database (a clean slate between tests)."""
        self.psql(
            "postgres",
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{self.database}' AND pid <> pg_backend_pid()",
        )
        self.psql("postgres", f"DROP DATABASE IF EXISTS {self.database}")
        self.psql("postgres", f"CREATE DATABASE {self.database} OWNER {self.user}")

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)
