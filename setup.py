"""Builds the package's native module with the repository's CMake
(tools/build.sh, target tpc_python; TPC_BUILD_DIR overrides ./build) and
installs it beside python/tpc's Python files."""

import os
import pathlib
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent


class BuildWithCMake(build_py):
    def run(self):
        build = pathlib.Path(os.environ.get("TPC_BUILD_DIR", ROOT / "build"))
        env = dict(os.environ, BUILD_DIR=str(build), TPC_BUILD_TARGETS="tpc_python")
        subprocess.check_call([str(ROOT / "tools" / "build.sh")], env=env)
        target = pathlib.Path(self.build_lib) / "tpc"
        target.mkdir(parents=True, exist_ok=True)
        for built in (build / "python" / "tpc").iterdir():
            if built.suffix in (".py", ".so"):
                shutil.copy2(built, target / built.name)


class NativeDistribution(Distribution):
    """The wheel holds a native module: tagged for this Python and platform."""

    def has_ext_modules(self):
        return True


setup(
    packages=["tpc"],
    package_dir={"": "python"},
    cmdclass={"build_py": BuildWithCMake},
    distclass=NativeDistribution,
    options={"build": {"build_base": "build/setuptools"},
             "egg_info": {"egg_base": "build"}},
)
