"""benchmarks/cso_pair_accuracy.py: pair accuracy against PRM noise, on the tiny model."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import cso_pair_accuracy  # noqa: E402


def test_pair_accuracy_rows_per_seed_noise_and_method_and_a_resume_adds_none(tiny_model_dir, tmp_path, monkeypatch,
                                                                             capsys):
    argv = ["cso_pair_accuracy.py", str(tmp_path), "--seeds", "0", "--noise", "0", "0.6",
            "--set", f"model=hf:{tiny_model_dir}", "--set", "env_kwargs={size: 3, max_steps: 4}",
            "--set", "tasks_per_round=6", "--set", "max_new_tokens=4", "--set", "k=4"]
    monkeypatch.setattr(sys, "argv", argv)
    cso_pair_accuracy.main()
    rows = [json.loads(line) for line in (tmp_path / "pair_accuracy.jsonl").read_text().splitlines()]
    assert {(r["noise"], r["method"]) for r in rows} == {(e, m) for e in (0.0, 0.6) for m in cso_pair_accuracy.METHODS}
    exact = {r["method"]: r for r in rows if r["noise"] == 0.0}
    # The untrained policy fails every task, and the exact oracle's pairs are all right.
    assert exact["step-dpo"]["failures"] == 6 and exact["step-dpo"]["pairs"] > 0
    assert exact["step-dpo"]["accuracy"] == exact["cso-noverify"]["accuracy"] == 1.0
    assert all(r["right"] <= r["pairs"] for r in rows)
    table = capsys.readouterr().out
    assert table.startswith("| PRM | ε |") and "| oracle | 0.6 |" in table
    cso_pair_accuracy.main()  # finished (PRM, seed, ε): nothing runs again
    assert len((tmp_path / "pair_accuracy.jsonl").read_text().splitlines()) == len(rows)

    # Another PRM (here the policy as an LLM judge) adds its own rows beside the oracle's.
    monkeypatch.setattr(sys, "argv", [*argv[:6], "--set", "prm=policy", *argv[7:]])
    cso_pair_accuracy.main()
    judged = [json.loads(line) for line in (tmp_path / "pair_accuracy.jsonl").read_text().splitlines()][len(rows):]
    assert {(r["prm"], r["noise"]) for r in judged} == {("policy", 0.0)} and len(judged) == 3
    assert "| policy | 0 |" in capsys.readouterr().out


def test_pair_accuracy_refuses_noise_outside_0_1(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["cso_pair_accuracy.py", str(tmp_path), "--noise", "1.5"])
    with pytest.raises(SystemExit):
        cso_pair_accuracy.main()
