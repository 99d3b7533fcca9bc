"""The online sampler as a dataset sampler for a trainer of one's own (#34 item 1, `train/curriculum.py`): the layout a
GRPO trainer expects, groups closed by their G-th reward, and TRL's own `GRPOTrainer` drawing its batches from it while
`environment_factory`'s episodes teach it which tasks are solved."""

import math

import pytest

from groundstate.integrations.gymnasium import TextEnv
from groundstate.train.curriculum import SignalSampler
from groundstate.train.online import OnlineConfig, OnlineSampler
from groundstate.types import Verdict, system_error
from groundstate.worlds.domain import load_domain

IDS = [f"t{i}" for i in range(12)]
pytestmark = pytest.mark.filterwarnings("ignore:with groups of 2 and forget")  # said, and meant: small groups, quick tests


def test_a_repeated_block_is_each_steps_draw_as_trls_repeat_count_wants_it():
    s = SignalSampler(IDS, group_size=2, tasks_per_step=3, steps=2, seed=4, repeat=3)
    got = list(s)
    assert len(got) == len(s) == 2 * 3 * 2 * 3 and s.online.step == 2  # two draws, each block thrice
    for step in range(2):
        blocks = [got[step * 18 + i * 6 : step * 18 + (i + 1) * 6] for i in range(3)]
        assert blocks[0] == blocks[1] == blocks[2]


def test_each_step_yields_its_tasks_rows_g_times_in_a_row_as_the_online_sampler_draws_them():
    s = SignalSampler(IDS, group_size=4, tasks_per_step=3, steps=5, seed=7)
    twin = OnlineSampler(IDS, 4, seed=7)
    got = list(s)
    assert len(got) == len(s) == 5 * 3 * 4
    for step in range(5):
        block = got[step * 12 : (step + 1) * 12]
        assert [block[i] for i in range(0, 12, 4)] == [IDS.index(t) for t in twin.next_tasks(3)]
        assert all(len(set(block[i : i + 4])) == 1 for i in range(0, 12, 4))  # G of a task in a row


def test_the_gth_reward_closes_a_group_and_no_verdict_is_never_a_zero():
    s = SignalSampler(IDS, group_size=4, tasks_per_step=2, steps=1, config=OnlineConfig(forget=1.0))
    for r in (1.0, 0.0, math.nan):
        s.record("t0", r)
    assert s.online.posterior("t0") == (0.5, 0.5) and s.pending() == {"t0": 3}  # three rewards are not a group
    s.record("t0", None)
    assert s.online.posterior("t0") == (1.5, 1.5) and s.pending() == {} and s.recorded == 1
    task = load_domain("kiosk").tasks[0]
    s2 = SignalSampler([task.id], group_size=2, tasks_per_step=1, steps=1, config=OnlineConfig(forget=1.0))
    s2.on_episode(task, None, system_error("the sandbox died", "infrastructure"))
    s2.on_episode(task, None, Verdict(reward=1))
    assert s2.online.posterior(task.id) == (1.5, 0.5)  # the system error is no evidence either way
    with pytest.raises(KeyError, match="not one this sampler draws"):
        s.record("elsewhere", 1.0)
    for bad in (2, -0.5, "1", True):
        with pytest.raises(ValueError, match="a reward is 1, 0, something between or None"):
            s.record("t1", bad)


