"""TIDE's own file formats, read from small hand-written fixtures.

`tide_results.jsonl` follows the result JSONL of TIDE's evaluation runner (one line per
task sample, rollouts inside); `tide_instances.jsonl` follows the per-instance trajectory
JSONL that TIDE's GUI analysis converts other agents' logs into. Both end with broken
lines, which must be reported as file:line and skipped.
"""

from pathlib import Path

import pytest

from hindsight.logs.importers import (
    GENERIC, TIDE, TIDE_INSTANCE, detect_format, import_trajectories, read_views, view_from_tide_instance,
)
from hindsight.logs.schema import SchemaError

DATA = Path(__file__).resolve().parent.parent / "diagnostics" / "data"
RESULTS = DATA / "tide_results.jsonl"
INSTANCES = DATA / "tide_instances.jsonl"


def read(path, env=""):
    issues = []
    views = list(read_views(path, issues.append, env=env))
    return views, issues


def test_result_file_reads_action_entropy_from_mean_or_raw():
    (won, lost), issues = read(RESULTS, env="frozen_lake")
    assert won.env == "frozenlake" and won.success and won.length == 2 and won.id == "seed-101"
    # The first step logs a mean; the second only the raw per-token list (its mean is used).
    assert won.entropies == pytest.approx((0.4, 0.4))
    assert won.surprisals is None and won.progress is None
    assert lost.actions == ("up", "up", "stop") and lost.valid == (False, False, True)
    assert lost.entropies == (0.1, 0.05, None)
    assert [(i.line, i.path) for i in issues] == [(3, str(RESULTS)), (4, str(RESULTS))]
    assert "invalid JSON" in issues[0].message and "bad TIDE sample" in issues[1].message


def test_instance_file_views():
    views, issues = read(INSTANCES)
    assert [v.id for v in views] == ["chrome/open-tab", "gimp/crop", "vlc/volume", "files/rename"]
    tab, crop, volume, empty = views
    assert tab.env == "osworld" and tab.model == "toy-agent" and tab.success and tab.score == 1.0
    # An action list becomes one text, calls in order; an empty list is the empty action.
    assert tab.actions[1] == "pyautogui.typewrite('example.org')\npyautogui.press('enter')"
    assert volume.actions[-1] == ""
    assert tab.valid == (True, True) and tab.state_keys is None and tab.states == tab.observations
    # The numeric success is the final progress; non-zero counts as solved.
    assert volume.success and volume.score == 0.5 and volume.progress == (None, None, None, None, 0.5)
    assert not crop.success and crop.progress == (None, None, None, 0.0)
    assert volume.embeddings is not None and volume.embeddings[0] == (1.0, 0.0) and tab.embeddings is None
    assert not empty.success and empty.length == 0 and empty.progress is None
    assert [i.line for i in issues] == [4, 5, 6]
    assert all(str(i).startswith(f"{INSTANCES}:{i.line}: ") for i in issues)
    assert "invalid JSON" in issues[0].message
    assert "success is 'yes'" in issues[1].message
    assert "step 0 is not a JSON object" in issues[2].message


def test_instance_environment_falls_back_to_the_hint():
    view = view_from_tide_instance({"success": True, "trajectory": [{"observation": "a", "action": ["x"]}]},
                                   env="android_world")
    assert view.env == "androidworld" and view.success and view.actions == ("x",) and view.id == ""
    with pytest.raises(SchemaError):
        view_from_tide_instance({"success": 2.0, "trajectory": []})
    with pytest.raises(SchemaError):
        view_from_tide_instance({"trajectory": []})


def test_format_detection_tells_the_tide_formats_apart():
    assert detect_format({"traj_rollouts": [], "success": True}) == TIDE
    assert detect_format({"trajectory": [], "success": 0.0}) == TIDE_INSTANCE
    assert detect_format({"trajectory": []}) is None
    assert detect_format({"steps": [], "success": True}) == GENERIC


def test_instances_import_as_full_trajectories():
    first, *_ = import_trajectories(INSTANCES)
    assert first.env == "osworld" and first.success and first.score == 1.0
    assert [s.observation for s in first.steps][0].endswith("step_0.png")
