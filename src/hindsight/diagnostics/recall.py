"""Memory recall distance (TIDE, appendix C.5).

How long ago did the agent last see an object it now acts on? With o_t the observation
the agent sees before action a_t, E(o) the object instances an observation shows, and
G the object classes the task needs:

    LastSeen(obj, t) = max { k : k < t, obj in E(o_k) }           (undefined if none)
    d_t(obj)         = t - LastSeen(obj, t)    for obj touched by a_t, class(obj) in G
    D(τ)             = mean of d_t(obj) over all such defined (t, obj) pairs

LastSeen looks strictly before t, as the paper defines it: an object first noticed in the
current observation is acted on from perception, not from memory, and is not counted.
Only environments with object hooks (ALFWorld-style text) support this; for the others
`recall_distances` is never called and the run reports why (`EnvHooks.recall_skip_reason`).
"""

from __future__ import annotations

from typing import Sequence

from hindsight.diagnostics.hooks import EnvHooks


def recall_distances(
    observations: Sequence[str], actions: Sequence[str | None], instruction: str, hooks: EnvHooks
) -> list[int]:
    """Every defined d_t(obj) of one trajectory, in step order."""
    if hooks.visible_objects is None or hooks.acted_objects is None or hooks.task_objects is None:
        raise ValueError(f"environment {hooks.env_id!r} has no object hooks: {hooks.recall_skip_reason}")
    # ALFWorld states the task in the first observation ("Your task is to: ..."), not always in the
    # instruction; the task-object extractor takes the first task sentence of the two.
    needed = hooks.task_objects(f"{instruction}\n{observations[0]}" if observations else instruction)
    last_seen: dict[str, int] = {}
    distances = []
    for t, (observation, action) in enumerate(zip(observations, actions)):
        if action:
            for obj in sorted(hooks.acted_objects(action)):
                if hooks.object_type(obj) in needed and obj in last_seen:
                    distances.append(t - last_seen[obj])
        for obj in hooks.visible_objects(observation):
            last_seen[obj] = t
    return distances
