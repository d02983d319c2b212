"""benchmarks/choice_margins.py: a FrozenLake policy's margins at the states where a hole must be read."""

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from hindsight.envs import make
from hindsight.envs.frozenlake import MOVES, _read_map, choice_cells, is_choice, tie_cells

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import choice_margins  # noqa: E402

LAKE = {"size": 4, "max_steps": 8, "view": "compass"}


@pytest.fixture
def grpo_run(tmp_path, tiny_lora_model_dir):
    from hindsight.methods.grpo import GRPOConfig

    config = GRPOConfig(model=f"hf:{tiny_lora_model_dir}", env="frozenlake", env_kwargs=LAKE, memory="none",
                        max_new_tokens=8, lora_rank=4, lora_alpha=8)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yaml").write_text(json.dumps({"kind": "grpo", **asdict(config)}))  # JSON is YAML
    return folder, config


def adapters(config, folder):
    """Two adapters of the run's shape: the untrained one (the base model) and a perturbed one."""
    from hindsight.methods.model_setup import load_trainable

    model = load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, False)
    untrained = model.save_peft("policy", folder / "untrained", {})
    torch.manual_seed(0)
    with torch.no_grad():
        for name, weight in model.model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.5)
    return untrained, model.save_peft("policy", folder / "perturbed", {})


@pytest.fixture
def trained(grpo_run, tmp_path):
    """The run's config, its model and the two adapters of `adapters`."""
    from hindsight.methods.model_setup import load_trainable

    _, config = grpo_run
    untrained, perturbed = adapters(config, tmp_path)
    return config, load_trainable(config.model, ("policy",), config.lora_rank, config.lora_alpha, False), untrained, \
        perturbed


def by_hand_margin(model, prompt_text: str, first: str, second: str) -> float:
    """log P(<action>first</action>) − log P(<action>second</action>) from the logits, token by token."""
    tokenizer = model.backend.tokenizer

    def reply_logprob(move):
        prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
        reply = tokenizer.encode(f"<action>{move}</action>", add_special_tokens=False)
        with torch.no_grad():
            logits = model.model(input_ids=torch.tensor([prompt + reply])).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        return sum(float(logp[len(prompt) - 1 + i, token]) for i, token in enumerate(reply))

    return reply_logprob(first) - reply_logprob(second)


def test_choice_states_are_reached_on_ice_and_name_the_hole_and_the_ice(grpo_run):
    _, config = grpo_run
    from hindsight.llm import load_model

    tokenizer = load_model(config.model).tokenizer
    states = choice_margins.choice_states(config, "test", 12, tokenizer)
    env = make("frozenlake", **LAKE)
    assert states and {s.seed for s in states} <= set(env.split_seeds("test", 12))
    for state in states:
        start, goal, holes = _read_map(env.generate_instance(state.seed)["map"])
        assert state.hole != state.ice
        assert f"{state.hole.capitalize()}: a hole, closer to the goal." in state.prompt
        assert (f"{state.ice.capitalize()}: safe ice, closer to the goal." in state.prompt
                or f"{state.ice.capitalize()}: the goal." in state.prompt)
        # memory none shows the turn number once the walk has made a move
        assert (f"(Turn {state.turn + 1}; earlier turns are not shown.)" in state.prompt) == (state.turn > 0)
    # Every choice cell of the lakes is there once: count them from the maps by hand.
    expected = 0
    for seed in env.split_seeds("test", 12):
        start, goal, holes = _read_map(env.generate_instance(seed)["map"])
        expected += len(choice_cells(start, goal, holes))
    assert len(states) == expected


def test_tie_states_name_two_ice_moves_toward_the_goal_one_sideways(grpo_run):
    _, config = grpo_run
    from hindsight.llm import load_model

    tokenizer = load_model(config.model).tokenizer
    states = choice_margins.tie_states(config, "test", 12, tokenizer)
    env = make("frozenlake", **LAKE)
    expected = 0
    for seed in env.split_seeds("test", 12):
        start, goal, holes = _read_map(env.generate_instance(seed)["map"])
        expected += len(tie_cells(start, goal, holes))
    assert states and len(states) == expected
    for state in states:
        assert state.sideways in ("left", "right") and state.vertical in ("up", "down")
        for move in (state.sideways, state.vertical):
            assert (f"{move.capitalize()}: safe ice, closer to the goal." in state.prompt
                    or f"{move.capitalize()}: the goal." in state.prompt)


