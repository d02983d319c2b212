import pytest

from hindsight.diagnostics import DEFAULT_T_MAX, auv, success_curve, trajectory_auv


def test_hand_worked_curve_and_auv():
    # Four tasks, horizon 4: solved on turns 1 and 3, one failure, one solved on turn 5 (after t_max).
    curve = success_curve([1, 3, None, 5], t_max=4)
    assert curve == (0.0, 0.25, 0.25, 0.5, 0.5)
    # (1/4) * [(0+.25)/2 + (.25+.25)/2 + (.25+.5)/2 + (.5+.5)/2] = (1/4) * 1.25
    assert auv(curve) == pytest.approx(0.3125)


def test_success_after_t_max_counts_for_nothing():
    assert success_curve([7], t_max=6) == (0.0,) * 7
    assert auv(success_curve([7], t_max=6)) == 0.0
    assert auv(success_curve([6], t_max=6)) == pytest.approx(0.5 / 6)


def test_p0_is_zero_even_for_a_success_without_steps():
    curve = success_curve([0, 0], t_max=2)
    assert curve == (0.0, 1.0, 1.0)
    # Solving everything on the first turn gives the largest possible AUV, 1 - 1/(2 t_max).
    assert auv(curve) == pytest.approx(1 - 1 / 4)


def test_single_trajectory_auv_and_linearity():
    t_max = 20
    assert trajectory_auv(1, t_max) == pytest.approx(19.5 / 20)
    assert trajectory_auv(20, t_max) == pytest.approx(0.5 / 20)
    assert trajectory_auv(21, t_max) == 0.0
    assert trajectory_auv(None, t_max) == 0.0
    turns = [1, 4, None, 9, 25, 20, 3]
    mean_single = sum(trajectory_auv(s, t_max) for s in turns) / len(turns)
    assert auv(success_curve(turns, t_max)) == pytest.approx(mean_single)


def test_paper_horizons_and_argument_checks():
    assert DEFAULT_T_MAX == {"blocksworld": 20, "frozenlake": 30, "sudoku": 20, "alfworld": 60, "webshop": 15,
                             "osworld": 50, "androidworld": 50, "windowsagentarena": 50}
    with pytest.raises(ValueError):
        success_curve([], t_max=3)
    with pytest.raises(ValueError):
        success_curve([1], t_max=0)
    with pytest.raises(ValueError):
        auv([0.0])
