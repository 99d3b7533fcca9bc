"""GRPO with TRL on CPU: parameters move, zero-variance groups are filtered and refilled, rewards are verdicts."""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from groundstate.agents.local import PROMPT_FLAGS, BatchedPolicy  # noqa: E402
from groundstate.agents.toolcall_format import render_tool_call  # noqa: E402
from groundstate.grading.grader import grader_for, replay  # noqa: E402
from groundstate.pipeline.runner import RunConfig, run  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.train.tiny import domain_corpus, save_tiny  # noqa: E402
from groundstate.train.trl_engine import TrainConfig, train_trl  # noqa: E402
from groundstate.types import EpisodeLimits  # noqa: E402
from groundstate.worlds.domain import Domain  # noqa: E402

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"


class CoinFlipPolicy(BatchedPolicy):
    """Real tokens, forced decisions: on `shop-cancel` the first turn is the gold call half of the time; on
    the other tasks it never is (so those groups are all-fail: zero variance). Everything after — the
    episode, the grader, TRL's update — is real."""

    _calls = 0

    def _generate_batch(self, batch, generators=None):
        eos = self.tok.eos_token_id
        call = self.codec.encode(render_tool_call("cancel_order", {"order_id": 1})) + [eos]
        done = self.codec.encode("Done.") + [eos]
        out = []
        for ids in batch:
            self._calls += 1
            text = self.tok.decode(ids)
            first_turn = "<tool_response>" not in text and "Done." not in text
            choose_call = first_turn and "Please cancel order 1" in text and self._calls % 2 == 0
            seq = call if choose_call else done
            out.append((seq, [-0.5] * len(seq), True))
        return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    domain = Domain(SHOP)
    save_tiny(d, domain_corpus(domain, repeat=3), vocab_size=400, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    (d / PROMPT_FLAGS).write_text(json.dumps({"tools_in_prompt": False, "system_in_prompt": False}))
    return d


@pytest.mark.slow
def test_two_grpo_steps_update_the_policy_filter_refill_and_reward_with_verdicts(tiny_dir, tmp_path):
    domain = Domain(SHOP)
    pairs = [(t, domain) for t in domain.tasks]
    backend = SqliteBackend()
    out = tmp_path / "grpo"
    cfg = TrainConfig(
        group_size=4, tasks_per_step=2, steps=2, lr=5e-2, save_steps=1, max_new_tokens=24, max_context=256, refill_ratio=1.0, max_turns=6
    )
    from transformers import AutoModelForCausalLM

    before = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict().items()}
    final = train_trl(str(tiny_dir), pairs, backend, out, cfg, policy_cls=CoinFlipPolicy)
    after = AutoModelForCausalLM.from_pretrained(final).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "GRPO changed no parameter"

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["kind"] == "rollouts"]
    assert len(steps) == 2
    assert all(r["groups"] == 2 for r in steps)
    # groups of tasks other than shop-cancel are all-fail: each step saw some, and refilled within the bound
    assert sum(r["all_fail"] for r in steps) >= 1
    assert sum(r["refill_groups"] for r in steps) >= 1 and all(r["refill_groups"] <= 2 for r in steps)
    assert any(r["kind"] == "trainer" and "loss" in r for r in rows)

    # every training reward equals the evaluator's verdict of the same trajectory, replayed on a fresh sandbox
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert {r["reward"] for r in rollouts} == {0.0, 1.0}
    for r in rollouts:
        task = domain.task(r["task_id"])
        with backend.open(backend.prepare(domain, task.patch)) as sb:
            replay(sb, [{"tool": c["name"], "args": c["arguments"]} for c in r["tool_calls"]])
            assert float(grader_for(backend).grade(task, sb).reward) == r["reward"]
    assert (out / "checkpoint-1" / PROMPT_FLAGS).exists()  # checkpoints load like the base


@pytest.mark.slow
def test_online_sampling_chooses_the_steps_tasks_and_writes_its_state_with_the_checkpoints(tiny_dir, tmp_path):
    domain = Domain(SHOP)
    pairs = [(t, domain) for t in domain.tasks]
    out = tmp_path / "grpo"
    shape = {"group_size": 4, "tasks_per_step": 2, "steps": 2, "lr": 5e-2, "save_steps": 1, "max_new_tokens": 24, "max_context": 256}
    cfg = TrainConfig(**shape, max_turns=6, sampling="online", forget=1.0, explore=0.0)
    train_trl(str(tiny_dir), pairs, SqliteBackend(), out, cfg, policy_cls=CoinFlipPolicy, probe={"shop-multi": (4, 0)})
    steps = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "rollouts"]
    assert len(steps) == 2 and all({"online_retired", "online_mean_signal", "wasted_all_fail"} <= set(r) for r in steps)
    assert all(r["rollouts"] == 4 * (r["groups"] + r["refill_groups"]) for r in steps)
    # λ = 1: the posteriors hold the probe's 4 runs plus every rollout the steps ran, dropped and refilled groups included
    state = json.loads((out / "online_sampler.json").read_text())
    assert state["step"] == 2 and (out / "checkpoint-1" / "online_sampler.json").exists()
    assert sum(t["a"] + t["b"] - 1 for t in state["tasks"].values()) == pytest.approx(4 + sum(r["rollouts"] for r in steps))
    # what TRL trained on is grouped as it ran: consecutive blocks of G rollouts of one task, named by the task it was
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 4
    assert all(len({r["task_id"] for r in rollouts[i : i + 4]}) == 1 for i in range(0, len(rollouts), 4))