def test_a_gymnasium_loop_of_ones_own_steers_to_the_tasks_whose_groups_are_mixed():
    """Gymnasium's `TextEnv` played by scripted decisions: tasks where the gold is sent half of the time give mixed
    groups, tasks always solved or never solved give none; after a few steps the sampler draws the mixed ones most."""
    kiosk = load_domain("kiosk")
    pairs = [(t, kiosk) for t in kiosk.tasks if t.id.startswith("kiosk-cancel-")][:9]
    env = TextEnv(pairs)
    kind = {t.id: ("mixed", "solved", "never")[i % 3] for i, (t, _) in enumerate(pairs)}
    s = SignalSampler([t.id for t, _ in pairs], group_size=4, tasks_per_step=3, steps=6, seed=1, config=OnlineConfig(explore=0.0, forget=1.0))
    drawn = []
    for step in range(6):
        for task_id in s.next_step():
            drawn.append((step, task_id))
            task = next(t for t, _ in pairs if t.id == task_id)
            for i in range(4):
                obs, info = env.reset(options={"task_id": task_id})
                solve = kind[task_id] == "solved" or (kind[task_id] == "mixed" and i % 2 == 0)
                action = "".join(_call(c) for c in task.gold) if solve else "Done."
                reward = _play(env, action)
                s.record(task_id, reward)
    env.close()
    late = [kind[t] for step, t in drawn if step >= 3]
    assert late.count("mixed") > len(late) / 2, late
    a, b = s.online.posterior(next(t for t in kind if kind[t] == "mixed" and s.online.last_seen[s.online.index[t]] >= 0))
    assert 0.2 < a / (a + b) < 0.8


def _call(c):
    from groundstate.agents.toolcall_format import render_tool_call

    return render_tool_call(c.tool, c.args)


def _play(env, action):
    obs, reward, terminated, truncated, info = env.step(action)
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step("Done.")
    return reward


