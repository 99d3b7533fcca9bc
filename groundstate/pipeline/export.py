"""Run trajectories to training data: one chat example per attempt, in the format Hugging Face tools read.

An example is `{"messages", "tools", "task_id", "attempt", "reward", "domain"}`:
- `messages` are the attempt's conversation in the OpenAI/Hugging Face chat format. Assistant tool calls
  keep `{id, type: "function", function: {name, arguments}}` with `arguments` as a JSON *object* (what
  TRL's dataset guide and Hugging Face chat templates expect; a template given a string would write it
  quoted). Arguments the model wrote as invalid JSON stay the raw string, which templates that accept
  strings write verbatim. Tool results are `{role: "tool", tool_call_id, name, content}`.
- `tools` are the domain's tool JSON schemas (the `tools` column TRL's `SFTTrainer` passes to the chat
  template), taken from the domains the caller names (`--domain DIR`) or the bundled domain of the record's
  `domain` name; left out otherwise. A record never makes export load a domain folder: that would run the
  folder's Python, and results files are shared data.
- System-error records are never exported (they are not the agent's doing); `passed_only` keeps reward 1.
  When a results file holds a key twice, the last record of that key wins.
- An exported attempt whose message holds tool calls export cannot read (not a list of JSON objects, each with an
  object `function`) is a `RecordError` naming the source, the record and the field; nothing is written. Skipping it
  would drop an attempt from the data while the file says it is there: a broken results file is refused, like a
  line that is not a record.

Formats (under `out_dir`): `sft-jsonl` writes `train.jsonl`; `parquet` writes `train.parquet`; `hf-dataset`
saves a `datasets.Dataset` to `out_dir` itself (`datasets.load_from_disk(out_dir)`). Every format writes
`export.json` beside the data with the counts. Parquet and the saved dataset store messages and tools as
the `datasets.Json` type: heterogeneous tool arguments keep their exact keys instead of being unified into
one struct padded with nulls (which would add `null` arguments when a template renders them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from groundstate.jsontext import json_object
from groundstate.records import AttemptRecord, RecordError, latest_per_key
from groundstate.worlds.domain import DOMAINS_DIR, Domain, bundled_domains, load_domain

FORMATS = ("hf-dataset", "parquet", "sft-jsonl")


@dataclass
class ExportCounts:
    records: int = 0  # records read
    exported: int = 0  # examples written
    system_errors: int = 0  # skipped: infrastructure failures, never training data
    not_passed: int = 0  # skipped by passed_only (reward 0 or unjudged)
    not_passed_kept: int = 0  # exported although not passed (reward 0 or unjudged): passed_only was off
    duplicates: int = 0  # skipped: an earlier record of a key that appears again
    no_trajectory: int = 0  # skipped: a record without messages
    unparsed_arguments: int = 0  # tool calls whose arguments stay a raw string (not a JSON object)
    without_tools: int = 0  # examples whose domain could not be loaded (no `tools`)


def _arguments(raw: Any, counts: ExportCounts) -> Any:
    if not isinstance(raw, str):
        return raw
    value = json_object(raw)  # None past `MAX_DEPTH`, as the episode answered such a call
    if value is not None:
        return value
    counts.unparsed_arguments += 1
    return raw


class MessageShapeError(ValueError):
    """A message field `chat_messages` cannot read: `field` (`messages.2.tool_calls.0`) and what is wrong with it."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"field {field!r}: {problem}")
        self.field, self.problem = field, problem


def _kind(v: Any) -> str:
    return "null" if v is None else type(v).__name__ + " " + json.dumps(v, default=str)[:40]


def chat_messages(messages: list[dict[str, Any]], counts: ExportCounts | None = None) -> list[dict[str, Any]]:
    """A trajectory's messages with tool-call arguments as JSON objects; everything else is kept as it was.

    A message's `tool_calls` must be a list of JSON objects whose `function` (where there is one) is an object: else a
    `MessageShapeError` naming the field (`messages.2.tool_calls.0`)."""
    counts = counts or ExportCounts()
    out = []
    for i, m in enumerate(messages):
        m = dict(m)
        if m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise MessageShapeError(f"messages.{i}.tool_calls", f"must be a list of tool calls, got {_kind(m['tool_calls'])}")
            calls = []
            for j, c in enumerate(m["tool_calls"]):
                if not isinstance(c, dict):
                    raise MessageShapeError(f"messages.{i}.tool_calls.{j}", f"a tool call must be a JSON object, got {_kind(c)}")
                if not isinstance(c.get("function", {}), dict):
                    raise MessageShapeError(f"messages.{i}.tool_calls.{j}.function", f"must be a JSON object, got {_kind(c['function'])}")
                fn = dict(c.get("function", {}))
                fn["arguments"] = _arguments(fn.get("arguments"), counts)
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


