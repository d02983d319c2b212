"""The `verl.plugins` entry point registers Hindsight's agent loop and estimators when verl is imported."""

import subprocess
import sys

import pytest

# verl has its own venv (constraints-verl.txt): `bash .ci/verl` builds it and runs these; `.ci/run` ignores them.
pytest.importorskip("verl", reason="verl is not installed here; it has its own venv (bash .ci/verl)")

PROBE = """
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
print(_agent_loop_registry["hindsight"]["_target_"])
print(get_adv_estimator_fn("hindsight_grpo").__qualname__)
"""


def test_importing_verl_registers_the_agent_loop_and_the_estimators():
    # A fresh interpreter: registration must come from verl's plugin loader, not from this test's imports.
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["hindsight.verl.agent_loop.HindsightAgentLoop", "trajectory_grpo"]
