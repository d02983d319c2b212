"""benchmarks/keep.py: a comparison's runs saved into the repository and restored on a new machine."""

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import keep  # noqa: E402


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


@pytest.fixture()
def out(tmp_path):
    """One of each: a finished evaluation, a finished training run with a checkpoint, an evaluation
    killed mid-write, a training run killed before its end, an exported adapter."""
    root = tmp_path / "out"
    write(root / "react/config.yaml", "env: frozenlake\n")
    write(root / "react/trajectories/eval.jsonl", '{"a": 1}\n{"a": 2}\n')
    write(root / "react/summary.json", json.dumps({"success_rate": 0.5}))
    write(root / "grpo-s0/config.yaml", "method: grpo\n")
    write(root / "grpo-s0/metrics.jsonl", '{"step": 1}\n')
    write(root / "grpo-s0/trajectories/train.jsonl", '{"t": 1}\n')
    write(root / "grpo-s0/trajectories/eval-test-final.jsonl", '{"t": 2}\n')
    write(root / "grpo-s0/round-1/pairs.jsonl", '{"chosen": "up"}\n')
    write(root / "grpo-s0/summary.json", json.dumps({"success_rate": 0.6}))
    write(root / "grpo-s0/checkpoints/step-000008/state.pt", b"\0" * 64)
    write(root / "grpo-s0/checkpoints/step-000008/config.yaml", "not a run\n")
    write(root / "reflact/config.yaml", "env: frozenlake\n")
    write(root / "reflact/trajectories/eval.jsonl", '{"task": 1}\n{"task": 2}\n{"task": 3, "cut')
    write(root / "reflact/summary.json", json.dumps({"interrupted": True}))
    write(root / "grpo-s0/forked_from.json", '{"source": "elsewhere", "step": 4}\n')
    write(root / "sg-s0/config.yaml", "method: grpo\n")
    write(root / "sg-s0/forked_from.json", '{"source": "grpo-s0", "step": 2}\n')
    write(root / "sg-s0/metrics.jsonl", '{"step": 1}\n')
    write(root / "sg-s0/checkpoints/step-000002/state.pt", b"\0" * 64)
    write(root / "start-adapter/adapter_config.json", '{"r": 16}')
    write(root / "start-adapter/adapter_model.safetensors", b"\1\2\3")
    return root


