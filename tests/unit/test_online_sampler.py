"""Online policy-relative difficulty (#34 item 1): each pool task's Beta posterior of the current policy's pass rate,
its expected signal, and the sampler that draws a step's tasks by it — followed on a simulated policy whose pass rates
drift, where it keeps a larger informative share than uniform draws."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from groundstate.stats.difficulty import posterior
from groundstate.train.online import OnlineConfig, OnlineSampler, expected_signal, probe_counts

IDS = [f"t{i}" for i in range(10)]


def test_the_probe_starts_a_posterior_as_selection_does_and_an_unprobed_task_starts_from_jeffreys():
    s = OnlineSampler(IDS, 8, probe={"t0": (4, 3), "t1": (6, 0), "elsewhere": (4, 4)})
    assert s.posterior("t0") == posterior(4, 3) == (3.5, 1.5)
    assert s.posterior("t1") == posterior(6, 0)
    assert s.posterior("t2") == (0.5, 0.5)
    assert "elsewhere" not in s.index  # a probed task outside the pool is not drawn
    assert not s.retired.any() and not s.too_hard.any()  # a probe of a few runs settles nothing
    with pytest.raises(ValueError, match="need 0 <= c <= n"):
        OnlineSampler(IDS, 8, probe={"t0": (2, 3)})


def test_each_clean_rollout_counts_and_a_system_error_is_not_a_zero():
    s = OnlineSampler(IDS, 4, config=OnlineConfig(forget=1.0))
    s.open_step()
    s.observe("t0", [1.0, 0.0, None, 1.0])
    assert s.posterior("t0") == (2.5, 1.5)
    s.observe("t0", [None, None, None, None])  # a group of system errors: no evidence either way
    assert s.posterior("t0") == (2.5, 1.5)
    s.observe("t0", [0.0, 0.0, 0.0, 0.0])
    assert s.posterior("t0") == (2.5, 5.5)  # λ = 1 never forgets: the counts add up
    assert s.to_json()["tasks"]["t0"]["last_seen"] == 1 and s.to_json()["tasks"]["t1"]["last_seen"] is None


@pytest.mark.filterwarnings("ignore:with groups of 4 and forget 0.5")  # said, and meant here: small evidence
def test_forgetting_shrinks_the_evidence_above_the_prior_at_each_update():
    s = OnlineSampler(IDS, 4, probe={"t0": (4, 4)}, config=OnlineConfig(forget=0.5))
    s.observe("t0", [0.0] * 4)
    assert s.posterior("t0") == (0.5 + 0.5 * 4, 0.5 + 4)
    s.observe("t0", [0.0] * 4)
    assert s.posterior("t0") == (0.5 + 0.25 * 4, 0.5 + 0.5 * 4 + 4)
    # a policy that stopped passing: the forgetful posterior says so sooner than the one that never forgets
    means = {}
    for lam in (0.5, 1.0):
        t = OnlineSampler(IDS, 4, probe={"t0": (20, 20)}, config=OnlineConfig(forget=lam))
        for _ in range(3):
            t.observe("t0", [0.0] * 4)
        a, b = t.posterior("t0")
        means[lam] = a / (a + b)
    assert means[0.5] < 0.3 < 0.5 < means[1.0]


@pytest.mark.parametrize("a, b", [(0.5, 0.5), (3.5, 1.5), (1.0, 1.0), (12.5, 0.5), (2.0, 7.0)])
@pytest.mark.parametrize("G", [2, 3, 4, 8])
def test_expected_signal_is_exact(a, b, G):
    moment = lambda x, y: math.prod((x + k) / (x + y + k) for k in range(G))  # E[p^G] under Beta(x, y)  # noqa: E731
    assert float(expected_signal(a, b, G)) == pytest.approx(1 - moment(a, b) - moment(b, a), abs=1e-12)


def test_expected_signal_agrees_with_monte_carlo_and_is_highest_for_an_uncertain_even_task():
    rng = np.random.default_rng(0)
    passes = rng.binomial(4, rng.beta(3.5, 1.5, 400_000))  # groups of 4 of tasks drawn from the posterior
    mc = np.mean((passes > 0) & (passes < 4))
    assert float(expected_signal(3.5, 1.5, 4)) == pytest.approx(mc, abs=0.004)
    G = 8
    assert float(expected_signal(4.5, 4.5, G)) > float(expected_signal(0.5, 0.5, G)) > float(expected_signal(12.5, 0.5, G))
    assert float(expected_signal(0.5, 0.5, G)) == pytest.approx(1 - 2 * math.prod((0.5 + k) / (1 + k) for k in range(G)))


def _play(s: OnlineSampler, steps: int, n: int, outcome) -> list[list[str]]:
    drawn = []
    for _ in range(steps):
        tasks = s.next_tasks(n)
        drawn.append(tasks)
        for t in tasks:
            s.observe(t, outcome(t))
    return drawn


def test_the_draw_is_deterministic_for_a_seed_and_distinct_within_a_step():
    outcome = lambda t: [1.0, 0.0, 1.0, 1.0] if int(t[1:]) % 3 else [0.0] * 4  # noqa: E731
    one = _play(OnlineSampler(IDS, 4, seed=7), 30, 4, outcome)
    assert one == _play(OnlineSampler(IDS, 4, seed=7), 30, 4, outcome)
    assert one != _play(OnlineSampler(IDS, 4, seed=8), 30, 4, outcome)
    assert all(len(set(step)) == 4 for step in one)
    # a refill draw leaves out the step's tasks while the pool has others, and repeats only when it must
    s = OnlineSampler(IDS, 4, seed=1)
    first = s.next_tasks(6)
    more = s.draw(4, exclude=first)
    assert len(more) == 4 and not set(more) & set(first)
    assert len(s.draw(12)) == 12


def test_exploration_draws_a_share_epsilon_uniformly_from_the_whole_pool():
    ids = [f"t{i}" for i in range(100)]
    mastered = {t: (40, 40) for t in ids[10:]}  # 90 retired tasks: only exploration ever draws them
    for eps, lo, hi in ((0.0, 0.0, 0.0), (0.2, 0.15, 0.23)):
        s = OnlineSampler(ids, 8, probe=mastered, config=OnlineConfig(explore=eps), seed=3)
        assert s.summary()["online_retired"] == 90
        draws = [t for _ in range(400) for t in s.next_tasks(5)]
        share = sum(t in mastered for t in draws) / len(draws)
        assert lo <= share <= hi, (eps, share)  # ε of the slots, 90/95 of them landing on a retired task


def test_a_mastered_task_retires_and_comes_back_when_it_fails():
    s = OnlineSampler(IDS, 8, config=OnlineConfig(explore=0.0), seed=0)
    while not s.retired[s.index["t0"]]:
        s.observe("t0", [1.0] * 8)
    assert s.to_json()["tasks"]["t0"]["retired"] and s.summary()["online_retired"] == 1
    assert all("t0" not in step for step in _play(s, 20, 9, lambda t: [1.0, 0.0] * 4 if t != "t0" else [1.0] * 8))
    s.observe("t0", [0.0] * 8)  # an exploration draw finds the policy failing it again
    assert not s.retired[s.index["t0"]]


def test_a_too_hard_task_rests_and_is_revisited_on_schedule():
    s = OnlineSampler(IDS, 8, config=OnlineConfig(explore=0.0, revisit=5), seed=0)
    s.open_step()
    while not s.too_hard[s.index["t0"]]:
        s.observe("t0", [0.0] * 8)
    rest = s.step
    seen = []
    for _ in range(12):
        tasks = s.next_tasks(4)
        seen.append(s.step if "t0" in tasks else None)
        if "t0" in tasks:
            assert tasks[0] == "t0"  # a due revisit takes the step's first slot
        for t in tasks:
            s.observe(t, [0.0] * 8 if t == "t0" else [1.0, 0.0] * 4)
    assert [x for x in seen if x] == [rest + 5, rest + 10]  # never dropped for good, never drawn while it rests
    # once the policy starts passing it, it leaves the resting set and is drawn by its signal like any other
    s.observe("t0", [1.0, 0.0] * 4)
    s.observe("t0", [1.0, 0.0] * 4)
    assert not s.too_hard[s.index["t0"]]


def test_the_state_is_json_and_a_sampler_resumes_from_it(tmp_path):
    outcome = lambda t: [1.0, 0.0, 1.0, 1.0] if int(t[1:]) % 2 else [0.0] * 4  # noqa: E731
    s = OnlineSampler(IDS, 4, probe={"t3": (4, 4)}, config=OnlineConfig(forget=0.7, explore=0.1), seed=5)
    _play(s, 10, 3, outcome)
    s.save(tmp_path / "state.json")
    state = json.loads((tmp_path / "state.json").read_text())
    assert set(state["tasks"]["t3"]) == {"a", "b", "last_seen", "retired", "too_hard"}
    assert state["step"] == 10 and state["config"]["forget"] == 0.7
    resumed = OnlineSampler.from_json(state)
    assert resumed.to_json() == s.to_json()
    assert _play(resumed, 5, 3, outcome) == _play(s, 5, 3, outcome)
    resumed = OnlineSampler.from_json(state)
    # another pool: a new task starts from Jeffreys, a task no longer in the pool is left out
    other = OnlineSampler.from_json(state, IDS[1:] + ["new"])
    assert other.posterior("new") == (0.5, 0.5) and "t0" not in other.index and other.posterior("t3") == resumed.posterior("t3")


def test_the_probe_counts_come_from_a_selections_rows(tmp_path):
    rows = [{"task_id": "a", "clean_runs": 4, "successes": 1, "band": "hard"}, {"task_id": "b", "clean_runs": 3, "successes": 3}]
    (tmp_path / "selection.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert probe_counts(tmp_path / "selection.jsonl") == {"a": (4, 1), "b": (3, 3)}


def _informative_share(sampler: OnlineSampler | None, seed: int, steps: int = 60, n: int = 8, G: int = 8) -> tuple[float, np.ndarray]:
    """A policy whose pass rates rise: task i passes with p = σ(θ_i + 0.08 t) at step t, θ from -3 to 2 over 40 tasks,
    so tasks start too hard, become mixed and end mastered. Returns the share of groups of G that were mixed, and the
    final pass rates. `sampler` None: n tasks uniformly without replacement each step."""
    rng = np.random.default_rng(seed)
    theta = np.linspace(-3, 2, 40)
    mixed = 0
    for t in range(steps):
        p = 1 / (1 + np.exp(-(theta + 0.08 * t)))
        tasks = sampler.next_tasks(n) if sampler else [f"t{i}" for i in rng.choice(len(theta), n, replace=False)]
        for task in tasks:
            passes = rng.binomial(1, p[int(task[1:])], G)
            if sampler:
                sampler.observe(task, passes.tolist())
            mixed += 0 < passes.sum() < G
    return mixed / (steps * n), p


def test_on_a_drifting_policy_the_sampler_keeps_a_larger_informative_share_than_uniform_draws():
    ids = [f"t{i}" for i in range(40)]
    online, uniform = [], []
    for seed in range(3):
        s = OnlineSampler(ids, 8, seed=seed)
        share, p = _informative_share(s, seed)
        online.append(share)
        uniform.append(_informative_share(None, seed)[0])
        assert share > uniform[-1]
        retired = [i for i, t in enumerate(ids) if s.retired[s.index[t]]]
        assert retired and all(p[i] > 0.8 for i in retired)  # what it retired, the policy has outgrown
    assert np.mean(online) >= np.mean(uniform) + 0.06, (online, uniform)


# -- hostile and careless input (#34 review) -----------------------------------------------------------------------


def test_a_group_of_system_errors_forgets_nothing_and_is_not_a_visit():
    """An outage is no evidence: a mastered task's posterior must not decay toward the prior through groups that were
    all system errors (which would un-retire it), nor count as the visit that ends a rest."""
    s = OnlineSampler(IDS, 8, probe={"t0": (40, 40)})
    before = s.posterior("t0")
    assert s.retired[s.index["t0"]]
    for _ in range(5):
        s.open_step()
        s.observe("t0", [None] * 8)
    assert s.posterior("t0") == before and s.retired[s.index["t0"]] and s.to_json()["tasks"]["t0"]["last_seen"] is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda st: st["tasks"]["t0"].update(a=float("nan")), "tasks.t0.a"),
        (lambda st: st["tasks"]["t0"].update(b=-1.0), "tasks.t0.b"),
        (lambda st: st["tasks"]["t0"].update(last_seen="x"), "tasks.t0.last_seen"),
        (lambda st: st["tasks"]["t0"].update(last_seen=99), "tasks.t0.last_seen"),
        (lambda st: st["tasks"]["t0"].pop("b"), "tasks.t0.b"),
        (lambda st: st["config"].update(sharpnes=2.0), "config"),
        (lambda st: st["config"].update(forget=2.0), "config"),
        (lambda st: st.update(group_size=1), "group_size"),
        (lambda st: st.update(step=-1), "step"),
        (lambda st: st.update(version=2), "version"),
        (lambda st: st.pop("tasks"), "tasks"),
    ],
)
def test_a_damaged_state_is_refused_naming_the_file_and_field(tmp_path, change, field):
    from groundstate.train.online import SamplerStateError

    s = OnlineSampler(IDS, 8)
    s.next_tasks(3)
    s.observe("t0", [1.0] * 8)
    state = s.to_json()
    change(state)
    path = tmp_path / "online_sampler.json"
    path.write_text(json.dumps(state))
    with pytest.raises(SamplerStateError, match=rf"{path}: {field}"):
        OnlineSampler.load(path, IDS)


def test_a_torn_or_foreign_state_file_is_refused_naming_it(tmp_path):
    from groundstate.train.online import SamplerStateError

    path = tmp_path / "online_sampler.json"
    s = OnlineSampler(IDS, 8)
    s.save(path)
    assert OnlineSampler.load(path, IDS).to_json() == s.to_json()
    path.write_text(path.read_text()[:40])  # a crash mid-write of an older version's plain write
    with pytest.raises(SamplerStateError, match=f"{path}: cannot read"):
        OnlineSampler.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(SamplerStateError, match="expected a JSON object"):
        OnlineSampler.load(path)
    assert [p.name for p in tmp_path.iterdir()] == ["online_sampler.json"]  # save leaves no temporary file behind


def test_the_engine_resumes_the_sampler_from_the_checkpoint_trl_resumes_from(tmp_path):
    """TRL resumes from the latest checkpoint-N: the sampler must come from that one, or the run is refused — never
    from an older checkpoint's state while the model resumes from a newer one, and never of another group size."""
    from groundstate.train.online import SamplerStateError
    from groundstate.train.trl_engine import ONLINE_STATE, TrainConfig, online_sampler

    pairs = [(type("T", (), {"id": t})(), None) for t in IDS]
    cfg = TrainConfig(group_size=8, sampling="online")
    fresh = online_sampler(cfg, pairs, tmp_path, {"t0": (4, 4)})
    assert fresh is not None and fresh.posterior("t0") == (4.5, 0.5)
    (tmp_path / "checkpoint-2").mkdir()
    fresh.step = 2
    fresh.save(tmp_path / "checkpoint-2" / ONLINE_STATE)
    assert online_sampler(cfg, pairs, tmp_path, None).to_json() == fresh.to_json()
    (tmp_path / "checkpoint-10").mkdir()  # newer, and without a state
    with pytest.raises(SamplerStateError, match=r"checkpoint-10/online_sampler.json: missing"):
        online_sampler(cfg, pairs, tmp_path, None)
    fresh.save(tmp_path / "checkpoint-10" / ONLINE_STATE)
    with pytest.raises(SamplerStateError, match="group_size: the state is of groups of 8, this run's are of 4"):
        online_sampler(TrainConfig(group_size=4, sampling="online"), pairs, tmp_path, None)


@pytest.mark.parametrize(
    "line",
    ['{"task_id": "t0", "clean_runs": 2, "successes": 3}', '{"task_id": "t0", "clean_runs": "4", "successes": 1}', "[1]", "{not json"],
)
def test_bad_probe_rows_are_refused_naming_file_and_line(tmp_path, line):
    path = tmp_path / "selection.jsonl"
    path.write_text('{"task_id": "t1", "clean_runs": 4, "successes": 1}\n' + line + "\n")
    with pytest.raises(ValueError, match=rf"{path}:2: "):
        probe_counts(path)


def test_a_setting_under_which_training_can_never_retire_a_task_is_said():
    with pytest.warns(UserWarning, match="too few to retire"):
        OnlineSampler(IDS, 2)  # G / (1 - λ) = 10 rollouts at most: P(p > 0.9) stays below 0.9
