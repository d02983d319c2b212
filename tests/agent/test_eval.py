"""`hindsight eval` end to end with the scripted, random and oracle policies and the bundled model."""

import json
from dataclasses import replace

import pytest

from hindsight.agent.evaluate import EvalConfig, read_eval_config, run_eval
from hindsight.cli.main import main
from hindsight.logs import read_trajectories


@pytest.mark.parametrize("env", ["frozenlake", "blocksworld", "sudoku"])
def test_oracle_solves_every_env_through_the_cli(env, tmp_path, capsys):
    out = tmp_path / env
    assert main(["eval", "--env", env, "--model", "oracle", "--episodes", "6", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["success_rate"] == 1.0 and summary["invalid_rate"] == 0.0
    trajectories = list(read_trajectories(out))
    assert len(trajectories) == 6 and all(t.success and t.split == "test" for t in trajectories)
    config = (out / "config.yaml").read_text()
    assert "env: " + env in config and "model: oracle" in config


def test_summary_table_is_printed(tmp_path, capsys):
    assert main(["eval", "--env", "frozenlake", "--model", "random", "--episodes", "3",
                 "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "success" in out and "invalid" in out and "eval.jsonl" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env", "frozenlak", "--model", "oracle"], "did you mean 'frozenlake'"),
        (["--env", "frozenlake", "--model", "gpt4"], "unknown model spec"),
        (["--env", "frozenlake", "--model", "scripted:/no/such/file.json"], "not found"),
        (["--env", "frozenlake", "--model", "oracle", "--memory", "lots"], "memory"),
        (["--env", "frozenlake", "--model", "oracle", "--set", "size=big"], "size"),
        (["--env", "frozenlake", "--model", "oracle", "--dtype", "bfloat16"], "unknown option(s) for oracle: dtype"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(args, message, tmp_path, capsys):
    assert main(["eval", *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert message.lower() in err.lower() and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_output_folder_that_cannot_be_made_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "run"
    assert main(["eval", "--env", "frozenlake", "--model", "oracle", "--episodes", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hindsight: error: cannot use {out}") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_refuses_to_append_to_an_existing_evaluation(tmp_path, capsys):
    args = ["eval", "--env", "sudoku", "--model", "oracle", "--episodes", "2", "--out", str(tmp_path / "e")]
    assert main(args) == 0
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "already holds an evaluation" in err and "--resume" in err


def test_scripted_responses_become_valid_and_invalid_steps(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["<action>left</action>", "nonsense", '{"action": "right"}', "<action>up</action>"]))
    run = run_eval(EvalConfig(env="frozenlake", model=f"scripted:{script}", episodes=1, max_steps=4,
                              out=str(tmp_path / "s")))
    (trajectory,) = read_trajectories(run)
    assert [s.action for s in trajectory.steps][:3] == ["left", None, "right"]
    assert [s.valid for s in trajectory.steps][:3] == [True, False, True]
    assert trajectory.steps[1].raw == "nonsense"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["invalid_rate"] > 0 and summary["interrupted"] is False


def test_random_policy_is_reproducible_with_the_run_seed(tmp_path):
    runs = [run_eval(EvalConfig(env="blocksworld", model="random", episodes=3, seed=7, out=str(tmp_path / f"r{i}")))
            for i in range(2)]
    actions = [[[s.action for s in t.steps] for t in sorted(read_trajectories(r), key=lambda t: t.seed)] for r in runs]
    assert actions[0] == actions[1]


@pytest.mark.slow
def test_bundled_model_runs_a_few_real_steps(tmp_path, capsys):
    out = tmp_path / "smol"
    code = main(["eval", "--env", "frozenlake", "--model", "smollm2", "--episodes", "2", "--max-steps", "2",
                 "--max-new-tokens", "24", "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 2 and summary["steps"] >= 2
    for trajectory in read_trajectories(out):
        for step in trajectory.steps:
            assert step.raw  # the model's own words, whatever they are
            assert step.token_ids and step.logprobs and len(step.token_ids) == len(step.logprobs)
            assert all(lp <= 0 for lp in step.logprobs)


def test_a_local_model_evaluates_in_bfloat16_and_records_it_for_a_resume(tiny_model_dir, tmp_path):
    out = tmp_path / "bf16"
    assert main(["eval", "--env", "frozenlake", "--model", f"hf:{tiny_model_dir}", "--dtype", "bfloat16",
                 "--episodes", "2", "--max-steps", "2", "--max-new-tokens", "4", "--out", str(out)]) == 0
    assert read_eval_config(out).model_options == {"dtype": "bfloat16"}
    assert len(list(read_trajectories(out))) == 2


class StopsOnThirdCall:
    """Answers "up" twice, then is interrupted: with max_steps=1 and 2 episodes at once, 4 finish."""

    spec = "stops-on-third-call"

    def __init__(self):
        self.calls = 0

    def generate(self, requests, params):
        from hindsight.types import Completion

        self.calls += 1
        if self.calls == 3:
            raise KeyboardInterrupt
        return [Completion(text="<action>up</action>") for _ in requests]


def interrupted_eval(tmp_path, monkeypatch) -> EvalConfig:
    """An evaluation of 6 tasks interrupted after finishing 4."""
    import hindsight.llm

    load = hindsight.llm.load_model
    monkeypatch.setattr(hindsight.llm, "load_model", lambda spec, **options: StopsOnThirdCall())
    config = EvalConfig(env="frozenlake", model="oracle", episodes=6, concurrency=2, max_steps=1,
                        out=str(tmp_path / "i"))
    with pytest.raises(KeyboardInterrupt):
        run_eval(config)
    monkeypatch.setattr(hindsight.llm, "load_model", load)
    return config


def test_interrupted_eval_keeps_finished_trajectories_and_says_so(tmp_path, monkeypatch):
    interrupted_eval(tmp_path, monkeypatch)
    summary = json.loads((tmp_path / "i" / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["episodes"] == 4 == len(list(read_trajectories(tmp_path / "i")))


def test_resume_runs_only_the_unfinished_tasks_and_matches_an_uninterrupted_run(tmp_path, monkeypatch, capsys):
    config = interrupted_eval(tmp_path, monkeypatch)
    out = tmp_path / "i"
    log = out / "trajectories" / "eval.jsonl"
    with log.open("a") as f:
        f.write('{"kind": "trajectory", "env": "frozenl')  # a line cut short by the crash

    assert main(["eval", "--resume", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["interrupted"] is False and summary["episodes"] == 6
    resumed = sorted(read_trajectories(out), key=lambda t: t.seed)
    whole = sorted(read_trajectories(run_eval(replace(config, out=str(tmp_path / "whole")))), key=lambda t: t.seed)
    assert [t.seed for t in resumed] == [t.seed for t in whole]
    # The four tasks the interrupted run finished keep their "up"; the other two were played by the oracle.
    assert [[s.action for s in t.steps] for t in resumed][4:] == [[s.action for s in t.steps] for t in whole][4:]
    assert sum(t.steps[0].action == "up" for t in resumed) >= 4

    # Resuming a finished evaluation runs nothing and rewrites the same summary.
    assert main(["eval", "--resume", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 6 and len(list(read_trajectories(out))) == 6


def test_resume_drops_the_attempts_of_an_unfinished_reflexion_task(tmp_path):
    from hindsight.agent.evaluate import is_final_attempt, keep_finished_tasks

    run = run_eval(EvalConfig(env="frozenlake", model="random:3", episodes=4, reflexion_attempts=3, max_steps=3,
                              env_kwargs={"size": 3}, out=str(tmp_path / "r")))
    log = run / "trajectories" / "eval.jsonl"
    lines = log.read_text().splitlines()
    trajectories = list(read_trajectories(run))
    retried = next(t.seed for t in trajectories if not is_final_attempt(t))
    final_line = 1 + next(i for i, t in enumerate(trajectories) if t.seed == retried and is_final_attempt(t))
    log.write_text("".join(line + "\n" for i, line in enumerate(lines) if i != final_line))

    kept = keep_finished_tasks(log)
    assert retried not in {t.seed for t in kept}
    assert {t.seed for t in kept} == {t.seed for t in trajectories} - {retried}
    assert [t.id for t in read_trajectories(run)] == [t.id for t in kept]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resume", "{tmp}/none"], "not an evaluation run directory"),
        (["--resume", "{tmp}/e", "--env", "sudoku"], "drop --env"),
        (["--resume", "{tmp}/e", "--dtype", "bfloat16"], "drop --env/--model/--out/--set/--dtype"),
        ([], "--env and --model are required"),
    ],
)
def test_resume_mistakes_are_one_line(args, message, tmp_path, capsys):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(["eval", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_self_guide_at_inference_records_an_assessment_before_every_action(tmp_path, capsys):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Reason: nothing done yet.\nLabel: neutral", "<action>left</action>",
                                  "Reason: a wall.\nLabel: negative", "<action>right</action>"]))
    out = tmp_path / "sg"
    assert main(["eval", "--env", "frozenlake", "--model", f"scripted:{script}", "--episodes", "1", "--max-steps", "2",
                 "--self-guide", "--out", str(out), "--json"]) == 0
    (trajectory,) = read_trajectories(out)
    assert [s.action for s in trajectory.steps] == ["left", "right"]
    assert [(s.assessment.label, s.assessment.reward) for s in trajectory.steps] == [("neutral", 0.0),
                                                                                     ("negative", -0.1)]


def test_reflact_at_inference_reflects_on_the_goal_before_every_action(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["The goal G is two cells down.", "<action>down</action>",
                                  "", "<action>down</action>"]))
    run = run_eval(EvalConfig(env="frozenlake", model=f"scripted:{script}", episodes=1, max_steps=2, reflact=True,
                              out=str(tmp_path / "r")))
    (trajectory,) = read_trajectories(run)
    notes = [step.assessment for step in trajectory.steps]
    assert [(n.kind, n.label, n.reward) for n in notes] == [("reflection", None, 0.0)] * 2
    assert notes[0].text == "The goal G is two cells down." and notes[0].parse_error is None
    assert notes[1].parse_error == "empty reflection"
    with pytest.raises(ValueError, match="choose one"):
        EvalConfig(env="frozenlake", model="oracle", self_guide=True, reflact=True)


def test_the_goal_reflection_prompt_shows_task_steps_and_situation():
    from hindsight.agent.reflection import GoalReflector
    from hindsight.types import Step

    step = Step(index=0, observation="You are at A.", state_key="a", raw="", action="left", analysis=None, valid=True,
                reward=0.0, score=0.0, feedback="You are at B.")
    (system, user) = GoalReflector().prompt("Reach G.", [step], "You are at B.")
    assert "Reach G." in user.content and "1. left -> You are at B." in user.content
    assert user.content.index("Current situation:\nYou are at B.") > user.content.index("Steps so far")


def test_best_of_n_takes_the_prms_favourite_candidate(tmp_path):
    plain = run_eval(EvalConfig(env="frozenlake", model="random:1", episodes=20, env_kwargs={"size": 3},
                                max_steps=6, out=str(tmp_path / "plain")))
    chosen = run_eval(EvalConfig(env="frozenlake", model="random:1", episodes=20, env_kwargs={"size": 3},
                                 max_steps=6, best_of=8, prm="oracle", out=str(tmp_path / "best")))
    plain_rate = json.loads((plain / "summary.json").read_text())["success_rate"]
    best_rate = json.loads((chosen / "summary.json").read_text())["success_rate"]
    # Eight uniform candidates hold the planner's move 90% of the time; the oracle PRM finds it.
    assert best_rate >= 0.8 > plain_rate + 0.3
    # Every best-of turn keeps its eight rated candidates; the step took the first of the best.
    for trajectory in read_trajectories(chosen):
        for step in trajectory.steps:
            assert len(step.candidates) == 8
            scores = [c.score for c in step.candidates]
            assert all(0.0 <= score <= 1.0 for score in scores)  # the random policy's moves all parse
            assert step.action == step.candidates[scores.index(max(scores))].action
    assert all(step.candidates is None for trajectory in read_trajectories(plain) for step in trajectory.steps)
    with pytest.raises(ValueError, match="temperature above 0"):
        EvalConfig(env="frozenlake", model="random", best_of=4, temperature=0)
    with pytest.raises(ValueError, match="prm cannot be 'policy'"):
        EvalConfig(env="frozenlake", model="random", best_of=4, prm="policy")
