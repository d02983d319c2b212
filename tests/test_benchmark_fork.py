"""benchmarks/fork_run.py: a run continued from another's checkpoint under another guidance schedule."""

import json
import sys
from pathlib import Path

import pytest
import torch

from hindsight.methods.grpo import train_grpo
from hindsight.train.checkpoint import list_checkpoints
from tests.methods.test_training_loops import comparable, grpo_config, read_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fork_compare  # noqa: E402
import fork_run  # noqa: E402

# λ(u) with u = (update − 1)/3 in the three-update runs below: 0 at updates 1-2, 1 at update 3.
LATE = dict(guidance_reward=True, trust_start=0.5, trust_full=0.6, trust_hold_until=1.0, trust_end=1.0)
LATE_SWITCHES = [f"{key}={str(value).lower()}" for key, value in LATE.items()]


def fake_source(folder: Path, steps=(2, 4), lambdas=(0.0,) * 6, **overrides) -> Path:
    """A finished-looking GRPO+SG run folder: config, metrics with λ, a train log and checkpoints."""
    from dataclasses import asdict

    from hindsight.methods.grpo import GRPOConfig

    config = GRPOConfig(self_guide=True, updates=len(lambdas), **overrides)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(json.dumps({"kind": "grpo", **asdict(config)}))  # JSON is YAML
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "selfguide/lambda": w}) + "\n"
                                                  for i, w in enumerate(lambdas)))
    (folder / "trajectories").mkdir()
    (folder / "trajectories" / "train.jsonl").write_text('{"header": 1}\n')
    for step in steps:
        state = folder / "checkpoints" / f"step-{step:06d}"
        state.mkdir(parents=True)
        (state / "state.pt").write_bytes(b"state")
    return folder


def test_a_fork_copies_the_checkpoint_and_changes_only_the_schedule(tmp_path):
    source = fake_source(tmp_path / "sg")
    record = fork_run.fork(source, 2, tmp_path / "late", LATE_SWITCHES)
    assert record["step"] == 2 and record["changes"] == LATE
    fork = tmp_path / "late"
    assert [c.step for c in list_checkpoints(fork)] == [2]  # only the one it continues from
    config = fork_run.read_config(fork)[1]
    assert config.guidance_reward and config.trust_start == 0.5 and config.seed == 0
    assert (fork / "metrics.jsonl").read_text() == (source / "metrics.jsonl").read_text()
    assert json.loads((fork / "forked_from.json").read_text())["source"] == str(source.resolve())


@pytest.mark.parametrize("step, switches, message", [
    # The paper's schedule over 6 updates gives λ = 1 at update 4 (u = 0.5): the runs part before step 4.
    (4, ["guidance_reward=true"], "λ differs at update 4"),
    (2, ["lr=0.5"], "only the guidance schedule may change"),
    (2, [], "changes nothing"),
    (3, LATE_SWITCHES, "no complete checkpoint after update 3"),
    (0, LATE_SWITCHES, "step must be"),
    (2, ["trust_start=0.9", "guidance_reward=true"], "trust schedule needs"),  # breakpoints out of order
])
def test_a_fork_that_would_not_be_the_run_it_claims_is_refused(tmp_path, step, switches, message):
    source = fake_source(tmp_path / "sg")
    with pytest.raises(fork_run.ForkError, match=message):
        fork_run.fork(source, step, tmp_path / "fork", switches)
    assert not (tmp_path / "fork").exists()


def test_a_fork_must_agree_with_the_weights_the_source_logged(tmp_path):
    # A source whose log says λ was 1 at update 2, though its config says guidance off: refused.
    source = fake_source(tmp_path / "sg", lambdas=(0.0, 1.0, 0.0, 0.0, 0.0, 0.0))
    with pytest.raises(fork_run.ForkError, match="logged λ = 1 at update 2"):
        fork_run.fork(source, 2, tmp_path / "fork", LATE_SWITCHES)


