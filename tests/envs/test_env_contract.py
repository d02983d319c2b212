"""Every built-in environment passes the contract audit at several difficulties."""

import pytest

from hindsight.envs.checker import check_env

SETTINGS = [
    ("frozenlake", {}),
    ("frozenlake", {"size": 3}),
    ("frozenlake", {"size": 6, "p_hole": 0.35, "holes": "blocking"}),
    ("frozenlake", {"size": 8, "p_hole": 0.5}),
    ("blocksworld", {}),
    ("blocksworld", {"num_blocks": 3}),
    ("blocksworld", {"num_blocks": 7}),
    ("sudoku", {}),
    ("sudoku", {"blanks": 10}),
    ("sudoku", {"size": 9, "blanks": 20}),
    ("deepsearch", {}),
    ("deepsearch", {"hops": 4, "top_k": 2}),
    ("webshop", {}),
    ("webshop", {"catalogue_size": 300, "results_per_page": 3}),
]


@pytest.mark.parametrize(("env_id", "kwargs"), SETTINGS, ids=[f"{e}-{k}" for e, k in SETTINGS])
def test_contract_holds(env_id, kwargs):
    # The subprocess hash-seed probe runs once per environment (on its defaults) to keep the suite fast.
    report = check_env(env_id, kwargs, seeds=4, prefixes=2, hash_seed_check=not kwargs)
    assert report.ok, "\n".join(report.violations)
    expected = {"static", "reset", "junk-actions", "truncation", "step-after-done", "oracle", "step",
                "admissible", "replay", "oracle-midway", "splits"}  # fmt: skip
    assert expected <= set(report.checks)
    if not kwargs:
        assert "hash-seed" in report.checks
        assert not report.notes


def test_tiny_settings_report_few_distinct_tasks_as_a_note():
    # A 3×3 lake without holes has only a few dozen distinct tasks, too few for 5 per split.
    report = check_env("frozenlake", {"size": 3, "p_hole": 0.0}, seeds=2, prefixes=1, split_n=5, hash_seed_check=False)
    assert report.ok
    assert any("distinct test instances" in note for note in report.notes)


def test_contract_holds_for_an_instance_file(tmp_path):
    from hindsight.envs import make
    from hindsight.envs.instances import export_instances

    path = export_instances(make("blocksworld", num_blocks=5), "validation", 4, tmp_path / "bw.jsonl")
    report = check_env("blocksworld", {"instances": str(path)}, seeds=4, hash_seed_check=True)
    assert report.ok, "\n".join(report.violations)
    assert report.seeds == make("blocksworld", instances=str(path)).split_seeds("validation", 4)
