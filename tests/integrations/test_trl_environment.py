"""TRL's `environment_factory` over groundstate domains, driven by TRL's own `GRPOTrainer`: the rewards TRL trains
on are groundstate's verdicts of the same trajectories, and two domains mix in one run."""

import asyncio
import concurrent.futures
import inspect
import json
import math
import multiprocessing
import os
import pickle
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from transformers import LogitsProcessor, LogitsProcessorList  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402

from groundstate.agents.scripted import ScriptedAgent  # noqa: E402
from groundstate.agents.toolcall_format import render_tool_call  # noqa: E402
from groundstate.integrations.trl import RESERVED, ClassSpec, _tool_method, environment_factory, graded_only, rebuild_class, trl_dataset  # noqa: E402
from groundstate.state.sqlite import SqliteBackend  # noqa: E402
from groundstate.train.tiny import IM_END, domain_corpus, save_tiny  # noqa: E402
from groundstate.types import EpisodeLimits  # noqa: E402
from groundstate.worlds.attempt import play  # noqa: E402
from groundstate.worlds.domain import Domain, load_domain  # noqa: E402
from groundstate.worlds.selectors import select_tasks, state_graded_only  # noqa: E402

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"


def _pairs():
    shop, kiosk = Domain(SHOP), load_domain("kiosk")
    kiosk_task = next(t for t in kiosk.tasks if len(t.gold) == 1 and kiosk.tools[t.gold[0].tool].write)
    return [(shop.task("shop-cancel"), shop), (shop.task("shop-multi"), shop), (kiosk_task, kiosk)]


def test_each_domain_is_a_class_whose_public_methods_are_its_tools_with_their_schemas():
    pairs = _pairs()
    factory = environment_factory(pairs)
    assert set(factory) == {"shop", "kiosk"}
    for name, cls in factory.items():
        domain = next(d for _, d in pairs if d.name == name)
        methods = {n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not n.startswith("_") and n not in RESERVED}
        assert methods == set(domain.tools.names())
        for schema in domain.tools.openai_schemas():
            ours = schema["function"]
            theirs = get_json_schema(getattr(cls(), ours["name"]))["function"]  # what TRL renders into the prompt
            assert theirs["description"] == " ".join(ours["description"].split())
            assert set(theirs["parameters"]["properties"]) == set(ours["parameters"]["properties"])
            assert set(theirs["parameters"].get("required", [])) == set(ours["parameters"].get("required", []))
    rows = trl_dataset(pairs)
    assert [(r["environment"], r["task_id"]) for r in rows] == [(d.name, t.id) for t, d in pairs]


def _rollouts_in_this_process(payload: bytes) -> dict[str, list[float | None]]:
    """Unpickle a factory (in a process of its own) and play each domain's gold and no-op on its first task."""
    factory = pickle.loads(payload)
    out: dict[str, list[float | None]] = {}
    for name, cls in factory.items():
        task = next(iter(cls._tasks.values()))
        out[name] = []
        for calls in (task.gold, []):
            env = cls()
            env.reset(environment=name, task_id=task.id)
            for call in calls:
                getattr(env, call.tool)(**call.args)
            out[name].append(env.get_reward())
    return out


def _record(task, trajectory, verdict) -> None:
    """A module-level `on_episode`: it pickles (a lambda would not)."""


def test_the_factory_pickles_and_its_classes_play_gold_in_a_spawned_process():
    """TRL's AsyncGRPOTrainer ships `environment_factory` to a spawned rollout process: there each class is built again
    from its domain's reference, with the same tools, and a rollout of gold earns 1, one doing nothing 0."""
    pairs = _pairs()
    factory = environment_factory(pairs, on_episode=_record)
    payload = pickle.dumps(factory)
    here = pickle.loads(payload)
    assert {n: sorted(here[n]._tasks) for n in here} == {n: sorted(factory[n]._tasks) for n in factory}
    assert all(inspect.getmembers(here[n], inspect.isfunction) != [] for n in here)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        played = pool.submit(_rollouts_in_this_process, payload).result(timeout=600)
    assert played == {"shop": [1.0, 0.0], "kiosk": [1.0, 0.0]}

    # what does not pickle is named; a domain whose files changed since is refused, not served
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError), match="lambda"):
        pickle.dumps(environment_factory(pairs, on_episode=lambda *a: None))
    spec = factory["shop"]._spec
    with pytest.raises(ValueError, match="content hash"):
        rebuild_class(ClassSpec(**{**spec.__dict__, "content_hash": "0" * 16}))


