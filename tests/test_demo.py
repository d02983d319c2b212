"""`hindsight demo`: zero-shot and trained side by side, diagnosed, with a report.

The demo's own flow runs on a tiny random model with a random adapter standing in for the
bundled one; `test_the_shipped_adapter_plays_frozenlake` checks the real one on SmolLM2.
"""

import json
import re

import pytest
import torch
import yaml

from hindsight.cli.demo import Provenance
from hindsight.cli.main import main
from hindsight.llm import adapters

SYSTEM_PROMPT = "Reach G. Reply with <action>up</action>, <action>down</action>, <action>left</action> or <action>right</action>."


def provenance(base: str) -> dict:
    return {
        "name": "tiny", "base_model": base,
        "evaluation": {"env": "frozenlake", "env_kwargs": {"size": 3, "max_steps": 2}, "system_prompt": SYSTEM_PROMPT,
                       "memory": "none", "max_new_tokens": 4},
        "measured": {"test_success_rate": 0.5, "test_episodes": 2},
        "reproduce": {"commit": "0123456789abcdef", "commands": ["hindsight train sft --config X --out Y"]},
    }


def make_bundled(monkeypatch, tmp_path, model_dir, data: dict | None) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "bundled"
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    model.save_pretrained(folder / "tiny")
    if data is not None:
        (folder / "tiny" / "provenance.json").write_text(json.dumps(data))
    monkeypatch.setattr(adapters, "bundled_adapters_dir", lambda: folder)


def test_demo_evaluates_both_models_on_the_same_tasks_and_writes_a_report(monkeypatch, tmp_path, tiny_model_dir,
                                                                           capsys):
    make_bundled(monkeypatch, tmp_path, tiny_model_dir, provenance(f"hf:{tiny_model_dir}"))
    out = tmp_path / "demo"
    assert main(["demo", "--adapter", "tiny", "--episodes", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for text in ("zero-shot", "trained", "success", "AUV", "loop ratio", "invalid", "report:",
                 "hindsight train sft --config X --out Y"):
        assert text in printed, text
    assert (out / "report" / "index.html").is_file()
    # The report's trajectory viewer holds every trajectory the demo played, for both models.
    html = (out / "report" / "index.html").read_text(encoding="utf-8")
    viewer = json.loads(re.search(r'<script type="application/json" id="viewer-data">(.*?)</script>', html,
                                  re.DOTALL).group(1))
    assert {run["label"]: len(run["trajectories"]) for run in viewer["runs"]} == {"zero-shot": 3, "trained": 3}
    seeds = {}
    for label in ("zero-shot", "trained"):
        config = yaml.safe_load((out / label / "config.yaml").read_text())
        assert config["system_prompt"] == SYSTEM_PROMPT and config["temperature"] == 0.0
        lines = (out / label / "trajectories" / "eval.jsonl").read_text().splitlines()[1:]
        seeds[label] = sorted(json.loads(line)["seed"] for line in lines)
    assert config["model"] == f"hf:{tiny_model_dir}+tiny"
    assert seeds["zero-shot"] == seeds["trained"] and len(seeds["trained"]) == 3


def test_demo_mistakes_are_one_line_errors(monkeypatch, tmp_path, tiny_model_dir, capsys):
    make_bundled(monkeypatch, tmp_path, tiny_model_dir, None)
    assert main(["demo", "--adapter", "tiny", "--out", str(tmp_path / "a")]) == 2
    assert "no bundled adapter 'tiny' with a provenance.json" in capsys.readouterr().err
    broken = provenance("smollm2")
    del broken["evaluation"]
    (tmp_path / "bundled" / "tiny" / "provenance.json").write_text(json.dumps(broken))
    assert main(["demo", "--adapter", "tiny", "--out", str(tmp_path / "b")]) == 2
    assert "not a valid provenance file" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "bundled" / "tiny" / "provenance.json").write_text(json.dumps(provenance("smollm2")))
    assert main(["demo", "--adapter", "tiny", "--out", str(tmp_path / "full")]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["demo", "--episodes", "0"]) == 2


@pytest.mark.slow
def test_the_shipped_adapter_plays_frozenlake(tmp_path):
    """The bundled adapter on the bundled model: valid moves, and most of a few test tasks solved."""
    shipped = Provenance.read("frozenlake3")
    out = tmp_path / "eval"
    assert main(["eval", "--env", shipped.env, "--model", f"{shipped.base}+frozenlake3", "--episodes", "4",
                 "--memory", shipped.memory, "--temperature", "0", "--max-new-tokens", str(shipped.max_new_tokens),
                 "--system-prompt", shipped.system_prompt, "--out", str(out),
                 *[arg for key, value in shipped.env_kwargs.items() for arg in ("--set", f"{key}={value}")]]) == 0
    summary = json.loads((out / "summary.json").read_text())
    # Zero-shot the same model writes no valid move at all (docs/results.md).
    assert summary["invalid_rate"] == 0.0 and summary["success_rate"] >= 0.5
