"""Instance files: export, load, play, and the errors for bad files."""

import json

import pytest

from hindsight.envs import EnvError, make
from hindsight.envs.instances import export_instances, load_instances, read_instance_file


def test_round_trip_plays_the_same_tasks(tmp_path):
    source = make("frozenlake", size=5, holes="blocking", max_steps=25)
    path = export_instances(source, "test", 6, tmp_path / "sub" / "lake.jsonl")
    header, *lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert header == {
        "kind": "header",
        "format": "hindsight.instances",
        "version": 1,
        "env": "frozenlake",
        "kwargs": {"size": 5, "p_hole": 0.2, "holes": "blocking", "score": "goal", "max_steps": 25},
    }
    seeds = source.split_seeds("test", 6)
    assert [line["seed"] for line in lines] == seeds and {line["split"] for line in lines} == {"test"}

    loaded = load_instances(path, "frozenlake")
    assert loaded == {seed: source.generate_instance(seed) for seed in seeds}

    # The header's settings come back as defaults, the stored tasks are played verbatim.
    replay = make("frozenlake", instances=str(path))
    assert replay.hole_mode == "blocking" and replay.max_steps == 25
    assert replay.split_seeds("test", 6) == seeds
    for seed in seeds:
        assert replay.reset(seed) == source.reset(seed)
        assert replay.step("left") == source.step("left")


def test_split_seeds_follow_the_recorded_splits(instance_file):
    task = make("sudoku").generate_instance(0)
    other = make("sudoku").generate_instance(1)
    path = instance_file("sudoku", [(10, "train", task), (3, "test", other), (7, "test", task)])
    env = make("sudoku", instances=str(path))
    assert env.split_seeds("test", 2) == [3, 7]
    assert env.split_seeds("train", 1) == [10]
    assert env.seed_split(10) == "train"
    with pytest.raises(EnvError, match="holds 0 validation instances; 1 requested"):
        env.split_seeds("validation", 1)
    with pytest.raises(EnvError, match="seed 4 is not in"):
        env.reset(4)


def test_explicit_keywords_override_the_header(tmp_path):
    path = export_instances(make("blocksworld", num_blocks=5), "train", 2, tmp_path / "b.jsonl")
    assert make("blocksworld", instances=str(path), max_steps=7).max_steps == 7
    assert make("blocksworld", instances=str(path)).max_steps == 25


def test_missing_file(tmp_path):
    with pytest.raises(EnvError, match="does not exist"):
        load_instances(tmp_path / "nope.jsonl", "sudoku")
    with pytest.raises(EnvError, match="does not exist"):
        make("sudoku", instances=str(tmp_path / "nope.jsonl"))


def test_wrong_env(tmp_path):
    path = export_instances(make("sudoku"), "test", 2, tmp_path / "s.jsonl")
    with pytest.raises(EnvError, match="holds 'sudoku' instances, not 'frozenlake'"):
        load_instances(path, "frozenlake")
    with pytest.raises(EnvError, match="holds 'sudoku' instances, not 'frozenlake'"):
        make("frozenlake", instances=str(path))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "is empty"),
        ('{"kind": "header", "format": "other", "version": 1}', ":1: not a Hindsight instance file"),
        (
            '{"kind": "header", "format": "hindsight.instances", "version": 9, "env": "sudoku", "kwargs": {}}',
            ":1: instance file version 9",
        ),
        ("HEADER\n", ":1: not valid JSON"),
        ("{header}\n{line}\n{{not json\n", ":3: not valid JSON"),
        ("{header}\n[1, 2]\n", ":2: expected a JSON object"),
        ('{header}\n{{"seed": "x", "split": "test", "instance": {{}}}}\n', ":2: 'seed' must be an integer"),
        ('{header}\n{{"seed": 1, "split": "dev", "instance": {{}}}}\n', ":2: 'split' must be one of"),
        ('{header}\n{{"seed": 1, "split": "test", "instance": []}}\n', ":2: 'instance' must be a JSON object"),
        ("{header}\n{line}\n\n{line}\n", ":4: seed 1 already appears on line 2"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path, body, message):
    header = json.dumps(
        {"kind": "header", "format": "hindsight.instances", "version": 1, "env": "sudoku", "kwargs": {}}
    )
    line = json.dumps({"kind": "instance", "seed": 1, "split": "test", "instance": make("sudoku").generate_instance(1)})
    path = tmp_path / "bad.jsonl"
    path.write_text(body.format(header=header, line=line) if "{header}" in body else body)
    with pytest.raises(EnvError) as caught:
        read_instance_file(path)
    assert str(path) in str(caught.value) and message in str(caught.value)
