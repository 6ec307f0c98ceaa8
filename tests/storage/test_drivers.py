"""Which PostgreSQL driver a URL takes, and the message when it is missing."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest
from sqlalchemy.engine import make_url

from storage import TrialStore
from sweeper.errors import StorageError


def test_a_plain_postgresql_url_takes_psycopg_3() -> None:
    # what the postgres extra installs (psycopg[binary]) is what SQLAlchemy loads for it
    assert make_url("postgresql://u@h/db").get_dialect().driver == "psycopg"
    assert importlib.util.find_spec("psycopg") is not None


def test_a_missing_driver_says_what_to_install() -> None:
    if importlib.util.find_spec("pg8000") is not None:
        pytest.skip("pg8000 is installed here")
    with pytest.raises(StorageError) as caught:
        TrialStore("postgresql+pg8000://u:secret@127.0.0.1:1/db")
    message = str(caught.value)
    assert "No module named 'pg8000'" in message
    distribution = importlib.metadata.packages_distributions()["storage"][0]  # the installed one, whatever its name
    assert f"pip install '{distribution}[postgres]'" in message
    assert "secret" not in message
