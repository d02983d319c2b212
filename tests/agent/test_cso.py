"""CSO's pipeline on FrozenLake: alternatives, PRM scores, branch verification and replayable pairs."""

import copy
import json

import pytest

from hindsight.agent.cso import branch_points, make_pairs, sample_alternatives, score_steps, verify
from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task
from hindsight.agent.prm import JudgePRM, OraclePRM, StepQuery, parse_score
from hindsight.agent.replay import replay_to
from hindsight.agent.prompts import Memory
from hindsight.envs import make
from hindsight.llm import load_model
from hindsight.types import Completion

from .fakes import RecordingBackend

LAKE = {"size": 3, "max_steps": 6}
CONFIG = RolloutConfig(memory=Memory.parse("none"), concurrency=64)


def lake():
    return make("frozenlake", **LAKE)


def always(action):
    return RecordingBackend(lambda request: f"<action>{action}</action>")


def failures_of(action, seeds=range(12)):
    runs = RolloutEngine(lake, always(action), CONFIG).run([Task(seed=s) for s in seeds])
    failed = [t for t in runs if not t.success]
    assert failed
    return failed


def test_the_oracle_prm_follows_the_planner():
    (trajectory,) = failures_of("up", seeds=[next(s for s in range(50) if not _solved_by("up", s))])
    env = lake()
    env.reset(trajectory.seed)
    best = env.oracle_action()
    scores = OraclePRM().score([StepQuery(trajectory, 0, best), StepQuery(trajectory, 0, "jump")])
    # A refused move wastes a turn but leaves the task solvable.
    assert scores[0].value == 1.0 and scores[1].value == 0.25
    # Walking up along the top edge changes nothing: a wasted move, likewise 0.25.
    stuck = [t for t in failures_of("up") if any(a.state_key == b.state_key for a, b in zip(t.steps, t.steps[1:]))]
    first = stuck[0]
    k = next(k for k, (a, b) in enumerate(zip(first.steps, first.steps[1:])) if a.state_key == b.state_key)
    assert OraclePRM().score([StepQuery(first, k, "up")])[0].value == 0.25


def test_the_oracle_prm_scores_a_fall_below_every_recoverable_move():
    # The last step of a fall: the fatal move scores 0, every move that keeps the task solvable more.
    fall = next(t for t in failures_of("down") + failures_of("right") if "fell into" in t.steps[-1].feedback)
    at, moves = fall.num_steps - 1, ("up", "down", "left", "right")
    scores = dict(zip(moves, OraclePRM().score([StepQuery(fall, at, move) for move in moves])))
    assert scores[fall.steps[-1].action].value == 0.0
    env = replay_to(fall, at)
    fatal = {move for move in moves if _ends_unsolved(env, move)}
    assert fatal and fatal != set(moves)
    assert all((scores[move].value == 0.0) == (move in fatal) for move in moves)
    assert min(scores[move].value for move in set(moves) - fatal) >= 0.25


def _ends_unsolved(env, move):
    probe = copy.deepcopy(env)
    probe.step(move)
    return probe.done and not probe.is_success()


def _solved_by(action, seed):
    return RolloutEngine(lake, always(action), CONFIG).run([Task(seed=seed)])[0].success


def test_alternatives_are_one_turn_continuations_without_duplicates():
    failures = failures_of("up")[:3]
    expert = RecordingBackend(lambda request: "<action>down</action>" if "row 1" in request.messages[-1].content
                              else "<action>right</action>")
    found = sample_alternatives(RolloutEngine(lake, expert, CONFIG), failures, k=4)
    assert len(found) == sum(t.num_steps for t in failures)
    # Every sample of every step goes through the pool: full batches, one call per pool.
    assert sum(expert.batch_sizes) == 4 * len(found) and all(size == 64 for size in expert.batch_sizes[:-1])
    for alt in found:
        assert len(alt.actions) <= 1 and alt.repeats + len(alt.actions) == 4
        assert "up" not in alt.actions  # the policy's own action is never its alternative


