"""The paired difference of two arms: its mean, its interval, and refusing a broken pairing."""

import numpy as np
import pytest

from hindsight.stats import paired_difference


def grid(values):
    return {(s, t): v for s, row in enumerate(values) for t, v in enumerate(row)}


def test_the_difference_and_per_seed_means_match_a_plain_loop():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, size=(3, 50)).tolist()
    b = rng.integers(0, 2, size=(3, 50)).tolist()
    result = paired_difference(grid(a), grid(b), resamples=2000)
    per_seed = [sum(y - x for x, y in zip(ra, rb)) / 50 for ra, rb in zip(a, b)]
    assert result.per_seed == pytest.approx(per_seed, abs=1e-12)
    assert result.difference == pytest.approx(sum(per_seed) / 3, abs=1e-12)
    assert result.mean_b - result.mean_a == pytest.approx(result.difference, abs=1e-12)
    assert result.low <= result.difference <= result.high and (result.seeds, result.tasks) == ((0, 1, 2), 50)


def test_a_constant_shift_has_a_zero_width_interval_and_noise_a_wide_one():
    a = grid([[0.0] * 40] * 3)
    shifted = paired_difference(a, grid([[0.25] * 40] * 3), resamples=500)
    assert shifted.low == pytest.approx(0.25) and shifted.high == pytest.approx(0.25)
    # Seeds that disagree (one gains everything, two gain nothing) give an interval covering 0.
    split = paired_difference(a, grid([[1.0] * 40, [0.0] * 40, [0.0] * 40]), resamples=4000)
    assert split.difference == pytest.approx(1 / 3) and split.low == pytest.approx(0.0) and split.high == 1.0


def test_the_interval_covers_the_truth_about_as_often_as_it_claims():
    rng = np.random.default_rng(11)
    covered = 0
    for trial in range(200):
        a = rng.random((3, 60)) < 0.4
        b = rng.random((3, 60)) < 0.5  # true difference 0.1
        result = paired_difference(grid(a.tolist()), grid(b.tolist()), resamples=400, rng_seed=trial)
        covered += result.low <= 0.1 <= result.high
    assert 0.85 <= covered / 200 <= 1.0  # nominal 0.95; the seed level makes it conservative


@pytest.mark.parametrize("a, b, message", [
    ({(0, 1): 1.0}, {(0, 2): 1.0}, "same \\(seed, task\\) pairs"),
    ({(0, 1): 1.0, (1, 2): 0.0}, {(0, 1): 1.0, (1, 2): 0.0}, "same tasks"),
    ({}, {}, "no outcomes"),
])
def test_a_broken_pairing_is_refused(a, b, message):
    with pytest.raises(ValueError, match=message):
        paired_difference(a, b)


def test_wilson_interval_matches_a_plain_binomial_search():
    from hindsight.stats import wilson_interval

    # The Wilson interval holds exactly the p whose score test does not reject k of n at 5%.
    for k, n in [(0, 32), (5, 32), (16, 32), (32, 32), (169, 300)]:
        low, high = wilson_interval(k, n)
        grid = [i / 20000 for i in range(20001)]
        accepted = [p for p in grid if abs(k - n * p) <= 1.96 * (n * p * (1 - p)) ** 0.5]
        assert abs(low - min(accepted)) < 1e-4 and abs(high - max(accepted)) < 1e-4
    assert wilson_interval(0, 32)[0] == 0.0 and abs(wilson_interval(0, 32)[1] - 0.107) < 1e-3
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