def test_the_command_line_says_what_went_wrong_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fork_run", str(tmp_path / "nothing"), "2", str(tmp_path / "fork"),
                                      "--set", "guidance_reward=true"])
    with pytest.raises(SystemExit) as exit_info:
        fork_run.main()
    assert exit_info.value.code == 2 and "is not a run directory" in capsys.readouterr().err


def test_a_forked_run_resumes_into_the_run_it_would_have_been(tiny_model_dir, tmp_path):
    settings = dict(self_guide=True, assessment_max_new_tokens=4, updates=3, tasks_per_update=1, epochs=1,
                    checkpoint_every=1, eval_every=0, final_eval_episodes=1)
    source = train_grpo(grpo_config(tiny_model_dir, **settings), tmp_path / "sg")
    straight = train_grpo(grpo_config(tiny_model_dir, **settings, **LATE), tmp_path / "late")
    fork_run.fork(source, 2, tmp_path / "fork", LATE_SWITCHES)
    forked = train_grpo(None, tmp_path / "fork", resume=True)

    rows = comparable(read_metrics(forked))
    assert rows == comparable(read_metrics(straight))
    assert rows != comparable(read_metrics(source))  # λ = 1 at update 3 is the fork's own
    a = torch.load(list_checkpoints(straight)[-1].path / "model" / "weights.pt")
    b = torch.load(list_checkpoints(forked)[-1].path / "model" / "weights.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (forked / "trajectories" / "train.jsonl").read_text() == (
        straight / "trajectories" / "train.jsonl").read_text()

    # What the fork changed, read back: update 3 sampled the same rollouts under λ = 1 and λ = 0.
    lines = fork_compare.report(forked)
    assert lines[0].startswith("fork against sg: forked after update 2")
    update_3 = next(line for line in lines if line.startswith("| 3 |"))
    same = update_3.split(" | ")[2].split(" / ")
    assert "| 1 / 0 |" in update_3 and same[0] == same[1]
    header = next(i for i, line in enumerate(lines) if line.startswith("| checkpoint |"))
    assert lines[header + 2].startswith("| 3 | ") and "–" not in lines[header + 2]  # moved from step 2's weights
    assert lines[-1].startswith("final test, 1 tasks in both")


def test_advantage_changes_reach_only_the_groups_whose_env_returns_differ():
    env = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    sums = torch.tensor([[0.2, 0.0, 0.5, 0.1], [0.5, 0.9, 0.5, 0.4], [0.4, 0.4, 0.4, 0.4]], dtype=torch.float64)
    # Tied env returns: any λ > 0 gives the same advantages (the scale divides out), unlike λ = 0.
    half_vs_one = fork_compare.advantage_changes(env, sums, (0.5, 1.0), normalize_std=True)
    assert half_vs_one[0] < 1e-5 and half_vs_one[2] == 0
    # Where the env returns differ, λ's size reweights the group: (0.25, 1.45, 0.25, 1.2) against
    # (0.5, 1.9, 0.5, 1.4), normalised, differ by up to about 0.22.
    assert half_vs_one[1] == pytest.approx(0.217, abs=1e-3)
    off_vs_on = fork_compare.advantage_changes(env, sums, (0.0, 1.0), normalize_std=True)
    assert off_vs_on[0] > 1 and off_vs_on[2] == 0
    # Without the std normalisation the scale no longer divides out.
    assert fork_compare.advantage_changes(env, sums, (0.5, 1.0), normalize_std=False)[0] > 0.1


def test_fork_compare_says_what_is_not_a_fork(tmp_path, monkeypatch, capsys):
    source = fake_source(tmp_path / "sg")
    with pytest.raises(fork_compare.CompareError, match="no forked_from.json"):
        fork_compare.report(source)
    monkeypatch.setattr(sys, "argv", ["fork_compare", str(tmp_path / "nothing")])
    with pytest.raises(SystemExit) as exit_info:
        fork_compare.main()
    assert exit_info.value.code == 2 and "is not a run directory" in capsys.readouterr().err
