"""Data parallelism: two processes, each updating on half the batch, take the one-process step.

The two workers are real processes joined through accelerate (gloo on CPU), started the
way a launcher starts them (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hindsight.net import free_port
from hindsight.train.distributed import Workers

# Run by each worker process and, with one worker, by the test itself.
SCRIPT = r'''
import json, os, sys
import pytest
import torch
from hindsight.algos.grpo import Aggregation
from hindsight.methods.model_setup import load_trainable
from hindsight.train.distributed import Workers
from hindsight.train.sequences import TrainingSequence
from hindsight.train.update import UpdateSettings, policy_gradient_update

model_dir, out, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
workers = Workers.current()
# Six turns of three trajectories (t0: three turns, t1: two, t2: one with a zero advantage), of
# different lengths and answer lengths. Each process holds whole trajectories, as GRPO deals them.
trajectory = ["t0", "t1", "t0", "t2", "t1", "t0"]
advantage = {"t0": 1.0, "t1": -0.5, "t2": 0.0}
sequences = [
    TrainingSequence(tuple(range(10 + i, 20 + 3 * i)), (0,) * 4 + (1,) * (6 + 2 * i), trajectory[i], (i,))
    for i in range(6)
]
mine = [i for i in range(6) if trajectory[i] in workers.shard(["t0", "t1", "t2"])]
# Each case from a fresh model, in one process: starting a process was most of this test's time.
for aggregation, epochs in cases:
    torch.manual_seed(0)
    model = load_trainable(f"hf:{model_dir}", ("policy",), lora_rank=4, lora_alpha=8, full_finetune=False)
    before = {n: p.detach().clone() for n, p in model.model.named_parameters() if "lora_" in n}
    # SGD keeps the weights linear in the gradients, so float noise in a gradient stays that small in
    # the weights; Adam's first steps divide each gradient by its own size and would blow the noise
    # of a near-zero gradient up to a whole step. The optimizer acts on the summed gradient alike in
    # every process, so SGD tests the same claim.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    settings = UpdateSettings(aggregation=Aggregation(aggregation), epochs=epochs, micro_batch_size=2, kl_coef=0.1)
    stats = [policy_gradient_update(model, [sequences[i] for i in mine], [advantage[trajectory[i]] for i in mine],
                                    optimizer, None, settings, workers) for _ in range(2)]
    if workers.is_main:
        name = f"{out}-{aggregation}"
        torch.save({n: p.detach() - before[n] for n, p in model.model.named_parameters() if "lora_" in n},
                   name + ".pt")
        with open(name + ".json", "w") as f:
            json.dump([[s.loss, s.pg_loss, s.kl, s.clip_frac, s.grad_norm, s.sequences, s.tokens] for s in stats], f)
workers.close()
# This test is about the step, not the exit: a finished worker was seen to abort in the
# interpreter's teardown now and then ("terminate called without an active exception", once in
# about ten runs, with and without leaving the process group first), so it skips the teardown.
sys.stdout.flush()
os._exit(0)
'''


CASES = (("trajectory_mean", 2), ("token_mean", 1))  # (aggregation, epochs)


def run_workers(tmp_path: Path, model_dir: Path, world: int, name: str) -> dict[str, tuple[dict, list]]:
    """Every case of CASES over `world` processes: each aggregation's weight change and stats."""
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    port = free_port()
    processes = []
    for rank in range(world):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": str(world), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        processes.append(subprocess.Popen([sys.executable, str(script), str(model_dir), str(tmp_path / name),
                                           json.dumps(CASES)], env=env))
    assert all(p.wait(timeout=300) == 0 for p in processes)
    return {aggregation: (torch.load(tmp_path / f"{name}-{aggregation}.pt"),
                          json.loads((tmp_path / f"{name}-{aggregation}.json").read_text()))
            for aggregation, _ in CASES}


def test_single_process_workers_do_nothing():
    workers = Workers()
    assert workers.is_main and workers.shard([1, 2, 3]) == [1, 2, 3] and workers.gather([4]) == [4]
    assert workers.sum([1.5, 2.0]) == [1.5, 2.0]
    assert Workers(rank=1, world=2).shard(range(5)) == [1, 3]


