"""The checker can fail: each deliberately broken environment is caught."""

import pytest
from broken_envs import (
    ContractLake,
    CrashOnJunk,
    DriftingKey,
    GoldPathClaimingToPlan,
    GoldPathLake,
    JunkMovesPlayer,
    LazyOracle,
    OverScored,
    SetOrderKey,
    StickyClose,
)

from hindsight.envs import Env, FrozenLake, TextEnv
from hindsight.envs.checker import CheckReport, check_env


def _checks_failed(report: CheckReport) -> set[str]:
    return {v[1 : v.index("]")] for v in report.violations}


def test_a_sound_class_passes_when_given_directly():
    report = check_env(FrozenLake, {"size": 5}, seeds=3, prefixes=1)
    assert report.ok, report.violations
    assert report.env_id == "frozenlake" and "hash-seed" in report.checks and not report.notes


def test_an_environment_that_only_implements_the_contract_passes():
    lake = ContractLake(size=5)
    assert isinstance(lake, Env) and not isinstance(lake, TextEnv)
    report = check_env(ContractLake, {"size": 5}, seeds=3, prefixes=1)
    assert report.ok, report.violations
    assert report.env_id == "test-contract-lake" and {"close", "splits", "hash-seed"} <= set(report.checks)


def test_a_close_that_spoils_the_next_reset_is_caught():
    report = check_env(StickyClose, seeds=2, prefixes=1, hash_seed_check=False)
    assert _checks_failed(report) == {"close"}, report.violations
    assert "reset after close raised RuntimeError: closed for good" in report.violations[0]


def test_nondeterministic_state_key_is_caught():
    report = check_env(DriftingKey, seeds=2, prefixes=1, hash_seed_check=False)
    assert not report.ok
    assert {"reset", "replay"} <= _checks_failed(report)


def test_hash_seed_dependent_state_key_is_caught():
    # Within one process the set order is stable, so only the subprocess comparison sees it.
    report = check_env(SetOrderKey, seeds=2, prefixes=1, hash_seed_check=True)
    assert _checks_failed(report) == {"hash-seed"}, report.violations + report.notes
    assert "PYTHONHASHSEED" in report.violations[0]


def test_crash_on_junk_is_caught_not_raised():
    report = check_env(CrashOnJunk, seeds=2, prefixes=1, hash_seed_check=False)
    assert "junk-actions" in _checks_failed(report)
    assert any("raised ValueError" in v for v in report.violations)


def test_junk_that_changes_the_state_is_caught():
    report = check_env(JunkMovesPlayer, seeds=2, prefixes=1, hash_seed_check=False)
    assert "junk-actions" in _checks_failed(report)
    assert any("was accepted as valid" in v for v in report.violations)


def test_failing_oracle_is_caught():
    report = check_env(LazyOracle, seeds=3, prefixes=1, hash_seed_check=False)
    assert "oracle" in _checks_failed(report)


def test_a_gold_path_oracle_is_not_asked_to_repair_detours():
    # The same oracle fails from random midway states; only one that claims to replan is in violation.
    settings = {"size": 5, "holes": "blocking"}
    gold = check_env(GoldPathLake, settings, seeds=4, prefixes=2, hash_seed_check=False)
    assert gold.ok, gold.violations
    assert any("gold-path oracle did not reach success" in note for note in gold.notes)
    claiming = check_env(GoldPathClaimingToPlan, settings, seeds=4, prefixes=2, hash_seed_check=False)
    assert "oracle-midway" in _checks_failed(claiming)


def test_out_of_range_score_is_caught():
    report = check_env(OverScored, seeds=3, prefixes=1, hash_seed_check=False)
    assert any("outside [0, 1]" in v for v in report.violations)


def test_violations_per_check_are_capped():
    report = check_env(DriftingKey, seeds=10, prefixes=2, hash_seed_check=False)
    reset_lines = [v for v in report.violations if v.startswith("[reset]")]
    assert len(reset_lines) == 6 and reset_lines[-1].endswith("not listed")


@pytest.mark.parametrize("seeds", [[5, 9], 2])
def test_seed_selection(seeds):
    report = check_env("sudoku", seeds=seeds, prefixes=1, hash_seed_check=False)
    assert report.ok and report.seeds == ([5, 9] if isinstance(seeds, list) else [0, 1])
