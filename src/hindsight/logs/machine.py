"""The machine a run's closing numbers were written on.

The same code, seed and adapter gave 85 successes of 160 sampled attempts on one machine and
82 on another, while every greedy outcome matched (docs/results.md, issue 47); the earlier
machine's CPU was not recorded, so the cause could not be named. Floating-point results can
depend on the CPU's vector instructions and on the accelerator, so `summary.json` now names
them, and a kept result that cannot be rebuilt exactly says where it came from.

torch is read only when the run already imported it: the logs layer does not load it.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

#: The vector extensions that decide which CPU kernels run, widest first.
_VECTOR_FLAGS = ("avx512f", "avx2", "avx", "asimd", "neon")


@dataclass(frozen=True)
class Machine:
    """What decides a run's floating-point results, as far as it can be read here."""

    cpu: str  # the CPU's model name ("AMD EPYC"), or the architecture where none is given
    vector: str  # the widest vector extension the CPU reports ("avx512f", "avx2", ...), or ""
    torch: str  # torch's version, or "" where the run did not import it
    torch_cpu_capability: str  # the CPU kernels torch dispatches to ("AVX2"), or ""
    accelerator: str  # the CUDA device's name where torch sees one, else ""


def _cpuinfo(text: str) -> tuple[str, str]:
    """(model name, widest vector flag) from the text of /proc/cpuinfo."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return model, next((flag for flag in _VECTOR_FLAGS if flag in flags), "")


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> Machine:
    """The machine this process runs on (see the module docstring)."""
    try:
        model, vector = _cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace"))
    except OSError:  # not Linux: the platform module's name, no flags
        model, vector = platform.processor(), ""
    torch = sys.modules.get("torch")
    version = capability = accelerator = ""
    if torch is not None:
        version = str(torch.__version__)
        capability = str(torch.backends.cpu.get_cpu_capability())
        if torch.cuda.is_available():
            accelerator = str(torch.cuda.get_device_name(0))
    return Machine(cpu=model or platform.machine(), vector=vector, torch=version,
                   torch_cpu_capability=capability, accelerator=accelerator)


#: What decides which kernels a resumed run computes with, as `Machine` names them.
_KERNEL_FIELDS = ("torch", "torch_cpu_capability", "accelerator")


def kernel_change(then: Mapping[str, Any], now: Machine) -> str | None:
    """What differs between the kernels a checkpoint was written with (`then`, a `Machine` as a
    mapping; empty for a checkpoint that did not record one) and this process's, in one sentence;
    None where nothing that decides the floats differs or `then` does not say.

    A resumed run still goes on: only its bit-for-bit match with an uninterrupted run is lost.
    """
    changed = {name: then[name] for name in _KERNEL_FIELDS if name in then and then[name] != getattr(now, name)}
    if not changed:
        return None
    what = ", ".join(f"{name} {was or 'none'} -> {getattr(now, name) or 'none'}" for name, was in changed.items())
    hint = ""
    if str(changed.get("torch_cpu_capability", "")).upper() == "AVX2":
        hint = ("; to compute as the checkpoint did, set ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 "
                "MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 (docs/training.md)")
    return (f"the checkpoint was written with other kernels ({what}): the run goes on, but its "
            f"updates will not repeat an uninterrupted run's bit for bit{hint}")