def test_two_processes_take_the_single_process_step(tiny_lora_model_dir, tmp_path):
    one, two = run_workers(tmp_path, tiny_lora_model_dir, 1, "one"), run_workers(tmp_path, tiny_lora_model_dir, 2, "two")
    for aggregation, _ in CASES:
        (alone, alone_stats), (pair, pair_stats) = one[aggregation], two[aggregation]
        assert alone.keys() == pair.keys()
        step_alone = torch.cat([alone[k].flatten() for k in alone])
        step_pair = torch.cat([pair[k].flatten() for k in alone])
        assert step_alone.norm() > 0  # the steps changed the adapters, so equal changes mean equal steps
        # Gradients summed over processes reassociate float sums (~1e-6 of the step measured on
        # several machines); a wrong normalisation or a lost shard is off by a large fraction.
        assert (step_pair - step_alone).norm() <= 1e-3 * step_alone.norm()
        for row_alone, row_pair in zip(alone_stats, pair_stats):
            assert row_alone[5:] == row_pair[5:]  # sequences and tokens are totals over the processes
            assert row_alone[:5] == pytest.approx(row_pair[:5], rel=1e-3, abs=1e-6)


GRPO_SCRIPT = r'''
import json, sys
import torch
from hindsight.methods.grpo import GRPOConfig, train_grpo
train_grpo(GRPOConfig(**json.loads(sys.argv[1])), sys.argv[2])
assert not torch.distributed.is_initialized()  # the run's end left the launcher's process group
'''


def test_grpo_runs_data_parallel_over_two_processes(tiny_model_dir, tmp_path):
    script = tmp_path / "grpo.py"
    script.write_text(GRPO_SCRIPT)
    config = dict(model=f"hf:{tiny_model_dir}", env_kwargs={"size": 3, "max_steps": 2}, updates=2, tasks_per_update=3,
                  group_size=2, max_new_tokens=4, eval_every=1, eval_episodes=1, final_eval_episodes=2,
                  checkpoint_every=1, lr=1e-2)
    port = free_port()
    # Each worker's stderr goes to a file: two pipes read one after the other could fill and
    # stall the worker that is not being read, and with it the other at its next collective.
    stderr = [tmp_path / f"stderr-{rank}" for rank in range(2)]
    processes = []
    for rank in range(2):
        with stderr[rank].open("w") as log:
            processes.append(subprocess.Popen(
                [sys.executable, str(script), json.dumps(config), str(tmp_path / "run")], stderr=log,
                env={**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "RANK": str(rank),
                     "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}))
    codes = [p.wait(timeout=300) for p in processes]
    errors = [path.read_text() for path in stderr]
    assert codes == [0, 0], errors
    # Nothing alarming in a finished run's output: no traceback, no abort in the teardown and (on
    # GPUs, where torch warns of it) no process group left to the interpreter's exit.
    assert not any("destroy" in e or "terminate called" in e or "Traceback" in e for e in errors), errors
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2, 2]  # one writer: no row twice
    # Both processes' groups are logged: 3 tasks × G=2 per update, dealt out 2 + 1.
    train = [json.loads(line) for line in (run / "trajectories" / "train.jsonl").read_text().splitlines()[1:]]
    assert len(train) == 2 * 3 * 2 and len({(t["update"], t["seed"]) for t in train}) == 2 * 3
    assert rows[2]["rollout/env_steps"] == sum(t["num_steps"] for t in train)
    assert "eval/success_rate" in rows[1] and (run / "checkpoints" / "step-000002").is_dir()
    assert json.loads((run / "summary.json").read_text())["episodes"] == 2


def test_methods_that_do_not_split_their_work_refuse_several_processes(monkeypatch, tmp_path):
    from hindsight.configs import ConfigError
    from hindsight.methods.sft import SFTConfig, train_sft

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="sft runs in one process"):
        train_sft(SFTConfig(), tmp_path / "sft")
