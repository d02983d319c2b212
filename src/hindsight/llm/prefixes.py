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


def shared_prefill_tokens(prompts: Sequence[Sequence[int]]) -> int:
    """Prompt tokens a batch pushes through the model when its shared parts are computed once:
    the common prefix once (short of every prompt's last token), the rest of each distinct prompt
    once, and every row's last token, which decoding feeds. Without a common prefix or a repeated
    prompt, every token of every row.
    """
    lengths = [len(ids) for ids in prompts]
    prefix = min(common_prefix(prompts), min(lengths) - 1)
    distinct = {tuple(ids) for ids in prompts}
    if len(distinct) == len(prompts) and prefix <= 0:
        return sum(lengths)
    prefix = max(prefix, 0)
    return prefix + sum(len(ids) - 1 - prefix for ids in distinct) + len(prompts)


def reused_prefill_tokens(lengths: Sequence[int], reused: Sequence[int]) -> int:
    """Prompt tokens a batch pushes when each row starts from a stored turn whose first `reused[r]`
    tokens are the start of row r's prompt (`lengths[r]` tokens).

    The rows are left-padded to the longest, and every column from the first one some row does
    not have stored is computed for all rows, so one row with little stored costs every row.
    Each row's last token is always computed.
    """
    width = max(lengths)
    start = min(width - 1, min(width - n + k for n, k in zip(lengths, reused)))
    return sum(n - max(0, start - (width - n)) for n in lengths)
