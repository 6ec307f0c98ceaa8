"""Study database URLs: SQLite files by default, PostgreSQL for shared studies."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import optuna
import sqlalchemy
from sqlalchemy.engine import Engine, make_url

from errortree import StorageError

logger = logging.getLogger(__name__)

DEFAULT_URL = "sqlite:///sweeper-study.db"
SCHEMA_ATTEMPTS = 5
T = TypeVar("T")
SQLITE_TIMEOUT_S = 60.0


class StorageUrlError(StorageError):
    """A --storage value that is not a database URL: input the user fixes (exit code 2)."""

    exit_code = 2


def normalize_url(url: str | os.PathLike[str] | None) -> str:
    """A SQLAlchemy URL; a bare path means a SQLite file (made absolute)."""
    if url is None or str(url) == "":
        url = DEFAULT_URL
    text = str(url)
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser().resolve()}"
    try:
        parsed = make_url(text)
    except (sqlalchemy.exc.ArgumentError, ValueError) as exc:
        raise StorageUrlError(f"not a database URL: {text!r} ({exc})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database).expanduser()
        if not path.is_absolute():
            text = f"sqlite:///{path.resolve()}"
    return text


def redact(url: str) -> str:
    """The URL as it may be shown: the password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


def engine_kwargs(url: str) -> dict[str, Any]:
    if make_url(url).get_backend_name() == "sqlite":
        return {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    return {"pool_pre_ping": True}


def _driver_hint(url: str, exc: ImportError) -> str:
    """What to install when a database URL's driver is missing."""
    if make_url(url).get_backend_name() == "postgresql":
        return f"{exc}; pip install 'sweeper[postgres]' (psycopg 3, for a postgresql:// URL)"
    return str(exc)


def create_engine(url: str) -> Engine:
    """An engine for our own tables (SQLite in WAL mode so readers do not block a sweep)."""
    try:
        engine = sqlalchemy.create_engine(url, **engine_kwargs(url))
    except ImportError as exc:
        raise StorageError(f"cannot use study database {redact(url)}: {_driver_hint(url, exc)}") from None
    except sqlalchemy.exc.ArgumentError as exc:
        raise StorageError(f"cannot use study database {redact(url)}: {exc}") from None
    _tune_sqlite(engine)
    return engine


def _tune_sqlite(engine: Engine) -> None:
    """WAL journal (readers never block the sweep) with NORMAL sync.

    In WAL mode NORMAL loses no committed transaction when the process is
    killed (only, at worst, the last ones on a power cut) and saves an fsync
    per commit, which is most of a trial's bookkeeping time on a disk.
    """
    if engine.dialect.name != "sqlite":
        return

    @sqlalchemy.event.listens_for(engine, "connect")
    def _sqlite_pragmas(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    engine.dispose()  # connections opened before the listener reconnect with it


def create_schema(url: str, create: Callable[[], T], what: str) -> T:
    """Run ``create`` (it creates tables if missing), retrying when a concurrent worker races it.

    Two workers starting on an empty database both try to create the same
    tables (and types); the loser gets a unique violation, a "relation
    already exists" (PostgreSQL) or a "table ... already exists" (SQLite,
    whose check and create are not one transaction) and finds the schema in
    place on a retry.
    """
    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            return create()
        except (
            sqlalchemy.exc.IntegrityError,
            sqlalchemy.exc.ProgrammingError,
            sqlalchemy.exc.OperationalError,
        ) as exc:
            if isinstance(exc, sqlalchemy.exc.OperationalError) and not _schema_race(exc):
                raise StorageError(f"cannot open study database {redact(url)}: {exc}") from None
            if attempt == SCHEMA_ATTEMPTS - 1:
                raise StorageError(f"cannot create {what} in {redact(url)}: {exc}") from None
            logger.info("%s being created by another worker; retrying", what)
            time.sleep(0.5 * (attempt + 1))
        except (sqlalchemy.exc.SQLAlchemyError, ImportError, RuntimeError, ValueError) as exc:
            raise StorageError(f"cannot open study database {redact(url)}: {exc}") from None
    raise AssertionError("unreachable")


def _schema_race(exc: sqlalchemy.exc.OperationalError) -> bool:
    """A SQLite error that another worker creating the same schema explains."""
    text = str(exc.orig)
    return "already exists" in text or "database is locked" in text


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage on the same database (liveness is tracked in our tables)."""
    storage = create_schema(
        url,
        lambda: optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs(url)),
        "Optuna's tables",
    )
    _tune_sqlite(storage.engine)
    return storage
