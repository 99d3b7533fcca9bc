"""Export of run trajectories to training data: three formats read back, tool calls kept, filters, chat template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

from groundstate.pipeline.export import FORMATS, chat_messages, export, to_examples  # noqa: E402
from groundstate.pipeline.runner import RunConfig, run  # noqa: E402
from groundstate.records import RecordError, read_records  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.worlds.domain import Domain  # noqa: E402

FIXTURE = Path(__file__).parents[1] / "fixtures" / "shop"
K = 4


@pytest.fixture(scope="module")
def domain() -> Domain:
    return Domain(FIXTURE)


@pytest.fixture(scope="module")
def run_file(domain, tmp_path_factory) -> Path:
    """A scripted run (noisy gold: passes and failures), plus one system-error record after the episode ran."""
    path = tmp_path_factory.mktemp("run") / "results.jsonl"
    summary = run([(t, domain) for t in domain.tasks], RunConfig(agent="scripted:noisy:0.5", k=K), SqliteBackend(), path)
    assert summary.ran == len(domain.tasks) * K and summary.system_errors == 0
    assert 0 < summary.passed < summary.ran  # both kinds are there to filter
    broken = read_records(path)[0].model_copy(
        update={
            "attempt": K,
            "reward": None,  # a grader failure: trajectory kept
            "system_error": "OperationalError: database went away",
        }
    )
    with path.open("a") as f:
        f.write(broken.to_line())
    return path


@pytest.fixture(scope="module")
def records(run_file):
    return read_records(run_file)


def _clean(records):
    return [r for r in records if not r.system_error]


def _read_back(fmt: str, path: Path) -> list[dict]:
    if fmt == "sft-jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    if fmt == "parquet":
        return list(datasets.load_dataset("parquet", data_files=str(path), split="train"))
    return list(datasets.load_from_disk(str(path)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_reads_back_one_example_per_clean_attempt(fmt, records, domain, tmp_path):
    path = export(records, fmt, tmp_path / fmt, domains=[FIXTURE])
    examples = _read_back(fmt, path)
    clean = _clean(records)
    assert len(examples) == len(clean) == len(domain.tasks) * K
    assert [(e["task_id"], e["attempt"]) for e in examples] == [(r.task_id, r.attempt) for r in clean]
    assert ("shop-cancel", K) not in {(e["task_id"], e["attempt"]) for e in examples}  # the system error is skipped
    info = json.loads((tmp_path / fmt / "export.json").read_text())
    assert info["counts"]["exported"] == len(clean) and info["counts"]["system_errors"] == 1 and info["format"] == fmt
    tools = domain.tools.openai_schemas()
    for e, r in zip(examples, clean, strict=True):
        assert set(e) == {"messages", "tools", "task_id", "attempt", "reward", "domain"}
        assert e["reward"] == r.reward and e["domain"] == "shop"
        assert e["tools"] == tools
        original = r.trajectory.messages
        assert [m["role"] for m in e["messages"]] == [m["role"] for m in original]
        assert e["messages"][0] == {"role": "system", "content": domain.system_prompt()}
        for m, o in zip(e["messages"], original, strict=True):
            assert set(m) == set(o)  # no keys padded in by a unified schema (a template would render them)
            if o["role"] == "tool":
                assert m == o
            if o.get("tool_calls"):
                assert len(m["tool_calls"]) == len(o["tool_calls"])
                for c, oc in zip(m["tool_calls"], o["tool_calls"], strict=True):
                    assert c["id"] == oc["id"] and c["type"] == "function" and c["function"]["name"] == oc["function"]["name"]
                    assert isinstance(c["function"]["arguments"], dict)  # an object, as Hugging Face chat templates expect
                    assert c["function"]["arguments"] == json.loads(oc["function"]["arguments"])
    assert sum(len(m.get("tool_calls") or []) for e in examples for m in e["messages"]) > 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_passed_only_keeps_reward_one(fmt, records, tmp_path):
    examples = _read_back(fmt, export(records, fmt, tmp_path / fmt, passed_only=True, domains=[FIXTURE]))
    passed = [(r.task_id, r.attempt) for r in _clean(records) if r.reward == 1]
    assert [(e["task_id"], e["attempt"]) for e in examples] == passed
    assert examples and all(e["reward"] == 1 for e in examples)


def test_counts_duplicates_and_unknown_domains(records):
    clean = _clean(records)
    again = clean[0].model_copy(update={"reward": 1 - clean[0].reward})
    examples, counts = to_examples(records + [again])  # no domain folder given: "shop" is not bundled
    assert counts.records == len(records) + 1 and counts.system_errors == 1 and counts.duplicates == 1
    assert counts.exported == len(clean) and counts.without_tools == len(clean)
    assert all("tools" not in e for e in examples)
    assert (examples[-1]["task_id"], examples[-1]["attempt"], examples[-1]["reward"]) == (again.task_id, again.attempt, again.reward)
    _, counts = to_examples(records, passed_only=True)
    assert counts.not_passed == sum(r.reward != 1 for r in clean)


def test_arguments_that_are_not_a_json_object_stay_raw():
    msgs = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1'}},
                {"id": "c1", "type": "function", "function": {"name": "g", "arguments": "[1, 2]"}},
                {"id": "c2", "type": "function", "function": {"name": "h", "arguments": '{"b": [1, 2]}'}},
            ],
        }
    ]
    out = chat_messages(msgs)
    assert [c["function"]["arguments"] for c in out[0]["tool_calls"]] == ['{"a": 1', "[1, 2]", {"b": [1, 2]}]
    assert msgs[0]["tool_calls"][2]["function"]["arguments"] == '{"b": [1, 2]}'  # the input is not changed


def test_unknown_format_is_refused(records, tmp_path):
    with pytest.raises(ValueError, match="sft-jsonl"):
        export(records, "csv", tmp_path)


def test_chat_template_renders_exported_examples_as_at_rollout(records, domain, tmp_path):
    """The exported example renders with groundstate's chat template (and tools) to the same text as the
    trajectory's own OpenAI-style messages: training sees what the policy saw and wrote."""
    pytest.importorskip("transformers")
    from groundstate.train.tiny import build_tokenizer, domain_corpus

    tok = build_tokenizer(domain_corpus(domain, repeat=2), vocab_size=512)
    tools = domain.tools.openai_schemas()
    for fmt in ("hf-dataset", "sft-jsonl"):
        examples = _read_back(fmt, export(records, fmt, tmp_path / fmt, domains=[FIXTURE]))
        for e, r in zip(examples, _clean(records), strict=True):
            text = tok.apply_chat_template(e["messages"], tools=e["tools"], tokenize=False)
            assert text == tok.apply_chat_template(r.trajectory.messages, tools=tools, tokenize=False)
            assert "<tools>" in text and text.startswith("<|im_start|>system\n")
            ids = tok.apply_chat_template(e["messages"], tools=e["tools"], tokenize=True, return_dict=True)["input_ids"]
            assert len(ids) > 0
    called = next(e for e in examples if any(m.get("tool_calls") for m in e["messages"]))
    call = next(m for m in called["messages"] if m.get("tool_calls"))["tool_calls"][0]["function"]
    rendered = tok.apply_chat_template(called["messages"], tools=called["tools"], tokenize=False)
    assert '<tool_call>\n{"name": ' + json.dumps(call["name"]) + ', "arguments": ' + json.dumps(call["arguments"]) + "}\n</tool_call>" in rendered


