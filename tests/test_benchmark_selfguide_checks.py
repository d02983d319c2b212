"""benchmarks/selfguide_checks.py: issue 49's gate and headroom checks stop the driver before the arms."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import selfguide_checks  # noqa: E402


def write(folder: Path, **summary) -> None:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary))


def out_dir(tmp_path: Path, passes_gate: bool, plain: float, notes: float) -> Path:
    write(tmp_path / "assessor", passes_gate=passes_gate, agreement=0.87, always_positive=0.53, negative_recall=0.93)
    write(tmp_path / "check-plain", success_rate=plain, episodes=100, invalid_rate=0.4)
    write(tmp_path / "check-notes", success_rate=notes, episodes=100, invalid_rate=0.3)
    return tmp_path


@pytest.mark.parametrize("passes_gate, plain, notes, status", [
    (True, 0.25, 0.60, 0),  # the band's ends are inside it
    (False, 0.40, 0.40, 1),
    (True, 0.63, 0.40, 1),
    (True, 0.40, 0.24, 1),
])
def test_the_checks_pass_only_with_the_gate_and_both_starts_in_the_band(tmp_path, capsys, passes_gate, plain,
                                                                         notes, status):
    assert selfguide_checks.main([str(out_dir(tmp_path, passes_gate, plain, notes))]) == status
    printed = capsys.readouterr().out
    assert ("the gate: passed" if passes_gate else "the gate: FAILED") in printed
    assert ("no arm should run" in printed) == bool(status)


def test_a_missing_or_unfinished_summary_is_a_clear_error(tmp_path, capsys):
    out = out_dir(tmp_path, True, 0.4, 0.4)
    (out / "check-notes" / "summary.json").write_text(json.dumps({"success_rate": 0.4, "interrupted": True}))
    assert selfguide_checks.main([str(out)]) == 2
    assert "check-notes" in capsys.readouterr().err
    assert selfguide_checks.main([str(tmp_path / "nowhere")]) == 2
