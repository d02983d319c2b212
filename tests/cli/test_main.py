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
