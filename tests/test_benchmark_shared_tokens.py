"""benchmarks/shared_tokens.py: what each training layout pushes through the model."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import shared_tokens  # noqa: E402


def report(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["shared_tokens.py", *args])
    shared_tokens.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("bundled_tokenizer")  # skips where the bundled model is not installed
def test_whole_episodes_push_each_distinct_token_about_once(monkeypatch, capsys):
    full = report(monkeypatch, capsys, "--env", "frozenlake", "--env-kwargs", "{size: 4, max_steps: 6}",
                  "--memory", "full", "--episodes", "3", "--policy", "random")
    pushed = full["pushed"]
    assert full["turns"] > full["episodes"] == 3
    # Sharing never pushes more, and a whole episode pushes its context once: near the floor.
    assert pushed["per turn, whole"] > pushed["per turn, shared prefix"] > pushed["whole episodes, shared prefix"]
    assert full["distinct_tokens"] <= pushed["whole episodes, shared prefix"] <= 1.05 * full["distinct_tokens"]
    none = report(monkeypatch, capsys, "--env", "frozenlake", "--env-kwargs", "{size: 4, max_steps: 6}",
                  "--memory", "none", "--episodes", "2", "--group-size", "2")
    # Without history there is no episode to join: the per-turn layout is kept.
    assert none["pushed"]["whole episodes, shared prefix"] == none["pushed"]["per turn, shared prefix"]
    assert none["sampler_distinct_prompt_tokens_per_turn_batch"] < none["sampler_prompt_tokens"]
