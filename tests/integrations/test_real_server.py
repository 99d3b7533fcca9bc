"""A real OpenAI-compatible server: `transformers serve` (the `serving` extra) on loopback, serving a model groundstate
builds itself, driven by `groundstate run --agent openai:MODEL@http://127.0.0.1:PORT/v1`.

With greedy decoding the same model run as `hf:DIR` and through the server must make the same tool calls and get the
same verdicts, task for task: that proves the chat template, the rendering of the tool schemas and the system prompt,
and the parsing of tool calls agree on both paths. The two paths are independent where it matters: `hf:` renders the
first prompt itself and then extends its own token sequence (token-exact, parsed by `toolcall_format.parse_response`);
the server renders every request from the OpenAI messages with the tokenizer's chat template, decodes with
`model.generate` and parses the calls itself with the tokenizer's `response_template` (it returns `tool_calls`).

The model: a tiny Qwen2 (`build_tiny_policy`) whose prompts carry the system message and the tool schemas, as every
generic server renders them, warm-started for about a minute so that it writes well-formed calls (not correct ones:
copying ids comes much later in training, so the verdicts are failures, but their diffs hold the rows it changed).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")
for _module in ("fastapi", "uvicorn"):  # what `transformers[serving]` adds (openai, rich, accelerate come with others)
    if importlib.util.find_spec(_module) is None:
        pytest.skip(f"the serving extra is not installed ({_module} is missing): pip install -e '.[serving]'", allow_module_level=True)

from groundstate.train.sft import SftConfig  # noqa: E402
from groundstate.train.tiny import build_tiny_policy  # noqa: E402

pytestmark = pytest.mark.slow

# one task of each kiosk template: single write; read, then decide; look up, then write; two writes
TASKS = ["kiosk-cancel-001", "kiosk-cancel-if-pending-001", "kiosk-upgrade-001", "kiosk-credit-001", "kiosk-cancel-two-001"]
# greedy on both paths, one attempt in flight (so the local policy decodes each prompt alone, unpadded, as the server does)
RUN_ARGS = ["--temperature", "0", "--max-tokens", "48", "--max-turns", "3", "--concurrency", "1", "--k", "1"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """~65 s on two cores: 90 supervised steps at batch 8 on fresh kiosk demonstrations (prompts of ~680 tokens)."""
    out = tmp_path_factory.mktemp("served") / "model"
    sft = SftConfig(demonstrations=400, batch_size=8, lr=3e-3, warmup_steps=10, max_steps=90, eval_every=10**6, eval_tasks=1)
    build_tiny_policy(
        out, "kiosk", vocab_size=1024, sft=sft, log=lambda m: None, tools_in_prompt=True, system_in_prompt=True, hidden=128, layers=2, ffn=256
    )
    flags = json.loads((out / "groundstate.json").read_text())
    assert flags["tools_in_prompt"] and flags["system_in_prompt"], flags
    return out


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """`transformers serve MODEL_DIR` as its own process group on a free loopback port; killed at teardown."""
    import httpx

    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "serve.log"
    cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen([*cmd, "--device", "cpu"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited with {proc.returncode} before it was healthy:\n{_tail(log)}")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve was not healthy within 120 s:\n{_tail(log)}")
            time.sleep(0.5)
        yield {"base_url": f"{base}/v1", "model": str(model_dir), "log": log, "proc": proc}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


def _groundstate_run(agent: str, out: Path, log: Path) -> dict[str, dict]:
    """The real command line, in a subprocess; its records by task id."""
    env = {**os.environ, "GROUNDSTATE_ENDPOINT_RETRIES": "0"}  # a failing local server fails the test at once, visibly
    env.pop("OPENAI_BASE_URL", None)
    cmd = [sys.executable, "-m", "groundstate.cli", "run", "--agent", agent, "--tasks", ",".join(TASKS), *RUN_ARGS, "--out", str(out)]
    done = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{_tail(log)}"
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["task_id"]: r for r in records}


@pytest.fixture(scope="module")
def runs(server, model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    (root / "served").mkdir()
    (root / "local").mkdir()
    served = _groundstate_run(f"openai:{server['model']}@{server['base_url']}", root / "served" / "results.jsonl", server["log"])
    local = _groundstate_run(f"hf:{model_dir}", root / "local" / "results.jsonl", server["log"])
    return served, local


def test_the_server_is_transformers_serve_serving_our_directory(server):
    import httpx

    models = httpx.get(f"{server['base_url']}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [server["model"]]  # the model id in requests is the directory's path
    assert server["proc"].poll() is None


def _calls(record: dict) -> list[tuple[str, object, bool]]:
    return [(c["name"], c["arguments"], c["ok"]) for c in record["trajectory"]["tool_calls"]]


def _assistant_turns(record: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each assistant message's text and calls (name, arguments as sent back), without the call ids (the server
    makes its own)."""
    return [
        ((m.get("content") or ""), [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []])
        for m in record["trajectory"]["messages"]
        if m["role"] == "assistant"
    ]


def test_served_and_local_greedy_runs_make_the_same_calls_and_get_the_same_verdicts(runs):
    served, local = runs
    assert sorted(served) == sorted(local) == sorted(TASKS)
    for task in TASKS:
        s, h = served[task], local[task]
        assert s["system_error"] is None and h["system_error"] is None, (s["system_error"], h["system_error"])
        assert s["agent"].startswith("openai:") and h["agent"].startswith("hf:")
        assert _calls(s) == _calls(h), f"{task}: the served model called {_calls(s)}, the local one {_calls(h)}"
        assert _assistant_turns(s) == _assistant_turns(h), task
        assert (s["reward"], s["finish_reason"]) == (h["reward"], h["finish_reason"]), task
        assert s["verdict"] == h["verdict"], f"{task}: verdicts differ:\n{s['verdict']}\n{h['verdict']}"
        # the server counts the prompt it rendered from the messages, the local policy the token sequence it extended:
        # equal counts on every turn (summed here) mean the two renderings agree, tool schemas and system prompt included
        for key in ("input_tokens", "output_tokens"):
            assert s["usage"][key] == h["usage"][key], f"{task}: {key} {s['usage'][key]} served, {h['usage'][key]} local"
        # the server parsed the calls itself (tool_calls in its reply, from the tokenizer's response_template);
        # the local path parsed the same text with groundstate's Hermes parser
        assert {c.get("parser") for c in s["trajectory"]["tool_calls"]} <= {"native"}, task
        assert {c.get("parser") for c in h["trajectory"]["tool_calls"]} <= {"hermes"}, task

    executed = [c for t in TASKS for c in served[t]["trajectory"]["tool_calls"]]
    assert len(executed) >= len(TASKS), f"the model made only {len(executed)} tool calls: the parity shows little"
    assert len({c["name"] for c in executed}) >= 2 and any(c["ok"] for c in executed)
    assert any(sum(served[t]["verdict"]["changes"].values()) for t in TASKS), "no attempt changed the database: the verdicts compare little"
