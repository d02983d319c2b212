"""benchmarks/bestof_failures.py: what the candidates of a failed best-of episode's last turn offered."""

import json
import sys
from pathlib import Path

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prm import BestOfN, PRMScore
from hindsight.agent.prompts import Memory
from hindsight.envs import make
from hindsight.logs.schema import trajectory_to_record
from hindsight.types import Completion

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bestof_failures  # noqa: E402


class Moves:
    """A policy backend whose k-th answer is moves[k % len(moves)]: candidates of a turn differ."""

    spec = "fake"

    def __init__(self, *moves):
        self.moves, self.calls = moves, 0

    def generate(self, requests, params):
        out = []
        for _ in requests:
            out.append(Completion(text=f"<action>{self.moves[self.calls % len(self.moves)]}</action>"))
            self.calls += 1
        return out


class Prefers:
    """A PRM that scores one move 1 and every other 0, whatever the state."""

    def __init__(self, favourite):
        self.favourite = favourite

    def score(self, queries):
        return [PRMScore(1.0 if query.action == self.favourite else 0.0) for query in queries]


def best_of(backend, prm, seeds=range(40)):
    lake = lambda: make("frozenlake", size=3, max_steps=6)  # noqa: E731
    config = RolloutConfig(memory=Memory.parse("none"), best_of=BestOfN(2, prm))
    return RolloutEngine(lake, backend, config).run([Task(seed=s) for s in seeds])


def fell(trajectory):
    return not trajectory.success and "fell into" in trajectory.steps[-1].feedback


def test_one_move_sampled_is_never_a_choice_passed_over():
    runs = best_of(Moves("down"), Prefers("down"))
    count = bestof_failures.count_failures(runs)
    falls = sum(fell(t) for t in runs)
    assert falls and count.episodes == len(runs) and count.failed == sum(not t.success for t in runs)
    assert count.fatal_one_move == count.fatal == falls
    assert count.fatal_all_fatal == count.fatal_passed_over == 0
    assert count.out_of_budget == count.failed - falls


def test_a_safe_candidate_the_prm_passed_over_is_counted_with_its_scores():
    # Candidates "down" and "right" every turn; the PRM always takes "down", into holes too.
    runs = best_of(Moves("down", "right"), Prefers("down"))
    count = bestof_failures.count_failures(runs)
    assert count.fatal == sum(fell(t) for t in runs)
    assert count.fatal_one_move == 0 and count.fatal_passed_over > 0
    assert count.fatal_all_fatal + count.fatal_passed_over == count.fatal
    assert dict(count.passed_over_scores) == {(1.0, 0.0): count.fatal_passed_over}
    assert "with a non-fatal candidate the PRM passed over" in bestof_failures.report(count)


def test_command_line_reads_a_log_and_refuses_one_without_candidates(tmp_path, capsys):
    log = tmp_path / "eval.jsonl"
    log.write_text("".join(json.dumps(trajectory_to_record(t)) + "\n" for t in best_of(Moves("down"), Prefers("down"))))
    assert bestof_failures.main([str(log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fatal"] == data["fatal_one_move"] > 0
    lake = lambda: make("frozenlake", size=3, max_steps=6)  # noqa: E731
    plain = RolloutEngine(lake, Moves("down"), RolloutConfig(memory=Memory.parse("none"))).run(
        [Task(seed=s) for s in range(20)])
    log.write_text(json.dumps(trajectory_to_record(next(t for t in plain if not t.success))) + "\n")
    assert bestof_failures.main([str(log)]) == 2
    assert "no best-of candidates" in capsys.readouterr().err
    assert bestof_failures.main([str(tmp_path / "missing.jsonl")]) == 2
