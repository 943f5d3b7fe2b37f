"""Packaging needs one step pyproject.toml cannot say: build the Tiering page (npm) before the package is built, so
the wheel carries it (``airflow_provider_tiering/plugins/www/build_page.py``)."""

import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUILD_PAGE = Path(__file__).resolve().parent / "airflow_provider_tiering" / "plugins" / "www" / "build_page.py"


class BuildPyWithPage(build_py):
    def run(self) -> None:
        runpy.run_path(str(BUILD_PAGE))["build"]()
        super().run()


setup(cmdclass={"build_py": BuildPyWithPage})
