"""Entropy of the action tokens: the maths, the action span, and the path from a backend's
per-token entropies to a step, a log line and the diagnosis."""

import math

import pytest

from hindsight.agent.engine import RolloutConfig, RolloutEngine, Task, action_token_entropies
from hindsight.agent.parser import parse_response, tokens_in_span
from hindsight.diagnostics import RunAccumulator
from hindsight.llm.hf import token_text_ends
from hindsight.logs import RunDir, read_views
from hindsight.logs.importers import view_from_trajectory
from hindsight.types import Completion

from tests.agent.fakes import LineEnv, RecordingBackend


def completion_from_pieces(pieces, entropies):
    """A completion as a backend with per-token entropies would return it."""
    text = "".join(pieces)
    return Completion(text=text, token_ids=tuple(range(len(pieces))), logprobs=tuple(-0.5 for _ in pieces),
                      entropies=tuple(entropies), token_ends=tuple(token_text_ends(pieces, text)))


# ---------------------------------------------------------------- the entropy of a distribution


def plain_entropy(row):
    """-sum p log p of softmax(row), term by term, skipping zero probabilities."""
    finite = [x for x in row if x != -math.inf]
    top = max(finite)
    z = sum(math.exp(x - top) for x in finite)
    total = 0.0
    for x in row:
        if x == -math.inf:
            continue
        p = math.exp(x - top) / z
        total -= p * math.log(p)
    return total


def test_entropy_of_small_logits_matches_a_plain_loop():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from hindsight.llm._decoding import entropy_from_log_probs

    logits = torch.tensor([
        [0.0, 0.0, 0.0, 0.0],            # uniform: log 4
        [10.0, 0.0, -3.0, 1.5],          # peaked
        [2.0, -math.inf, 0.5, -math.inf],  # masked entries contribute nothing
        [-1.0, 3.0, 3.0, -2.0],
    ])
    got = entropy_from_log_probs(torch.log_softmax(logits, dim=-1))
    assert got.shape == (4,)
    for row, value in zip(logits.tolist(), got.tolist()):
        assert value == pytest.approx(plain_entropy(row), abs=1e-6)
    assert got[0].item() == pytest.approx(math.log(4), abs=1e-6)
    batched = entropy_from_log_probs(torch.log_softmax(logits.reshape(2, 2, 4), dim=-1))
    assert batched.shape == (2, 2) and batched.flatten().tolist() == pytest.approx(got.tolist())


def test_recorder_keeps_one_entropy_per_generated_position():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from hindsight.llm._decoding import LogprobRecorder

    recorder = LogprobRecorder()
    steps = [torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]), torch.tensor([[5.0, 0.0, 0.0], [0.0, 1.0, 0.0]])]
    prompt = torch.tensor([[7], [7]])
    recorder(prompt, steps[0])
    chosen = torch.tensor([[2], [0]])
    recorder(torch.cat([prompt, chosen], dim=1), steps[1])
    sequences = torch.cat([prompt, chosen, torch.tensor([[0], [1]])], dim=1)
    logprobs = recorder.finish(sequences)
    entropies = recorder.entropies(2)
    assert logprobs.shape == entropies.shape == (2, 2)
    for b in range(2):
        for t in range(2):
            assert entropies[b, t].item() == pytest.approx(plain_entropy(steps[t][b].tolist()), abs=1e-6)
    assert LogprobRecorder().entropies(3).shape == (3, 0)


# ---------------------------------------------------------------- the action span


def test_action_span_of_tag_dangling_and_json_answers():
    text = "<analysis>try <action>up</action>?</analysis> <action> 'Right' </action>"
    parsed = parse_response(text)
    start, end = parsed.action_span
    assert parsed.action == "Right" and text[start:end] == "Right"  # the last block, quotes and spaces left out
    dangling = "<analysis>go</analysis><action>\n\n  go to desk 1\nmore"
    parsed = parse_response(dangling)
    assert parsed.action == "go to desk 1" and dangling[slice(*parsed.action_span)] == "go to desk 1"
    as_json = 'Sure: {"think": "left is open", "action": "Left"}'
    parsed = parse_response(as_json)
    assert parsed.action == "Left" and as_json[slice(*parsed.action_span)] == "Left"
    assert parse_response("no action here").action_span is None
    assert parse_response("<action>  </action>").action_span is None