def test_a_saved_checkpoint_runs_as_hf_agent(tiny_dir, tmp_path):
    domain = Domain(SHOP)
    summary = run(
        [(domain.task("shop-cancel"), domain)],
        RunConfig(agent=f"hf:{tiny_dir}", k=2, sampling={"max_tokens": 8}, limits=EpisodeLimits(max_turns=2)),
        SqliteBackend(),
        tmp_path / "r.jsonl",
    )
    assert summary.ran == 2 and summary.system_errors == 0
    from groundstate.records import read_records

    recs = read_records(tmp_path / "r.jsonl")
    assert all(r.finish_reason in ("max_turns", "user_done", "agent_done") and r.usage.output_tokens > 0 for r in recs)


def test_train_and_an_hf_run_print_their_own_lines_not_the_libraries(tiny_dir, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}  # the command as a user runs it: its own process, no terminal
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "PYTHONWARNINGS"):
        env.pop(name, None)
    commands = {
        "train": ["train", "--model", str(tiny_dir), "--train", str(SHOP), "--steps", "1", "--group-size", "2", "--tasks-per-step", "2"]
        + ["--max-new-tokens", "8", "--out", str(tmp_path / "t")],
        "run": ["run", "--agent", f"hf:{tiny_dir}", "--tasks", str(SHOP), "--k", "1", "--max-turns", "2", "--max-tokens", "8"]
        + ["--out", str(tmp_path / "r.jsonl")],
    }
    for name, args in commands.items():
        r = subprocess.run([sys.executable, "-m", "groundstate.cli", *args], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, (name, r.stderr[-2000:])
        lines = (r.stdout + r.stderr).splitlines()
        assert not [line for line in lines if "it/s]" in line or "s/it]" in line], (name, r.stderr)  # loading/saving bars
        assert not [line for line in lines if "Warning" in line or "warnings.warn" in line], (name, r.stderr)
        assert any(" written to " in line for line in lines), (name, r.stderr)


@pytest.mark.slow
def test_the_curve_is_written_per_step_with_validation_at_checkpoints_and_the_ledger_adds_up(tiny_dir, tmp_path):
    from groundstate.records import read_records
    from groundstate.train.ledger import build_ledger, read_curve
    from groundstate.train.validation import CheckpointValidator

    domain = Domain(SHOP)
    pairs = [(t, domain) for t in domain.tasks]
    backend = SqliteBackend()
    out = tmp_path / "grpo"
    cfg = TrainConfig(group_size=4, tasks_per_step=2, steps=2, lr=5e-2, save_steps=1, max_new_tokens=24, max_context=256, max_turns=6)
    validate = CheckpointValidator(pairs[:2], backend, out, k=2, sampling={"max_tokens": 8}, limits=EpisodeLimits(max_turns=2))
    train_trl(str(tiny_dir), pairs, backend, out, cfg, policy_cls=CoinFlipPolicy, validate=validate)

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "rollouts"] == [r["step"] for r in rows if r["kind"] == "step"] == [1, 2]
    assert all(r["seconds"] > 0 for r in rows if r["kind"] == "step")
    curve = read_curve(out)
    assert [s.step for s in curve.steps] == [1, 2]
    assert all(s.input_tokens > 0 and s.output_tokens > 0 and 0 <= s.informative_share <= 1 for s in curve.steps)
    # validation of the base (step 0) and of each checkpoint, through the evaluator, each into its own results file
    assert [v.step for v in curve.validation] == [0, 1, 2]
    for v in curve.validation:
        recs = read_records(v.file)
        assert len(recs) == 2 * 2 and v.tasks == 2 and v.k == 2 and v.ci_95 is not None and v.ci_95[0] <= v.pass_at_1 <= v.ci_95[1]

    # the ledger: the training rows' rollouts, what TRL trained on among them, and the validation files as evaluation
    ledger = build_ledger(train_dir=out)
    steps = [r for r in rows if r["kind"] == "rollouts"]
    assert ledger.training.rollouts == sum(r["rollouts"] for r in steps) == sum(4 * (r["groups"] + r["refill_groups"]) for r in steps)
    trained_on = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(trained_on) == 2 * 2 * 4 and ledger.training.input_tokens >= sum(r["input_tokens"] for r in trained_on) > 0
    assert ledger.training.wasted["all_fail"].rollouts == sum(r["wasted_all_fail"] for r in steps) > 0
    assert ledger.evaluation.rollouts == 3 * 2 * 2 and len(ledger.evaluation.sources) == 3
