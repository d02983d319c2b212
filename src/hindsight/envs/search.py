"""BM25 search over a fixed set of texts, shared by the environments that search (webshop,
deepsearch). `bm25s` is imported when an index is built, so importing an environment stays cheap."""

from __future__ import annotations

from typing import Any, Sequence


def _tokens(query: str) -> list[str]:
    import bm25s

    return bm25s.tokenize(query, stopwords="en", return_ids=False, show_progress=False)[0]


class BM25Index:
    """BM25 (`bm25s`, English stopwords) over `texts`, the i-th known by `ids[i]`.

    A search ranks by score, best first, and breaks equal scores in id order, so a ranking
    never depends on the index's internal order; texts sharing no word with the query are
    never returned.
    """

    def __init__(self, ids: Sequence[str], texts: Sequence[str]):
        import bm25s
        import numpy as np

        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        self._bm25 = bm25s.BM25()
        self._bm25.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)
        self._id_rank = np.empty(len(ids), dtype=np.int64)
        self._id_rank[sorted(range(len(ids)), key=lambda i: ids[i])] = np.arange(len(ids))

    def scores(self, query: str) -> Any:
        """The BM25 score of every text for `query`, in text order (an array of zeros when no word counts)."""
        import numpy as np

        tokens = _tokens(query)
        return self._bm25.get_scores(tokens) if tokens else np.zeros(len(self._id_rank))

    def search(self, query: str, limit: int | None = None) -> tuple[list[int], int]:
        """The positions of the best `limit` matching texts (all when None), and how many match at all."""
        import numpy as np

        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((self._id_rank[hits], -scores[hits]))]
        return [int(i) for i in order[:limit]], int(hits.size)
