"""ECHO analysis maths against plain loops: stages, per-stage samples, failure drift, rating tallies."""

import math
import random

import numpy as np
import pytest

from hindsight.algos.echo_analysis import (
    Addressed, Granularity, RatedCritique, failure_drift, sample_per_stage, split_stages, stage_of, tally,
    tally_ratings, unit_rows,
)


@pytest.mark.parametrize("first,last,n", [(1, 1, 3), (1, 2, 3), (1, 3, 3), (1, 10, 3), (0, 10, 3), (5, 104, 7),
                                          (1, 100, 1), (3, 8, 4)])
def test_stages_cover_the_updates_in_contiguous_near_equal_ranges(first, last, n):
    stages = split_stages(first, last, n)
    span = last - first + 1
    assert len(stages) == min(n, span)
    assert stages[0].first_update == first and stages[-1].last_update == last
    for a, b in zip(stages, stages[1:]):
        assert b.first_update == a.last_update + 1
    sizes = [s.last_update - s.first_update + 1 for s in stages]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == span
    # stage_of against a plain scan of every stage's range.
    for update in range(first - 2, last + 3):
        expected = None
        for stage in stages:
            for u in range(stage.first_update, stage.last_update + 1):
                if u == update:
                    expected = stage.index
        assert stage_of(update, stages) == expected


def test_stage_labels_and_bad_input():
    assert [s.label for s in split_stages(1, 4, 3)] == ["update 1", "update 2", "updates 3–4"]
    with pytest.raises(ValueError):
        split_stages(1, 4, 0)
    with pytest.raises(ValueError):
        split_stages(5, 4, 2)


def test_sample_per_stage_caps_each_stage_keeps_order_and_repeats():
    items = [(k % 3, k) for k in range(40)]
    kept = sample_per_stage(items, lambda item: item[0], 5, seed=1)
    assert kept == sample_per_stage(items, lambda item: item[0], 5, seed=1)
    assert [sum(1 for s, _ in kept if s == stage) for stage in range(3)] == [5, 5, 5]
    assert kept == sorted(kept, key=lambda item: item[1]) and set(kept) <= set(items)
    assert sample_per_stage(items, lambda item: item[0], 0) == items
    assert sample_per_stage(items, lambda item: item[0], 100) == items


def plain_unit(row):
    norm = math.sqrt(sum(v * v for v in row))
    return [v / norm if norm else v for v in row]


def plain_centroid(rows):
    return [sum(r[i] for r in rows) / len(rows) for i in range(len(rows[0]))]


