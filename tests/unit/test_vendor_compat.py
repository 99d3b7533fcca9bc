"""Other projects' private names: only `groundstate/cli/_vendor_compat.py` imports any, and these tests fail, naming what
moved, when an upgrade takes away what `cli.common` relies on of them (typer's usage-error classes)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.main import get_command

from groundstate.cli._vendor_compat import NoArgsIsHelpError, UsageError

REPO = Path(__file__).resolve().parents[2]
COMPAT = "groundstate/cli/_vendor_compat.py"
# not underscored, yet no part of the project's API: the MCP SDK's platform helpers and its stdio client's environment
# (stdio_transport writes its own)
PRIVATE = ("mcp.os", "mcp.client.stdio.get_default_environment")


def private_imports(path: Path) -> list[str]:
    """The names of other projects `path` imports that are private: a module or name with a leading underscore, or one
    of `PRIVATE` (or inside it)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            pairs = [(a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            pairs = [(node.module, a.name) for a in node.names]
        else:
            continue
        for module, name in pairs:
            qualified = f"{module}.{name}" if name else module
            if module.split(".")[0] in ("groundstate", "__future__"):
                continue
            if any(part.startswith("_") for part in qualified.split(".")) or any(qualified == p or qualified.startswith(p + ".") for p in PRIVATE):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {qualified}")
    return found


def test_only_the_compat_module_imports_another_projects_private_names():
    found = [hit for p in sorted((REPO / "groundstate").rglob("*.py")) if str(p.relative_to(REPO)) != COMPAT for hit in private_imports(p)]
    assert not found, f"import these through {COMPAT} (with a test here), or use a public API: {found}"
    assert private_imports(REPO / COMPAT), "the compat module imports nothing private any more: remove it"


def _group() -> TyperGroup:
    app = typer.Typer(no_args_is_help=True)

    @app.command()
    def go(n: int = typer.Option(1, "--n")) -> None:
        pass

    @app.command()
    def other() -> None:
        pass

    group = get_command(app)
    assert isinstance(group, TyperGroup)
    return group


@pytest.mark.parametrize(
    ("args", "message", "command_path"),
    [
        (["go", "--bogus"], "No such option: --bogus", "prog go"),
        (["go", "--n", "x"], "Invalid value for '--n'", "prog go"),
        (["nosuch"], "No such command 'nosuch'", "prog"),
    ],
)
def test_typer_raises_our_usage_error_for_a_mistake_on_the_command_line(args, message, command_path):
    """What `cli.common.Commands` catches and turns into one `error:` line: the class, its message, its context, its exit status."""
    with pytest.raises(UsageError) as raised:
        _group().main(args, prog_name="prog", standalone_mode=False)
    e = raised.value
    assert not isinstance(e, NoArgsIsHelpError)
    assert message in e.format_message() and e.exit_code == 2
    assert e.ctx is not None and e.ctx.command_path == command_path


def test_a_group_called_without_a_command_raises_our_no_args_is_help_error(capsys):
    """What `cli.common.Commands` lets through (typer prints the group's help), caught before `UsageError`."""
    with pytest.raises(NoArgsIsHelpError) as raised:
        _group().main([], prog_name="prog", standalone_mode=False)
    assert isinstance(raised.value, UsageError) and raised.value.ctx.command_path == "prog"
    assert "Commands" in capsys.readouterr().out


def test_usage_errors_are_made_and_reraised_as_cli_common_does():
    """`renamed` raises `UsageError(message)` and raises it again with the command's context; a callback's
    `typer.BadParameter` is one too, so the same handler reads it."""
    ctx = typer.Context(_group(), info_name="prog")
    e = UsageError(UsageError("--k is given twice").message, ctx)
    assert e.message == "--k is given twice" and e.ctx is ctx and e.exit_code == 2
    assert issubclass(typer.BadParameter, UsageError)