@pytest.mark.slow
def test_trls_grpo_trainer_draws_its_batches_from_the_sampler_and_its_episodes_teach_it(tmp_path, monkeypatch):
    """TRL's own `GRPOTrainer` with `environment_factory` and this sampler in place of its `RepeatSampler`: every batch
    is the tasks the sampler drew, G rollouts of each, and every group TRL played reached the posterior — the state
    equals a fresh online sampler told the same groups."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList
    from trl import GRPOConfig, GRPOTrainer

    from groundstate.integrations.trl import environment_factory, trl_dataset
    from groundstate.train.tiny import IM_END, domain_corpus, save_tiny

    kiosk = load_domain("kiosk")
    pairs = [(t, kiosk) for t in kiosk.tasks if len(t.gold) == 1 and kiosk.tools[t.gold[0].tool].write][:6]
    solved = {t.id for t, _ in pairs[::2]}  # the forced policy sends the gold on these tasks, "Done." on the others
    model_dir = save_tiny(tmp_path / "tiny", domain_corpus(kiosk, repeat=1), vocab_size=400, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    tok = AutoTokenizer.from_pretrained(model_dir)
    dataset = trl_dataset(pairs)
    drawn = []

    class Recording(SignalSampler):
        def next_step(self):
            drawn.extend(super().next_step())
            return drawn[-2:]

    sampler = Recording(dataset["task_id"], group_size=2, tasks_per_step=2, steps=3, seed=3, config=OnlineConfig(explore=0.0, forget=1.0))
    episodes = []

    def on_episode(task, traj, verdict):
        episodes.append((task.id, float(verdict.reward)))
        sampler.on_episode(task, traj, verdict)

    class Forced(LogitsProcessor):
        def __init__(self):
            self.start = self.rows = None
            self.im_end = tok.convert_tokens_to_ids(IM_END)

        def __call__(self, input_ids, scores):
            if self.start is None:
                self.start = input_ids.shape[1]
                self.rows = [self.plan(tok.decode(ids)) for ids in input_ids.tolist()]
            k = input_ids.shape[1] - self.start
            forced = torch.full_like(scores, -math.inf)
            for row, plan in enumerate(self.rows):
                forced[row, plan[k] if k < len(plan) else self.im_end] = 0.0
            return forced

        def plan(self, text):
            from groundstate.agents.toolcall_format import render_tool_call

            task = next(t for t, _ in pairs if t.instruction in text)
            done = "<tool_response>" in text or task.id not in solved
            reply = "Done." if done else render_tool_call(task.gold[0].tool, task.gold[0].args)
            return tok.encode(reply, add_special_tokens=False) + [self.im_end]

    class Trainer(GRPOTrainer):
        def _get_train_sampler(self, dataset=None):
            return sampler

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=3,
        max_completion_length=512,
        max_tool_calling_iterations=2,
        learning_rate=1e-2,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    trainer = Trainer(
        model=model, args=args, train_dataset=dataset, processing_class=tok, environment_factory=environment_factory(pairs, on_episode=on_episode)
    )
    generate = trainer.model.generate
    trainer.model.generate = lambda *a, **kw: generate(*a, logits_processor=LogitsProcessorList([Forced()]), **kw)
    trainer.train()

    assert len(episodes) == 3 * 2 * 2 and sampler.recorded == 6 and sampler.pending() == {}
    assert all(r == (1.0 if t in solved else 0.0) for t, r in episodes)
    twin = OnlineSampler([t.id for t, _ in pairs], 2, seed=3, config=OnlineConfig(explore=0.0, forget=1.0))
    for i in range(0, len(episodes), 2):
        twin.observe(episodes[i][0], [episodes[i][1], episodes[i + 1][1]])
    for t, _ in pairs:
        assert sampler.online.posterior(t.id) == twin.posterior(t.id)
    # the rollouts TRL played were the sampler's draws, in its order, G of each
    assert [t for t, _ in episodes[::2]] == drawn and [t for t, _ in episodes[1::2]] == drawn


def test_one_draw_at_a_time_makes_steps_of_distinct_tasks_and_skips_tasks_whose_group_is_open():
    """verl fetches one prompt at a time: `draw` gives the online sampler's tasks one by one, a step every
    `tasks_per_step` draws, never a task of the current step or one whose group has not closed while others are free."""
    s = SignalSampler(IDS, group_size=2, tasks_per_step=3, steps=1, seed=5)
    first = [s.draw() for _ in range(3)]
    assert len(set(first)) == 3 and s.online.step == 1
    nxt = s.draw()  # a new step, and the three groups drawn are all still open
    assert s.online.step == 2 and nxt not in first
    for t in first:
        s.record(t, 1.0)
        s.record(t, 0.0)
    assert s.pending() == {} and s.recorded == 3
    tiny = SignalSampler(["a", "b"], group_size=2, tasks_per_step=1, steps=1)
    a = tiny.draw()
    b = tiny.draw()
    assert b != a  # a's group, drawn the step before, is open: the other task
    tiny.draw()  # both open: the pool has no other, so one repeats
    assert sum(len(v) for v in tiny._open.values()) == 3


def test_a_group_whose_reward_never_comes_back_holds_its_task_back_for_one_step_only():
    """verl loses a rollout's reward when the episode fails before it is graded: the group never closes, and its task
    must not be kept out of every later draw."""
    s = SignalSampler(IDS[:3], group_size=2, tasks_per_step=1, steps=1, config=OnlineConfig(explore=0.0), seed=1)
    lost = s.draw()
    s.record(lost, 1.0)  # one reward of two: the other never comes
    drawn = []
    for _ in range(30):
        t = s.draw()
        drawn.append(t)
        s.record(t, 1.0)
        s.record(t, 0.0)
    assert lost in drawn[1:]  # blocked for the step after, drawn again later


def test_a_resumed_sampler_draws_what_the_original_would_have():
    a = SignalSampler(IDS, group_size=2, tasks_per_step=3, steps=4, seed=2)
    for t in a.next_step():
        a.record(t, 1.0)
        a.record(t, 0.0)
    b = SignalSampler.resume(a.state(), IDS, tasks_per_step=3, steps=3)
    assert [b.next_step() for _ in range(3)] == [a.next_step() for _ in range(3)]
    from groundstate.train.online import SamplerStateError

    with pytest.raises(SamplerStateError, match="group_size"):
        SignalSampler.resume({**a.state(), "group_size": 1}, IDS, 3, 3)
