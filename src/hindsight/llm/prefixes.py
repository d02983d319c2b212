"""Shared prefixes of token sequences: what can be computed once for a whole batch.

Pure functions on token-id sequences, used by the sampler (a batch's prompts) and by
training (a micro-batch's sequences).
"""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix every sequence starts with (0 for fewer than two)."""
    if len(sequences) < 2:
        return 0
    first, length = sequences[0], min(len(s) for s in sequences)
    for index in range(length):
        token = first[index]
        if any(s[index] != token for s in sequences):
            return index
    return length


def prefix_tree_size(sequences: Sequence[Sequence[int]]) -> int:
    """Positions of the sequences' prefix tree: every token, each shared prefix counted once.

    The floor of what any encoding of the batch must push through the model; tokens
    pushed ÷ this is the batch's redundancy (1: every token computed once).
    """
    total, previous = 0, ()
    for ids in sorted(tuple(s) for s in sequences):
        total += len(ids) - common_prefix([ids, previous]) if previous else len(ids)
        previous = ids
    return total
