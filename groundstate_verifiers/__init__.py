"""The verifiers taskset `groundstate-verifiers` (`vf-eval groundstate-verifiers ...`): verifiers imports a taskset
by its id as a top-level module and takes the Taskset, Harness and Env its `__all__` exports. The adapter itself
is `groundstate.integrations.verifiers`."""

from groundstate.integrations.verifiers import GroundstateHarness, GroundstateTaskset

__all__ = ["GroundstateTaskset", "GroundstateHarness"]