def test_the_oracle_finds_verified_critical_steps_and_the_pairs_replay_with_the_registry():
    failures = failures_of("up")
    expert = RolloutEngine(lake, load_model("oracle"), CONFIG)
    found = sample_alternatives(expert, failures, k=3)
    scored = score_steps(OraclePRM(), failures, found)
    assert any(s.candidate for s in scored)
    picks = branch_points(scored)
    assert picks and all(scored_step.candidate for scored_step in scored
                         if any((p.trajectory, p.at) == (scored_step.alternatives.trajectory,
                                                         scored_step.alternatives.at) for p in picks))
    # The oracle continues after each alternative, so a branch fails only when the step budget
    # the failure already spent runs out; the stubborn policy (always up) gets there only when
    # the alternative leaves the goal straight above it.
    verified = verify(RolloutEngine(lake, load_model("oracle"), CONFIG), failures, picks)
    stubborn = verify(RolloutEngine(lake, always("up"), CONFIG), failures, picks)
    assert sum(b.verified for b in stubborn) < sum(b.verified for b in verified)
    assert all(b.continuations[0].truncated for b in verified if not b.verified)
    assert all(set(s.action for s in b.continuations[0].steps[b.pick.at + 1:]) <= {"up"} for b in stubborn)
    pairs = make_pairs(failures, scored, verified, CONFIG.prompt_builder())
    assert len(pairs) == sum(b.verified for b in verified)
    assert len(make_pairs(failures, scored, stubborn, CONFIG.prompt_builder())) == sum(b.verified for b in stubborn)
    for pair in pairs:
        json.dumps(pair)  # JSON-compatible, as the JSONL file needs
        assert pair["chosen"] != pair["rejected"] and pair["rejected_action"] == "up"
        assert pair["prm"]["policy"] < 0.45 < 0.65 < pair["prm"]["chosen"]
        env = make(pair["env"], **pair["env_kwargs"])
        env.reset(pair["seed"])
        for action in pair["prefix_actions"] + [pair["chosen_action"]] + pair["branch"]["actions"]:
            _, _, terminated, truncated, info = env.step(action)
        assert info["success"] and pair["branch"]["success"]
        assert pair["prompt"][-1]["role"] == "user" and pair["chosen"][0]["role"] == "assistant"


def test_ablations_no_prm_branches_everything_and_no_verification_trusts_the_prm():
    failures = failures_of("up")[:4]
    found = sample_alternatives(RolloutEngine(lake, load_model("random:3"), CONFIG), failures, k=3)
    scored = score_steps(OraclePRM(), failures, found)
    everything = branch_points(scored, use_prm=False)
    assert len(everything) == sum(len(a.actions) for a in found) >= len(branch_points(scored))
    unverified = make_pairs(failures, scored, [], CONFIG.prompt_builder(), verified_only=False)
    assert all(p["branch"] is None and p["prm"]["chosen"] > 0.65 for p in unverified)
    assert len(unverified) == sum(sum(v > 0.65 for v in s.scores) for s in scored if s.candidate)


@pytest.mark.parametrize("text, value", [
    ("Score: 0.8", 0.8), ("score = .35", 0.35), ("**Score:** 80%", 0.8), ("I give it 7/10.", 0.7),
    ("Score: 1", 1.0), ("0", 0.0), ("Score: 3", None), ("no idea", None), ("Score: 85/100", 0.85),
    ("0.75 since it moves closer", 0.75), ("  **0.5**", 0.5),
    # What the bundled 135M judge answers: the prompt copied back, or a list of moves. Their
    # numbers are not scores (the first number of each once read as 1.0).
    ("You are standing on a frozen lake. Rows are numbered from 1 at the top", None),
    ("1. right -> You moved right to row 2, column 1.", None), ("1) up", None), ("1. 1. 1. 1. 1. 1", None),
    ("0.5. A safe step", 0.5), ("1.\n", 1.0),
])
def test_judge_scores_are_parsed_tolerantly(text, value):
    assert parse_score(text) == (None if value is None else pytest.approx(value))


def test_the_judge_falls_back_to_its_stated_value_and_counts_failures():
    answers = iter(["Score: 0.9", "I cannot tell", Completion(text="", error="timeout")])
    judge = JudgePRM(RecordingBackend(lambda request: next(answers)), fallback=0.3)
    trajectory = failures_of("up")[0]
    scores = judge.score([StepQuery(trajectory, 0, a) for a in ("down", "left", "right")])
    assert [s.value for s in scores] == [0.9, 0.3, 0.3] and judge.failures == 2
    assert scores[1].error.startswith("no score") and "timeout" in scores[2].error
    prompt = judge.prompt(StepQuery(trajectory, 0, "down"))[-1].content
    assert "Proposed next move: down" in prompt and trajectory.steps[0].observation.strip()[:20] in prompt
    with pytest.raises(ValueError, match="fallback"):
        JudgePRM(RecordingBackend(lambda r: ""), fallback=2.0)


