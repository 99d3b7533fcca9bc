"""A reproducible user side, end to end through `groundstate run` with the OpenAI stub playing a *sampled* customer
(every reply differs unless the temperature is 0): the user cache replays it exactly, the user-turn audit turns a
reply that breaks the persona into a repairable system error, and `metrics` reports the fault rate per user model."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, text, tool_call
from typer.testing import CliRunner

from groundstate.agents.user_cache import CACHE_FILE, BadCacheRow, UserCache, UserCacheError
from groundstate.cli import app
from groundstate.pipeline.runner import RunConfig, manifest_path, run
from groundstate.records import read_records
from groundstate.state.sqlite import SqliteBackend

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"
# a plain ask (`user_audit._plain`): what the user invents, misstates or walks away from after it is the user's fault
QUESTION = "Sure, I can help with that. Could you give me your order number, please?"
WORDS = ["kindly", "thanks", "cheers", "please", "quickly", "today", "if possible", "ta", "much obliged", "now"]
TASKS = """\
tasks:
  - id: shop-llm-1
    instruction: Hi, I would like to cancel an order.
    user: {persona: "Ada, a customer of the shop; brief.", context: "Your email is c1@example.com and your order number is #1."}
    patch: {orders: [{id: 1, customer_id: 1, status: pending, total: 10.0, updated_at: null}]}
    gold: [{tool: cancel_order, args: {order_id: 1}}]
  - id: shop-llm-2
    instruction: Hello, one of my orders has to be cancelled.
    user: {persona: "Ben, a customer of the shop; chatty.", context: "Your email is c2@example.com and your order number is #2."}
    patch: {orders: [{id: 2, customer_id: 2, status: pending, total: 20.0, updated_at: null}]}
    gold: [{tool: cancel_order, args: {order_id: 2}}]
