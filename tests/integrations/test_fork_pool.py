"""#37 item 1: the forking server pool. A server forked from its command's zygote gives the verdicts and state hashes
a fresh process gives, starts from a clean module state every attempt, never outlives its attempt, and a command
that cannot fork safely starts processes instead, with one warning."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import yaml
from tb_standin import SERVER, tb_pairs, tb_play

from groundstate.agents.scripted import ScriptedAgent, make_scripted_agent
from groundstate.tools import fork_pool, zygote
from groundstate.tools.fork_pool import fork_shape, zygote_pids
from groundstate.tools.mcp_client import McpToolset


def _with_start(tb: dict[str, Path], start: str, tmp_path: Path) -> dict[str, Path]:
    """The `tb` fixture's paths, with a servers file (`servers_ok`) that asks for `start`."""
    spec = yaml.safe_load(tb["servers_ok"].read_text())
    spec["servers"]["standin_bank"]["start"] = start
    path = tmp_path / f"servers_{start}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return {**tb, f"servers_{start}": path}


def _effects(task, domain, calls) -> dict:
    """The servers' effects (result and golden hashes, diff, state) after `calls`, read from the environment itself."""

    async def go():
        env = await domain.open_environment(task, None)
        try:
            for call in calls:
                await env.call_tool(call["tool"], call["args"])
            return await env.effects()
        finally:
            await env.close()

    return asyncio.run(go())


def test_forked_servers_give_the_verdicts_and_hashes_of_fresh_processes(tb, tmp_path):
    """Every stand-in case, gold, no-op and a perturbed gold: the same verdict and the same effects (result
    hash, golden hash, diff, final state) whether each attempt's server is forked or a fresh process."""
    paths = _with_start(_with_start(tb, "fork", tmp_path), "process", tmp_path)
    seen = 0
    for which in ("main",):  # every case of the stand-in dataset that runs without the ThinkingBox framework
        forked, spawned = tb_pairs(paths, which, "fork"), tb_pairs(paths, which, "process")
        for (task, fdomain), (_, pdomain) in zip(forked, spawned, strict=True):
            assert fdomain.servers["standin_bank"].fork and not pdomain.servers["standin_bank"].fork
            gold = [c.model_dump() for c in task.gold]
            perturbed = [dict(c, args={k: (v + 1 if isinstance(v, int) else v) for k, v in c["args"].items()}) for c in gold]
            for calls in (gold, [], perturbed):
                assert _effects(task, fdomain, calls) == _effects(task, pdomain, calls), (task.id, calls)
                a = tb_play(task, fdomain, ScriptedAgent(calls)).verdict.to_json()
                b = tb_play(task, pdomain, ScriptedAgent(calls)).verdict.to_json()
                assert a == b, (task.id, calls)
                seen += 1
    assert seen == 6


def test_a_write_in_one_forked_attempt_is_never_seen_by_the_next(tb):
    """Gold moves 30 from A1; the next attempt's server starts from the seed again (as a fresh process would), and so
    does the one after a no-op; the pids differ (a child per attempt) and none outlives its attempt."""
    ((task, domain),) = tb_pairs(tb, "transfer")
    assert domain.servers["standin_bank"].fork
    before = {p.name for p in tb["pids"].iterdir()}

    async def balance_after(calls) -> int:
        env = await domain.open_environment(task, None)
        try:
            for call in calls:
                await env.call_tool(call["tool"], call["args"])
            result = await env.call_tool("get_account", {"account_id": "A1"})
            return int(yaml.safe_load(result.content)["balance"])
        finally:
            await env.close()

    gold = [c.model_dump() for c in task.gold]
    assert asyncio.run(balance_after(gold)) == 70
    assert asyncio.run(balance_after([])) == 100
    assert asyncio.run(balance_after(gold)) == 70
    assert tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain)).verdict.reward == 1
    pids = [int(p.removesuffix(".pid")) for p in {p.name for p in tb["pids"].iterdir()} - before if p.endswith(".pid")]
    assert len(pids) == 4 and not [p for p in pids if psutil.pid_exists(p)]
    zygotes = zygote_pids()
    assert zygotes and not zygotes & set(pids)  # the zygote lives on, and never served an attempt itself
    for z in zygotes:
        assert not [c for c in psutil.Process(z).children() if c.status() != psutil.STATUS_ZOMBIE]  # it holds no server