def test_tie_lean_is_the_sideways_replys_log_prob_over_the_vertical_ones(trained):
    config, model, _, perturbed = trained
    states = choice_margins.tie_states(config, "test", 6, model.backend.tokenizer)
    lean = choice_margins.tie_lean_of(model, str(perturbed), states, batch=5)
    by_hand = [by_hand_margin(model, s.prompt, s.sideways, s.vertical) for s in states]
    assert lean.states == len(states)
    assert lean.lean == pytest.approx(sum(by_hand) / len(by_hand), abs=1e-4)
    assert lean.sideways_preferred == sum(m > 0 for m in by_hand) / len(by_hand)


def test_walk_to_steps_on_ice_toward_the_goal():
    start, goal, holes = (0, 0), (3, 3), {(1, 1), (1, 3), (2, 3), (3, 0)}
    moves = choice_margins.walk_to(start, (2, 2), goal, holes)
    assert len(moves) == 4
    cell = start
    for move in moves:
        cell = (cell[0] + MOVES[move][0], cell[1] + MOVES[move][1])
        assert cell not in holes
    assert cell == (2, 2) and is_choice(cell, goal, holes)


def test_margins_are_the_replies_log_prob_differences_split_by_the_holes_side(trained):
    config, model, untrained, perturbed = trained
    states = choice_margins.choice_states(config, "test", 12, model.backend.tokenizer)
    result = choice_margins.margins_of(model, str(perturbed), states, batch=3)
    by_hand = [by_hand_margin(model, s.prompt, s.ice, s.hole) for s in states]
    side = [m for m, s in zip(by_hand, states) if s.hole_sideways]
    vertical = [m for m, s in zip(by_hand, states) if not s.hole_sideways]
    assert result.states == len(states) and (result.hole_sideways, result.hole_vertical) == (len(side), len(vertical))
    assert result.mean_hole_sideways == pytest.approx(sum(side) / len(side), abs=1e-4)
    assert result.mean_hole_vertical == pytest.approx(sum(vertical) / len(vertical), abs=1e-4)
    assert result.hole_reading == pytest.approx((result.mean_hole_sideways + result.mean_hole_vertical) / 2)
    assert result.sideways_lean == pytest.approx((result.mean_hole_vertical - result.mean_hole_sideways) / 2)
    assert result.ice_preferred == sum(m > 0 for m in by_hand) / len(by_hand)
    # The untrained adapter is the base model, so its margins differ from the perturbed one's.
    assert choice_margins.margins_of(model, str(untrained), states).hole_reading != pytest.approx(
        result.hole_reading, abs=1e-3)


def test_the_script_prints_a_table_and_refuses_what_it_cannot_read(grpo_run, tmp_path, monkeypatch, capsys):
    folder, config = grpo_run
    untrained, perturbed = adapters(config, tmp_path)
    monkeypatch.setattr(sys, "argv", ["choice_margins.py", str(folder), str(untrained), str(perturbed), "--lakes", "6"])
    choice_margins.main()
    out = capsys.readouterr().out
    assert "choice states on the first 6 test lakes" in out
    assert out.count(" | ") > 10 and str(perturbed) in out
    monkeypatch.setattr(sys, "argv", ["choice_margins.py", str(folder), str(perturbed), "--states", "ties",
                                      "--lakes", "6"])
    choice_margins.main()
    out = capsys.readouterr().out
    assert "tie states on the first 6 test lakes" in out and "| sideways lean, nats |" in out
    monkeypatch.setattr(sys, "argv", ["choice_margins.py", str(folder), str(untrained), "--json", "--lakes", "6"])
    choice_margins.main()
    assert json.loads(capsys.readouterr().out)["adapter"] == str(untrained)
    # Not a GRPO run, not FrozenLake, a missing adapter: one line each, no traceback.
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "config.yaml").write_text(json.dumps({"kind": "sft"}))
    monkeypatch.setattr(sys, "argv", ["choice_margins.py", str(sft), str(untrained)])
    with pytest.raises(SystemExit, match="is a 'sft' run"):
        choice_margins.main()
    other = json.loads((folder / "config.yaml").read_text())
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    (blocks / "config.yaml").write_text(json.dumps({**other, "env": "blocksworld", "env_kwargs": {}}))
    monkeypatch.setattr(sys, "argv", ["choice_margins.py", str(blocks), str(untrained)])
    with pytest.raises(SystemExit, match="not FrozenLake"):
        choice_margins.main()
    monkeypatch.setattr(sys, "argv", ["choice_margins.py", str(folder), str(tmp_path / "nowhere"), "--lakes", "6"])
    with pytest.raises(SystemExit, match="choice_margins: "):
        choice_margins.main()
