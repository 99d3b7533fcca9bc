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