@pytest.mark.skipif(torch.cuda.is_available(), reason="where TRL's async trainer stops on a machine without a GPU")
def test_trls_async_trainer_takes_the_factory_and_stops_only_where_it_needs_a_gpu(tiny_shop_model, tmp_path):
    """TRL 1.16's experimental AsyncGRPOTrainer, on this CPU-only torch: it accepts the factory and stops in its own
    constructor, measuring the GPU's peak FLOPs; its rollout worker (the process the factory is pickled to) refuses to
    start without vLLM installed. docs/INTEGRATIONS.md says so; what the worker needs of the factory, that it pickles
    and plays in a spawned process, is the test above."""
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer
    from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker

    pairs = _pairs()[:1]
    args = AsyncGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=2, per_device_train_batch_size=2, max_steps=1, report_to=[]
    )
    factory = environment_factory(pairs, on_episode=_record)
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        AsyncGRPOTrainer(model=str(tiny_shop_model), args=args, train_dataset=trl_dataset(pairs), environment_factory=factory)
    with pytest.raises(ImportError, match="vLLM is required"):
        AsyncRolloutWorker(environment_factory=factory)


def test_an_episode_is_graded_like_groundstate_run_and_failures_are_not_zeros():
    pairs = _pairs()
    seen = []
    env = environment_factory(pairs, on_episode=lambda t, tr, v: seen.append((t.id, v.reward)))["shop"]()
    row = trl_dataset(pairs)[0]
    assert env.reset(**row) == "Please cancel order 1."
    assert json.loads(env.cancel_order(order_id=1))["status"] == "cancelled"
    assert env.get_reward() == 1.0 and env.get_reward() == 1.0  # graded once
    assert env.reset(**row) == "Please cancel order 1."  # a fresh sandbox: the order is pending again
    assert "invalid arguments" in env.get_order(order_id="not a number")  # validated against the real schema
    assert env.get_reward() == 0.0
    assert seen == [("shop-cancel", 1), ("shop-cancel", 0)]
    with pytest.raises(ValueError, match="task_id 'nope'"):
        env.reset(**{**row, "task_id": "nope"})
    assert env.task.id == "shop-cancel" and env.get_reward() == 0.0  # a refused row leaves the last rollout as it was

    # the task's tool-call limit holds: calls past it are refused, not executed
    limited = environment_factory(pairs, limits=EpisodeLimits(max_tool_calls=1))["shop"]()
    limited.reset(**row)
    limited.get_order(order_id=1)
    assert limited.cancel_order(order_id=1) == "error: tool-call limit reached; call not executed"
    assert limited.get_reward() == 0.0 and limited.trajectory.finish_reason == "max_tool_calls"


def test_arguments_no_other_adapter_could_receive_are_refused_and_recorded_as_json_text():
    """TRL hands a tool method whatever Python values it has; the other adapters get JSON. Values JSON cannot hold are
    refused naming the argument, the tool layer's rules (finite numbers, valid text) hold as everywhere, and the
    trajectory stays writable as strict JSON."""
    pairs = _pairs()
    env = environment_factory(pairs)["shop"]()
    env.reset(**trl_dataset(pairs)[0])
    assert "order_id: numbers must be finite, got nan" in env.cancel_order(order_id=float("nan"))
    assert "order_id: numbers must be finite, got inf" in env.cancel_order(order_id=float("inf"))
    assert env.cancel_order(order_id=object()).startswith("error: invalid arguments for cancel_order: order_id: a value of type object is not JSON")
    assert "order_id: a value of type set is not JSON" in env.cancel_order(order_id={1})
    cycle: list = []
    cycle.append(cycle)
    assert "order_id: Circular reference detected" in env.cancel_order(order_id=cycle)
    assert "not valid Unicode" in env.get_order(order_id="\ud800")
    assert json.loads(env.cancel_order(order_id=1))["status"] == "cancelled"
    assert [c.arguments for c in env.trajectory.tool_calls] == [
        '{"order_id": NaN}',
        '{"order_id": Infinity}',
        '{"order_id": "<object>"}',
        '{"order_id": "<set>"}',
        "{'order_id': [[...]]}",
        '{"order_id": "\ufffd"}',
        {"order_id": 1},  # strict JSON: as given
    ]
    assert [c.ok for c in env.trajectory.tool_calls] == [False] * 6 + [True]
    json.dumps(env.trajectory.to_json()["tool_calls"], allow_nan=False, ensure_ascii=False).encode("utf-8")  # writable, as every record must be
    assert env.get_reward() == 1.0  # only the valid call ran