PACKAGE = {
    "tbpkg/__init__.py": "",
    "tbpkg/store.py": "ROWS = []  # module state of a dependency, as the benchmark servers keep theirs\n",
    "tbpkg/server.py": textwrap.dedent(
        """\
        import sys
        from mcp.server import MCPServer

        from . import store

        mcp = MCPServer("tbpkg")


        @mcp.tool()
        def add(item: str) -> str:
            store.ROWS.append(item)
            return str(len(store.ROWS))


        @mcp.tool()
        def rows() -> str:
            return ",".join(store.ROWS) + "|" + " ".join(sys.argv[1:])


        if __name__ == "__main__":
            from io import TextIOWrapper

            KEPT = TextIOWrapper(sys.stdout.buffer, encoding="utf-8")  # what fastmcp's stdio server does first: a buffer made
            mcp.run(transport="stdio")  # over the zygote's /dev/null thought stdout seekable and failed here (ESPIPE)
        """
    ),
}


def test_a_module_server_forks_with_fresh_dependency_state_and_its_arguments(tmp_path):
    """`python -m tbpkg.server ARG`: the zygote preloads `tbpkg.store` (a relative import); each forked server still
    starts with the store's import-time state and sees its own argv, as `python -m` gives it."""
    for name, text in PACKAGE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    async def attempt(adds: list[str]) -> str:
        with (tmp_path / "err.log").open("w+") as errlog:
            async with McpToolset.stdio(sys.executable, ["-m", "tbpkg.server", "--flag"], cwd=str(tmp_path), errlog=errlog, fork=True) as tools:
                for item in adds:
                    await tools.acall("add", {"item": item})
                return (await tools.acall("rows", {})).content

    assert asyncio.run(attempt(["a", "b"])) == "a,b|--flag"
    assert asyncio.run(attempt([])) == "|--flag"
    assert asyncio.run(attempt(["c"])) == "c|--flag"
    shape = fork_shape(sys.executable, ["-m", "tbpkg.server", "--flag"])
    assert shape == ("module", "tbpkg.server", ["--flag"])


UNSAFE = {
    "thread": "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n",
    "socket": "import socket\nLISTENER = socket.socket()\n",
}


@pytest.mark.parametrize("what", sorted(UNSAFE))
def test_a_server_whose_imports_start_a_thread_or_open_a_socket_starts_processes_with_one_warning(tb, tmp_path, caplog, what):
    """Forking after a thread started or a socket opened would not give a clean server: the zygote says so, one warning
    line names the command and the reason, and every attempt's server is a fresh process — the same verdicts."""
    (tmp_path / "unsafe_dep.py").write_text(UNSAFE[what])
    script = tmp_path / "unsafe_server.py"
    script.write_text(f"import unsafe_dep\nimport runpy\nrunpy.run_path({str(SERVER)!r}, run_name='__main__')\n")
    spec = yaml.safe_load(tb["servers_ok"].read_text())
    spec["servers"]["standin_bank"]["command"] = ["{python}", str(script)]
    (tmp_path / "servers_unsafe.yaml").write_text(yaml.safe_dump(spec))
    ((task, domain),) = tb_pairs({**tb, "servers_unsafe": tmp_path / "servers_unsafe.yaml"}, "transfer", "unsafe")
    with caplog.at_level(logging.WARNING, logger="groundstate.tools.fork_pool"):
        rewards = [tb_play(task, domain, make_scripted_agent(f"scripted:{a}", task, domain)).verdict.reward for a in ("gold", "noop", "gold")]
    assert rewards == [1, 0, 1]
    warnings = [r.getMessage() for r in caplog.records if "not forked" in r.getMessage()]
    assert len(warnings) == 1 and str(script) in warnings[0]
    assert ("thread" in warnings[0]) if what == "thread" else ("socket" in warnings[0])


@pytest.mark.parametrize(
    "command, args, shape",
    [
        ("/usr/bin/python3", ["-m", "pkg.mod", "x"], ("module", "pkg.mod", ["x"])),
        ("/venv/bin/python3.12", ["server.py"], ("script", "server.py", [])),
        ("python", ["-u", "-m", "pkg"], None),  # interpreter flags: not a shape the zygote reproduces
        ("python", ["-c", "print()"], None),
        ("node", ["server.js"], None),
        ("/usr/bin/uvx", ["mcp-server-git"], None),
        ("python", ["-m"], None),
    ],
)
def test_only_plain_python_module_and_script_commands_fork(command, args, shape):
    assert fork_shape(command, args) == shape


def test_a_command_that_cannot_fork_is_warned_once_and_starts_processes(tmp_path, caplog):
    """`python -c …` is no module or script: one warning, then each attempt a fresh process, which still works."""
    code = "import runpy, sys; sys.argv = ['x']; runpy.run_module('tbpkg.server', run_name='__main__')"
    for name, text in PACKAGE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    async def attempt() -> str:
        with (tmp_path / "err.log").open("w+") as errlog:
            async with McpToolset.stdio(sys.executable, ["-c", code], cwd=str(tmp_path), errlog=errlog, fork=True) as tools:
                await tools.acall("add", {"item": "a"})
                return (await tools.acall("rows", {})).content

    with caplog.at_level(logging.WARNING, logger="groundstate.tools.fork_pool"):
        assert [asyncio.run(attempt()) for _ in range(2)] == ["a|", "a|"]
    assert len([r for r in caplog.records if "not forked" in r.getMessage()]) == 1


