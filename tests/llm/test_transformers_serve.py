"""`hindsight eval --model openai:DIR` against a real OpenAI-compatible server: `transformers serve`.

The server (from transformers' `serving` extra, in the `hf` extra) serves a tiny local model
on CPU; the evaluation must record every step of every episode, with the server's answers.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hindsight.llm.vllm import LocalServer

pytestmark = pytest.mark.slow


@pytest.fixture
def served(tiny_model_dir, tmp_path):
    server = LocalServer(
        "transformers serve",
        lambda port: [str(Path(sys.executable).parent / "transformers"), "serve", str(tiny_model_dir),
                      "--port", str(port), "--host", "127.0.0.1", "--device", "cpu"],
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}, startup_timeout=300,
        log_path=tmp_path / "server.log")
    yield server.url
    server.close()


def test_an_evaluation_against_transformers_serve_records_every_step(served, tiny_model_dir, tmp_path):
    out = tmp_path / "eval"
    env = {**os.environ, "OPENAI_BASE_URL": served, "OPENAI_API_KEY": "unused", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "hindsight", "eval", "--env", "frozenlake", "--model", f"openai:{tiny_model_dir}",
         "--episodes", "4", "--max-steps", "3", "--max-new-tokens", "8", "--temperature", "0", "--out", str(out),
         "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary.get("env_failures", 0) == 0
    lines = [json.loads(line) for line in (out / "trajectories" / "eval.jsonl").read_text().splitlines()]
    records = [line for line in lines if line["kind"] == "trajectory"]
    steps = [step for record in records for step in record["steps"]]
    # The tiny model writes no action block: every turn is a recorded invalid step answered by the
    # server (a finish reason, no backend error), none a lost call.
    assert len(records) == 4 and len(steps) == summary["steps"] == 12
    assert all(step["finish_reason"] in ("stop", "length") for step in steps)
    assert not any((step["parse_error"] or "").startswith("backend error") for step in steps)