def test_save_keeps_finished_runs_partial_evaluations_and_adapters(out, tmp_path):
    kept = tmp_path / "kept"
    lines = keep.save(out, kept)

    assert lines == ["grpo-s0: finished", "react: finished", "reflact: partial evaluation",
                     "sg-s0: skipped (an unfinished training run)", "start-adapter: adapter"]
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        "grpo-s0/config.yaml", "grpo-s0/forked_from.json", "grpo-s0/metrics.jsonl.gz", "grpo-s0/round-1/pairs.jsonl.gz",
        "grpo-s0/summary.json",
        "grpo-s0/trajectories/eval-test-final.jsonl.gz", "grpo-s0/trajectories/train.jsonl.gz",
        "react/config.yaml", "react/summary.json", "react/trajectories/eval.jsonl.gz",
        "reflact/config.yaml", "reflact/trajectories/eval.jsonl.gz",
        "start-adapter/adapter_config.json", "start-adapter/adapter_model.safetensors"]
    # The line a killed evaluation was writing is dropped; its finished tasks are kept.
    assert gzip.decompress((kept / "reflact/trajectories/eval.jsonl.gz").read_bytes()) == \
        b'{"task": 1}\n{"task": 2}\n'
    # Saving twice gives the same bytes, so an unchanged run makes no diff in the repository.
    before = {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    keep.save(out, kept)
    assert before == {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()}


def test_restore_writes_the_runs_back_for_the_drivers(out, tmp_path):
    kept, new = tmp_path / "kept", tmp_path / "new"
    keep.save(out, kept)

    lines = keep.restore(kept, new)

    assert lines == ["grpo-s0: restored", "react: restored", "reflact: restored", "start-adapter: restored"]
    for name in ("react/trajectories/eval.jsonl", "react/summary.json", "grpo-s0/metrics.jsonl",
                 "grpo-s0/trajectories/train.jsonl", "start-adapter/adapter_model.safetensors"):
        assert (new / name).read_bytes() == (out / name).read_bytes()
    assert keep.finished(new / "react") and keep.finished(new / "grpo-s0")
    assert not (new / "reflact/summary.json").exists()  # unfinished: `hindsight eval --resume` continues it
    assert (new / "reflact/trajectories/eval.jsonl").read_text() == '{"task": 1}\n{"task": 2}\n'
    assert not (new / "sg-s0").exists() and not (new / "grpo-s0/checkpoints").exists()


def test_restore_leaves_finished_runs_alone_and_replaces_unfinished_ones(out, tmp_path):
    kept = tmp_path / "kept"
    keep.save(out, kept)
    write(out / "reflact/trajectories/eval.jsonl", '{"task": 1}\n')  # an older, shorter copy

    lines = keep.restore(kept, out)

    assert "react: left alone (already there)" in lines and "reflact: restored" in lines
    assert (out / "reflact/trajectories/eval.jsonl").read_text() == '{"task": 1}\n{"task": 2}\n'
    assert (out / "grpo-s0/checkpoints/step-000008/state.pt").exists()
    # An evaluation that went further here than in the kept copy is not set back.
    write(out / "reflact/trajectories/eval.jsonl", '{"task": 1}\n{"task": 2}\n{"task": 3}\n')
    assert "reflact: left alone (this copy is as far along)" in keep.restore(kept, out)
    assert (out / "reflact/trajectories/eval.jsonl").read_text().count("\n") == 3


def test_bad_folders_get_a_clear_error(tmp_path, capsys):
    assert keep.main(["save", str(tmp_path / "missing"), str(tmp_path / "kept")]) == 2
    assert "no such folder" in capsys.readouterr().err
    write(tmp_path / "run/config.yaml", "env: frozenlake\n")
    assert keep.main(["save", str(tmp_path / "run"), str(tmp_path / "kept")]) == 2
    assert "is itself a run folder" in capsys.readouterr().err


@pytest.fixture()
def repo(tmp_path):
    import subprocess

    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_park_commits_unfinished_runs_with_their_checkpoint_and_unpark_brings_them_back(out, tmp_path, repo):
    write(out / "sg-s0/checkpoints/step-000004/state.pt", b"\1" * 64)  # the latest of two
    write(out / "sg-s0/checkpoints/step-000004/model/weights.pt", b"\2" * 32)
    write(out / "sg-s0/checkpoints/step-000006.tmp/state.pt", b"\3")  # still being written: not parked
    write(out / "sg-s0/trajectories/train.jsonl", '{"u": 1}\n{"u": 2, "cut')

    assert keep.park(out, "selfguide", repo) == ["sg-s0: parked at step-000004"]

    new = tmp_path / "new"
    assert keep.unpark("selfguide", new, repo) == ["sg-s0: unparked at step-000004"]
    assert sorted(str(p.relative_to(new)) for p in new.rglob("*") if p.is_file()) == [
        "sg-s0/checkpoints/step-000004/model/weights.pt", "sg-s0/checkpoints/step-000004/state.pt",
        "sg-s0/config.yaml", "sg-s0/forked_from.json", "sg-s0/metrics.jsonl", "sg-s0/trajectories/train.jsonl"]
    assert (new / "sg-s0/checkpoints/step-000004/state.pt").read_bytes() == b"\1" * 64
    assert (new / "sg-s0/trajectories/train.jsonl").read_text() == '{"u": 1}\n'  # whole lines only
    # A copy that is as far along, or finished, is left alone.
    assert keep.unpark("selfguide", new, repo) == ["sg-s0: left alone (already as far along)"]
    # Parking again replaces the branch's commit (no history) and keeps other comparisons' runs.
    write(out / "sg-s0/checkpoints/step-000006/state.pt", b"\4")
    keep.park(out, "echo", repo)
    keep.park(out, "selfguide", repo)
    assert keep.git(repo, "rev-list", "--count", "parked").strip() == b"1"
    assert keep.unpark("echo", tmp_path / "other", repo) == ["sg-s0: unparked at step-000006"]
    assert keep.unpark("selfguide", new, repo) == ["sg-s0: unparked at step-000006"]
    assert not (new / "sg-s0/checkpoints/step-000004").exists()  # the run folder is the parked one
    # Once the run finished, the next park drops it.
    write(out / "sg-s0/summary.json", json.dumps({"success_rate": 0.5}))
    nothing = f"nothing to park in {out} (no unfinished training run with a checkpoint)"
    assert keep.park(out, "selfguide", repo) == [nothing]
    assert keep.unpark("selfguide", new, repo) == ["nothing parked under 'selfguide'"]


def test_unpark_without_a_parked_branch_is_a_clear_error(repo, tmp_path):
    with pytest.raises(keep.KeepError, match="nothing was parked"):
        keep.unpark("selfguide", tmp_path / "out", repo)


def test_a_trained_run_is_kept_with_a_slim_last_checkpoint_and_continues_its_final_evaluation(out, tmp_path):
    torch = pytest.importorskip("torch")
    run = out / "sg-gr-s2"
    write(run / "config.yaml", "kind: grpo\nupdates: 8\n")
    write(run / "metrics.jsonl", '{"step": 8}\n')
    write(run / "trajectories/train.jsonl", '{"update": 8}\n')
    write(run / "trajectories/eval-test-final.jsonl", '{"task": 1}\n{"task": 2}\n{"task": 3, "cut')
    write(run / "checkpoints/step-000008/model/weights.pt", b"\5" * 32)
    weights = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weights], lr=0.1)
    weights.sum().backward()
    optimizer.step()
    assert optimizer.state_dict()["state"]  # the moments the slim copy drops
    saved_rng = torch.get_rng_state()
    torch.save({"step": 8, "optimizers": {"policy": optimizer.state_dict()}, "rng": {"torch": saved_rng},
                "state": {"env_steps": 687}}, run / "checkpoints/step-000008/state.pt")
    write(run / "checkpoints/step-000006/state.pt", b"\0")  # an older checkpoint: not kept
    kept = tmp_path / "kept"

    assert "sg-gr-s2: trained, final evaluation unfinished" in keep.save(out, kept)

    assert sorted(str(p.relative_to(kept / "sg-gr-s2")) for p in (kept / "sg-gr-s2").rglob("*") if p.is_file()) == [
        "checkpoints/step-000008/model/weights.pt", "checkpoints/step-000008/state.pt", "config.yaml",
        "metrics.jsonl.gz", "trajectories/eval-test-final.jsonl.gz", "trajectories/train.jsonl.gz"]
    new = tmp_path / "new"
    assert "sg-gr-s2: restored" in keep.restore(kept, new)
    assert (new / "sg-gr-s2/trajectories/eval-test-final.jsonl").read_text() == '{"task": 1}\n{"task": 2}\n'
    assert (new / "sg-gr-s2/checkpoints/step-000008/model/weights.pt").read_bytes() == b"\5" * 32
    slim = torch.load(new / "sg-gr-s2/checkpoints/step-000008/state.pt", weights_only=False)
    assert slim[keep.SLIM_KEY] and slim["state"] == {"env_steps": 687} and slim["step"] == 8
    assert torch.equal(slim["rng"]["torch"], saved_rng)  # the RNGs are kept
    # It still loads into a fresh optimizer, with its hyperparameters and no moments.
    fresh = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=0.5)
    fresh.load_state_dict(slim["optimizers"]["policy"])
    assert fresh.param_groups[0]["lr"] == pytest.approx(0.1) and not fresh.state_dict()["state"]
    # A copy whose final evaluation went as far is not set back.
    assert "sg-gr-s2: left alone (this copy is as far along)" in keep.restore(kept, new)


def test_a_run_short_of_its_last_update_is_not_kept_as_trained(out, tmp_path):
    write(out / "sg-s0/config.yaml", "kind: grpo\nupdates: 8\n")  # its checkpoint is after update 2
    assert "sg-s0: skipped (an unfinished training run)" in keep.save(out, tmp_path / "kept")
