import pytest

from hindsight.diagnostics import EmbeddingCosine, ExactState, NormalisedText, make_equality
from hindsight.diagnostics.equality import cosine
from hindsight.logs.importers import TrajectoryView


def view(observations, keys=None, embeddings=None, final_observation=None, final_key=None):
    n = len(observations)
    return TrajectoryView(env="x", success=False, observations=tuple(observations), actions=("a",) * n,
                          valid=(True,) * n, state_keys=tuple(keys) if keys is not None else None,
                          embeddings=tuple(embeddings) if embeddings is not None else None,
                          final_observation=final_observation, final_state_key=final_key)


def ids(tokens):
    """Tokens renumbered by first appearance, so tests compare groupings, not representations."""
    seen = {}
    return [seen.setdefault(token, len(seen)) for token in tokens]


def test_exact_uses_state_keys_when_every_step_has_one():
    v = view(["same", "same", "other"], keys=["k1", "k2", "k1"], final_key="k2")
    assert ids(ExactState().tokens(v)) == [0, 1, 0]
    assert ids(ExactState().tokens(v, include_final=True)) == [0, 1, 0, 1]


def test_exact_falls_back_to_observations_without_complete_keys():
    v = view(["same", "same", "other"], keys=["k1", "", "k3"], final_observation="other")
    assert ids(ExactState().tokens(v)) == [0, 0, 1]
    assert ids(ExactState().tokens(v, include_final=True)) == [0, 0, 1, 1]
    assert ids(ExactState().tokens(view(["p", "q", "p"]))) == [0, 1, 0]


def test_normalised_text_ignores_case_and_spacing_only():
    v = view(["Row 1\n  Row 2", "row 1 row 2", "row 1 row 3"])
    assert ids(NormalisedText().tokens(v)) == [0, 0, 1]


def test_embedding_cosine_groups_by_threshold_against_the_first_member():
    vectors = [(1.0, 0.0), (0.9999, 0.01), (0.0, 1.0), (0.7, 0.7)]
    v = view(["a", "b", "c", "d"], embeddings=vectors)
    assert ids(EmbeddingCosine(threshold=0.999).tokens(v)) == [0, 0, 1, 2]
    # With a loose threshold (0.7, 0.7) is close enough (cos 0.707) to the first cluster.
    assert ids(EmbeddingCosine(threshold=0.7).tokens(v)) == [0, 0, 1, 0]


def test_embedding_from_a_function_and_missing_embeddings():
    lengths = EmbeddingCosine(threshold=0.999, embed=lambda text: (float(len(text)), 1.0))
    assert ids(lengths.tokens(view(["ab", "cd", "abc"]))) == [0, 0, 1]
    with pytest.raises(ValueError, match="embeddings"):
        EmbeddingCosine().tokens(view(["a", "b"]))
    with pytest.raises(ValueError):
        EmbeddingCosine(threshold=1.5)


def test_cosine_and_factory():
    assert cosine((1.0, 0.0), (0.0, 2.0)) == 0.0
    assert cosine((3.0, 4.0), (6.0, 8.0)) == pytest.approx(1.0)
    assert cosine((0.0, 0.0), (0.0, 0.0)) == 1.0
    assert make_equality("text").name == "text"
    assert make_equality("embedding", 0.5).threshold == 0.5
    with pytest.raises(ValueError):
        make_equality("fuzzy")
