"""metrics.jsonl and its optional W&B mirror (a stand-in `wandb` module records the calls)."""

import json
import sys
import types

import pytest

from hindsight.configs import ConfigError
from hindsight.logs import RunDir
from hindsight.methods.metrics import MetricsLog
from hindsight.methods.grpo import GRPOConfig


class FakeWandbRun:
    def __init__(self, **kwargs):
        self.init = kwargs
        self.logged: list[tuple[dict, int]] = []
        self.finished = False

    def log(self, values, step):
        self.logged.append((values, step))

    def finish(self):
        self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
    module = types.ModuleType("wandb")
    module.runs = []

    def init(**kwargs):
        module.runs.append(FakeWandbRun(**kwargs))
        return module.runs[-1]

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def test_rows_reach_jsonl_and_wandb(tmp_path, fake_wandb):
    config = GRPOConfig(wandb_project="hindsight-tests", lr=3e-4)
    log = MetricsLog(RunDir(tmp_path / "run"), config)
    log.log(1, {"rollout/success_rate": 0.5, "policy/loss": -0.1, "note": "text is not a scalar"})
    log.log(2, {"rollout/success_rate": 0.75})
    log.close()

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2] and rows[0]["note"] == "text is not a scalar"
    (run,) = fake_wandb.runs
    assert run.init["project"] == "hindsight-tests" and run.init["config"]["lr"] == 3e-4
    assert run.logged == [({"rollout/success_rate": 0.5, "policy/loss": -0.1}, 1), ({"rollout/success_rate": 0.75}, 2)]
    assert run.finished


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path, fake_wandb):
    config = GRPOConfig(wandb_project="p")
    for _ in range(2):
        MetricsLog(RunDir(tmp_path / "run"), config).close()
    first, second = fake_wandb.runs
    assert first.init["id"] == second.init["id"] and second.init["resume"] == "allow"
    MetricsLog(RunDir(tmp_path / "other"), config).close()
    assert fake_wandb.runs[-1].init["id"] != first.init["id"]


def test_missing_wandb_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes `import wandb` fail
    with pytest.raises(ConfigError, match="pip install wandb"):
        MetricsLog(RunDir(tmp_path / "run"), GRPOConfig(wandb_project="p"))
