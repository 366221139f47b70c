"""Data dirs made by the real ``cmbuyer-server init``, without migrating a fresh database for every test.

Migrating a new database is a dozen fsynced transactions (about 0.1–0.4 s, most of it waiting on the disk), and
some 900 tests need a data dir. So each test process migrates one database once (the real ``init`` on a
template dir), and :func:`init_data_dir` starts every data dir from a copy of that file, then runs the real
``init`` on it: the data dir gets its own fresh secrets and 0600 env file, its permissions and its evidence
dir from ``init`` itself, which finds the schema current (the checksummed migrations are checked, none is
applied). The copy is byte for byte what ``init`` wrote into an empty dir.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import shutil
import tempfile
import threading
from pathlib import Path

from cmbuyer.server.cli import main as server_cli

DB_NAME = "cmbuyer.sqlite3"  # the file `init` creates in a data dir (config.Settings.db_path)

_lock = threading.Lock()
_template: list[Path] = []


def _migrated_db() -> Path:
    """This process's database migrated by the real ``init`` (made on first use, removed at exit)."""
    with _lock:
        if not _template:
            root = Path(tempfile.mkdtemp(prefix="cmbuyer-test-template-"))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            _run_init(root / "data")
            db = root / "data" / DB_NAME
            assert db.is_file(), f"init wrote no {DB_NAME} in {root / 'data'}"
            _template.append(db)
        return _template[0]


def _run_init(data_dir: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert server_cli(["--data-dir", str(data_dir), "init", "--json"]) == 0


def init_data_dir(data_dir: Path) -> Path:
    """``cmbuyer-server init`` on ``data_dir``; a new directory (its parent must exist) starts from a copy of
    this process's migrated database, an existing one is initialized as it is (``init`` keeps its env file and
    migrates its database). Returns ``data_dir``; AssertionError when ``init`` fails."""
    if not data_dir.exists():
        data_dir.mkdir(mode=0o700)
        shutil.copyfile(_migrated_db(), data_dir / DB_NAME)
    _run_init(data_dir)
    return data_dir
