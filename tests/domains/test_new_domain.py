"""docs/DOMAINS.md, followed literally: `groundstate new domain` and the step by step that grows its folder.

The test reads the page's "Step by step" section: each `$ groundstate ...` line of a console block is run
(in a temporary working directory, through the CLI app) and must exit 0 and print the lines the page shows
under it; the page's two Python blocks are pasted into taskgen.py where its prose says. So the page cannot
drift from what the tool does.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.pipeline.scaffold import NAME_PATTERN, new_domain
from groundstate.worlds.domain import DomainConfig, load_domain

DOC = Path(__file__).resolve().parents[2] / "docs" / "DOMAINS.md"
FUNCTION_ANCHOR = "# (family, template, number of tasks)\n"  # the page: add the function above this line
ENTRY_ANCHOR = '    ("single_write", t_cancel_order, 2),\n'  # the page: add the entry below this line


def _step_by_step() -> tuple[str, list[tuple[str, str]]]:
    """The section's prose and its fenced blocks, in order, as (language, body)."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Step by step\n", 1)[1].split("\n## ", 1)[0]
    return section, re.findall(r"^```(\w+)\n(.*?)^```$", section, re.M | re.S)


def _run(line: str) -> str:
    """One command as a shell would run it: a fresh process, so nothing loaded by an earlier command is reused."""
    args = shlex.split(line)
    assert args[0] == "groundstate", line
    result = CliRunner().invoke(app, args[1:])
    assert result.exit_code == 0, f"{line}\n{result.output}"
    return result.output


def _shown(expected: str, output: str) -> bool:
    """`expected` appears in `output`, whatever the terminal wrapped."""
    return " ".join(expected.split()) in " ".join(output.split())


def test_the_step_by_step_runs_as_written(tmp_path, monkeypatch, request):
    prose, blocks = _step_by_step()
    assert FUNCTION_ANCHOR.strip() in prose and ENTRY_ANCHOR.strip() in prose, "the page no longer says where the code goes"
    monkeypatch.chdir(tmp_path)
    postgres = None
    commands: list[str] = []
    for lang, body in blocks:
        if lang == "python":  # step 3: the template above the TEMPLATES comment, its entry below t_cancel_order's
            function = body.startswith("def ")
            _paste(tmp_path / "bakery" / "taskgen.py", body, FUNCTION_ANCHOR if function else ENTRY_ANCHOR, above=function)
            continue
        assert lang == "console", f"an unexpected {lang} block in the step by step"
        runs: list[tuple[str, list[str]]] = []
        for line in body.splitlines():
            if line.startswith("$ "):
                runs.append((line[2:], []))
            elif line.strip():
                runs[-1][1].append(line)
        for command, expected in runs:
            if "--backend postgres" in command:
                if postgres is None:
                    try:
                        request.getfixturevalue("pg_backend")
                        postgres = True
                    except pytest.skip.Exception:
                        postgres = False
                if not postgres:
                    continue
            output = _run(command)
            for line in expected:
                assert _shown(line, output), f"{command}: the page shows {line!r}; the command printed:\n{output}"
            commands.append(command)
    assert [c.split(" --domain")[0] for c in commands if "postgres" not in c] == [
        "groundstate new domain bakery",
        "groundstate tasks lint",
        "groundstate tasks generate",
        "groundstate tasks lint",
        "groundstate tasks generate",
    ], commands
    assert len(load_domain(str(tmp_path / "bakery")).tasks) == 4


def _paste(path: Path, code: str, anchor: str, *, above: bool) -> None:
    """Insert `code` above or below `anchor`, a line that occurs once in the file."""
    source = path.read_text(encoding="utf-8")
    assert source.count(anchor) == 1, f"{path.name} lost the line {anchor.strip()!r} the page points at"
    path.write_text(source.replace(anchor, code + "\n\n" + anchor if above else anchor + code), encoding="utf-8")


def test_a_new_domain_lints_green_with_no_survivors(tmp_path):
    folder = new_domain(tmp_path, "pantry")
    assert sorted(p.name for p in folder.iterdir() if p.name != "__pycache__") == [
        "domain.yaml",
        "policy.md",
        "schema.sql",
        "seed.py",
        "taskgen.py",
        "tasks",
        "tools.py",
    ]
    result = CliRunner().invoke(app, ["tasks", "lint", "--domain", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["tasks"], summary["gold_pass"], summary["noop_fail"]) == (2, 2, 2)
    assert summary["mutants"] > 0 and summary["mutants_killed"] == summary["mutants"] and not summary["survivors"]
    domain = load_domain(str(folder))
    assert {t for t in domain.tables} == {"pantry_customers", "pantry_orders"}
    assert {n for n in domain.tools.names() if domain.tools[n].write} == {"cancel_pantry_order", "set_pantry_customer_tier"}


def test_new_domain_refuses_bad_names_and_existing_folders(tmp_path):
    assert NAME_PATTERN.pattern == DomainConfig.model_json_schema()["properties"]["name"]["pattern"]
    for bad in ("Bakery", "9lives", "my-shop", "", "a b"):
        with pytest.raises(ValueError, match="lower-case"):
            new_domain(tmp_path, bad)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an empty folder"):
        new_domain(tmp_path, "taken")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    assert new_domain(tmp_path, "empty") == tmp_path / "empty"  # an empty folder is fine


def test_the_cli_reports_what_it_refuses(tmp_path):
    result = CliRunner().invoke(app, ["new", "domain", "My-Shop", "--dir", str(tmp_path)])
    assert result.exit_code == 2 and "lower-case" in result.output
    assert not any(tmp_path.iterdir())