def test_tokens_in_span_takes_every_overlapping_token():
    #             0      1         2     3         4      5       6
    pieces = ["<action", ">", "go", " to", " desk", " 1", "</action>"]
    ends = token_text_ends(pieces, "".join(pieces))
    assert ends == [7, 8, 10, 13, 18, 20, 29]
    text = "".join(pieces)
    span = parse_response(text).action_span
    assert text[slice(*span)] == "go to desk 1"
    assert tokens_in_span(ends, span) == (2, 6)
    # A token straddling the edge of the span counts; a span outside every token selects nothing.
    assert tokens_in_span(ends, (9, 12)) == (2, 4)
    assert tokens_in_span(ends, (29, 31)) == (7, 7)
    assert token_text_ends(["a", "b"], "ab c") is None


def test_action_token_entropies_pick_the_action_tokens_only():
    pieces = ["<analysis>", "hmm", "</analysis>", "<action>", "ri", "ght", "</action>"]
    entropies = [2.0, 3.0, 2.5, 0.1, 0.4, 0.2, 0.05]
    completion = completion_from_pieces(pieces, entropies)
    assert action_token_entropies(completion, parse_response(completion.text).action_span) == (0.4, 0.2)
    assert action_token_entropies(Completion(text=completion.text), (0, 3)) is None
    assert action_token_entropies(completion, None) is None


# ---------------------------------------------------------------- from a backend to the diagnosis


def test_engine_records_action_entropies_and_the_log_keeps_them(tmp_path):
    def respond(request):
        return completion_from_pieces(["<analysis>", "onward", "</analysis>", "<action>", "right", "</action>"],
                                      [1.5, 2.5, 1.0, 0.3, 0.7, 0.1])

    backend = RecordingBackend(respond)
    (trajectory,) = RolloutEngine(lambda: LineEnv(goal=2), backend, RolloutConfig()).run([Task(seed=0)])
    assert trajectory.success and len(trajectory.steps) == 2
    assert all(step.action_entropies == (0.7,) for step in trajectory.steps)
    run = RunDir(tmp_path / "run")
    with run.trajectory_writer("eval", env="line") as writer:
        writer.write_trajectory(trajectory)
    (from_disk,) = read_views(run.path)
    assert from_disk == view_from_trajectory(trajectory, source=from_disk.source)
    assert from_disk.entropies == (0.7, 0.7)
    assert from_disk.surprisals == pytest.approx((0.5, 0.5))  # the whole response, kept apart
    acc = RunAccumulator("line")
    acc.add(from_disk)
    diagnosis = acc.finish(label="line", path=str(run.path))
    assert diagnosis.entropy_other == pytest.approx(0.7) and diagnosis.surprisal_other == pytest.approx(0.5)


def test_old_records_without_the_field_still_read(tmp_path):
    def respond(request):
        return Completion(text="<action>right</action>", token_ids=(1, 2), logprobs=(-1.0, -2.0))

    (trajectory,) = RolloutEngine(lambda: LineEnv(goal=1), RecordingBackend(respond), RolloutConfig()).run(
        [Task(seed=0)])
    assert trajectory.steps[0].action_entropies is None
    run = RunDir(tmp_path / "old")
    with run.trajectory_writer("eval", env="line") as writer:
        writer.write_trajectory(trajectory)
    assert "action_entropies" not in (run.trajectories_dir / "eval.jsonl").read_text()
    (view,) = read_views(run.path)
    assert view.entropies is None and view.surprisals == (1.5,)
