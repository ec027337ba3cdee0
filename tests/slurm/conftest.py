"""Finding the SLURM cluster that the ``slurm``-marked tests run on.

``tests/slurm/cluster.sh up`` starts one (CI's ``.ci/run`` does, and exports ``SLURM_CONF``);
without ``SLURM_CONF`` the tests look for that script's default directory. With no reachable
cluster they are skipped, with the command that starts one, unless ``TRUSTLIT_REQUIRE_SLURM=1``
(set by CI), which turns the skip into a failure: CI must really run them.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: runs jobs on a real SLURM cluster (tests/slurm/cluster.sh up)")


def _default_conf() -> Path:
    directory = os.environ.get("TRUSTLIT_SLURM_DIR") or Path(tempfile.gettempdir()) / "trustlit-slurm"
    return Path(directory) / "slurm.conf"


def _reachable(conf: str) -> str | None:
    """None when ``scontrol ping`` reaches the controller, else why not."""
    try:
        result = subprocess.run(
            ["scontrol", "ping"], env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True, timeout=20
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as error:
        return f"scontrol ping failed: {error}"
    return None if result.returncode == 0 and "UP" in result.stdout else (result.stdout + result.stderr).strip()


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    """The ``SLURM_CONF`` of a running cluster; skips (or fails under ``TRUSTLIT_REQUIRE_SLURM=1``) without one."""
    conf = os.environ.get("SLURM_CONF") or str(_default_conf())
    problem = None if Path(conf).is_file() else f"no slurm.conf at {conf}"
    problem = problem or _reachable(conf)
    if problem is None:
        return conf
    message = f"no SLURM cluster ({problem}): start one with `sudo tests/slurm/cluster.sh up` or run `make test-slurm`"
    if os.environ.get("TRUSTLIT_REQUIRE_SLURM") == "1":
        pytest.fail(f"TRUSTLIT_REQUIRE_SLURM=1 but {message}")
    pytest.skip(message)
