"""Mistakes a new user makes end in one line naming the thing and the fix, exit 2, nothing written (#21 item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundstate.agents.local import ModelLoadError, check_model_ref, load_pretrained
from groundstate.cli import app

DEAD_PG = "postgresql://nobody:s3cret@127.0.0.1:1/nowhere"
SHOP = Path(__file__).parents[1] / "fixtures" / "shop"  # nothing listens on port 1


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


def one_error_line(r) -> str:
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert "Traceback" not in r.output
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--agent", "scripted:gold", "--tasks", "hr", "--k", "1", "--backend", "postgres"],
        ["tasks", "lint", "--domain", "hr", "--backend", "postgres"],
        ["tasks", "certify", "--domain", "hr", "--backend", "sqlite", "--backend", "postgres"],
    ],
)
def test_an_unreachable_postgres_stops_before_any_work(tmp_path, command):
    out = tmp_path / "results.jsonl"
    extra = ["--out", str(out)] if command[0] == "run" else []
    r = invoke(*command, "--pg-dsn", DEAD_PG, *extra)
    assert r.exit_code == 2
    line = one_error_line(r)
    assert "cannot reach PostgreSQL at nobody@127.0.0.1:1/nowhere" in line and "--pg-dsn" in line
    assert "s3cret" not in r.output  # the DSN's password is never printed
    assert list(tmp_path.iterdir()) == []


def test_a_wrong_postgres_database_is_named(tmp_path):
    r = invoke("tasks", "lint", "--domain", "hr", "--backend", "postgres", "--pg-dsn", "postgresql://postgres@127.0.0.1:5432/no_such_db_here")
    assert r.exit_code == 2 and 'database "no_such_db_here" does not exist' in one_error_line(r)


def test_train_names_a_model_that_is_not_there(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "no_weights").mkdir()
    (tmp_path / "no_weights" / "config.json").write_text("{}")
    (tmp_path / "no_weights" / "training_args.bin").write_text("x")  # what Trainer writes beside a checkpoint: not weights
    cases = {
        str(tmp_path / "no_weights"): "holds no weights (no model*.safetensors or pytorch_model*.bin beside its config.json)",
        str(tmp_path / "missing"): "no such model folder",
        "./runs/not-here": "no such model folder",
        str(tmp_path / "weights.bin"): "is a file, not a model folder",
        str(tmp_path / "empty"): "is not a Hugging Face model folder (no config.json in it)",
    }
    for ref, says in cases.items():
        out = tmp_path / "out"
        r = invoke("train", "--model", ref, "--train", "hr", "--out", str(out), "--steps", "1")
        assert r.exit_code == 2 and f"--model {ref}: {says}" in one_error_line(r)
        assert not out.exists()


def test_model_references():
    for hub_id in ("Qwen/Qwen2.5-0.5B-Instruct", "gpt2", "HuggingFaceTB/SmolLM2-135M-Instruct"):
        check_model_ref(hub_id)  # a hub id is left to the hub
    for bad in ("/nonexistent", "~/nope", "a/b/c", "has space"):
        with pytest.raises(ValueError, match="no such model folder"):
            check_model_ref(bad)
    with pytest.raises(ValueError, match="no model given"):
        check_model_ref(" ")
    with pytest.raises(ModelLoadError, match="no such model folder"):
        load_pretrained("/nonexistent")


# -- a bad --agent, --user or --judge, a dead or unauthorised endpoint: before any attempt (#21 items 1-2) -------------


@pytest.mark.parametrize(
    "option, spec, says",
    [
        ("--agent", "scripted:nosiy:0.3", "unknown agent spec 'scripted:nosiy:0.3'"),
        ("--agent", "gold", "did you mean scripted:gold?"),
        ("--agent", "scripted:noisy", "noisy needs its probability"),
        ("--agent", "scripted:noisy:1.5", "P must be in [0, 1]"),
        ("--agent", "scripted:noisy:nan", "P must be in [0, 1]"),
        ("--agent", "hf:/nonexistent", "/nonexistent: no such model folder"),
        ("--agent", "openai", "openai needs its model"),
        ("--agent", "openai:", "bad endpoint spec"),
        ("--user", "llm", "unknown user spec 'llm'"),
        ("--judge", "gpt-4o", "judge: bad endpoint spec 'gpt-4o'"),
    ],
)
def test_a_spec_that_cannot_be_built_stops_the_run_in_one_line(tmp_path, monkeypatch, option, spec, says):
    monkeypatch.chdir(tmp_path)
    args = ["--agent", "scripted:gold"] if option != "--agent" else []
    r = invoke("run", *args, option, spec, "--tasks", "hr")
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and says in r.output and "nothing was run or written" in r.output
    assert "Traceback" not in r.output and list(tmp_path.iterdir()) == []  # no junk runs/ folder


def test_a_dead_endpoint_is_one_line_before_any_attempt(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    for option in ("--agent", "--user", "--judge"):
        args = {"--agent": [], "--user": ["--agent", "scripted:gold"], "--judge": ["--agent", "scripted:gold"]}[option]
        r = invoke("run", *args, option, f"openai:m@http://127.0.0.1:{port}/v1", "--tasks", "hr")
        assert r.exit_code == 2, r.output
        assert (
            f"{option} openai:m@http://127.0.0.1:{port}/v1: cannot reach http://127.0.0.1:{port}/v1" in r.output
            and "is the server running?" in r.output
        )
    assert list(tmp_path.iterdir()) == []


def test_no_url_and_no_key_names_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    r = invoke("run", "--agent", "openai:gpt-4o", "--tasks", "hr")
    assert r.exit_code == 2 and "official API (https://api.openai.com/v1) and OPENAI_API_KEY is not set" in r.output
    assert list(tmp_path.iterdir()) == []


def test_an_unauthorised_endpoint_says_so_and_an_unlisted_model_is_a_warning(tmp_path, monkeypatch):
    from openai_stub import OpenAIStub, Reply, error, text

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIStub(models=error(401, "invalid key")) as stub:
        r = invoke("run", "--agent", f"openai:m@{stub.base_url}", "--tasks", "hr")
        assert r.exit_code == 2 and "refused the request (HTTP 401): OPENAI_API_KEY is not set" in r.output, r.output
        assert stub.gets == ["/v1/models"] and stub.requests == []  # one probe, no attempt
    listing = Reply(body={"object": "list", "data": [{"id": "other-model", "object": "model", "created": 0, "owned_by": "x"}]})
    with OpenAIStub(models=listing, default=text("Done.")) as stub:
        r = invoke("run", "--agent", f"openai:m@{stub.base_url}", "--tasks", str(SHOP), "--out", str(tmp_path / "r.jsonl"))
    assert r.exit_code == 0, r.output
    assert "does not list model 'm' (it lists other-model): requests may fail" in r.output


def test_a_run_of_only_system_errors_exits_non_zero(tmp_path):
    from openai_stub import OpenAIStub, error

    with OpenAIStub(default=error(400, "bad request")) as stub:  # not transient: each attempt fails at once
        r = invoke(
            "run", "--agent", f"openai:m@{stub.base_url}", "--tasks", str(SHOP), "--out", str(tmp_path / "r.jsonl"), "--max-endpoint-failures", "0"
        )
    assert r.exit_code == 1 and "was a system error, so nothing was measured; the first: " in r.output, r.output
    assert "bad request" in r.output.split("the first: ")[1]  # the error itself, not only where to look for it
    assert "re-run with --repair to retry them" not in r.output  # said once, after the cause is fixed


# -- one rule for incomplete runs in every read command (#21 item 10) -------------------------------------------


def test_every_read_command_refuses_an_incomplete_run_in_the_same_words(tmp_path):
    full, partial = tmp_path / "full.jsonl", tmp_path / "partial.jsonl"
    r = invoke("run", "--agent", "scripted:noisy:0.5", "--tasks", str(SHOP), "--k", "4", "--out", str(full))
    assert r.exit_code == 0, r.output
    lines = full.read_text().splitlines()
    partial.write_text("\n".join(lines[:-1]) + "\n")  # one key missing
    commands = {
        "compute": ["metrics", str(partial)],
        "compare": ["compare", str(partial), str(full)],
        "plan": ["power", str(partial)],
        "report": ["report", str(partial), "--out", str(tmp_path / "r.html")],
        "select": ["select", str(partial), "--out", str(tmp_path / "sel")],
    }
    for verb, args in commands.items():
        r = invoke(*args)
        assert r.exit_code == 1, (args, r.output)
        line = one_error_line(r)
        assert line.startswith("error: incomplete ") and "1 missing keys" in line, line
        assert line.endswith(f"re-run it with --repair to finish it, or use --allow-incomplete to {verb} anyway"), line
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "sel").exists()
    for args in commands.values():  # allowed: it goes on, and says so
        r = invoke(*args, "--allow-incomplete")
        assert r.exit_code == 0, (args, r.output)
        assert "incomplete" in r.output, (args, r.output)
    assert "incomplete run, reported anyway: 1 missing keys" in (tmp_path / "r.html").read_text()


def test_a_server_without_its_scheme_is_refused_not_sent_to_the_official_api(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke("run", "--agent", "openai:m@localhost:8000/v1", "--tasks", "hr")
    assert r.exit_code == 2 and "the URL needs its scheme, e.g. openai:m@http://localhost:8000/v1" in r.output
    assert list(tmp_path.iterdir()) == []


def test_the_default_user_temperature_given_explicitly_is_the_same_run():
    from groundstate.pipeline.runner import RunConfig, run_identity

    plain = RunConfig(agent="scripted:gold", user="openai:u@http://127.0.0.1:1/v1")
    explicit = RunConfig(agent="scripted:gold", user="openai:u@http://127.0.0.1:1/v1", user_sampling={"temperature": 0.0})
    assert run_identity(plain, []).id == run_identity(explicit, []).id
    warm = RunConfig(agent="scripted:gold", user="openai:u@http://127.0.0.1:1/v1", user_sampling={"temperature": 0.7})
    assert run_identity(warm, []).id != run_identity(plain, []).id


# -- usage mistakes and wrong files: one line each, before anything else is printed (#21 item 3) ----------------------


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--agent", "scripted:gold"],  # --tasks and --k left to their defaults, said only once the backend is known
        ["probe", "--agent", "scripted:gold"],
        ["tasks", "lint", "--domain", "hr"],
        ["tasks", "certify", "--domain", "hr"],
    ],
)
def test_a_misspelled_backend_is_one_line_before_anything_else(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    r = invoke(*command, "--backend", "sqlit")
    assert r.exit_code == 2
    assert "unknown backend 'sqlit': use sqlite or postgres" in one_error_line(r)
    assert list(tmp_path.iterdir()) == []


def readers(results: Path, other: Path, out: Path) -> dict[str, list[str]]:
    """Every command that reads a results file, given `results` (and the run `other` beside it for compare)."""
    f = str(results)
    return {
        "metrics": ["metrics", f],
        "compare base": ["compare", f, str(other)],
        "compare candidate": ["compare", str(other), f],
        "report": ["report", f, "--out", str(out / "r.html")],
        "report baseline": ["report", str(other), "--baseline", f, "--out", str(out / "r.html")],
        "export": ["export", f, "--format", "sft-jsonl", "--out", str(out / "sft")],
        "power": ["power", f],
        "select": ["select", f, "--out", str(out / "sel")],
        "regrade": ["regrade", f, "--out", str(out / "regraded.jsonl")],
    }


@pytest.fixture(scope="module")
def a_run(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("run") / "r.jsonl"
    assert invoke("run", "--agent", "scripted:gold", "--tasks", "hr", "--out", str(path)).exit_code == 0
    return path


@pytest.mark.parametrize("given", ["folder", "missing", "empty"])
def test_every_reader_names_a_folder_a_missing_or_an_empty_results_file_in_one_line(tmp_path, a_run, given):
    run_dir = tmp_path / "runs" / "a_run_folder_with_a_long_name_that_would_wrap_at_eighty_columns"
    run_dir.mkdir(parents=True)
    results = {"folder": run_dir, "missing": run_dir / "no_results_here.jsonl", "empty": run_dir / "empty.jsonl"}[given]
    if given == "empty":
        results.touch()
    says = {
        "folder": "is a folder, not a results file",
        "missing": "no such results file",
        "empty": "holds no records (an empty results file, or one whose only line was cut off mid-write: nothing to read)",
    }[given]
    out = tmp_path / "out"
    for name, command in readers(results, a_run, out).items():
        r = CliRunner().invoke(app, command, env={"COLUMNS": "80"})
        assert r.exit_code == 2, (name, r.output)
        line = one_error_line(r)
        assert f"{results}: {says}" in line, (name, line)  # the whole path, never wrapped or boxed, in the same words
        assert not out.exists(), name


def test_usage_errors_are_one_line_with_where_help_is_not_a_box(tmp_path):
    long_dir = tmp_path / "a_folder_whose_name_alone_is_longer_than_the_eighty_columns_of_a_narrow_terminal"
    long_dir.mkdir()
    cases = {
        ("run", "--agent", "scripted:gold", "--bogus"): "No such option: --bogus",
        ("run", "--agent", "scripted:gold", "--k", "0"): "Invalid value for '--k': 0 is not an integer >= 1",
        ("regrade", "results.jsonl"): "Missing option '--out'",
        ("report", "results.jsonl", "--out", str(long_dir)): f"Invalid value for '--out': file '{long_dir}' is a directory",
        ("nosuchcommand",): "No such command 'nosuchcommand'",
    }
    for args, says in cases.items():
        r = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
        assert r.exit_code == 2, (args, r.output)
        line = one_error_line(r)
        assert says in line and line.endswith("--help)"), (args, line)
        assert not set("╭╮╰╯│") & set(r.output), r.output
    r = CliRunner().invoke(app, ["tasks"], env={"COLUMNS": "80"})  # a group without its command still shows its help
    assert "Usage:" in r.output and "lint" in r.output


def test_export_says_a_missing_file_before_its_format_line(tmp_path):
    r = invoke("export", str(tmp_path / "nope.jsonl"), "--format", "sft-jsonl", "--out", str(tmp_path / "out"))
    assert r.exit_code == 2 and "nope.jsonl: no such results file" in one_error_line(r)


# -- a domain folder with a mistake: the file and the fix, through the commands that load it ---------------------------


def broken_domain(tmp_path: Path, mistake: str) -> Path:
    """A `groundstate new domain` folder with one mistake made in it."""
    assert invoke("new", "domain", "mydom", "--dir", str(tmp_path)).exit_code == 0
    folder = tmp_path / "mydom"
    if mistake == "seed without generate":
        seed = folder / "seed.py"
        seed.write_text(seed.read_text().replace("def generate(", "def make_rows("))
    elif mistake == "tool without docstring":
        tools = folder / "tools.py"
        text = tools.read_text()
        start = text.index('"""', text.index("def find_mydom_customer"))
        tools.write_text(text[:start] + text[text.index('"""', start + 3) + 3 :])
    elif mistake == "name with markup":
        config = folder / "domain.yaml"
        config.write_text(config.read_text().replace("name: mydom", 'name: "My[a-z]Dom"'))
    return folder


