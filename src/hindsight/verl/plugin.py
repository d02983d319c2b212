"""What verl's plugin loader imports in every verl process (entry point `hindsight` of `verl.plugins`).

Importing this module registers the agent loop `hindsight` (the `register` decorator on
`HindsightAgentLoop` runs on import) and the advantage estimator `hindsight_grpo`. verl loads
plugins while `verl` itself is being imported and only logs a failure at debug level, so
`tests/with_verl/test_plugin.py` checks the registrations from a fresh interpreter.
"""

from __future__ import annotations

from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from hindsight.verl import agent_loop
from hindsight.verl.estimators import trajectory_grpo

#: verl's `algorithm.adv_estimator` names of Hindsight's estimators.
ESTIMATORS = {"hindsight_grpo": trajectory_grpo}

for _name, _estimator in ESTIMATORS.items():
    # A second import of this module (a reload) must not trip verl's duplicate-name check.
    if ADV_ESTIMATOR_REGISTRY.get(_name) is not _estimator:
        register_adv_est(_name)(_estimator)

__all__ = ["ESTIMATORS", "agent_loop"]