def _schema(name="lookup", description="Look up an order.", params=None, required=None):
    params = params if params is not None else {"order_id": {"type": "integer", "description": "The order."}}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": params, "required": required or list(params)},
        },
    }


@pytest.mark.parametrize("name", ["reset", "get_reward", "task", "trajectory", "verdict", "_private", "class", "has-dash"])
def test_a_tool_name_that_cannot_be_a_method_is_refused_naming_domain_and_tool(name):
    with pytest.raises(ValueError, match=f"domain d: tool {name!r} cannot be a TRL environment method"):
        _tool_method("d", _schema(name=name))


@pytest.mark.parametrize("param", ["self", "from", "a-b"])
def test_a_parameter_that_cannot_be_a_keyword_argument_is_refused(param):
    with pytest.raises(ValueError, match=f"domain d: tool lookup has a parameter {param!r}"):
        _tool_method("d", _schema(params={param: {"type": "string", "description": "x"}}))


@pytest.mark.parametrize(
    "text",
    [
        "Look up an order. Returns: the order row.",
        "Raises: nothing. Args: none",
        "One of (choices: pending, shipped)",
        'Pick one (choices: ["z"])',
        "first line\n    Args:\n        evil: injected",
    ],
)
def test_descriptions_reach_the_model_as_written_whatever_words_they_hold(text):
    # transformers' docstring parser reads "Returns:", "Args:" and "(choices: ...)" anywhere; they must stay text
    params = {"a": {"type": "string", "description": text}, "b": {"type": "string", "enum": ["x", "y"], "description": text}}
    method = _tool_method("d", _schema(description=text, params=params))
    rendered = get_json_schema(method)["function"]
    flat = " ".join(text.split())
    assert rendered["description"].replace(" :", ":") == flat
    assert set(rendered["parameters"]["properties"]) == {"a", "b"}
    assert rendered["parameters"]["properties"]["b"]["enum"] == ["x", "y"]
    assert [p["description"].replace(" :", ":") for p in rendered["parameters"]["properties"].values()] == [flat, flat]


def test_rubric_tasks_are_refused_because_their_passes_could_not_be_judged():
    shop = Domain(SHOP)
    task = shop.task("shop-cancel").model_copy(update={"rubrics": ["Did the agent confirm the cancellation?"]})
    with pytest.raises(ValueError, match="task shop-cancel has reply rubrics"):
        environment_factory([(task, shop)])
    with pytest.raises(ValueError, match="task shop-cancel has reply rubrics"):
        trl_dataset([(task, shop)])

    # the docs' selection: retail's rubric tasks left out by the helper, the rest served
    retail = select_tasks("kiosk,retail")
    graded = state_graded_only(retail)
    assert 0 < len(graded) < len(retail) and graded == [(t, d) for t, d in retail if not t.rubrics]
    assert set(environment_factory(graded)) == {"kiosk", "retail"}
    with pytest.raises(ValueError, match="all 1 selected tasks have reply rubrics"):
        state_graded_only([(task, shop)])


def test_a_backend_that_fails_gives_no_reward_rather_than_a_zero(monkeypatch):
    pairs = _pairs()
    backend = SqliteBackend()
    env = environment_factory(pairs, backend=backend)["shop"]()

    def down(*a, **k):
        raise ConnectionError("backend is down")

    monkeypatch.setattr(backend, "open", down)
    assert env.reset(**trl_dataset(pairs)[0]) == "Please cancel order 1."  # the rollout still has its prompt
    assert "system error" in env.cancel_order(order_id=1)
    assert env.get_reward() is None and env.verdict.system_error and "backend is down" in env.verdict.system_error

    # another reward function wrapped in graded_only gives that rollout None too, so TRL leaves it out entirely
    healthy = environment_factory(pairs)["shop"]()
    healthy.reset(**trl_dataset(pairs)[0])
    format_bonus = graded_only(lambda completions, **kw: [0.1 for _ in completions])
    assert format_bonus(completions=[[], []], environments=[env, healthy]) == [None, 0.1]


def test_a_rollout_dropped_without_a_reward_still_releases_its_sandbox():
    import gc

    pairs = _pairs()
    backend = SqliteBackend()
    env = environment_factory(pairs, backend=backend)["shop"]()
    env.reset(**trl_dataset(pairs)[0])
    sandbox = env._env.sandbox
    assert not sandbox.closed
    del env
    gc.collect()
    assert sandbox.closed