def test_export_command(run_file, tmp_path):
    from typer.testing import CliRunner

    from groundstate.cli import app

    out = tmp_path / "sft"
    result = CliRunner().invoke(app, ["export", str(run_file), "--format", "sft-jsonl", "--out", str(out), "--passed-only", "--domain", str(FIXTURE)])
    assert result.exit_code == 0, result.output
    passed = sum(1 for r in read_records(run_file) if r.reward == 1 and not r.system_error)
    assert f"{passed} examples exported from {len(read_records(run_file))} records" in result.output
    assert "1 system errors" in result.output and str(out / "train.jsonl") in result.output
    assert len((out / "train.jsonl").read_text().splitlines()) == passed
    bad = CliRunner().invoke(app, ["export", str(run_file), "--format", "csv", "--out", str(out)])
    assert bad.exit_code == 2 and "unknown format" in bad.output


@pytest.mark.parametrize(
    ("tool_calls", "field", "problem"),
    [
        (["x"], ".tool_calls.0'", 'a tool call must be a JSON object, got str "x"'),
        ([{"function": 5}], ".tool_calls.0.function'", "must be a JSON object, got int 5"),
        ("x", ".tool_calls'", 'must be a list of tool calls, got str "x"'),
    ],
    ids=["a string call", "a number function", "a string list"],
)
def test_a_tool_call_export_cannot_read_is_refused_naming_file_record_and_field(run_file, tmp_path, tool_calls, field, problem):
    """A message's tool calls that are not a list of JSON objects with an object `function` made `export` crash with
    a traceback (`AttributeError: 'str' object has no attribute 'get'`). The file is refused in one line naming it,
    the record and the field, and nothing is written."""
    from typer.testing import CliRunner

    from groundstate.cli import app

    lines = [json.loads(line) for line in run_file.read_text().splitlines()]
    at, data = next((n, d) for n, d in enumerate(lines) if not d["system_error"] and any(m.get("tool_calls") for m in d["trajectory"]["messages"]))
    i = next(i for i, m in enumerate(data["trajectory"]["messages"]) if m.get("tool_calls"))
    data["trajectory"]["messages"][i]["tool_calls"] = tool_calls
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(d) + "\n" for d in lines))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["export", str(bad), "--format", "sft-jsonl", "--all-attempts", "--out", str(out)])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())  # the console wraps long lines
    where = f"{bad}: record {data['task_id']} attempt {data['attempt']}: field 'trajectory.messages.{i}{field}: {problem}"
    assert message == f"error: {where}", message
    assert not (out / "train.jsonl").exists() and not (out / "export.json").exists()
    with pytest.raises(RecordError, match="the records: record"):
        export(read_records(bad), "sft-jsonl", tmp_path / "lib", passed_only=False)


