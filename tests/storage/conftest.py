"""A throw-away PostgreSQL cluster for the tests of shared studies, and a storage-kind fixture.

The cluster is started once per session with the server binaries of the
system (``scripts/install_postgres.sh`` installs them): initdb into a temp
folder, pg_ctl start on a free port of 127.0.0.1, trust authentication. As
root it runs as the ``postgres`` user (PostgreSQL refuses to run as root).
Each test gets its own database.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_USER = "sweeper"


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresCluster:
    def __init__(self) -> None:
        self.initdb, self.pg_ctl = _binary("initdb"), _binary("pg_ctl")
        self.folder = Path(tempfile.mkdtemp(prefix="sweeper-pg-"))
        self.data = self.folder / "data"
        self.port = _free_port()
        self.run_as: list[str] = []
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and there is no 'postgres' user to run PostgreSQL as")
            os.chown(self.folder, account.pw_uid, account.pw_gid)
            self.run_as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *argv: str) -> None:
        result = subprocess.run([*self.run_as, *argv], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout}\n{result.stderr}")

    def start(self) -> None:
        self._run(
            self.initdb,
            "-D",
            str(self.data),
            "-U",
            PG_USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        options = f"-p {self.port} -h 127.0.0.1 -k {self.folder} -c fsync=off -c max_connections=50"
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.folder / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        try:
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        # a plain URL, as users write it: SQLAlchemy 2 takes psycopg (3) for it
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        import psycopg

        name = f"test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=PG_USER, dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    if _binary("initdb") is None or _binary("pg_ctl") is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: run scripts/install_postgres.sh")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")
    cluster = PostgresCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres: PostgresCluster) -> str:
    """A fresh, empty database on the session's cluster."""
    return postgres.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every storage kind: a SQLite file and a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'study.db'}"
    return request.getfixturevalue("postgres_url")
