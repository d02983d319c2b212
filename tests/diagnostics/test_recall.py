import pytest

from hindsight.diagnostics import RunAccumulator, hooks_for, recall_distances
from hindsight.logs.importers import TrajectoryView

TASK = "Your task is to: put some apple on diningtable."


def test_recall_distance_hand_worked():
    observations = [
        "You are in the middle of a room. You see a countertop 1 and a diningtable 1.",  # t=0
        "On the countertop 1, you see a apple 1 and a mug 2.",                            # t=1: apple 1 seen
        "On the cabinet 1, you see nothing.",                                              # t=2
        "On the countertop 1, you see a apple 1 and a mug 2.",                            # t=3: seen again
        "You pick up the apple 1 from the countertop 1.",                                  # t=4
        "You arrive at diningtable 1.",                                                    # t=5
    ]
    actions = ["go to countertop 1", "go to cabinet 1", "go to countertop 1", "take apple 1 from countertop 1",
               "go to diningtable 1", "put apple 1 in/on diningtable 1"]
    # Task objects: apple, diningtable. LastSeen looks at observations strictly before the action's step.
    # t=3 takes apple 1, last seen at t=1 -> 2;  t=4 goes to diningtable 1, last seen at t=0 -> 4;
    # t=5 puts apple 1 (last seen t=4) -> 1 on diningtable 1 (last seen t=0) -> 5. Countertops and
    # cabinets are not task objects.
    assert recall_distances(observations, actions, TASK, hooks_for("alfworld")) == [2, 4, 1, 5]


def test_objects_first_seen_in_the_current_observation_do_not_count():
    observations = ["On the countertop 1, you see a apple 1."]
    assert recall_distances(observations, ["take apple 1 from countertop 1"], TASK, hooks_for("alfworld")) == []


def test_envs_without_object_hooks_skip_with_a_reason():
    with pytest.raises(ValueError, match="fully observable"):
        recall_distances(["x"], ["right"], "", hooks_for("frozenlake"))
    acc = RunAccumulator("frozenlake")
    acc.add(TrajectoryView(env="frozenlake", success=True, observations=("a",), actions=("right",), valid=(True,)))
    run = acc.finish(label="r", path="r")
    assert run.recall_distance is None and "fully observable" in run.recall_note
