"""ECHO and Self-Guide over two processes take the steps and log the metrics of one process.

The workers are real processes joined through accelerate (gloo on CPU), started the way a
launcher starts them. Sampling noise depends on how the batch is split (one seeded draw
per generate call, and each process draws its own), so a data-parallel run samples other
episodes than a one-process run. To compare the two on the same global batch, the workers
sample every request alone, seeded by its prompt and by how many equal prompts came before
it in the call (the members of a group differ by that count); the sampled tokens, returns,
advantages, sequences, updates, gathering and logs are the real code.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hindsight.net import free_port

from .test_training_loops import comparable, read_metrics

# Run by every worker: METHOD CONFIG_JSON OUT.
SCRIPT = r'''
import collections, json, sys, zlib
from dataclasses import replace

import torch

from hindsight.agent.selfguide import SelfAssessor
from hindsight.methods import echo, grpo


class RequestSeeded:
    """The model's sampler, drawing each request's tokens from a seed of the request alone."""

    def __init__(self, backend):
        self.backend = backend

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def generate(self, requests, params):
        seen, out = collections.Counter(), []
        for request in requests:
            key = json.dumps([[m.role, m.content] for m in request.messages]) + str(params.max_new_tokens)
            seed = zlib.crc32(f"{key}#{seen[key]}".encode())
            seen[key] += 1
            out += self.backend.generate([request], replace(params, seed=seed))
        return out


def seeded(load):
    def wrapped(*args, **kwargs):
        model = load(*args, **kwargs)
        model.sampler = RequestSeeded(model.sampler)
        return model
    return wrapped


_parse = SelfAssessor.parse


def label_by_length(self, completion):
    # The tiny model writes no readable label: label by the sampled text instead.
    assessment = _parse(self, completion)
    label = "positive" if len(completion.text) % 2 == 0 else "negative"
    return replace(assessment, label=label, reward=0.1 if label == "positive" else -0.1, parse_error=None)


def text_score(self, trajectory):
    # The tiny model never acts validly: a return decided by the sampled text gives both tracks a signal.
    return (sum(map(ord, trajectory.steps[0].raw)) % 5) / 4 if trajectory.steps else 0.0


method, config, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
if method == "echo":
    echo.load_echo_model = seeded(echo.load_echo_model)
    echo.ECHOConfig.trajectory_return = text_score
    echo.train_echo(echo.ECHOConfig(**config), out)
else:
    grpo.load_trainable = seeded(grpo.load_trainable)
    SelfAssessor.parse = label_by_length
    grpo.train_grpo(grpo.GRPOConfig(**config), out)
if torch.distributed.is_initialized():
    # Leave the process group before exiting (gloo threads alive at exit can abort a finished worker).
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
'''


def launch(tmp_path: Path, method: str, config: dict, world: int) -> Path:
    """Run `method` with `config` over `world` processes; the run directory."""
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    out, port = tmp_path / f"{method}-{world}", free_port()
    processes = [
        subprocess.Popen([sys.executable, str(script), method, json.dumps(config), str(out)],
                         env={**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": str(world), "RANK": str(rank),
                              "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        for rank in range(world)
    ]
    assert all(p.wait(timeout=300) == 0 for p in processes)
    return out


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "step-000002" / "model" / "weights.pt", weights_only=True)


def assert_same_run(alone: Path, pair: Path, roles: tuple[str, ...]) -> None:
    """Equal metric rows, records and final adapters, up to the float noise of summing over processes."""
    rows_alone, rows_pair = comparable(read_metrics(alone)), comparable(read_metrics(pair))
    assert [r["step"] for r in rows_pair] == [r["step"] for r in rows_alone]  # one writer: no row twice
    for one, two in zip(rows_alone, rows_pair):
        assert one.keys() == two.keys()
        for key, value in one.items():
            # Summed gradients reassociate float sums (~1e-6 of a quantity); a metric of one shard, or
            # a lost one, is off by a large fraction.
            assert two[key] == pytest.approx(value, rel=1e-3, abs=1e-6), key
    train = lambda run: sorted(line for line in (run / "trajectories" / "train.jsonl").read_text().splitlines()[1:])  # noqa: E731
    assert len(train(pair)) == len(train(alone))
    weights_alone, weights_pair = final_weights(alone), final_weights(pair)
    assert weights_alone.keys() == weights_pair.keys()
    for role in roles:
        names = [n for n in weights_alone if f".{role}." in n]
        # LoRA's B starts at zero, so it is the whole change the run made to the role.
        change = torch.cat([weights_alone[n].flatten() for n in names if "lora_B" in n])
        assert change.norm() > 0, role
        gap = torch.cat([(weights_pair[n] - weights_alone[n]).flatten() for n in names])
        assert gap.norm() <= 1e-3 * change.norm(), role


def test_echo_runs_data_parallel_like_one_process(tiny_model_dir, tmp_path):
    config = dict(model=f"hf:{tiny_model_dir}", env="blocksworld", env_kwargs={"num_blocks": 3, "max_steps": 2},
                  memory="none", updates=2, tasks_per_update=3, group_size=2, max_new_tokens=4,
                  critic_max_new_tokens=6, eval_every=1, eval_episodes=1, final_eval_episodes=2, checkpoint_every=1,
                  lr=1e-2, critic_lr=1e-2, micro_batch_size=2)
    alone, pair = launch(tmp_path, "echo", config, 1), launch(tmp_path, "echo", config, 2)
    assert_same_run(alone, pair, ("policy", "critic"))
    # Every process's cascades, written once: 3 tasks dealt out 2 + 1, N = 2 refinements each.
    records = lambda name: (pair / "trajectories" / f"{name}.jsonl").read_text().splitlines()[1:]  # noqa: E731
    assert len(records("initial")) == 2 * 3 and len(records("train")) == 2 * 3 * 2


def test_selfguide_runs_data_parallel_like_one_process(tiny_model_dir, tmp_path):
    config = dict(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3, "max_steps": 2}, updates=2, tasks_per_update=3,
                  group_size=2, max_new_tokens=4, assessment_max_new_tokens=5, eval_every=1, eval_episodes=1,
                  final_eval_episodes=2, checkpoint_every=1, lr=1e-2, micro_batch_size=2, self_guide=True,
                  guidance_reward=True, trust_start=0.0, trust_full=0.0, trust_hold_until=1.0, trust_end=1.0)
    alone, pair = launch(tmp_path, "grpo", config, 1), launch(tmp_path, "grpo", config, 2)
    assert_same_run(alone, pair, ("policy",))
    updates = read_metrics(pair)[1:3]
    assert all(row["selfguide/lambda"] == 1.0 and row["selfguide/assessments"] > 0 for row in updates)
    # The labels of both processes' assessments are counted, and they separated some group.
    assert all(0 < row["selfguide/positive_rate"] < 1 for row in updates)
    assert any(row.get("policy/sequences") for row in updates)
