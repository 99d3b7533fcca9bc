"""A warning once per adapter and process when most of its episodes end without a tool call.

A model that never emits a tool call the adapter can read — its chat template renders no tool schemas, or its calls
are in a format nobody parses — earns 0 on every state-graded task and trains on nothing, silently. Each adapter whose
episodes a trainer drives (TRL's `environment_factory`, Gymnasium) counts its finished episodes here; once `WINDOW`
have ended and at least `SHARE` of them made no tool call, one `NoToolCallWarning` says so and what to check.
"""

from __future__ import annotations

import threading
import warnings

__all__ = ["SHARE", "WINDOW", "NoToolCallWarning", "NoToolCalls"]

WINDOW = 32  # finished episodes looked at before anything is said
SHARE = 0.9  # the share of them without a tool call that is worth a warning


class NoToolCallWarning(UserWarning):
    """Most episodes of an adapter ended without a tool call."""


class NoToolCalls:
    """Counts one adapter's finished episodes (`episode(calls)`) and warns once, as the module docstring says."""

    def __init__(self, adapter: str, advice: str):
        self.adapter, self.advice = adapter, advice
        self.episodes = self.without = 0
        self.warned = False
        self._lock = threading.Lock()

    def episode(self, tool_calls: int) -> None:
        with self._lock:
            if self.warned:
                return
            self.episodes += 1
            self.without += tool_calls == 0
            if self.episodes < WINDOW or self.without < SHARE * self.episodes:
                return
            self.warned = True
            episodes, without = self.episodes, self.without
        warnings.warn(
            f"{without} of the first {episodes} {self.adapter} episodes ended without a tool call: the model may not be "
            f"emitting tool calls that can be read, and a state-graded task then earns 0 whatever it says. {self.advice}",
            NoToolCallWarning,
            stacklevel=3,
        )
