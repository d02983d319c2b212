"""The machine record in summary.json (hindsight.logs.machine)."""

from __future__ import annotations

import json

import torch

from hindsight.logs import RunDir
from hindsight.logs.machine import Machine, machine

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