class ForcedDecisions(LogitsProcessor):
    """Real tokens, forced decisions: on its first turn every other rollout emits the task's gold calls and the
    rest reply "Done."; after a tool result, every rollout replies "Done.". Generation, TRL's tool loop and
    parsing, the environments, the rewards and the update are all real."""

    def __init__(self, tok, tasks):
        self.tok, self.tasks, self.rows, self.start = tok, tasks, None, None
        self.im_end = tok.convert_tokens_to_ids(IM_END)

    def plan(self, text: str, i: int) -> list[int]:
        task = next(t for t in self.tasks if t.instruction in text)
        reply = "Done." if "<tool_response>" in text or i % 2 else "".join(render_tool_call(c.tool, c.args) for c in task.gold)
        ids = self.tok.encode(reply, add_special_tokens=False)
        assert self.tok.decode(ids) == reply, "the tiny tokenizer must round-trip the forced text"
        return ids + [self.im_end]

    def __call__(self, input_ids, scores):
        if self.start is None:
            self.start = input_ids.shape[1]
            self.rows = [self.plan(self.tok.decode(ids), i) for i, ids in enumerate(input_ids.tolist())]
        k = input_ids.shape[1] - self.start
        forced = torch.full_like(scores, -math.inf)
        for row, plan in enumerate(self.rows):
            forced[row, plan[k] if k < len(plan) else self.im_end] = 0.0
        return forced


