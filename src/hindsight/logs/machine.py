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
