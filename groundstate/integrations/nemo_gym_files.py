"""`groundstate new nemo-gym NAME --tasks SELECTOR`: a NeMo Gym resources server folder for groundstate tasks.

NeMo Gym finds a server by its folder under the directory it runs in (`resources_servers/NAME/`) and starts it as
`python app.py` with its config; this writes that folder, needing no NeMo Gym here:

- `app.py`: runs `integrations.nemo_gym.GroundstateResourcesServer`;
- `configs/NAME.yaml`: the resources server (`tasks`: the selector, the parts it read as paths made absolute,
  `selectors.absolute_selector`; `backend`) and a
  `simple_agent` that plays its datasets against the model server `policy_model`, with `max_steps` one more than the
  largest turn limit among the tasks (its closing reply);
- `data/SPLIT.jsonl`: one row per task for NeMo Gym's rollout collection: `responses_create_params` (the domain's
  policy as the system message, the instruction as the user's, the tools in the Responses API's form, one call per
  response), `task_id`, `agent_ref`. A dataset per split (`integrations.splits.TaskSplits.default`: `all`, and the tasks' own `pool` and
  `bench`; `pool` is NeMo Gym's type train, the others validation), and `example` (its first five tasks), which NeMo
  Gym's own checks read;
- `requirements.txt`: groundstate as installed here (`-e` the clone it runs from, else its released version).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from groundstate import __version__
from groundstate.integrations.splits import TYPES, TaskSplits
from groundstate.tasks import Task
from groundstate.types import EpisodeLimits
from groundstate.worlds.domain import Domain
from groundstate.worlds.selectors import absolute_selector

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
EXAMPLES = 5
# the resources server's own routes (NeMo Gym's, FastAPI's): a tool of one of these names would shadow it
ROUTES = frozenset({"seed_session", "verify", "aggregate_metrics", "mcp", "stats", "docs", "redoc", "openapi.json"})
APP = '''"""groundstate tasks as a NeMo Gym resources server (written by `groundstate new nemo-gym`)."""

from groundstate.integrations.nemo_gym import GroundstateResourcesServer

if __name__ == "__main__":
    GroundstateResourcesServer.run_webserver()
'''


def servable(pairs: list[tuple[Task, Domain]]) -> tuple[list[tuple[Task, Domain]], int]:
    """The tasks of `pairs` a groundstate resources server serves, and how many it leaves out: those with reply rubrics
    (NeMo Gym's reward is a number, and such a task has none until a judge reads the reply; `state_graded_only`).
    ValueError for a task of another kind of domain than SQL, a tool named as one of the server's own routes, or
    nothing left to serve."""
    from groundstate.worlds.selectors import state_graded_only

    for task, domain in pairs:
        if not isinstance(domain, Domain):
            raise ValueError(f"task {task.id}: NeMo Gym serves SQL domains' tasks; {type(domain).__name__} is not one")
        for schema in domain.tools.openai_schemas():
            if schema["function"]["name"] in ROUTES:
                raise ValueError(f"domain {domain.name}: tool {schema['function']['name']!r} would shadow the server's own route")
    if not pairs:
        raise ValueError("no task selected")
    kept = state_graded_only(pairs)
    return kept, len(pairs) - len(kept)


def responses_tool(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat-completions tool schema in the Responses API's form (NeMo Gym's `responses_create_params.tools`)."""
    fn = schema["function"]
    return {"type": "function", "name": fn["name"], "description": fn.get("description", ""), "parameters": fn.get("parameters", {}), "strict": False}


def rows(pairs: list[tuple[Task, Domain]], agent: str) -> list[dict[str, Any]]:
    """One rollout-collection row per task: what its agent is shown at the start (as `Environment.initial_messages`
    and `tool_schemas` give it), the task's id (which `/seed_session` reads) and the agent that plays it."""
    return [
        {
            "responses_create_params": {
                "input": [{"role": "system", "content": domain.system_prompt()}, {"role": "user", "content": task.instruction}],
                "tools": [responses_tool(s) for s in domain.tools.openai_schemas()],
                # one call per model response: NeMo Gym's agent posts each call on its own, and each is one turn here
                "parallel_tool_calls": False,
            },
            "task_id": task.id,
            "agent_ref": {"type": "responses_api_agents", "name": agent},
        }
        for task, domain in pairs
    ]


def write_server(parent: Path, name: str, selector: str, pairs: list[tuple[Task, Domain]], backend: str = "sqlite") -> Path:
    """Write the server folder `parent/resources_servers/name` for `pairs` (the tasks `selector` selects) and return it.
    ValueError for a name NeMo Gym cannot use as a config key; FileExistsError if the folder exists."""
    if not NAME_PATTERN.match(name):
        raise ValueError(f"name {name!r}: use lower-case letters, digits and _ (a letter first, at most 64)")
    folder = parent / "resources_servers" / name
    if folder.exists():
        raise FileExistsError(f"{folder} exists: choose another name or remove it")
    agent = f"{name}_simple_agent"
    splits = TaskSplits.default([t for t, _ in pairs])
    domains = {t.id: d for t, d in pairs}
    datasets: dict[str, list[tuple[Task, Domain]]] = {
        info["name"]: [(t, domains[t.id]) for t in splits.split(info["name"]).tasks] for info in splits.describe()
    }
    datasets["example"] = pairs[:EXAMPLES]
    bundled = all(d.path.resolve().parent == _bundled_dir() for _, d in pairs)
    entries = []
    for split in datasets:
        kind = "example" if split == "example" else "train" if TYPES.get(split) == "train" else "validation"
        entry: dict[str, Any] = {"name": split, "type": kind, "jsonl_fpath": f"resources_servers/{name}/data/{split}.jsonl"}
        if kind != "example":
            entry["license"] = "Apache 2.0" if bundled else "TBD"  # NeMo Gym asks one of train and validation data
        entries.append(entry)
    config = {
        f"{name}_resources_server": {
            "resources_servers": {
                name: {
                    "entrypoint": "app.py",
                    "domain": "agent",
                    "verified": False,
                    "description": "groundstate tasks, rewarded by the final state of their database",
                    "tasks": absolute_selector(selector),
                    "backend": backend,
                }
            }
        },
        agent: {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": f"{name}_resources_server"},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                    "max_steps": max(EpisodeLimits().turns_for(t) for t, _ in pairs) + 1,
                    "datasets": entries,
                }
            }
        },
    }
    (folder / "configs").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "app.py").write_text(APP)
    (folder / "requirements.txt").write_text(_requirement() + "\n")
    (folder / "configs" / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    for split, chosen in datasets.items():
        with open(folder / "data" / f"{split}.jsonl", "w") as f:
            for row in rows(chosen, agent):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return folder


def _requirement() -> str:
    clone = Path(__file__).resolve().parents[2]
    return f"-e {clone}" if (clone / "pyproject.toml").exists() else f"groundstate=={__version__}"


def _bundled_dir() -> Path:
    from groundstate.worlds.domain import DOMAINS_DIR

    return DOMAINS_DIR.resolve()
