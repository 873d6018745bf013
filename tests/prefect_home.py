"""A Prefect home whose database Prefect has already created, for the tests that start
``python -m muflow run`` (its temporary Prefect server) in a home of their own.

Prefect creates its database the first time a server starts in a home (its migrations:
about 9 s on a 2-core machine), as on a person's first run; every later run in that home
starts the server on the existing database. The tests below each want a home of their own
(no run sees another test's flow runs) but not the first run's cost every time: the
database is made once a test session, by Prefect's own command (``prefect server database
upgrade``), and copied into each test's home. ``test_run_command``'s default run keeps a
new, empty home: a first run there is tested as a person meets it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_template: Path | None = None


def _made_template() -> Path:
    """A home with Prefect's database created by its own upgrade command, once a session."""
    global _template
    if _template is None:
        root = Path(tempfile.mkdtemp(prefix="muflow-test-prefect-home-"))
        atexit.register(shutil.rmtree, root, True)
        home = root / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
        done = subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade",
                               "-y"], env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or not (home / "prefect.db").is_file():
            raise RuntimeError(f"prefect server database upgrade failed:\n{done.stderr[-3000:]}")
        _template = home
    return _template


def prefect_home(path: Path) -> Path:
    """``path`` as a Prefect home with its database already created (copied from the
    session's template unless ``path`` exists: a second run of a test in the same home keeps
    what its first run wrote)."""
    path = Path(path)
    if not path.exists():
        shutil.copytree(_made_template(), path)
    return path
