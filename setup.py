"""Ships the top-level recipes/, configs/ and slurm/ inside the wheel, under trustlit/_shipped/.

They stay at the repository's top level for people working in a checkout; an installed trustlit
finds its copies through :func:`trustlit.resources.shipped_dir`. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("recipes", "configs", "slurm")


class BuildWithShippedFiles(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's own directories
            return
        for name in SHIPPED:
            target = Path(self.build_lib) / "trustlit" / "_shipped" / name
            shutil.copytree(name, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildWithShippedFiles})
