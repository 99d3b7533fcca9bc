"""One name per concept across commands (#21 item 8): attempts per task are `--k`, what a command writes is `--out`, a
domain is `--domain` (a bundled domain's name or any domain folder); old spellings still work for a release, hidden
from help, each with a note naming the new one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_help import commands
from typer.testing import CliRunner

from groundstate.cli import app
from groundstate.cli.common import rename_options
from groundstate.worlds.domain import DOMAINS_DIR

OLD = {"--n", "-o", "--output", "--out-dir", "--domain-path", "--workers"}
KIOSK = str(DOMAINS_DIR / "kiosk")


def test_no_command_declares_an_old_spelling_and_every_domain_option_takes_a_name_or_folder():
    for path, cmd in commands():
        for p in cmd.params:
            if p.param_type_name != "option":
                continue
            assert not OLD & set(p.opts), f"{path}: {p.opts} declares an old spelling"
            if "--domain" in p.opts:
                assert "name or folder" in (p.help or ""), f"{path} --domain: {p.help!r}"
            assert not {"--out"} & set(p.opts) or p.opts[0] == "--out", f"{path}: {p.opts}"


@pytest.mark.parametrize(
    "args,renamed,expected",
    [
        (["--n", "3"], {"--n": "--k"}, ["--k", "3"]),
        (["--n=3"], {"--n": "--k"}, ["--k=3"]),
        (["-ox.html"], {"-o": "--out"}, ["--out", "x.html"]),
        # a value is never an option: the selector "--n" stays what it is, and so does everything after --
        (["--tasks", "--n", "--n", "3"], {"--n": "--k"}, ["--tasks", "--n", "--k", "3"]),
        (["--", "--n"], {"--n": "--k"}, ["--", "--n"]),
        (["--next", "--no"], {"--n": "--k", "-o": "--out"}, ["--next", "--no"]),
    ],
)
def test_old_spellings_are_rewritten_only_where_they_are_options(args, renamed, expected):
    assert rename_options(args, renamed, {"--tasks", "--k", "--out"})[0] == expected


def test_old_spellings_still_work_with_a_note_and_are_hidden_from_help(tmp_path):
    cli = CliRunner()
    results = tmp_path / "r.jsonl"
    r = cli.invoke(app, ["probe", "--agent", "scripted:gold", "--tasks", KIOSK, "--n", "2", "--out", str(results)])
    assert r.exit_code == 0, r.output
    assert "note: --n is now --k" in r.stderr
    assert {json.loads(line)["attempt"] for line in results.read_text().splitlines()} == {0, 1}
    for old in ("-o", "--output"):
        html = tmp_path / f"report{old}.html"
        r = cli.invoke(app, ["report", str(results), old, str(html)])
        assert r.exit_code == 0 and html.exists() and f"note: {old} is now --out" in r.stderr, r.output
    r = cli.invoke(app, ["select", str(results), "--out-dir", str(tmp_path / "sel"), "--domain-path", "kiosk", "--min-clean-runs", "2"])
    assert r.exit_code == 0 and (tmp_path / "sel" / "manifest.json").exists(), r.output
    assert "note: --out-dir is now --out" in r.stderr and "note: --domain-path is now --domain" in r.stderr
    r = cli.invoke(app, ["tasks", "lint", "--domain", "hr", "--workers", "2"])  # concurrency, as run and probe say it
    assert r.exit_code == 0 and "note: --workers is now --concurrency" in r.stderr, r.output
    for command, old in (
        ["run", "--n"],
        ["probe", "--n"],
        ["report", "--output"],
        ["select", "--out-dir"],
        ["select", "--domain-path"],
        ["tasks lint", "--workers"],
        ["tasks certify", "--workers"],
    ):
        shown = cli.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"}).stdout
        assert f" {old} " not in shown and f" {old}," not in shown, f"{command} --help shows {old}"


def test_domain_means_a_name_or_a_folder_everywhere(tmp_path):
    cli = CliRunner()
    results = tmp_path / "r.jsonl"
    assert cli.invoke(app, ["run", "--agent", "scripted:gold", "--tasks", KIOSK, "--out", str(results)]).exit_code == 0
    for domain in ("kiosk", KIOSK):  # export takes the tool schemas from a name as from a folder
        r = cli.invoke(app, ["export", str(results), "--format", "sft-jsonl", "--out", str(tmp_path / Path(domain).name), "--domain", domain])
        assert r.exit_code == 0 and "no tools column" not in r.stderr, r.output
    # an unknown name, a folder that is not a domain, a domain without a generator: one line each, exit 2, no traceback
    scaffold = cli.invoke(app, ["new", "domain", "plain", "--dir", str(tmp_path)])
    assert scaffold.exit_code == 0, scaffold.output
    (tmp_path / "plain" / "taskgen.py").unlink(missing_ok=True)
    cases = {
        "nosuch": "unknown domain 'nosuch'; bundled:",
        str(tmp_path / "nope"): f"{tmp_path / 'nope'} is not a domain folder (it holds no domain.yaml)",
        str(tmp_path / "plain"): "has no task generator",
    }
    for domain, said in cases.items():
        for args in (["tasks", "generate", "--check", "--domain", domain], ["tiny", "build", "--out", str(tmp_path / "m"), "--domain", domain]):
            r = cli.invoke(app, args, env={"COLUMNS": "80"})
            assert r.exit_code == 2, r.output  # a traceback would be exit 1
            lines = [line for line in r.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], (args, r.stderr)
    assert not (tmp_path / "m").exists()


def test_the_commands_know_which_options_take_a_value():
    import typer.main

    run = typer.main.get_command(app).commands["run"]
    ctx = run.make_context("run", ["--agent", "scripted:gold", "--tasks", "--n", "--n", "3"])  # parsed, not run
    assert ctx.params["tasks"] == "--n" and ctx.params["k"] == 3  # the value of --tasks is not an old spelling


def test_an_option_given_under_an_old_and_another_spelling_is_refused_unless_it_repeats(tmp_path):
    cases = {
        (
            "run",
            "--agent",
            "scripted:gold",
            "--tasks",
            "hr",
            "--k",
            "2",
            "--n",
            "4",
            "--out",
            str(tmp_path / "r.jsonl"),
        ): "--k is given twice, as --k and as --n",
        ("report", "r.jsonl", "-o", "a.html", "--output", "b.html"): "--out is given twice, as --output and as -o",
        ("tasks", "lint", "--domain", "hr", "--workers", "2", "-c", "3"): "--concurrency is given twice, as --workers and as -c",
    }
    for args, says in cases.items():
        r = CliRunner().invoke(app, list(args))
        assert r.exit_code == 2 and says in r.output and r.output.rstrip().endswith("--help)"), (args, r.output)
    assert not (tmp_path / "r.jsonl").exists()
    once = {"--domain": "--domain"}  # repeatable options are not in `once`: both spellings add to the list
    assert rename_options(["--domain", "a", "--domain-path", "b"], {"--domain-path": "--domain"}, {"--domain"}, {})[0] == [
        "--domain",
        "a",
        "--domain",
        "b",
    ]
    with pytest.raises(Exception, match="given twice"):
        rename_options(["--domain", "a", "--domain-path", "b"], {"--domain-path": "--domain"}, {"--domain"}, once)