"""
cli = CliRunner()
GAMERS = {
    "agent-phone": "What is the phone number on your file?",  # the persona has none: the obliging user invents one
    "agent-closer": "Your order is cancelled. Could you confirm your order number for our records?",  # the user leaves
    "agent-spam": "Before we start, please type 'ok' 40,000 times.",  # the obliging user floods
}


class Shop:
    """The stub's answers to both models. `agent-a` asks for the order number and cancels; `agent-b` looks the customer
    up first (a tool call the user never sees), asks the same question, then also asks for the e-mail address. The
    user (`user-model`) answers from its prompt's facts; at a temperature above 0 each reply is new (a counter picks
    its closing words), at 0 it is always the same. `user_says` replaces its answer to the order question, `flood` every
    answer; asked for a phone number (it has none) it makes one up. The `GAMERS` never cancel: each asks its question,
    then claims the order is cancelled."""

    def __init__(self, user_says: str | None = None, flood: str | None = None):
        self.draws = itertools.count()
        self.user_says, self.flood = user_says, flood

    def __call__(self, body):
        msgs = body["messages"]
        if body["model"] == "user-model":
            return self.user(body, msgs[0]["content"], msgs[-1]["content"])
        return self.agent(body["model"], msgs)

    def user(self, body, prompt: str, last: str):
        if "40,000 times" in last:
            return text("ok " * 40_000)
        if "cancelled" in last:
            return text("Thank you! ###STOP###")
        if "phone" in last:  # an obliging customer: it makes one up
            return text("It is 555-0199.")
        if self.flood is not None:
            return text(self.flood)
        n = next(self.draws)
        closing = f"{WORDS[n % len(WORDS)]} ({n})" if body.get("temperature", 0) > 0 else "thanks"
        email, order = re.search(r"email is (\S+@\S+?) ", prompt).group(1), re.search(r"order number is (#\d+)", prompt).group(1)
        if "email" in last:
            return text(f"It is {email}, {closing}.")
        return text(self.user_says or f"It is order {order}, {closing}.")

    def agent(self, model: str, msgs):
        last = msgs[-1]
        if model in GAMERS:  # a failing agent that provokes the user, then claims success
            asked = [m["content"] for m in msgs if m["role"] == "assistant"]
            return text(GAMERS[model] if not asked else "Your order is cancelled.")
        if last["role"] == "tool":
            if "cancelled" in last["content"]:
                return text("Your order is cancelled. Is there anything else I can help with?")
            return text(QUESTION)
        replies = [m["content"] for m in msgs if m["role"] == "user"][1:]
        if not replies:
            return tool_call("find_customer", {"email": "c1@example.com"}) if model == "agent-b" else text(QUESTION)
        if model == "agent-b" and len(replies) == 1:
            return text("Thanks. Could you confirm your email address?")
        return tool_call("cancel_order", {"order_id": int(re.search(r"#(\d+)", " ".join(replies)).group(1))})


@pytest.fixture
def shop_llm(tmp_path) -> Path:
    folder = tmp_path / "shop"
    shutil.copytree(SHOP, folder)
    (folder / "tasks" / "basic.yaml").write_text(TASKS)
    return folder


@pytest.fixture(autouse=True)
def fast_endpoint(monkeypatch):
    monkeypatch.setenv("GROUNDSTATE_ENDPOINT_RETRIES", "0")


def gs_run(stub, shop_llm, out, *extra, agent="agent-a", k="2"):
    args = ["run", "--agent", f"openai:{agent}@{stub.base_url}", "--user", f"openai:user-model@{stub.base_url}"]
    args += ["--tasks", str(shop_llm), "--k", k, "--out", str(out), *extra]
    return cli.invoke(app, args)


def user_side(path: Path) -> dict[tuple[str, int], list[str]]:
    """Every user message of every attempt, by key."""
    return {r.key: [m["content"] for m in r.trajectory.messages if m["role"] == "user"] for r in read_records(path)}


def squash(s: str) -> str:
    return "".join(s.split())


def stored(folder: Path) -> int:
    cache = UserCache(folder)
    try:
        return len(cache)
    finally:
        cache.close()


# -- (i) the cache makes two runs of a sampled user identical on the user side ---------------------------------


def test_two_runs_with_one_user_cache_meet_the_same_sampled_customer(shop_llm, tmp_path):
    cache = tmp_path / "cache"
    with OpenAIStub(responder=Shop()) as stub:
        first = gs_run(stub, shop_llm, tmp_path / "a.jsonl", "--user-temperature", "0.9", "--user-cache", str(cache))
        user_calls = len(stub.bodies("user-model"))
        again = gs_run(stub, shop_llm, tmp_path / "b.jsonl", "--user-temperature", "0.9", "--user-cache", str(cache))
        assert len(stub.bodies("user-model")) == user_calls  # the second run never asked the user model
        plain = [gs_run(stub, shop_llm, tmp_path / f"plain{i}.jsonl", "--user-temperature", "0.9") for i in range(2)]
        temperatures = {b.get("temperature") for b in stub.bodies("user-model")}
    assert first.exit_code == again.exit_code == 0, first.output + again.output
    assert all(r.exit_code == 0 for r in plain), [r.output for r in plain]
    assert temperatures == {0.9}  # the user really sampled
    a, b = user_side(tmp_path / "a.jsonl"), user_side(tmp_path / "b.jsonl")
    assert len(a) == 4 and a == b  # every user message of every attempt is equal
    assert user_calls == 8  # 2 tasks × 2 attempts × (the order number, the goodbye)
    assert a[("shop-llm-1", 0)] != a[("shop-llm-1", 1)]  # the attempt index keeps the k attempts' variety
    p0, p1 = user_side(tmp_path / "plain0.jsonl"), user_side(tmp_path / "plain1.jsonl")
    assert all(p0[key] != p1[key] for key in p0)  # without the cache, a sampled user differs run to run
    counts = {r.key: r.user_replies.to_json() for r in read_records(tmp_path / "b.jsonl")}
    assert set(map(json.dumps, counts.values())) == {json.dumps({"cached": 2, "generated": 0})}
    assert {r.user_replies.generated for r in read_records(tmp_path / "a.jsonl")} == {2}
    assert read_records(tmp_path / "plain0.jsonl")[0].user_replies is None
    assert squash(f"user cache {cache / CACHE_FILE}: 0 user replies served from the cache, 8 generated and stored") in squash(first.output)
    assert squash("8 user replies served from the cache, 0 generated and stored") in squash(again.output)
    assert {r.reward for r in read_records(tmp_path / "b.jsonl")} == {1}


def test_two_agents_facing_the_cache_get_the_same_first_user_replies(shop_llm, tmp_path):
    cache = tmp_path / "cache"
    with OpenAIStub(responder=Shop()) as stub:
        a = gs_run(stub, shop_llm, tmp_path / "a.jsonl", "--user-temperature", "0.7", "--user-cache", str(cache), agent="agent-a")
        b = gs_run(stub, shop_llm, tmp_path / "b.jsonl", "--user-temperature", "0.7", "--user-cache", str(cache), agent="agent-b")
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    side_a, side_b = user_side(tmp_path / "a.jsonl"), user_side(tmp_path / "b.jsonl")
    for key in side_a:
        assert side_a[key][1] == side_b[key][1]  # the first reply: the same customer (agent-b's lookup is not seen)
        assert re.search(r"c\d@example\.com", side_b[key][2])  # then agent-b asked something else, answered afresh
    for r in read_records(tmp_path / "b.jsonl"):
        assert r.user_replies.to_json() == {"cached": 1, "generated": 2}, r.key
        assert r.reward == 1


def test_the_cache_is_not_part_of_the_run_identity_but_is_in_the_manifest(shop_llm, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "r.jsonl"
    with OpenAIStub(responder=Shop()) as stub:
        assert gs_run(stub, shop_llm, out, "--user-cache", str(cache), k="1").exit_code == 0
        manifest = json.loads(manifest_path(out).read_text())
        grown = gs_run(stub, shop_llm, out, k="2")  # the same run resumed without the cache: only attempt 1 is new
    assert grown.exit_code == 0, grown.output
    assert "2 attempts run (2 already done)" in grown.output
    assert manifest["config"]["user_cache"] == str(cache)
    assert len({r.run.id for r in read_records(out)}) == 1 and read_records(out)[0].run.user_audit is True


# -- (iii) a fault is a repairable system error, never the agent's 0; (iv) metrics shows the fault rate ---------


def test_a_user_fault_is_a_system_error_that_repair_reruns_and_metrics_counts(shop_llm, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "r.jsonl"
    shop = Shop(user_says="It is order #7, thanks.")  # its order is #1 or #2: the same shape, another value
    with OpenAIStub(responder=shop) as stub:
        faulty = gs_run(stub, shop_llm, out, "--user-cache", str(cache), k="1")
        user_model = f"openai:user-model@{stub.base_url}"
        records = read_records(out)
        assert faulty.exit_code == 1, faulty.output  # every attempt a system error: nothing measured, never exit 0
        for r in records:
            assert r.reward is None and r.system_error.startswith("user-simulator fault (contradicted_fact): the reply gives #7"), r.verdict
            assert f"its own order number is #{r.task_id[-1]}" in r.system_error
        said = squash(faulty.output)
        assert squash("every one of the 2 attempts run was a system error") in said and "--repair" in said, faulty.output
        assert squash("2 of them user-simulator faults") in said
        assert stored(cache) == 0  # a faulty reply is never stored

        refused = cli.invoke(app, ["metrics", str(out)])
        assert refused.exit_code == 1
        assert squash(f"user-simulator faults {user_model}: 2 of 2 tries (100.0%; contradicted_fact 2)") in squash(refused.output)
        shown = cli.invoke(app, ["metrics", str(out), "--allow-incomplete"])
        assert shown.exit_code == 0 and "user-simulator faults" in shown.output and "100.00%" in shown.output, shown.output

        shop.user_says = None  # the user model behaves now
        repaired = gs_run(stub, shop_llm, out, "--user-cache", str(cache), "--repair", k="1")
    assert repaired.exit_code == 0, repaired.output
    assert {(r.reward, r.system_error) for r in read_records(out)} == {(1, None)}
    assert [r.user_faults for r in read_records(out)] == [["contradicted_fact"]] * 2
    m = json.loads(cli.invoke(app, ["metrics", str(out), "--json"]).stdout)
    # the faulty tries' tokens are kept with the records that replaced them, and counted (before: dropped with the tries)
    before = {r.key: r.usage for r in records}
    assert all(r.replaced_usage == [before[r.key]] and before[r.key].input_tokens > 0 for r in read_records(out)), [
        (r.replaced_usage, before[r.key]) for r in read_records(out)
    ]
    spent = sum(r.usage.input_tokens for r in records) + sum(r.usage.input_tokens for r in read_records(out))
    assert m["tokens"]["input"] == spent
    assert m["user_simulator_faults"] == {
        user_model: {
            "tries": 4,
            "faults": 2,
            "unrepaired": 0,
            "rate": 0.5,
            "kinds": {"invented_fact": 0, "contradicted_fact": 2, "premature_stop": 0, "overlong_reply": 0},
        }
    }


def test_walking_away_when_asked_for_a_fact_is_a_premature_stop(shop_llm, tmp_path):
    out = tmp_path / "r.jsonl"
    with OpenAIStub(responder=Shop(user_says="###STOP###")) as stub:
        r = gs_run(stub, shop_llm, out, k="1")
    assert r.exit_code == 1, r.output  # every attempt a system error
    for record in read_records(out):
        assert record.system_error.startswith(
            "user-simulator fault (premature_stop): the user ended the conversation when the agent asked for its order number"
        )


def test_without_the_audit_a_faulty_user_is_graded_and_the_identity_says_so(shop_llm, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "r.jsonl"
    with OpenAIStub(responder=Shop(user_says="It is order #7, thanks.")) as stub:
        unaudited = gs_run(stub, shop_llm, out, "--user-cache", str(cache), "--no-user-audit", k="1")
        records = read_records(out)
        assert unaudited.exit_code == 0, unaudited.output
        assert {(r.system_error, r.run.user_audit) for r in records} == {(None, False)}  # graded: the agent cancelled no order
        assert {r.reward for r in records} == {0}
        assert stored(cache) == 4  # what an unaudited run heard is stored, faulty or not
        mixed = gs_run(stub, shop_llm, out, "--user-cache", str(cache), k="1")  # resuming with the audit on: another run
        assert mixed.exit_code == 2 and "user_audit" in mixed.output, mixed.output
        # an audited run meeting the stored faulty reply: a fault, and the reply leaves the cache
        audited = gs_run(stub, shop_llm, tmp_path / "audited.jsonl", "--user-cache", str(cache), k="1")
        calls = len(stub.bodies("user-model"))
    assert audited.exit_code == 1, audited.output  # every attempt a system error
    assert all(r.system_error.startswith("user-simulator fault (contradicted_fact)") for r in read_records(tmp_path / "audited.jsonl"))
    assert calls == 4  # served from the cache, not asked again
    assert stored(cache) == 2  # the two faulty replies were deleted, so --repair asks the model again


# -- (v) a hostile or careless cache folder: one clear error, nothing written ------------------------------------


def refused(shop_llm, tmp_path, cache: Path, *words: str) -> None:
    out = tmp_path / "results" / "r.jsonl"
    with OpenAIStub(responder=Shop()) as stub:
        r = gs_run(stub, shop_llm, out, "--user-cache", str(cache), k="1")
        assert stub.bodies() == []  # no model was called
    assert r.exit_code == 2, r.output
    for w in words:
        assert squash(w) in squash(r.output), r.output
    assert "Traceback" not in r.output
    assert not out.parent.exists()  # no results file, no manifest


def test_a_cache_folder_that_is_a_file_is_refused(shop_llm, tmp_path):
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    refused(shop_llm, tmp_path, cache, str(cache), "is a file")
    assert cache.read_text() == "not a folder"
    with pytest.raises(UserCacheError, match="is not a folder"):  # the library says the same without typer's check
        run([], RunConfig(user="openai:u@http://127.0.0.1:9/v1", user_cache=cache), SqliteBackend(), tmp_path / "x" / "r.jsonl")
    assert not (tmp_path / "x").exists()


def test_a_read_only_cache_folder_or_file_is_refused(shop_llm, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o555)
    try:
        refused(shop_llm, tmp_path, cache, f"user cache {cache}: the folder is not writable")
        assert list(cache.iterdir()) == []
    finally:
        cache.chmod(0o755)
    UserCache(cache).close()
    (cache / CACHE_FILE).chmod(0o444)
    refused(shop_llm, tmp_path, cache, f"user cache {cache / CACHE_FILE}: is read-only")


def test_a_corrupt_cache_file_is_refused_and_left_as_it_was(shop_llm, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    junk = b"SQLite format 3\x00" + bytes(range(256)) * 8
    (cache / CACHE_FILE).write_bytes(junk)
    refused(shop_llm, tmp_path, cache, f"user cache {cache / CACHE_FILE}: is not a usable SQLite file")
    assert (cache / CACHE_FILE).read_bytes() == junk and sorted(p.name for p in cache.iterdir()) == [CACHE_FILE]


def test_an_sqlite_file_of_another_schema_is_refused_and_left_as_it_was(shop_llm, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    with sqlite3.connect(cache / CACHE_FILE) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    before = (cache / CACHE_FILE).read_bytes()
    refused(shop_llm, tmp_path, cache, "is an SQLite file of another application (tables: notes)")
    assert (cache / CACHE_FILE).read_bytes() == before
    # a groundstate cache of another schema version is refused too
    (cache / CACHE_FILE).unlink()
    UserCache(cache).close()
    with sqlite3.connect(cache / CACHE_FILE) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(UserCacheError, match="another schema"):
        UserCache(cache)


def test_a_user_cache_for_the_scripted_user_is_refused(shop_llm, tmp_path):
    out = tmp_path / "results" / "r.jsonl"
    r = cli.invoke(app, ["run", "--agent", "scripted:gold", "--tasks", str(shop_llm), "--out", str(out), "--user-cache", str(tmp_path / "c")])
    assert r.exit_code == 2 and "--user-cache is for an LLM user" in r.output, r.output
    r = cli.invoke(app, ["probe", "--agent", "scripted:gold", "--tasks", str(shop_llm), "--out", str(out), "--user-temperature", "0.5"])
    assert r.exit_code == 2 and "--user-temperature is for an LLM user" in r.output, r.output
    assert not out.parent.exists() and not (tmp_path / "c").exists()


def test_run_and_probe_document_the_user_side_options():
    for command in ("run", "probe"):
        shown = squash(cli.invoke(app, [command, "--help"]).output)
        for option in ("--user-cache", "--no-user-audit", "--user-temperature"):
            assert option in shown, (command, option)
        assert squash("replayed on later runs") in shown and squash("user-simulator fault") in shown


# -- the store -----------------------------------------------------------------------------------------------------


def _write_many(folder: str, tag: str, n: int) -> None:
    cache = UserCache(folder)
    for i in range(n):
        cache.put(f"{tag}-{i}", "t", "m@u", 0, f"reply {tag} {i}")
        cache.put("shared", "t", "m@u", 0, f"first of {tag}")
    cache.close()


def test_concurrent_writers_share_one_cache(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_write_many, args=(str(tmp_path), tag, 200)) for tag in ("a", "b", "c")]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert [w.exitcode for w in writers] == [0, 0, 0]
    cache = UserCache(tmp_path)
    assert len(cache) == 601
    assert cache.get("b-199") == ("reply b 199",)
    first = cache.get("shared")
    assert first is not None and cache.put("shared", "t", "m@u", 0, "late") == (first[0], False)  # the first reply stored wins
    assert cache.get("missing") is None
    cache.put("ended", "t", "m@u", 0, None)
    assert cache.get("ended") == (None,)  # the user ending the conversation is stored too
    cache.close()


# -- a failing agent cannot buy a re-roll by provoking the user (#32 item 7) ----------------------------------------


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("agent", sorted(GAMERS))
def test_a_failing_agent_that_provokes_a_user_fault_is_graded_and_repair_never_rerolls_it(shop_llm, tmp_path, agent, cached):
    """Before, each made every attempt a system error (`invented_fact`, `premature_stop`, `overlong_reply`) that
    `--repair` re-rolled: best-of-n for a policy that provokes only when failing. Now each is the agent's 0, noted, and
    stays, with or without a user cache (which never stores the flood)."""
    out, cache = tmp_path / "r.jsonl", ["--user-cache", str(tmp_path / "cache")] if cached else []
    with OpenAIStub(responder=Shop()) as stub:
        first = gs_run(stub, shop_llm, out, *cache, agent=agent, k="1")
        calls = len(stub.bodies(agent))
        repaired = gs_run(stub, shop_llm, out, "--repair", *cache, agent=agent, k="1")
        assert len(stub.bodies(agent)) == calls  # nothing was played again
        user_model = f"openai:user-model@{stub.base_url}"
    assert first.exit_code == 0, first.output
    records = read_records(out)
    assert {(r.reward, r.system_error) for r in records} == {(0, None)}, [r.verdict for r in records]
    for r in records:
        assert any("the agent provoked, not a user-simulator fault" in reason for reason in r.verdict.reasons), r.verdict
    assert repaired.exit_code == 0 and "0 attempts run (2 already done)" in repaired.output, repaired.output
    m = json.loads(cli.invoke(app, ["metrics", str(out), "--json"]).stdout)
    assert m["user_simulator_faults"][user_model]["faults"] == 0
    if agent == "agent-spam":  # the flood went nowhere: the conversation ended there
        assert out.stat().st_size < 20_000 and {r.finish_reason for r in records} == {"user_done"}
        assert not cached or stored(tmp_path / "cache") == 0


# -- one reply is at most MAX_REPLY_CHARS characters; the audit is linear (#32 item 14) ------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("audit", ["--user-audit", "--no-user-audit"])
def test_a_flooding_user_is_a_system_error_and_the_results_stay_small(shop_llm, tmp_path, audit):
    """A user model that answers with 400,000 characters of address-like text (what the quadratic e-mail pattern spent
    minutes on; `--no-user-audit` served it and wrote it into the results): a system error, audited or not, never
    stored in the cache, and the results file holds no copy of it."""
    cache, out = tmp_path / "cache", tmp_path / "r.jsonl"
    flood = "a." * 200_000
    with OpenAIStub(responder=Shop(flood=flood)) as stub:
        r = gs_run(stub, shop_llm, out, "--user-cache", str(cache), audit, k="1")
        agent_bodies = stub.bodies("agent-a")
    assert r.exit_code == 1, r.output  # every attempt a system error
    for record in read_records(out):
        assert record.system_error.startswith("user-simulator fault (overlong_reply): the reply is 400,000 characters"), record.system_error
    assert out.stat().st_size < 20_000
    assert all(flood not in json.dumps(b) for b in agent_bodies)  # the agent never saw it
    assert stored(cache) == 0


# -- a bad row in the user cache is evicted, not a system error forever (#32 item 16) --------------------------------


def _spoil(folder: Path, value: str) -> None:
    """Every stored reply replaced by the SQL expression `value` (what another tool or a damaged disk may leave)."""
    conn = sqlite3.connect(folder / CACHE_FILE)
    with conn:
        conn.execute(f"UPDATE user_replies SET reply = {value} WHERE reply IS NOT NULL")
    conn.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "bad, why",
    [
        ("CAST('It is order #1.' AS BLOB)", "stored as blob, not text"),
        ("CAST(X'4974206973206f7264657220ff23312e' AS TEXT)", "not UTF-8 text (invalid start byte at byte 12)"),
        ("'It is order #1. ' || hex(zeroblob(200000))", "longer than a reply may be"),
    ],
    ids=["blob", "not-utf8", "flood"],
)
def test_a_bad_row_in_the_user_cache_is_evicted_reported_and_regenerated(shop_llm, tmp_path, caplog, bad, why):
    cache = tmp_path / "cache"
    with OpenAIStub(responder=Shop()) as stub:
        assert gs_run(stub, shop_llm, tmp_path / "a.jsonl", "--user-cache", str(cache), k="1").exit_code == 0
        _spoil(cache, bad)
        again = gs_run(stub, shop_llm, tmp_path / "b.jsonl", "--user-cache", str(cache), k="1")
        third = gs_run(stub, shop_llm, tmp_path / "c.jsonl", "--user-cache", str(cache), k="1")
    assert again.exit_code == 0, again.output
    records = read_records(tmp_path / "b.jsonl")
    assert {(r.reward, r.system_error) for r in records} == {(1, None)}
    assert {r.user_replies.evicted for r in records} == {1}
    assert squash("2 bad rows evicted") in squash(again.output), again.output
    warned = [m for m in caplog.messages if "evicted the reply stored for task" in m]
    assert len(warned) == 2 and all(str(cache / CACHE_FILE) in m and why in m for m in warned), caplog.messages
    # evicted and regenerated: the next run is served from the cache, all clean
    assert third.exit_code == 0 and squash("4 user replies served from the cache, 0 generated") in squash(third.output), third.output
    assert all(r.user_replies.evicted == 0 for r in read_records(tmp_path / "c.jsonl"))


def test_a_reply_stored_as_text_that_is_not_utf8_is_evicted(tmp_path, caplog):
    cache = UserCache(tmp_path)
    cache.put("k", "t", "m@u", 0, "placeholder")
    cache._conn.execute("UPDATE user_replies SET reply = CAST(X'497420697320ff23312e' AS TEXT) WHERE key = 'k'")
    with pytest.raises(sqlite3.OperationalError, match="decode"):  # what every attempt met before: the row cannot be read
        cache._conn.execute("SELECT reply FROM user_replies WHERE key = 'k'").fetchone()
    with pytest.raises(BadCacheRow, match="not UTF-8 text"):
        cache.get("k")
    assert cache.put("k", "t", "m@u", 0, "fresh") == ("fresh", True)  # a writer that meets it replaces it
    assert cache.get("k") == ("fresh",)
    cache.close()
