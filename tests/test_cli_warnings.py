"""A command in normal use prints no Python warning.

The command runs in a fresh interpreter, as a user starts it: pytest's own warning capture
would hide what the terminal shows. The evaluation merges a LoRA adapter saved against
another base name (as the bundled adapters are, against `smollm2`) and generates with
transformers, the path that printed peft's and transformers' warnings in `hindsight demo`.
"""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")


def save_adapter(model_dir, folder):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)
    model.save_pretrained(folder)
    settings = json.loads((folder / "adapter_config.json").read_text())
    settings["base_model_name_or_path"] = "smollm2"
    (folder / "adapter_config.json").write_text(json.dumps(settings))
    return folder


def test_an_evaluation_with_an_adapter_prints_no_warning(tmp_path, tiny_model_dir):
    adapter = save_adapter(tiny_model_dir, tmp_path / "adapter")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    done = subprocess.run(
        [sys.executable, "-m", "hindsight.cli.main", "eval", "--env", "frozenlake", "--set", "size=3",
         "--set", "max_steps=2", "--model", f"hf:{tiny_model_dir}+{adapter}", "--episodes", "2",
         "--temperature", "0", "--max-new-tokens", "4", "--threads", "1", "--out", str(tmp_path / "eval")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "eval" / "summary.json").is_file()
    printed = done.stdout + done.stderr
    assert not [line for line in printed.splitlines() if "Warning" in line], printed