@pytest.mark.parametrize(
    "mistake, says",
    [
        ("seed without generate", "mydom/seed.py: defines no generate(rng, scale) function"),
        ("tool without docstring", "mydom/tools.py: tool find_mydom_customer has no docstring: the docstring is its description"),
        ("name with markup", "mydom/domain.yaml: field 'name': String should match pattern '^[a-z][a-z0-9_]*$'"),
    ],
)
def test_a_broken_domain_folder_is_one_line_through_lint_and_run(tmp_path, monkeypatch, mistake, says):
    folder = broken_domain(tmp_path, mistake)
    monkeypatch.chdir(tmp_path)
    for command in (["tasks", "lint", "--domain", str(folder)], ["run", "--agent", "scripted:gold", "--tasks", str(folder)]):
        r = CliRunner().invoke(app, command, env={"COLUMNS": "80"})
        assert r.exit_code == 2, (command, r.output)
        assert says in one_error_line(r), command  # the pattern's [a-z] printed as written, not eaten as markup
    assert not (tmp_path / "runs").exists()


def test_the_core_install_runs_scripted_agents_and_names_the_extra_an_endpoint_needs(tmp_path):
    code = (  # as in `pip install -e .` without the openai extra
        "import sys; sys.modules['openai'] = None\nfrom groundstate.cli import app\napp(sys.argv[1:], prog_name='groundstate')\n"
    )

    def core(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "400"})

    r = core("run", "--agent", "scripted:gold", "--tasks", "hr", "--out", "r.jsonl")
    assert r.returncode == 0 and "results written to r.jsonl" in r.stderr, r.stderr
    assert core("metrics", "r.jsonl").returncode == 0
    r = core("run", "--agent", "openai:m@http://127.0.0.1:1/v1", "--tasks", "hr", "--out", "s.jsonl")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "needs the openai package, which this install lacks: pip install 'groundstate[openai]'" in r.stderr
    assert not (tmp_path / "s.jsonl").exists()


