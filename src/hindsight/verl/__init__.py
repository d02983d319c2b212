"""Hindsight inside verl: its environments as a verl agent loop, its advantage estimators.

Installing Hindsight in a verl environment (`pip install "hindsight[verl]"`) adds the entry
point `hindsight` to verl's plugin group `verl.plugins`. verl imports every plugin of that
group when `verl` itself is imported (unless `VERL_USE_EXTERNAL_PLUGINS=none`), so the driver,
the agent-loop workers and the trainer workers all see the same registrations without a line
of verl configuration: `hindsight.verl.plugin` registers

- the agent loop `hindsight` (`agent_loop.HindsightAgentLoop`), chosen per dataset row by its
  `agent_name` column or for every row by `actor_rollout_ref.rollout.agent.default_agent_loop`;
- the advantage estimator `hindsight_grpo` (`estimators.trajectory_grpo`), chosen by
  `algorithm.adv_estimator`.

Nothing here is imported by the rest of Hindsight: verl is an optional stack with its own
lock file (constraints-verl.txt).
"""

#: The name rows and configs use for Hindsight's agent loop.
AGENT_LOOP_NAME = "hindsight"