def plain_distance(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def plain_drift(vectors, labels, a, b):
    return plain_distance(plain_centroid([v for v, s in zip(vectors, labels) if s == a]),
                          plain_centroid([v for v, s in zip(vectors, labels) if s == b]))


def test_failure_drift_matches_plain_loops():
    rng = random.Random(3)
    labels = [rng.choice([0, 2, 3]) for _ in range(30)]  # stage 1 is empty
    rows = [[rng.gauss(s, 1.0) + 0.1 for _ in range(5)] for s in labels]
    result = failure_drift(np.array(rows), labels, 4, permutations=50, seed=7)

    vectors = [plain_unit(r) for r in rows]
    assert result.first_stage == 0 and result.last_stage == 3
    assert result.drift == pytest.approx(plain_drift(vectors, labels, 0, 3))
    assert result.steps == pytest.approx((plain_drift(vectors, labels, 0, 2), plain_drift(vectors, labels, 2, 3)))
    for spread in result.stages:
        members = [v for v, s in zip(vectors, labels) if s == spread.stage]
        assert spread.failures == len(members)
        if members:
            centre = plain_centroid(members)
            assert spread.spread == pytest.approx(sum(plain_distance(m, centre) for m in members) / len(members))
        else:
            assert spread.spread is None
    # The shuffles, replayed one by one with the same generator.
    generator = np.random.default_rng(7)
    shuffled = []
    for _ in range(50):
        order = generator.permutation(len(labels))
        shuffled.append(plain_drift(vectors, [labels[k] for k in order], 0, 3))
    assert result.chance_drift == pytest.approx(sum(shuffled) / 50)
    assert result.p_value == pytest.approx((1 + sum(d >= result.drift - 1e-12 for d in shuffled)) / 51)
    assert result.excess == pytest.approx(result.drift - result.chance_drift)


def test_separated_stages_drift_beyond_chance_and_mixed_ones_do_not():
    rng = np.random.default_rng(0)
    apart = np.concatenate([rng.normal([3, 0, 0], 0.3, (20, 3)), rng.normal([0, 3, 0], 0.3, (20, 3))])
    labels = [0] * 20 + [1] * 20
    moved = failure_drift(apart, labels, 2, permutations=100)
    assert moved.p_value == pytest.approx(1 / 101) and moved.excess > 0.5
    mixed = failure_drift(rng.normal([1, 1, 1], 0.5, (40, 3)), labels, 2, permutations=100)
    assert mixed.p_value > 0.05 and mixed.drift < moved.drift


def test_failure_drift_needs_two_stages_with_failures():
    result = failure_drift(np.ones((4, 3)), [1, 1, 1, 1], 3)
    assert result.drift is None and result.p_value is None and result.excess is None
    assert "fewer than two" in result.reason and [s.failures for s in result.stages] == [0, 4, 0]
    with pytest.raises(ValueError):
        failure_drift(np.ones((2, 3)), [0, 3], 3)
    with pytest.raises(ValueError):
        failure_drift(np.ones((2, 3)), [0], 3)


def test_unit_rows_keeps_zero_rows():
    rows = unit_rows(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert rows.tolist() == [[0.6, 0.8], [0.0, 0.0]]


def test_rating_tallies_match_plain_counts():
    rng = random.Random(5)
    levels = [*Granularity, None]
    verdicts = [*Addressed, None]
    critiques = [RatedCritique(rng.randrange(3), rng.random() < 0.4, rng.choice(levels), rng.choice(verdicts))
                 for _ in range(200)]
    tables = tally_ratings(critiques, 3)

    def plain(subset):
        counts = {"n": 0, "levels": {}, "verdicts": {}}
        for c in subset:
            counts["n"] += 1
            counts["levels"][c.granularity] = counts["levels"].get(c.granularity, 0) + 1
            counts["verdicts"][c.addressed] = counts["verdicts"].get(c.addressed, 0) + 1
        return counts

    for stage in range(3):
        for name, keep in (("all", lambda c: True), ("improved", lambda c: c.improved),
                           ("not_improved", lambda c: not c.improved)):
            subset = [c for c in critiques if c.stage == stage and keep(c)]
            expected = plain(subset)
            got = getattr(tables.stages[stage], name)
            assert got.critiques == expected["n"]
            assert (got.generic, got.targeted, got.pinpointed, got.granularity_unread) == tuple(
                expected["levels"].get(level, 0) for level in levels)
            assert (got.addressed_yes, got.addressed_no, got.addressed_unclear, got.addressed_unread) == tuple(
                expected["verdicts"].get(verdict, 0) for verdict in verdicts)
            yes, no = expected["verdicts"].get(Addressed.YES, 0), expected["verdicts"].get(Addressed.NO, 0)
            assert got.issue_addressed_rate == (pytest.approx(yes / (yes + no)) if yes + no else None)
            graded = [c.granularity.level for c in subset if c.granularity is not None]
            assert got.mean_granularity == (pytest.approx(sum(graded) / len(graded)) if graded else None)
            for level in Granularity:
                share = sum(1 for c in subset if c.granularity is level) / len(graded) if graded else None
                assert got.granularity_share(level) == (pytest.approx(share) if graded else None)
    assert tables.overall.all == tally(critiques) and tables.overall.stage == -1
    with pytest.raises(ValueError):
        tally_ratings([RatedCritique(3, True, None, None)], 3)


def test_empty_tally_has_no_rates():
    empty = tally([])
    assert empty.issue_addressed_rate is None and empty.mean_granularity is None
    assert empty.granularity_share(Granularity.GENERIC) is None