@pytest.mark.slow
def test_grpo_trainer_steps_reward_groundstate_verdicts_of_the_same_trajectories(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    pairs = _pairs()
    domains = {d.name: d for _, d in pairs}
    model_dir = save_tiny(
        tmp_path / "tiny",
        [text for d in domains.values() for text in domain_corpus(d, repeat=2)],
        vocab_size=600,
        hidden=32,
        layers=1,
        heads=2,
        kv_heads=1,
        ffn=64,
    )
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert tok.response_template is not None  # the models groundstate builds say how their turns parse
    episodes = []
    factory = environment_factory(pairs, on_episode=lambda task, traj, verdict: episodes.append((task, traj, verdict)))
    trained_on = []

    class RecordingTrainer(GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            # one column per environment class; a row's own class's column is its reward, the others are NaN
            own = [row[~row.isnan()].tolist() for row in rewards]
            trained_on.extend(zip([x["task_id"] for x in inputs], [r[0] if r else None for r in own], completions, strict=True))
            return rewards

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=3,
        max_completion_length=1024,
        max_tool_calling_iterations=3,
        learning_rate=5e-2,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = RecordingTrainer(model=model, args=args, train_dataset=trl_dataset(pairs), processing_class=tok, environment_factory=factory)
    generate = trainer.model.generate

    def forced_generate(*a, **kw):
        return generate(*a, logits_processor=LogitsProcessorList([ForcedDecisions(tok, [t for t, _ in pairs])]), **kw)

    trainer.model.generate = forced_generate
    trainer.train()

    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items()), "GRPO changed no parameter"
    assert len(trained_on) == 12 and len(episodes) == 12
    assert {reward for _, reward, _ in trained_on} == {0.0, 1.0}
    assert {task.domain for task, _, _ in episodes} == {"shop", "kiosk"}  # one run mixed both domains
    assert set(trainer._logs["rewards"]) == {"shop", "kiosk"}  # TRL logged each domain's reward under its name
    backend = SqliteBackend()
    for (task_id, reward, completion), (task, traj, verdict) in zip(trained_on, episodes, strict=True):
        assert task_id == task.id and reward == float(verdict.reward)
        # the tool calls TRL parsed and ran are the ones the environment recorded ...
        called = [
            (c["function"]["name"], c["function"]["arguments"]) for m in completion if m["role"] == "assistant" for c in m.get("tool_calls", [])
        ]
        assert called == [(c.name, c.arguments) for c in traj.tool_calls]
        # ... and `groundstate run`'s attempt path gives that trajectory the same verdict on a fresh sandbox
        agent = ScriptedAgent([{"tool": c.name, "args": c.arguments} for c in traj.tool_calls])
        replayed = asyncio.run(play(task, domains[task.domain], agent, None, backend=backend))
        assert replayed.verdict.reward == verdict.reward and replayed.verdict.diff == verdict.diff


EXAMPLES = {  # docs/INTEGRATIONS.md's TRL blocks: each is an example file, word for word, that a test runs
    "trl_environment_factory.py": "## TRL `environment_factory`",
    "trl_signal_sampler.py": "**Online sampling in your own trainer.**",
}
DOCS = Path(__file__).parents[2] / "docs"


def test_the_docs_trl_blocks_are_the_example_files_word_for_word():
    text = (DOCS / "INTEGRATIONS.md").read_text()
    for example, heading in EXAMPLES.items():
        block = text.split(heading, 1)[1].split("```python\n", 1)[1].split("```\n", 1)[0]
        source = (DOCS / "examples" / example).read_text()
        code = source.split('"""', 2)[2].strip() + "\n"  # what follows the module docstring
        assert block == code, f"docs/INTEGRATIONS.md's block under {heading!r} differs from docs/examples/{example}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("example", "env", "printed"),
    [
        ("trl_environment_factory.py", {}, "checkpoint: {out}"),
        ("trl_signal_sampler.py", {"G": "2", "TASKS_PER_STEP": "2"}, "groups recorded: 2; checkpoint: {out}"),
    ],
)
def test_the_documented_examples_run(tmp_path, example, env, printed):
    """docs/examples' TRL scripts, as docs/INTEGRATIONS.md tells a user to run them, on a model built here."""
    import subprocess
    import sys

    model_dir = save_tiny(
        tmp_path / "tiny", domain_corpus(load_domain("kiosk"), repeat=1), vocab_size=400, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64
    )
    env = {
        **os.environ,
        "MODEL": str(model_dir),
        "TASKS": "kiosk-cancel-00*",
        "STEPS": "1",
        "OUT": str(tmp_path / "out"),
        "TRL_EXPERIMENTAL_SILENCE": "1",
        **env,
    }
    done = subprocess.run([sys.executable, str(DOCS / "examples" / example)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert printed.format(out=tmp_path / "out") in done.stdout
    assert (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)  # today's failure mode is a hang: the bound turns it into a failure
def test_a_generation_batch_larger_than_the_postgres_pool_trains_instead_of_hanging(tmp_path, monkeypatch, pg_backend):
    """TRL resets every rollout of a generation batch before it grades any, and each rollout holds its sandbox until
    `get_reward`: with a pool of 2 clones and 4 rollouts, the third reset used to wait forever for a clone. The pool
    grows to the batch, on TRL's own trainer."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from groundstate.state.postgres import PostgresBackend

    pairs = _pairs()[:1]
    backend = PostgresBackend(pg_backend.dsn, max_open=2)
    model_dir = save_tiny(tmp_path / "tiny", domain_corpus(pairs[0][1], repeat=2), vocab_size=400, hidden=32, layers=1, heads=2, kv_heads=1, ffn=64)
    tok = AutoTokenizer.from_pretrained(model_dir)
    episodes = []
    factory = environment_factory(pairs, backend=backend, on_episode=lambda task, traj, verdict: episodes.append(verdict))
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=1,
        max_completion_length=256,
        max_tool_calling_iterations=2,
        beta=0.0,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        args=args,
        train_dataset=trl_dataset(pairs),
        processing_class=tok,
        environment_factory=factory,
    )
    generate = trainer.model.generate
    trainer.model.generate = lambda *a, **kw: generate(*a, logits_processor=LogitsProcessorList([ForcedDecisions(tok, [t for t, _ in pairs])]), **kw)
    try:
        trainer.train()
        assert len(episodes) == 4 and {v.reward for v in episodes} == {0, 1}  # every rollout graded, none a system error
        assert backend.max_open == 4 and backend.in_use == 0  # the pool grew to the batch, and every sandbox came back
    finally:
        backend.close()
    assert backend.sandbox_databases() == []


def test_most_rollouts_without_a_tool_call_are_warned_about_once(monkeypatch):
    """The quickstart's model through TRL made 0 tool calls and got 0 reward, silently: now one warning says so, and a
    run whose rollouts call tools hears nothing."""
    from groundstate.integrations import trl as adapter
    from groundstate.integrations.watch import WINDOW, NoToolCalls, NoToolCallWarning

    pairs = _pairs()
    row = trl_dataset(pairs)[0]
    for calls, warned in ((1, 0), (0, 1)):
        monkeypatch.setattr(adapter, "_no_tool_calls", NoToolCalls("TRL environment", "check the template"))
        env = environment_factory(pairs)["shop"]()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(WINDOW + 4):
                env.reset(**row)
                if calls:
                    env.get_order(order_id=1)
                env.get_reward()
        assert len([w for w in caught if issubclass(w.category, NoToolCallWarning)]) == warned
