"""The runner: resumable, keyed results; system errors retried; a SIGKILL loses nothing already written."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from groundstate.pipeline.runner import RunConfig, run
from groundstate.records import read_records
from groundstate.state.sqlite import SqliteBackend
from groundstate.worlds.selectors import select_tasks

SHOP = str(Path(__file__).parents[1] / "fixtures" / "shop")


def keys(records):
    return [(r.task_id, r.attempt) for r in records]


def test_run_writes_one_record_per_key_and_resumes(tmp_path, shop):
    pairs = [(t, shop) for t in shop.tasks]
    path = tmp_path / "results.jsonl"
    s = run(pairs, RunConfig(agent="scripted:noisy:0.5", k=4), SqliteBackend(), path)
    assert (s.ran, s.skipped) == (12, 0)
    first = read_records(path)
    assert sorted(keys(first)) == sorted((t.id, a) for t in shop.tasks for a in range(4))
    for r in first:
        assert set(r.model_dump()) >= {
            "task_id",
            "attempt",
            "reward",
            "system_error",
            "finish_reason",
            "agent",
            "model",
            "usage",
            "verdict",
            "trajectory",
            "timings",
        }
        assert r.reward in (0, 1) and set(r.usage.model_dump()) == {"input_tokens", "output_tokens", "cached_input_tokens"}
    s = run(pairs, RunConfig(agent="scripted:noisy:0.5", k=4), SqliteBackend(), path)
    assert (s.ran, s.skipped) == (0, 12)
    assert read_records(path) == first
    manifest = json.loads(path.with_name(path.name + ".manifest.json").read_text())
    assert manifest["config"]["agent"] == "scripted:noisy:0.5" and manifest["resumed"] == 1 and manifest["task_list_hash"]


def test_same_seed_same_results_different_seed_differs(tmp_path, shop):
    pairs = [(t, shop) for t in shop.tasks]
    rewards = []
    for i, seed in enumerate([0, 0, 1]):
        run(pairs, RunConfig(agent="scripted:noisy:0.5", k=8, seed=seed), SqliteBackend(), tmp_path / f"{i}.jsonl")
        rewards.append({(r.task_id, r.attempt): r.reward for r in read_records(tmp_path / f"{i}.jsonl")})
    assert rewards[0] == rewards[1] and rewards[0] != rewards[2]


class FlakyBackend(SqliteBackend):
    """Fails to open a sandbox for the given attempt indices (an infrastructure fault)."""

    def __init__(self, fail_attempts):
        super().__init__()
        self.fail_attempts = set(fail_attempts)
        self.opens = 0

    def open(self, template):
        self.opens += 1
        if self.opens in self.fail_attempts:
            raise ConnectionError("database went away")
        return super().open(template)


def test_system_errors_are_recorded_then_retried_without_duplicates(tmp_path, shop):
    pairs = [(t, shop) for t in shop.tasks]
    path = tmp_path / "results.jsonl"
    s = run(pairs, RunConfig(agent="scripted:gold", k=2), FlakyBackend({1, 4}), path)
    assert s.system_errors >= 1
    errs = [r for r in read_records(path) if r.system_error]
    assert errs and all(r.reward is None and "database went away" in r.system_error for r in errs)
    # --repair retries only the system errors; the file ends with exactly one clean record per key
    s2 = run(pairs, RunConfig(agent="scripted:gold", k=2), SqliteBackend(), path, repair=True)
    assert s2.ran == len(errs)
    final = read_records(path)
    assert sorted(keys(final)) == sorted((t.id, a) for t in shop.tasks for a in range(2))
    assert all(r.system_error is None and r.reward == 1 for r in final)


def test_a_truncated_last_line_is_cut_and_rerun(tmp_path, shop):
    pairs = [(t, shop) for t in shop.tasks]
    path = tmp_path / "results.jsonl"
    run(pairs, RunConfig(agent="scripted:gold", k=1), SqliteBackend(), path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + lines[-1][:40])  # crash in the middle of the last write
    s = run(pairs, RunConfig(agent="scripted:gold", k=1), SqliteBackend(), path)
    assert s.ran == 1
    assert sorted(keys(read_records(path))) == sorted((t.id, 0) for t in shop.tasks)


def test_selectors(tmp_path):
    shop_pairs = select_tasks(SHOP)
    assert [t.id for t, _ in shop_pairs] == ["shop-cancel", "shop-refuse", "shop-multi"]
    (tmp_path / "bad.yaml").write_text("- nope\n")
    with pytest.raises(Exception, match="unknown task ids"):
        select_tasks(str(tmp_path / "bad.yaml"))
    assert [t.id for t, _ in select_tasks("retail-cancel-open-order-00*")][:2] == ["retail-cancel-open-order-001", "retail-cancel-open-order-002"]
    assert {d.name for _, d in select_tasks("bench")} == {"travel", "insurance", "hr"}
    with pytest.raises(ValueError, match="matched no task"):
        select_tasks("no-such-task-*")


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_loses_and_repeats_nothing(tmp_path):
    """Kill the runner with SIGKILL mid-run; re-running the same command completes exactly tasks × k keys."""
    path = tmp_path / "results.jsonl"
    k = 3000
    cmd = [sys.executable, "-m", "groundstate.cli", "run", "--agent", "scripted:noisy:0.3", "--tasks", SHOP, "--k", str(k), "--out", str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") > 500:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = read_records(path)
    assert 500 <= len(before) < 3 * k, "the kill must land mid-run"
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    after = read_records(path)
    assert len(after) == 3 * k
    assert len(set(keys(after))) == 3 * k
    by_key = {(r.task_id, r.attempt): r for r in after}
    for r in before:
        assert by_key[(r.task_id, r.attempt)] == r  # finished before the kill: kept exactly


def test_a_record_with_a_lone_surrogate_is_written_and_read_back(tmp_path, shop):
    """A model can emit JSON with an escaped lone surrogate ("\\ud800") in tool arguments: the agent gets an error
    result (the episode shows the surrogate as U+FFFD), and the attempt's record must still be written, whole and
    readable, by the writer and by a rewrite — also when another source (a server's diff) puts one in the verdict."""
    import asyncio

    from groundstate.pipeline.runner import make_record
    from groundstate.records import ResultsWriter, rewrite_atomically
    from groundstate.types import AgentTurn, ToolCallRequest
    from groundstate.worlds.attempt import play

    bad = "caf\ud800e"

    class Agent:
        def __init__(self):
            self.turns = 0

        async def act(self, conversation, tools):
            self.turns += 1
            if self.turns == 1:
                return AgentTurn(tool_calls=[ToolCallRequest("c1", "get_order", {"order_id": bad})])
            return AgentTurn(text=bad, done=True)

    backend = SqliteBackend()
    task = shop.task("shop-cancel")
    out = asyncio.run(play(task, shop, Agent(), None, backend=backend))
    assert out.verdict.system_error is None and out.trajectory.tool_calls[0].ok is False
    assert "not valid Unicode" in out.trajectory.tool_calls[0].result
    out.verdict.reasons.append(bad)  # e.g. a ThinkingBox server's diff item: text the episode does not clean
    record = make_record(task, 0, RunConfig(agent="scripted:gold", k=1), out.verdict, out.trajectory, out.timings)
    path = tmp_path / "r.jsonl"
    writer = ResultsWriter(path)
    writer.write(record)
    writer.close()
    [back] = read_records(path)
    assert back.trajectory.tool_calls[0].arguments == '{"order_id": "caf\ufffde"}' and back.reward == 0
    assert back.verdict.reasons[-1] == bad and back.trajectory.messages[-1]["content"] == "caf\ufffde"
    rewrite_atomically(path, [back, back.model_copy(update={"attempt": 1})])
    assert [r.attempt for r in read_records(path)] == [0, 1]


def test_outcome_counts_unjudged_and_system_errors_apart():
    """The run/probe progress line never counts an unjudged rubric attempt or a system error as a fail."""
    from groundstate.pipeline.runner import progress_status
    from groundstate.records import AttemptRecord

    records = [
        AttemptRecord(task_id="t", attempt=a, **fields)
        for a, fields in enumerate([{"reward": 1}, {"reward": 0}, {"reward": None, "unjudged": True}, {"reward": None, "system_error": "db down"}])
    ]
    tally = {"pass": 0, "fail": 0, "system_error": 0, "unjudged": 0}
    for r in records:
        tally[r.outcome] += 1
    assert tally == {"pass": 1, "fail": 1, "system_error": 1, "unjudged": 1}
    assert progress_status(tally) == "pass 1 · fail 1 · system errors 1 · unjudged 1"