def test_a_quoted_judge_quotes_the_lines_that_name_the_move():
    from hindsight.agent.prm import action_lines, build_prm, parse_prm

    observation = ("You are at row 2, column 4. The goal is 3 columns left.\nUp: a hole.\nDown: safe ice.\n"
                   "Left: safe ice.\nRight: the edge (you stay).")
    assert action_lines(observation, "up") == ["Up: a hole."]
    assert action_lines(observation, "left") == ["You are at row 2, column 4. The goal is 3 columns left.",
                                                 "Left: safe ice."]
    assert action_lines(observation, "jump") == []
    assert action_lines("b1 is on b2.\nYour hand is empty.", "unstack b1 b2") == ["b1 is on b2."]
    trajectory = failures_of("up")[0]
    query = StepQuery(trajectory, 0, "down")
    plain = JudgePRM(RecordingBackend(lambda r: "")).prompt(query)[-1].content
    quoted = JudgePRM(RecordingBackend(lambda r: ""), quote=True).prompt(query)[-1].content
    lines = action_lines(trajectory.steps[0].observation, "down")
    assert "What the current situation says" not in plain
    assert ("Proposed next move: down\nWhat the current situation says about it:\n"
            + ("\n".join(lines) or "(nothing)")) in quoted
    # quoted: composes with noise, and the oracle reads no prompt to quote into.
    spec = parse_prm("noisy:0.4:quoted:random:3")
    assert (spec.noise, spec.quote, spec.role.kind) == (0.4, True, "backend") and not parse_prm("random:3").quote
    prm = build_prm("quoted:random:3")
    assert isinstance(prm, JudgePRM) and prm.quote and prm.name == "quoted:judge"
    with pytest.raises(ValueError, match="reads no prompt"):
        parse_prm("quoted:oracle")


def test_scored_steps_keep_what_the_prm_answered():
    # A judge that copies the prompt for the policy's move ("up") and rates every other move.
    def answer(request):
        if "Proposed next move: up" in request.messages[-1].content:
            return "Rows are numbered from 1 at the top"
        return "Score: 0.9"

    failures = failures_of("up")[:2]
    found = sample_alternatives(RolloutEngine(lake, load_model("oracle"), CONFIG), failures, k=1)
    scored = score_steps(JudgePRM(RecordingBackend(answer), fallback=0.2), failures, found)
    assert scored and all(step.policy_score == 0.2 and step.prm_failures == 1 for step in scored)
    assert all(step.answers == ("Rows are numbered from 1 at the top",) + ("Score: 0.9",) * len(step.scores)
               for step in scored)
    oracle = score_steps(OraclePRM(), failures, found)
    assert all(len(step.answers) == 1 + len(step.scores) and step.answers[0].startswith("plan ") for step in oracle)


def test_step_dpo_pairs_the_prms_best_alternative_at_every_step():
    from hindsight.agent.cso import step_dpo_pairs

    failures = failures_of("up")[:4]
    found = sample_alternatives(RolloutEngine(lake, load_model("random:5"), CONFIG), failures, k=4)
    scored = score_steps(OraclePRM(), failures, found)
    pairs = step_dpo_pairs(failures, scored, CONFIG.prompt_builder())
    expected = [s for s in scored if s.scores and max(s.scores) > s.policy_score]
    assert len(pairs) == len(expected) > 0
    for pair, step in zip(pairs, expected):
        assert pair["prm"]["chosen"] == max(step.scores) and pair["source"] == "step-dpo"
        assert pair["rejected_action"] == "up" and pair["branch"] is None


def test_ipr_values_actions_by_the_success_of_policy_continuations():
    from hindsight.agent.cso import monte_carlo_pairs, monte_carlo_picks

    failures = failures_of("up")[:3]
    found = sample_alternatives(RolloutEngine(lake, load_model("oracle"), CONFIG), failures, k=1)
    picks = monte_carlo_picks(found)
    assert len(picks) == sum(1 + len(a.actions) for a in found)
    # The oracle continues: an action's value is 1 when the budget left allows finishing after it.
    branches = verify(RolloutEngine(lake, load_model("oracle"), CONFIG), failures, picks, rollouts=2)
    pairs = monte_carlo_pairs(failures, found, branches, CONFIG.prompt_builder())
    assert pairs and all(p["prm"]["chosen"] > p["prm"]["rejected"] for p in pairs)
    assert all(p["source"] == "ipr" and p["chosen_action"] != "up" for p in pairs)


