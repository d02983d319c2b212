import pytest

from hindsight.cli.main import main


@pytest.mark.parametrize("argv, usage", [
    (["train", "grpo", "runs/x"], "usage: hindsight train"),
    (["diagnose", "runs/x", "--bogus"], "usage: hindsight diagnose"),
    (["--bogus"], "usage: hindsight [-h]"),
])
def test_an_unrecognized_argument_is_reported_with_its_command_s_usage(argv, usage, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and f"error: unrecognized arguments: {argv[-1]}" in err


def failing_with(error: BaseException):
    def run(args):
        raise error
    return run


def test_a_path_that_cannot_be_used_is_one_line_and_exit_2(monkeypatch, capsys):
    import hindsight.cli.diagnose as diagnose

    monkeypatch.setattr(diagnose, "run", failing_with(PermissionError(13, "Permission denied", "/runs/x")))
    assert main(["diagnose", "/runs/x"]) == 2
    assert capsys.readouterr().err == "hindsight: error: cannot use /runs/x: Permission denied\n"


def test_a_closed_pipe_is_not_an_error_and_an_os_error_without_a_path_keeps_its_traceback(monkeypatch):
    import hindsight.cli.diagnose as diagnose

    # BrokenPipeError is an OSError without a path: the reader stopped early (`| head`).
    monkeypatch.setattr(diagnose, "run", failing_with(BrokenPipeError(32, "Broken pipe")))
    monkeypatch.setattr("os.dup2", lambda *args: None)  # keep pytest's stdout
    assert main(["diagnose", "/runs/x"]) == 0
    monkeypatch.setattr(diagnose, "run", failing_with(OSError(28, "No space left on device")))
    with pytest.raises(OSError, match="No space left"):
        main(["diagnose", "/runs/x"])