def test_a_record_never_makes_export_run_a_domain_folders_code(records, tmp_path):
    """#20 item 1: a shared results file whose `domain` names a folder (absolute, or a name climbing out of the
    bundled folder) made `export` import that folder's tools.py and seed.py. Only domains named on the command
    line, or bundled ones by name, are loaded; the others lose only their tools column."""
    import os
    import shutil

    from typer.testing import CliRunner

    from groundstate.cli import app
    from groundstate.worlds.domain import DOMAINS_DIR, load_domain

    marker = tmp_path / "ran.txt"
    evil = tmp_path / "evil"
    shutil.copytree(FIXTURE, evil, ignore=shutil.ignore_patterns("__pycache__"))
    (evil / "domain.yaml").write_text((evil / "domain.yaml").read_text().replace("name: shop", "name: evil_export_probe"))
    for module in ("tools.py", "seed.py"):
        with (evil / module).open("a") as f:
            f.write(f"\nimport pathlib\npathlib.Path({str(marker)!r}).write_text({module!r})\n")
    clean = _clean(records)
    named = [  # the first four clean records, one per way of naming the domain
        r.model_copy(update={"domain": d})
        for r, d in zip(clean, [str(evil), os.path.relpath(evil, DOMAINS_DIR), "retail", "evil_export_probe"], strict=False)
    ]
    results = tmp_path / "shared.jsonl"
    results.write_text("".join(r.to_line() for r in named))

    out = tmp_path / "sft"
    result = CliRunner().invoke(app, ["export", str(results), "--format", "sft-jsonl", "--all-attempts", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert not marker.exists(), f"export ran {marker.read_text()} of a folder named by a record"
    examples = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert [("tools" in e) for e in examples] == [False, False, True, False]
    assert examples[2]["tools"] == load_domain("retail").tools.openai_schemas()  # bundled domains still load by name
    assert "3 examples have no tools column" in " ".join(result.output.split())

    # the user names the folder on the command line: that is their choice, and its records get its tools
    result = CliRunner().invoke(app, ["export", str(results), "--format", "sft-jsonl", "--all-attempts", "--out", str(out), "--domain", str(evil)])
    assert result.exit_code == 0, result.output
    examples = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert [("tools" in e) for e in examples] == [False, False, True, True]
