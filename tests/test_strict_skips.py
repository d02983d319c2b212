"""In CI (`HINDSIGHT_STRICT_SKIPS=1`, set by `.ci/run`) a skipped test fails the run."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

SKIPPING = '''
import pytest

def test_needs_a_missing_package():
    pytest.importorskip("hindsight_no_such_package")
'''


SKIPPING_MODULE = '''
import pytest

pytest.importorskip("hindsight_no_such_package")


def test_in_a_module_that_needs_a_missing_package():
    pass
'''


# Plugins these runs never use: loading hypothesis's and anyio's in every process was most of
# this file's time (seven pytest processes).
UNUSED_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio")


def run_pytest(folder: Path, strict: bool, *options: str) -> int:
    env = {**os.environ, "HINDSIGHT_STRICT_SKIPS": "1" if strict else "0"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *UNUSED_PLUGINS, *options, str(folder)],
                          cwd=folder, env=env, capture_output=True).returncode


def test_a_skip_fails_only_in_strict_mode(tmp_path):
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    assert run_pytest(tmp_path, strict=False) == 0
    assert run_pytest(tmp_path, strict=True) == 1


def test_a_skip_fails_in_strict_mode_under_xdist_too(tmp_path):
    """The suite runs in pytest-xdist workers (pyproject's addopts): their skips reach the verdict."""
    shutil.copy(Path(__file__).parent / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    (tmp_path / "test_skipping_module.py").write_text(SKIPPING_MODULE)
    assert run_pytest(tmp_path, False, "-n", "2", "--dist", "loadfile") == 0
    assert run_pytest(tmp_path, True, "-n", "2", "--dist", "loadfile") == 1
    (tmp_path / "test_skipping.py").unlink()  # the module-level skip alone still fails the run
    assert run_pytest(tmp_path, True, "-n", "2", "--dist", "loadfile") == 1
