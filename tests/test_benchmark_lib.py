"""benchmarks/lib.sh: the comparison drivers' job slots."""

import subprocess
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "benchmarks" / "lib.sh"


def test_a_job_goes_to_the_slot_that_is_free_not_the_next_in_turn(tmp_path):
    # Slot "0" holds a job until the file `go` appears; the job in slot "0,0" ends at once. The third
    # job must take slot "0,0" (two threads), where a round-robin would have queued it behind the first.
    script = f"""
    set -euo pipefail
    out={tmp_path}
    lake=()
    CORES="0 0,0"
    . {LIB}
    spawn held "while [ ! -f {tmp_path}/go ]; do sleep 0.05; done"
    spawn quick "true"
    spawn third "echo threads \\$HINDSIGHT_THREADS > {tmp_path}/third.out"
    touch {tmp_path}/go
    wait
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    slots = [line.split(": ")[0].split(" ", 1)[1] for line in result.stdout.splitlines()]
    assert slots == ["cores 0", "cores 0,0", "cores 0,0"]
    assert (tmp_path / "third.out").read_text() == "threads 2\n"


def test_only_names_the_jobs_that_run(tmp_path):
    script = f"""
    set -euo pipefail
    out={tmp_path}
    lake=()
    CORES="0"
    ONLY="sg-s1 grpo-s0"
    . {LIB}
    for name in grpo-s0 sg-s0 sg-s1 grpo-s10; do spawn "$name" "touch {tmp_path}/$name.ran"; done
    wait
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in tmp_path.glob("*.ran")) == ["grpo-s0.ran", "sg-s1.ran"]