def test_a_noisy_prm_replaces_its_share_of_scores_and_keeps_the_clean_ones():
    from hindsight.agent.prm import NoisyPRM

    failures = failures_of("up")
    found = sample_alternatives(RolloutEngine(lake, load_model("random:5"), CONFIG), failures, k=4)
    queries = [StepQuery(failures[a.trajectory], a.at, action) for a in found for action in (a.policy_action, *a.actions)]
    clean = OraclePRM().score(queries)
    noisy = NoisyPRM(OraclePRM(), 0.4, seed=3).score(queries)
    assert [s.clean for s in noisy] == [s.value for s in clean]
    changed = [n.value != c.value for n, c in zip(noisy, clean)]
    # A replaced score is a uniform draw: it almost never equals one of the oracle's four levels.
    assert 0.25 < sum(changed) / len(changed) < 0.55, (sum(changed), len(changed))
    assert all(0.0 <= s.value <= 1.0 for s in noisy)
    # The draw belongs to the query, not to its position: reversed order, the same scores.
    again = NoisyPRM(OraclePRM(), 0.4, seed=3).score(queries[::-1])[::-1]
    assert [s.value for s in again] == [s.value for s in noisy]
    assert [s.value for s in NoisyPRM(OraclePRM(), 0.4, seed=4).score(queries)] != [s.value for s in noisy]
    assert [s.value for s in NoisyPRM(OraclePRM(), 0.0).score(queries)] == [s.value for s in clean]
    assert all(s.value != c.value for s, c in zip(NoisyPRM(OraclePRM(), 1.0).score(queries), clean))
    # score_steps keeps the clean scores beside the noisy ones, in the step's order.
    scored = score_steps(NoisyPRM(OraclePRM(), 0.4, seed=3), failures, found)
    plain = score_steps(OraclePRM(), failures, found)
    assert [s.clean_scores for s in scored] == [(p.policy_score, *p.scores) for p in plain]
    assert all(p.clean_scores == () for p in plain)


@pytest.mark.parametrize("value, error", [
    ("noisy:0.4", "noisy:EPS:PRM"), ("noisy:x:oracle", "noisy:EPS:PRM"), ("noisy:1.5:oracle", "noisy:EPS:PRM"),
    ("noisy:0.2:noisy:0.2:oracle", "noise over noise"), ("noisy:0.4:template", "prm cannot be"),
])
def test_noisy_prm_values_are_checked(value, error):
    from hindsight.agent.prm import parse_prm

    with pytest.raises(ValueError, match=error):
        parse_prm(value, ("oracle", "backend"))


def test_a_noisy_prm_composes_with_any_prm_value():
    from hindsight.agent.prm import NoisyPRM, build_prm, parse_prm

    assert parse_prm("noisy:0.4:oracle").noise == 0.4 and parse_prm("noisy:0.4:oracle").role.kind == "oracle"
    assert parse_prm("oracle").noise == 0.0
    prm = build_prm("noisy:0.25:random:3", allowed=("oracle", "backend"), seed=7)
    assert isinstance(prm, NoisyPRM) and prm.noise == 0.25 and prm.seed == 7 and prm.name == "noisy:0.25:judge"


def test_pair_accuracy_asks_the_planner_which_move_is_better():
    from hindsight.agent.cso import planner_prefers_chosen

    failures = failures_of("up")
    found = sample_alternatives(RolloutEngine(lake, load_model("random:5"), CONFIG), failures, k=4)
    scored = score_steps(OraclePRM(), failures, found)
    prompts = CONFIG.prompt_builder()
    # Pairs on the oracle's word choose a strictly better move every time...
    from hindsight.agent.cso import step_dpo_pairs

    pairs = step_dpo_pairs(failures, scored, prompts)
    assert pairs and all(planner_prefers_chosen(failures, pairs))
    # ...and turned around, never.
    flipped = [{**p, "chosen_action": p["rejected_action"], "rejected_action": p["chosen_action"]} for p in pairs]
    assert not any(planner_prefers_chosen(failures, flipped))
    # Two moves the planner rates alike are not a right pair.
    same = [{**p, "rejected_action": p["chosen_action"]} for p in pairs]
    assert not any(planner_prefers_chosen(failures, same))
