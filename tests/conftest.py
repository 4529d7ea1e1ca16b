from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mnemo import MnemoClient

ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("mnemo") is None:  # running from a checkout without an install
    sys.path.insert(0, str(ROOT))

from helpers import pg as pg_helpers  # noqa: E402
from helpers.backends import onto  # noqa: E402
from helpers.logs import erase_slot, sample_log  # noqa: E402
from helpers.pg import PgDatabase, Schema  # noqa: E402
from helpers.victims import make_victim  # noqa: E402

AGENT = "agent-1"
BACKENDS = ("file", "postgres")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A file database's path: for tests of what is truly the file backend's (bytes on disk, recovery)."""
    return tmp_path / "memory.mnemo.db"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of someone else's (helpers.victims), for a test to plant a link to where Mnemo writes."""
    return make_victim(tmp_path)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[PgDatabase | None]:
    """The run's own PostgreSQL database, or None when MNEMO_TEST_POSTGRES names no reachable server."""
    server = pg_helpers.server_dsn()
    if server is None:
        yield None
        return
    try:
        database = pg_helpers.PgDatabase(server)
    except Exception as exc:
        if os.environ.get(pg_helpers.REQUIRE) == "1":
            pytest.exit(f"{pg_helpers.ENV} is set but its PostgreSQL server is unreachable: {exc}", returncode=3)
        yield None
        return
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture
def pg(pg_database: PgDatabase | None) -> Iterator[Schema]:
    """A fresh schema on the run's PostgreSQL database, for the tests of what is the PostgreSQL backend's own."""
    if pg_database is None:
        if os.environ.get(pg_helpers.REQUIRE) == "1":
            pytest.fail(f"{pg_helpers.ENV} is not set: the PostgreSQL backend cannot be tested")
        pytest.skip(f"PostgreSQL tests need {pg_helpers.ENV} (a server DSN)")
    schema = Schema(pg_database)
    try:
        yield schema
    finally:
        pg_database.drop_schema(schema.name)


@pytest.fixture
def app_role(pg: Schema) -> Iterator[pg_helpers.AppRole]:
    """An application role on `pg`'s Mnemo database (made first, by agent `owner`, who owns it), dropped
    after the test: for tests of what a holder of that role's credentials can and cannot do."""
    from mnemo import MnemoClient

    MnemoClient(pg.url, "owner").close()
    role = pg_helpers.AppRole(pg)
    try:
        yield role
    finally:
        role.drop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def new_db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """Makes fresh, empty databases on each storage backend, as many as a test needs (a hypothesis
    state machine takes one per example): file paths, or postgresql:// URIs whose search_path is a
    schema of their own. All are removed when the test ends."""
    if backend == "file":
        count = itertools.count()
        yield lambda: str(tmp_path / f"memory-{next(count)}.mnemo.db")
        return
    database = request.getfixturevalue("pg_database")
    if database is None:
        if os.environ.get(pg_helpers.REQUIRE) == "1":
            pytest.fail(f"{pg_helpers.ENV} is not set: the PostgreSQL backend cannot be tested")
        pytest.skip(f"PostgreSQL tests need {pg_helpers.ENV} (a server DSN, for example postgresql://postgres@127.0.0.1/postgres)")
    schemas: list[str] = []

    def make() -> str:
        schema, url = database.new_schema()
        schemas.append(schema)
        return url

    try:
        yield make
    finally:
        database.drop_schemas(schemas)


@pytest.fixture
def db(backend: str, tmp_path: Path, new_db: Callable[[], str]) -> str:
    """A fresh, empty database on each storage backend: a file path, or a postgresql:// URI whose
    search_path is a schema of its own. Tests of behaviour take this one, so that they run on both."""
    if backend == "file":
        return str(tmp_path / "memory.mnemo.db")
    return new_db()


@pytest.fixture
def client(db: str) -> Iterator[MnemoClient]:
    """A client of a fresh database on each backend."""
    from mnemo import MnemoClient

    c = MnemoClient(db, AGENT, durability="none")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def sample_file(tmp_path: Path) -> Path:
    """The sample log of helpers/logs.py, with a signed checkpoint, in a file."""
    _b, built = sample_log(checkpoint=True)
    return built.write(tmp_path / "memory.mnemo.db")


@pytest.fixture
def sample_file_erased(tmp_path: Path) -> Path:
    """The sample log in a file, with the payload of r1 (put at seq 3, forgotten at seq 11) erased."""
    _b, built = sample_log(checkpoint=True)
    erase_slot(built.data, built, 3)
    return built.write(tmp_path / "memory.mnemo.db")


@pytest.fixture
def sample_db(db: str, sample_file: Path) -> str:
    """The sample log on each backend: the file, or its copy (entry for entry) in PostgreSQL."""
    return onto(db, sample_file)


@pytest.fixture
def sample_db_erased(db: str, sample_file_erased: Path) -> str:
    """The sample log with r1 erased on each backend: the file, or its copy in PostgreSQL."""
    return onto(db, sample_file_erased)