def test_zygote_reads_imports_without_running_the_server():
    """The preload list: module-level imports (also in if/try/with), relative ones resolved; function bodies skipped."""
    import ast

    tree = ast.parse(
        textwrap.dedent(
            """\
            import json, os.path
            from . import store
            from .db import Table
            from typing import Any
            try:
                import fastmcp
            except ImportError:
                import mcp
            if True:
                from collections import OrderedDict
            def later():
                import sqlite3
            """
        )
    )
    assert zygote._imports(tree, "pkg") == [
        ("json", ()),
        ("os.path", ()),
        ("pkg", ("store",)),
        ("pkg.db", ("Table",)),
        ("typing", ("Any",)),
        ("fastmcp", ()),
        ("mcp", ()),
        ("collections", ("OrderedDict",)),
    ]


def test_a_from_import_takes_the_name_as_the_import_statement_does(tmp_path, monkeypatch):
    """`from lazy import Thing`: a package whose attribute loads a module on first access (fastmcp's `FastMCP` does,
    half a second of imports) is preloaded with that module; a name that is a submodule is imported as one."""
    (tmp_path / "lazy").mkdir()
    (tmp_path / "lazy" / "__init__.py").write_text(
        "def __getattr__(name):\n    if name != 'Thing':\n        raise AttributeError(name)\n"
        "    import importlib\n    return importlib.import_module('lazy.heavy').Thing\n"
    )
    (tmp_path / "lazy" / "heavy.py").write_text("class Thing:\n    pass\n")
    (tmp_path / "lazy" / "sub.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    zygote._import_from("lazy", ("Thing", "sub", "missing"))
    assert {"lazy.heavy", "lazy.sub"} <= set(sys.modules)
    for name in ("lazy", "lazy.heavy", "lazy.sub"):
        sys.modules.pop(name, None)


def test_a_zygote_that_dies_is_replaced_and_the_attempt_still_gets_a_fresh_server(tb):
    """A zygote killed between attempts (OOM killer, an operator) is noticed and started again."""
    ((task, domain),) = tb_pairs(tb, "transfer")
    assert tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain)).verdict.reward == 1
    for pid in zygote_pids():
        os.kill(pid, 9)
    for _ in range(200):  # bounded: until the kill has landed (alive() polls, which reaps)
        if not zygote_pids():
            break
        time.sleep(0.05)
    assert tb_play(task, domain, make_scripted_agent("scripted:gold", task, domain)).verdict.reward == 1
    assert zygote_pids()
    fork_pool.close_all()
    assert not zygote_pids()


def test_a_zygote_starting_holds_up_only_its_own_command(tmp_path):
    """One command's zygote still importing (its import waits here for a file) does not hold up another command's: that
    one starts and is returned meanwhile; then the first finishes starting too."""
    import threading

    from mcp import StdioServerParameters

    (tmp_path / "gate_dep.py").write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(tmp_path / 'importing')!r}).touch()\n"
        f"while not pathlib.Path({str(tmp_path / 'open')!r}).exists():\n"
        "    time.sleep(0.02)\n"
    )
    (tmp_path / "slow_server.py").write_text("import gate_dep\n")
    (tmp_path / "fast_server.py").write_text("import json\n")
    env = {"PATH": os.environ.get("PATH", "")}
    slow = StdioServerParameters(command=sys.executable, args=[str(tmp_path / "slow_server.py")], cwd=str(tmp_path))
    fast = StdioServerParameters(command=sys.executable, args=[str(tmp_path / "fast_server.py")], cwd=str(tmp_path))
    got: dict[str, object] = {}
    starting = threading.Thread(target=lambda: got.setdefault("slow", fork_pool.zygote_for(slow, env, 120)))
    starting.start()
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "importing").exists():
            assert time.monotonic() < deadline and starting.is_alive(), "the slow zygote never began its imports"
            time.sleep(0.02)
        got["fast"] = fork_pool.zygote_for(fast, env, 120)
        assert isinstance(got["fast"], fork_pool.Zygote) and starting.is_alive()  # returned while the other still imports
    finally:
        (tmp_path / "open").touch()
        starting.join(120)
    assert isinstance(got["slow"], fork_pool.Zygote) and got["slow"] is not got["fast"]
    for z in (got["slow"], got["fast"]):
        z.close()  # type: ignore[union-attr]