class _ToolSchemas:
    """Tool schemas per domain name, from the domains the caller names, else from the bundled domain of that name;
    None when neither has it.

    A record's `domain` is only ever looked up as a name, never opened as a path: loading a domain imports its
    `tools.py` and `seed.py`, and a results file is data that people share, so a record naming a folder (or a
    name that climbs out of the bundled folder) must not make a reader run that folder's code.
    """

    def __init__(self, domains: Iterable[str | Path | Domain] = ()):
        self._by_name: dict[str, list[dict[str, Any]] | None] = {}
        for d in domains:
            d = d if isinstance(d, Domain) else load_domain(str(d))
            self._by_name[d.name] = d.tools.openai_schemas()

    def __call__(self, name: Any) -> list[dict[str, Any]] | None:
        if not isinstance(name, str):
            return None
        if name not in self._by_name:
            self._by_name[name] = Domain(DOMAINS_DIR / name).tools.openai_schemas() if name in bundled_domains() else None
        return self._by_name[name]


def to_examples(
    records: Iterable[AttemptRecord], passed_only: bool = False, domains: Iterable[str | Path | Domain] = (), source: str = "the records"
) -> tuple[list[dict[str, Any]], ExportCounts]:
    """Records to training examples (in the records' order) and the counts of what was kept and skipped.

    `domains` are the domain folders (or loaded domains) to take tool schemas from besides the bundled ones
    (e.g. a task folder outside the bundled ones); a record's `domain` is matched against their names only.
    An exported record whose messages `chat_messages` cannot read is a `RecordError` starting with `source` (the
    results file) and naming the record and the field.
    """
    records = list(records)
    schemas = _ToolSchemas(domains)
    counts = ExportCounts(records=len(records), system_errors=sum(r.outcome == "system_error" for r in records))
    latest = [r for r in latest_per_key(records).values() if r.outcome != "system_error"]
    counts.duplicates = len(records) - counts.system_errors - len(latest)
    examples = []
    for r in latest:
        if r.outcome != "pass":
            if passed_only:
                counts.not_passed += 1
                continue
            counts.not_passed_kept += 1
        messages = r.trajectory.messages if r.trajectory is not None else []
        if not messages:
            counts.no_trajectory += 1
            continue
        try:
            example: dict[str, Any] = {"messages": chat_messages(messages, counts)}
        except MessageShapeError as e:
            raise RecordError(f"{source}: record {r.task_id} attempt {r.attempt}: field 'trajectory.{e.field}': {e.problem}") from None
        tools = schemas(r.domain)
        if tools is not None:
            example["tools"] = tools
        else:
            counts.without_tools += 1
        example.update(task_id=r.task_id, attempt=r.attempt, reward=r.reward, domain=r.domain)
        examples.append(example)
    counts.exported = len(examples)
    return examples, counts


def write_examples(examples: list[dict[str, Any]], fmt: str, out_dir: Path | str, info: dict[str, Any] | None = None) -> Path:
    """Write examples in `fmt` under `out_dir` (see the module docstring); returns the data's path."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if fmt == "sft-jsonl":
        path = out_dir / "train.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for e in examples:
                f.write(json.dumps(e, ensure_ascii=False, default=str) + "\n")
    else:
        import datasets

        bars = not datasets.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # one file, written in well under a second: no bars in the CLI's output
        try:
            dataset = _dataset(examples)
            if fmt == "parquet":
                path = out_dir / "train.parquet"
                dataset.to_parquet(str(path))
            else:
                path = out_dir
                dataset.save_to_disk(str(path))
        finally:
            if bars:
                datasets.enable_progress_bars()
    (out_dir / "export.json").write_text(json.dumps({"format": fmt, "data": str(path), **(info or {})}, indent=1, default=str))
    return path


def _dataset(examples: list[dict[str, Any]]):
    from datasets import Dataset, Features, Json, List, Value

    columns: dict[str, Any] = {"messages": List(Json())}
    if any("tools" in e for e in examples):
        columns["tools"] = List(Json())
    columns |= {"task_id": Value("string"), "attempt": Value("int64"), "reward": Value("int64"), "domain": Value("string")}
    rows = [{c: e.get(c) for c in columns} for e in examples]
    return Dataset.from_list(rows, features=Features(columns))


def export(
    records: Iterable[AttemptRecord], fmt: str, out_dir: Path | str, passed_only: bool = False, domains: Iterable[str | Path | Domain] = ()
) -> Path:
    """Write one training example per attempt of `records` in `fmt` under `out_dir`; returns the data's path.

    The counts (exported, skipped system errors, ...) are written to `out_dir/export.json`.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    examples, counts = to_examples(records, passed_only, domains)
    return write_examples(examples, fmt, out_dir, {"passed_only": passed_only, "counts": asdict(counts)})
