"""benchmarks/judge_check.py: does a judge model's score depend on the move it is asked about?"""

import json
import sys
from pathlib import Path

import pytest

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prm import JudgePRM
from hindsight.agent.prompts import Memory
from hindsight.envs import make
from hindsight.logs.schema import trajectory_to_record
from hindsight.types import Completion

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import judge_check  # noqa: E402


class Answers:
    """A judge backend that answers `respond(prompt text)`."""

    spec = "fake"

    def __init__(self, respond):
        self.respond = respond

    def generate(self, requests, params):
        return [Completion(text=self.respond(r.messages[-1].content)) for r in requests]


def failures(count=3):
    lake = lambda: make("frozenlake", size=3, max_steps=6)  # noqa: E731
    walker = Answers(lambda prompt: "<action>up</action>")
    engine = RolloutEngine(lake, walker, RolloutConfig(memory=Memory.parse("none")))
    runs = engine.run([Task(seed=s) for s in range(12)])
    failed = [t for t in runs if not t.success][:count]
    assert len(failed) == count
    return failed


def test_a_judge_that_ignores_the_move_is_caught():
    queries = judge_check.queries_at_failures(failures(), states=3)
    assert {state for state, _ in queries} == {0, 1, 2} and len(queries) == 12  # four moves at each state
    ignores = JudgePRM(Answers(lambda prompt: "Score: 1"))
    report = judge_check.summary(judge_check.rate(ignores, queries))
    assert report["readable"] == 12 and report["states_all_moves_same_score"] == 3
    assert report["mean_score_planner_move"] == report["mean_score_other_moves"] == 1.0


def test_a_judge_that_reads_the_move_scores_the_planners_move_higher():
    queries = judge_check.queries_at_failures(failures(), states=3)
    ratings = judge_check.rate(JudgePRM(Answers(lambda prompt: "Score: 0")), queries)
    planner_moves = {(r.state, r.action) for r in ratings if r.planner == 1.0}
    assert planner_moves

    def knows(prompt):  # rates 0.9 exactly the moves the planner would rate 1
        state = next(s for s, q in queries if q.trajectory.steps[q.at].observation.strip() in prompt)
        action = prompt.split("Proposed next move: ")[1].split("\n")[0]
        return "Score: 0.9" if (state, action) in planner_moves else "Well, rows are numbered from 1 at the top."

    report = judge_check.summary(judge_check.rate(JudgePRM(Answers(knows), fallback=0.5), queries))
    assert report["mean_score_planner_move"] == pytest.approx(0.9) and report["mean_score_other_moves"] == 0.5
    assert report["readable"] == len(planner_moves) and report["states_all_moves_same_score"] == 0


def test_the_command_reads_a_log_and_says_what_is_wrong(tmp_path, capsys):
    log = tmp_path / "rollouts.jsonl"
    log.write_text("\n".join(json.dumps(trajectory_to_record(t)) for t in failures()) + "\n{broken\n")
    assert judge_check.main([str(log), "--judge", "random:1", "--states", "2"]) == 0
    out = capsys.readouterr()
    assert "rollouts.jsonl:4: invalid JSON" in out.err and json.loads(out.out[out.out.index("{\n"):])["moves"] == 8
    with pytest.raises(SystemExit):
        judge_check.main([str(tmp_path / "missing.jsonl"), "--judge", "random:1"])
    assert "no such log" in capsys.readouterr().err
