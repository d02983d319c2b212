"""Data-parallel training across processes, through accelerate.

Run a training command as usual for one process, or under a launcher for several:

    accelerate launch --num_processes 4 -m hindsight train grpo --config FILE.yaml --out DIR

GRPO (Self-Guide's switches included) and ECHO run this way; the other loops refuse it.

Every process holds the whole model (one per GPU) and runs the same loop. Each update's
task instances are dealt out to the processes, each rolls out whole groups (so group
advantages need no communication), and the update sums the gradients of all processes:
the step equals the single-process step on the union of the batches. Process 0 alone
writes logs and checkpoints and runs evaluations.

Without a launcher there is one process and every collective below is skipped, so the
single-process path pays nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class Workers:
    """The processes of this run: this one's rank and how many there are."""

    rank: int = 0
    world: int = 1

    @classmethod
    def current(cls) -> Workers:
        """This process's place in the run (joining the launcher's process group if there is one)."""
        import os

        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        from accelerate import PartialState

        # Sets up torch.distributed from the launcher's environment (gloo on CPUs) and, on
        # GPUs, selects this process's device, so the model loads onto it.
        state = PartialState(cpu=not torch.cuda.is_available())
        return cls(state.process_index, state.num_processes)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This process's share of `items` (every world-th item from its rank)."""
        return list(items[self.rank :: self.world])

    def gather(self, items: Sequence[T]) -> list[T]:
        """Every process's `items`, concatenated in rank order, on every process."""
        if self.world == 1:
            return list(items)
        parts: list[list[T] | None] = [None] * self.world
        torch.distributed.all_gather_object(parts, list(items))
        return [item for part in parts for item in part]

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sums over the processes."""
        if self.world == 1:
            return list(values)
        tensor = torch.tensor(list(values), dtype=torch.float64, device=_collective_device())
        torch.distributed.all_reduce(tensor)
        return tensor.tolist()

    def sum_gradients(self, parameters: Sequence[torch.nn.Parameter]) -> None:
        """Replace each gradient by its sum over the processes (a missing one counts as zero)."""
        if self.world == 1:
            return
        for parameter in parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        flat = torch.cat([p.grad.reshape(-1) for p in parameters])
        torch.distributed.all_reduce(flat)
        offset = 0
        for parameter in parameters:
            count = parameter.grad.numel()
            parameter.grad.copy_(flat[offset : offset + count].view_as(parameter.grad))
            offset += count

    def close(self) -> None:
        """Leave the launcher's process group, once this process has made its last collective.

        torch asks for this before a process ends: a group left to the interpreter's exit
        warns on GPUs, and its communication threads may outlive the objects they use. No
        barrier: process 0's final evaluation can outlast the group's timeout while the
        others have nothing left to wait for.
        """
        if self.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def require_groups(self, tasks_per_update: int) -> None:
        """Refuse fewer tasks per update than processes: each process needs whole task groups to score."""
        from hindsight.configs import ConfigError

        if tasks_per_update < self.world:
            raise ConfigError(f"tasks_per_update ({tasks_per_update}) must be at least the number of processes "
                              f"({self.world}): each process rolls out whole task groups")


def single_process(method: str) -> None:
    """Refuse a launch over several processes for a loop that does not split its work."""
    import os

    from hindsight.configs import ConfigError

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        raise ConfigError(f"{method} runs in one process (this launch has {world}); "
                          "grpo (with Self-Guide) and echo are the data-parallel loops")


def _collective_device() -> torch.device:
    backend = torch.distributed.get_backend()
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
