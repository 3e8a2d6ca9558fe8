"""Paths the tests need: the build (TPC_BUILD_DIR, set by ctest; default
<repo>/build), its tools, and a small GPT-2 over bytes with token data."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TPC_BUILD_DIR", REPO / "build"))
sys.path.insert(0, str(BUILD / "python"))

import tpc  # noqa: E402  (after the build's package is on the path)

MODEL_CONFIG = REPO / "test" / "tp-run" / "Inputs" / "gpt2-bytes.json"


def tool(name):
    return str(BUILD / "bin" / name)


def mpirun(ranks, command, timeout=180):
    """Runs `command` on `ranks` MPI ranks; a hang fails the test."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=str(BUILD / "python"))
    return subprocess.run(
        ["mpirun", "-np", str(ranks), "--oversubscribe", "-x", "PYTHONPATH"]
        + [str(c) for c in command],
        env=env, capture_output=True, text=True, errors="replace",
        timeout=timeout)


def worker(name):
    return [sys.executable, str(pathlib.Path(__file__).parent / "workers" / name)]


@pytest.fixture(scope="session")
def token_file(tmp_path_factory):
    """A few kilobytes of English, byte by byte (tpc-tokenize)."""
    directory = tmp_path_factory.mktemp("data")
    text = directory / "text.txt"
    lines = [f"Line {i}: the quick brown fox jumps over {i % 7} lazy dogs."
             for i in range(80)]
    text.write_text("\n".join(lines) + "\n")
    tokens = directory / "text.tokens"
    subprocess.run([tool("tpc-tokenize"), str(text), "-o", str(tokens)],
                   check=True)
    return tokens
