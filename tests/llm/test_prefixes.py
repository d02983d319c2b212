"""The prefill arithmetic of `hindsight.llm.prefixes`, against plain loops over the batch layout."""

from __future__ import annotations

import random

from hindsight.llm.prefixes import common_prefix, prefix_tree_size, reused_prefill_tokens, shared_prefill_tokens


def _reused_by_columns(lengths: list[int], reused: list[int]) -> int:
    """Lay the rows out left-padded, find the first column some row has not stored, and count
    the real tokens from there on (the last one of every row at least)."""
    width = max(lengths)
    stored = [[width - n <= c < width - n + k for c in range(width)] for n, k in zip(lengths, reused)]
    real = [[c >= width - n for c in range(width)] for n in lengths]
    start = width - 1
    for c in range(width):
        if any(real[r][c] and not stored[r][c] for r in range(len(lengths))):
            start = min(start, c)
            break
    return sum(real[r][c] for r in range(len(lengths)) for c in range(start, width))


def test_reused_prefill_counts_the_columns_from_the_first_one_a_row_lacks():
    assert reused_prefill_tokens([10, 10], [9, 9]) == 2  # only the last tokens
    assert reused_prefill_tokens([10, 10], [9, 3]) == 14  # one short match costs both rows
    assert reused_prefill_tokens([10, 6], [9, 5]) == 2
    assert reused_prefill_tokens([10, 6], [9, 0]) == 6 + 6  # the short row whole, the long one from its column
    rng = random.Random(0)
    for _ in range(300):
        lengths = [rng.randint(1, 12) for _ in range(rng.randint(1, 5))]
        reused = [rng.randint(0, n - 1) for n in lengths]
        assert reused_prefill_tokens(lengths, reused) == _reused_by_columns(lengths, reused)


def test_shared_prefill_counts_the_common_prefix_and_each_distinct_prompt_once():
    a, b = [1, 2, 3, 4, 5], [1, 2, 3, 9]
    assert shared_prefill_tokens([a, b]) == 3 + (5 - 1 - 3) + (4 - 1 - 3) + 2
    assert shared_prefill_tokens([a, a, a]) == 4 + 3  # one prefill of all but the last token, three last tokens
    assert shared_prefill_tokens([[7, 1], [8, 1]]) == 4  # nothing shared: every token
    assert shared_prefill_tokens([a]) == 5
    rng = random.Random(1)
    for _ in range(300):
        base = [rng.randint(0, 3) for _ in range(rng.randint(1, 6))]
        prompts = [base + [rng.randint(0, 3) for _ in range(rng.randint(0, 4))] for _ in range(rng.randint(1, 5))]
        total = sum(map(len, prompts))
        shared = shared_prefill_tokens(prompts)
        # Never more than every token, never less than the batch's prefix tree (each shared token
        # once) plus the last token of each row, which decoding feeds again.
        assert prefix_tree_size(prompts) <= shared <= total
        prefix = min(common_prefix(prompts), min(map(len, prompts)) - 1)
        if prefix <= 0 and len({tuple(p) for p in prompts}) == len(prompts):
            assert shared == total
