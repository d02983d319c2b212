"""The machine record in summary.json (hindsight.logs.machine)."""

from __future__ import annotations

import json

import torch

from hindsight.logs import RunDir
from hindsight.logs.machine import Machine, kernel_change, machine

AVX2_BOX = """processor\t: 0
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx fma avx2
processor\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx fma avx2
"""


def test_reads_the_cpu_and_its_widest_vector_extension(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AVX2_BOX)
    found = machine(cpuinfo)
    assert (found.cpu, found.vector) == ("AMD EPYC", "avx2")
    cpuinfo.write_text(AVX2_BOX.replace("avx2", "avx2 avx512f avx512bw"))
    assert machine(cpuinfo).vector == "avx512f"


def test_an_arm_cpu_without_a_model_name_is_named_by_its_architecture(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm\n")
    found = machine(cpuinfo)
    assert found.vector == "asimd"
    assert found.cpu  # platform.machine(), never empty on a real host


def test_a_missing_cpuinfo_still_gives_a_record(tmp_path):
    found = machine(tmp_path / "absent")
    assert found.vector == ""
    assert found.cpu


def test_torch_is_described_once_the_run_imported_it(tmp_path):
    found = machine(tmp_path / "absent")  # torch is imported by this module
    assert found.torch == torch.__version__
    assert found.torch_cpu_capability == torch.backends.cpu.get_cpu_capability()
    assert found.accelerator == (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")


def test_every_summary_names_its_machine_unless_the_caller_did(tmp_path):
    run = RunDir(tmp_path / "run")
    summary = json.loads(run.write_summary({"success_rate": 0.5}).read_text())
    assert summary["success_rate"] == 0.5
    assert set(summary["machine"]) == set(Machine.__dataclass_fields__)
    assert summary["machine"]["torch"] == torch.__version__
    given = {"cpu": "elsewhere"}
    assert json.loads(run.write_summary({"machine": given}).read_text())["machine"] == given


def test_a_change_of_kernels_since_a_checkpoint_is_named_with_how_to_undo_it():
    then = Machine("AMD EPYC", "avx2", "2.13.0", "AVX2", "")
    same_kernels = Machine("Intel Xeon", "avx512f", "2.13.0", "AVX2", "")  # another CPU held to AVX2
    assert kernel_change(vars(then), same_kernels) is None
    assert kernel_change({}, same_kernels) is None  # a checkpoint that recorded no machine
    change = kernel_change(vars(then), Machine("AMD EPYC", "avx512f", "2.13.0", "AVX512", ""))
    assert change.startswith("the checkpoint was written with other kernels (torch_cpu_capability AVX2 -> AVX512)")
    assert "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2" in change and "\n" not in change
    moved = kernel_change(vars(then), Machine("AMD EPYC", "avx2", "2.14.0", "AVX2", "NVIDIA H200"))
    assert "(torch 2.13.0 -> 2.14.0, accelerator none -> NVIDIA H200)" in moved and "ATEN" not in moved
