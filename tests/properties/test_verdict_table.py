"""The verdicts of the whole bundled suite are pinned, on both backends (#33's must-show: a redesign changes no verdict).

`tests/fixtures/behaviour/verdicts.txt` holds one line per task: its id, then for each of the scripted
gold, no-op and noisy (p = 0.3, seed 0) agents its reward and a hash of its verdict (reward, reasons, diff, changes,
blame: everything the grader decided). Both backends must give this one table, verdict for verdict. A change of the
code that changes a verdict fails here, naming the tasks. A
deliberate change of behaviour re-records the tables:

    GS_RECORD_VERDICTS=1 python -m pytest tests/properties/test_verdict_table.py
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from groundstate.pipeline.runner import RunConfig, run
from groundstate.records import read_records
from groundstate.worlds.domain import iter_tasks

TABLE = Path(__file__).parents[1] / "fixtures" / "behaviour" / "verdicts.txt"
AGENTS = ("scripted:gold", "scripted:noop", "scripted:noisy:0.3")


def _digest(verdict: dict) -> str:
    return hashlib.sha256(json.dumps(verdict, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


CHUNK = 8  # tasks run by every agent before the next ones: on PostgreSQL their clones are reused, not made anew


def verdict_lines(backend, out: Path) -> list[str]:
    """`task_id  gold_reward gold_hash  noop_reward noop_hash  noisy_reward noisy_hash`, sorted by task id.

    The agents take the tasks a few at a time, each agent a run of its own over them: a task's sandbox (a database clone
    on PostgreSQL, made and later dropped for some 70 ms) is then reused by the next agent's attempt and by blame's
    replays, instead of being cloned again once the other tasks' clones have pushed it out of the pool."""
    pairs = iter_tasks()
    cells: dict[str, list[str]] = {t.id: [] for t, _ in pairs}
    for start in range(0, len(pairs), CHUNK):
        chunk = pairs[start : start + CHUNK]
        for i, spec in enumerate(AGENTS):
            path = out / f"{start}-{i}.jsonl"
            run(chunk, RunConfig(agent=spec, k=1, seed=0, concurrency=8), backend, path)
            for r in sorted(read_records(path), key=lambda r: r.task_id):
                reward = "-" if r.reward is None else str(r.reward)
                cells[r.task_id].append(f"{reward} {_digest(r.verdict.to_json() if r.verdict is not None else {})}")
    return [f"{tid} " + " ".join(cs) for tid, cs in sorted(cells.items())]


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
def test_the_bundled_suite_gives_the_recorded_verdicts(backend_name, tmp_path, request):
    backend = request.getfixturevalue("pg_backend") if backend_name == "postgres" else None
    if backend is None:
        from groundstate.state.sqlite import SqliteBackend

        backend = SqliteBackend()
    lines = verdict_lines(backend, tmp_path)
    assert all(len(line.split()) == 1 + 2 * len(AGENTS) for line in lines), "every task has one verdict per agent"
    table = TABLE
    if os.environ.get("GS_RECORD_VERDICTS") and backend_name == "sqlite":
        table.write_text("\n".join(lines) + "\n", encoding="utf-8")
        pytest.skip(f"recorded {len(lines)} tasks to {table}")
    want = table.read_text(encoding="utf-8").splitlines()
    changed = sorted({line.split()[0] for line in set(want) ^ set(lines)})
    assert not changed, f"{len(changed)} tasks' verdicts differ from {table.name}, e.g. {changed[:6]}"
    assert len(lines) == len(want)
