"""TrainingProgress off a terminal: one plain stderr line per phase and per finished unit."""

import re

from hindsight.methods.progress import TrainingProgress


def test_plain_lines_when_stderr_is_not_a_terminal(capsys):
    with TrainingProgress(3, "grpo", completed=1) as progress:
        progress.phase("rollout")
        progress.advance("rollout 4s · update 2s")
        progress.advance("rollout 5s · update 2s")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"grpo 1/3 0:0\d \[rollout\]", lines[0])
    assert re.fullmatch(r"grpo 2/3 0:0\d rollout 4s · update 2s", lines[1])
    assert lines[2].startswith("grpo 3/3 ")


def test_disabled_progress_prints_nothing(capsys):
    with TrainingProgress(2, "grpo", enabled=False) as progress:
        progress.phase("rollout")
        progress.advance("done")
    assert capsys.readouterr().err == ""