def test_paths_with_brackets_are_printed_as_given_not_read_as_markup(tmp_path):
    d = tmp_path / "exp[v2]" / "[bold]"  # rich would eat both as markup
    probes = d / "p.jsonl"
    lines = {
        ("new", "domain", "mydom", "--dir", str(d)): [f"domain mydom written to {d / 'mydom'}", f"groundstate tasks lint --domain {d / 'mydom'}"],
        ("probe", "--agent", "scripted:noisy:0.3", "--tasks", "hr", "--k", "3", "--out", str(probes)): [
            f"probes written to {probes}",
            f"next: groundstate select {probes} --out {d / 'selection'}",
        ],
        ("run", "--agent", "scripted:gold", "--tasks", "hr", "--out", str(d / "r.jsonl")): [f"results written to {d / 'r.jsonl'}"],
        ("report", str(probes), "--out", str(d / "r.html")): [f"report written to {d / 'r.html'}"],
        ("select", str(probes), "--out", str(d / "sel")): [f"train.yaml written to {d / 'sel' / 'train.yaml'}"],
        ("export", str(probes), "--format", "sft-jsonl", "--out", str(d / "sft")): [f"counts written to {d / 'sft' / 'export.json'}"],
    }
    for args, says in lines.items():
        r = invoke(*args)
        assert r.exit_code == 0, (args, r.output)
        for line in says:
            assert line in r.output, (args, r.output)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--user", "llm"], "--user llm: unknown user spec 'llm'"),
        (["--judge", "gpt4"], "--judge gpt4: bad endpoint spec 'gpt4'"),
        (["--user", "openai:m@http://127.0.0.1:1/v1"], "--user is for --engine verl"),
        (["--engine", "verl", "--dry-run", "--judge", "gpt4"], "--judge gpt4: bad endpoint spec 'gpt4'"),
    ],
)
def test_train_refuses_a_user_or_judge_it_cannot_build_or_would_not_use(tmp_path, args, says):
    out = tmp_path / "out"
    r = invoke("train", "--model", "Qwen/Qwen3-0.6B", "--train", "hr", "--out", str(out), *args)
    assert r.exit_code == 2 and says in one_error_line(r)
    assert not out.exists()


@pytest.mark.parametrize("role", ["--user", "--judge"])
def test_a_verl_dry_run_with_an_endpoint_and_no_openai_client_is_refused(tmp_path, role):
    """verl's rollouts would call the endpoint from this environment: without the openai client the dry run said the
    recipe was fine, and the run failed at its first rollout."""
    code = "import sys; sys.modules['openai'] = None\nfrom groundstate.cli import app\napp(sys.argv[1:], prog_name='groundstate')\n"
    args = ["train", "--engine", "verl", "--dry-run", "--model", "Qwen/Qwen3-0.6B", "--train", "hr", "--out", str(tmp_path / "v")]
    r = subprocess.run([sys.executable, "-c", code, *args, role, "openai:m@http://127.0.0.1:1/v1"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{role} openai:m@http://127.0.0.1:1/v1: needs the openai package" in r.stderr, r.stderr
    assert not (tmp_path / "v").exists()
