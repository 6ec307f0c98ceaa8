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

from storage.errors import StorageError, StorageUrlError

logger = logging.getLogger(__name__)

DEFAULT_URL = "sqlite:///sweeper-study.db"
SCHEMA_ATTEMPTS = 5
T = TypeVar("T")
SQLITE_TIMEOUT_S = 60.0


def normalize_url(url: str | os.PathLike[str] | None) -> str:
    """A SQLAlchemy URL; a bare path means a SQLite file (made absolute).

    Reads no file and opens nothing. ``StorageUrlError`` (exit code 2) for a
    value that cannot name a study database: not a URL, a kind of database
    SQLAlchemy does not know, one whose driver is not installed, or a SQLite
    URL without a file (in memory, the study would be lost). ``check_url``
    also looks at the SQLite file itself.
    """
    if url is None or str(url) == "":
        url = DEFAULT_URL
    text = str(url)
    if "://" not in text:
        text = f"sqlite:///{Path(text).expanduser().resolve()}"
    try:
        parsed = make_url(text)
    except (sqlalchemy.exc.ArgumentError, ValueError) as exc:
        raise StorageUrlError(f"not a database URL: {text!r} ({exc})") from None
    _check_driver(parsed, text)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise StorageUrlError(
                f"{text!r} names no database file (a study in memory would be lost): give a file, "
                "as a path or sqlite:///PATH (see --storage)"
            )
        path = Path(parsed.database).expanduser()
        if not path.is_absolute():
            text = f"sqlite:///{path.resolve()}"
    return text


def check_url(url: str | os.PathLike[str] | None) -> str:
    """``normalize_url``, and a SQLite file checked where it is: a folder, a file that is
    not a SQLite database, or a new file in a folder that does not exist is a
    ``StorageUrlError`` (exit code 2). Reads a few bytes; creates nothing."""
    url = normalize_url(url)
    path = sqlite_file(url)
    if path is not None:
        check_sqlite_file(path)
        if not path.exists() and not path.parent.is_dir():
            raise StorageUrlError(f"no folder {path.parent} for the study database {path.name} (see --storage)")
    return url


def sqlite_file(url: str) -> Path | None:
    """The file a URL from ``normalize_url`` names when it is SQLite's; None for another database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    if not parsed.database:  # normalize_url refuses such a URL; here a caller skipped it
        raise StorageUrlError(f"{redact(url)} names no database file (see --storage)")
    return Path(parsed.database)


def _check_driver(parsed: sqlalchemy.URL, text: str) -> None:
    """A kind of database SQLAlchemy knows, with its driver installed (imported, not connected)."""
    try:
        dialect = parsed.get_dialect()
    except sqlalchemy.exc.NoSuchModuleError:
        raise StorageUrlError(
            f"{redact(text)}: unknown kind of database {parsed.drivername!r}: give a SQLite file (a path "
            "or sqlite:///PATH) or a PostgreSQL URL (postgresql://USER@HOST/DB) (see --storage)"
        ) from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        raise StorageUrlError(f"cannot use study database {redact(text)}: {_driver_hint(text, exc)}") from None


SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_file(path: Path) -> None:
    """A SQLite path that is there holds a SQLite database (an empty file is one): a folder,
    or a file that is something else, is a ``StorageUrlError``. Reads its first bytes."""
    if path.is_dir():
        raise StorageUrlError(f"{path} is a folder, not a study database file (see --storage)")
    if path.exists():
        try:
            with path.open("rb") as handle:
                head = handle.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise StorageUrlError(f"{path}: cannot be read ({exc.strerror}) (see --storage)") from None
        if head and head != SQLITE_HEADER:
            raise StorageUrlError(f"{path} is not a SQLite database (see --storage)")


def describe_error(exc: BaseException) -> str:
    """A database error in one line: the driver's own message, without SQLAlchemy's SQL and link."""
    orig = getattr(exc, "orig", None)
    if orig is not None:
        return " ".join(str(orig).split())
    lines = str(exc).strip().splitlines()
    return " ".join(lines[0].split()) if lines else type(exc).__name__


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
    """What to install when a database URL's driver is missing: for PostgreSQL, the ``postgres``
    extra of the distribution that installed this package (whatever its name)."""
    if make_url(url).get_backend_name() == "postgresql":
        distribution = _distribution()
        install = (
            f"pip install '{distribution}[postgres]'"
            if distribution
            else "install the 'postgres' extra of sweeper's distribution"
        )
        return f"{exc}; {install} (psycopg 3, for a postgresql:// URL)"
    return str(exc)


def _distribution() -> str | None:
    """The name of the installed distribution that ships the ``storage`` package, if any."""
    try:
        from importlib.metadata import packages_distributions

        names = packages_distributions().get(__name__.split(".")[0], [])
    except Exception:  # noqa: BLE001 - only a hint depends on it
        return None
    return names[0] if names else None


def create_engine(url: str) -> Engine:
    """An engine for our own tables (SQLite in WAL mode so readers do not block a sweep)."""
    try:
        engine = sqlalchemy.create_engine(url, **engine_kwargs(url))
    except ImportError as exc:
        raise StorageUrlError(f"cannot use study database {redact(url)}: {_driver_hint(url, exc)}") from None
    except sqlalchemy.exc.ArgumentError as exc:
        raise StorageUrlError(f"cannot use study database {redact(url)}: {describe_error(exc)}") from None
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
                raise StorageError(f"cannot open study database {redact(url)}: {describe_error(exc)}") from None
            if attempt == SCHEMA_ATTEMPTS - 1:
                raise StorageError(f"cannot create {what} in {redact(url)}: {describe_error(exc)}") from None
            logger.info("%s being created by another worker; retrying", what)
            time.sleep(0.5 * (attempt + 1))
        except ImportError as exc:
            raise StorageUrlError(f"cannot use study database {redact(url)}: {_driver_hint(url, exc)}") from None
        except (sqlalchemy.exc.SQLAlchemyError, RuntimeError, ValueError) as exc:
            raise StorageError(f"cannot open study database {redact(url)}: {describe_error(exc)}") from None
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
