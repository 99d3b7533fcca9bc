"""`groundstate new domain NAME`: a domain folder that already passes its checks (docs/DOMAINS.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from groundstate.cli.common import fail, out

app = typer.Typer(help="Start a new piece of work from a template that already passes its checks.", no_args_is_help=True)


@app.command("domain")
def new_domain(
    name: str = typer.Argument(..., help="Domain name: lower-case letters, digits and _ (it prefixes the table and tool names)."),
    parent: Path = typer.Option(Path("."), "--dir", help="Folder to create the domain folder in (default: the current one)."),
) -> None:
    """Scaffold a domain folder that lints green: schema, seed, tools, policy, task generator and its tasks (docs/DOMAINS.md)."""
    from groundstate.pipeline.scaffold import new_domain as scaffold

    try:
        folder = scaffold(parent, name)
    except (ValueError, FileExistsError) as e:
        fail(str(e))
    shown = str(folder) if folder.is_absolute() or str(folder).startswith(".") else f"./{folder}"
    out.print(f"domain {name} written to {shown}", markup=False)
    out.print("next (docs/DOMAINS.md):")
    out.print(f"  groundstate tasks lint --domain {shown}", markup=False)
    out.print(f"  edit {shown}/taskgen.py, then: groundstate tasks generate --domain {shown}", markup=False)


@app.command("nemo-gym")
def new_nemo_gym(
    name: str = typer.Argument(..., help="Server name: lower-case letters, digits and _ (NeMo Gym's config keys start with it)."),
    tasks: str = typer.Option(..., "--tasks", help="The tasks to serve: any --tasks selector of SQL domains, none with reply rubrics."),
    parent: Path = typer.Option(Path("."), "--dir", help="NeMo Gym's working folder, where resources_servers/NAME goes (default: the current one)."),
    backend: str = typer.Option("sqlite", "--backend", help="sqlite or postgres (then set pg_dsn in the config)."),
) -> None:
    """Write a NeMo Gym resources server for the tasks: app, config with a simple_agent, datasets (docs/INTEGRATIONS.md)."""
    from groundstate.integrations.nemo_gym_files import servable, write_server
    from groundstate.tasks import TaskFileError
    from groundstate.worlds.selectors import select_tasks

    if backend not in ("sqlite", "postgres"):
        fail(f"--backend {backend!r}: use sqlite or postgres")
    try:
        pairs, rubric_tasks = servable(select_tasks(tasks))
        folder = write_server(parent, name, tasks, pairs, backend)
    except (ValueError, OSError, TaskFileError, KeyError) as e:  # OSError: the folder exists, --dir is a file, ...
        fail(str(e))
    config = folder / "configs" / f"{name}.yaml"
    out.print(f"NeMo Gym resources server {name} written to {folder}: {len(pairs)} tasks", markup=False)
    if rubric_tasks:
        out.print(f"left out: {rubric_tasks} tasks with reply rubrics (NeMo Gym's reward is a number; theirs needs a judge)", markup=False)
    out.print(f"next, in {parent} (docs/INTEGRATIONS.md):", markup=False)
    out.print(f'  gym env start "+config_paths=[{config.relative_to(parent)},YOUR_MODEL_CONFIG]"', markup=False)
    out.print(
        f"  gym eval run --no-serve +agent_name={name}_simple_agent +input_jsonl_fpath={folder.relative_to(parent)}/data/all.jsonl +output_jsonl_fpath=rollouts.jsonl",
        markup=False,
    )
