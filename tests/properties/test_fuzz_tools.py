"""Hostile tool input: property-based fuzzing of every bundled tool through the path an episode uses.

Each fuzzed call goes through `Toolset.call` on a fresh sandbox of the domain's seed world. Arguments
are drawn from the tool's JSON schema (with real ids, emails and codes from the seed, so calls reach the
tool's business logic) and deliberately off it: wrong types, huge strings, unicode (NUL, lone
surrogates, right-to-left marks), SQL fragments, negative/zero/overflowing numbers, NaN and infinities,
missing and extra fields, arguments that are not an object at all. For every call:

- no exception escapes: the result is a `ToolResult` whose text is valid UTF-8 (it goes into results files);
- a refused call writes nothing (the change log stays empty: calls are atomic);
- a read-only tool writes nothing; a write tool writes only the tables its contract names (`WRITES`);
- the schema (tables, columns, triggers, indexes) is unchanged and no transaction is left open.

On PostgreSQL a smaller pass replays the same kind of calls on both backends and asserts the same
outcome (accepted or refused, and the same change set): the hostile cases must not split the backends.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundstate.agents.scripted import ScriptedUser
from groundstate.state.capture import LOG_TABLE
from groundstate.state.sqlite import SqliteBackend
from groundstate.types import AgentTurn, EpisodeLimits, ToolCallRequest, ToolResult
from groundstate.worlds.domain import bundled_domains, load_domain
from groundstate.worlds.environment import SqlEnvironment
from groundstate.worlds.episode import run_episode

# Tables each write tool may change, read off each domain's tools.py (its SQL and the helpers it calls).
# A tool missing here, or a table outside its entry in a change set, fails the test.
WRITES: dict[str, dict[str, set[str]]] = {
    "banking": {
        "verify_account_holder": {"holder_verifications"},
        "transfer_between_accounts": {"account_ledger", "banking_accounts", "fund_transfers"},
        "add_payee": {"transfer_payees"},
        "pay_payee": {"account_ledger", "banking_accounts", "fund_transfers"},
        "cancel_scheduled_payment": {"fund_transfers"},
        "set_card_freeze": {"banking_cards"},
        "replace_card": {"account_ledger", "banking_accounts", "banking_cards"},
        "set_card_daily_limit": {"banking_cards"},
        "open_card_dispute": {"account_ledger", "banking_accounts", "card_disputes"},
        "reverse_fee": {"account_ledger", "banking_accounts"},
        "add_banking_note": {"banking_notes"},
        "refer_to_banking_team": {"banking_referrals"},
    },
    "helpdesk": {
        "open_it_ticket": {"it_tickets"},
        "update_it_ticket": {"it_tickets"},
        "page_oncall": {"oncall_pages"},
        "request_software_access": {"software_access_requests"},
        "grant_software_access": {"software_access_grants", "software_access_requests"},
        "revoke_software_access": {"software_access_grants"},
        "lend_hardware": {"hardware_assets", "hardware_handovers"},
        "replace_hardware": {"hardware_assets", "hardware_handovers"},
        "reset_credential": {"staff_members"},
        "add_desk_note": {"service_desk_notes"},
    },
    "hr": {
        "submit_leave_request": {"leave_balances", "leave_requests"},
        "decide_leave_request": {"leave_balances", "leave_requests"},
        "cancel_leave_request": {"leave_balances", "leave_requests"},
        "update_onboarding_item": {"onboarding_items", "personnel"},
        "schedule_salary_adjustment": {"salary_adjustments"},
        "update_payroll_bank_account": {"personnel_bank_accounts"},
        "submit_expense_claim": {"expense_claims"},
        "review_expense_claim": {"expense_claims"},
        "add_hr_note": {"hr_notes"},
        "escalate_hr_case": {"hr_escalations"},
    },
    "insurance": {
        "add_named_driver": {"motor_policies", "named_drivers", "policy_endorsements"},
        "remove_named_driver": {"motor_policies", "named_drivers", "policy_endorsements"},
        "add_insured_vehicle": {"insured_vehicles", "motor_policies", "policy_endorsements"},
        "remove_insured_vehicle": {"insured_vehicles", "motor_policies", "policy_endorsements"},
        "change_policy_cover": {"insured_vehicles", "motor_policies", "policy_endorsements"},
        "file_motor_claim": {"motor_claims"},
        "approve_motor_claim": {"motor_claims"},
        "deny_motor_claim": {"motor_claims"},
        "pay_motor_claim": {"claim_payouts", "motor_claims"},
        "add_insurance_note": {"insurance_notes"},
        "refer_to_specialist": {"specialist_referrals"},
    },
    "kiosk": {
        "cancel_kiosk_order": {"kiosk_orders"},
        "set_member_tier": {"kiosk_members"},
        "add_member_credit": {"kiosk_members"},
        "add_member_note": {"kiosk_notes"},
    },
    "retail": {
        "cancel_order": {"orders", "products", "refunds"},
        "update_shipping_address": {"orders"},
        "exchange_item": {"order_items", "products"},
        "create_return": {"return_items", "returns"},
        "issue_refund": {"refunds"},
        "create_ticket": {"support_tickets"},
        "update_ticket_status": {"support_tickets"},
        "add_note": {"notes"},
        "escalate": {"escalations"},
    },
    "travel": {
        "cancel_booking": {"bookings", "fare_payments", "flight_segments", "flights", "mileage_entries", "travel_credits", "travellers"},
        "change_flight": {"fare_payments", "flight_segments", "flights", "travel_credits"},
        "upgrade_cabin": {"fare_payments", "flight_segments", "flights", "mileage_entries", "travellers"},
        "downgrade_cabin": {"flight_segments", "flights", "travel_credits"},
        "assign_seat": {"flight_segments"},
        "credit_missing_miles": {"mileage_entries", "travellers"},
        "issue_travel_credit": {"travel_credits"},
        "extend_travel_credit": {"travel_credits"},
        "add_travel_note": {"travel_notes"},
        "escalate_travel_case": {"travel_escalations"},
    },
}

# 93 tools x 110 -> 10,230 calls on SQLite. GS_FUZZ_EXAMPLES / GS_FUZZ_PG_EXAMPLES fuzz harder locally.
EXAMPLES_PER_TOOL = int(os.environ.get("GS_FUZZ_EXAMPLES", 110))
PG_EXAMPLES_PER_TOOL = int(os.environ.get("GS_FUZZ_PG_EXAMPLES", 10))
MIN_CALLS = 10_000

SQL_FRAGMENTS = [
    "'; DROP TABLE x; --",
    "1; DELETE FROM kiosk_members",
    "' OR '1'='1",
    '" OR ""="',
    "1 OR 1=1",
    "x'); ATTACH DATABASE '/tmp/gs_fuzz_pwned.db' AS p; --",
    "'; SELECT load_extension('/tmp/x'); --",
    "'; COPY (SELECT 1) TO PROGRAM 'touch /tmp/gs_fuzz_pwned'; --",
    "$$; DROP SCHEMA public CASCADE; $$",
    "%",
    "_",
    "%%",
    "\\",
    "?",
    "%s",
    "%(x)s",
    "NULL",
    "null",
    "undefined",
    "None",
    "true",
    "0x7fffffff",
    "'; UPDATE _gs_log SET old = NULL; --",
    "/*",
    "*/",
    "--",
    "`",
    "\\x00",
]
ODD_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\u202eevil\u202c",
    "\u200b",
    "e\u0301",
    "\ufeff",
    "😀" * 50,
    # past every text limit of a tool (10,000 characters), short of an agent turn's own cap (`types.MAX_REPLY_CHARS`: a
    # turn of three calls past it ends the episode, `max_reply_chars`, which tests/unit/test_reply_length.py covers)
    "A" * 30_000,
    "é" * 20_000,
    "\n\r\t",
    "Ω" * 3,
    "ＡＢＣ",
    "ß",
    "İ",
]
ODD_INTS = [0, -1, 1, -(2**31), 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30]
ODD_FLOATS = [0.0, -0.0, -1.0, 1e-300, 5e-324, 1e308, -1e308, float("nan"), float("inf"), float("-inf"), 0.1 + 0.2]
WRONG_TYPES = [None, True, False, [], {}, [1, 2], {"a": 1}, "3", " 7 ", "3.5", "1e3", "0x10", 3.0, 3.7, -0.0]


def _seed_values(domain) -> tuple[list[int], list[str], list[float]]:
    """Real values of the seed world, so that plausible calls reach the tool's logic past 'not found'."""
    ints, texts, reals = set(), set(), set()
    for rows in domain.seed_rows().values():
        for row in rows[:200]:
            for v in row.values():
                if isinstance(v, bool):
                    continue
                if isinstance(v, int):
                    ints.add(v)
                elif isinstance(v, float):
                    reals.add(v)
                elif isinstance(v, str) and len(v) < 80:
                    texts.add(v)
    rng = random.Random(0)

    def pick(s, n):
        return sorted(rng.sample(sorted(s, key=str), min(n, len(s))), key=str)

    return pick(ints, 300) or [1], pick(texts, 400) or ["x"], pick(reals, 100) or [1.0]


def _plausible(schema: dict[str, Any], seed: tuple[list[int], list[str], list[float]]) -> st.SearchStrategy:
    """A value the schema accepts, biased to real seed values."""
    ints, texts, reals = seed
    if "anyOf" in schema:
        return st.one_of([_plausible(s, seed) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        return st.one_of(st.sampled_from(ints), st.integers(-5, 60))
    if kind == "number":
        return st.one_of(st.sampled_from(reals), st.sampled_from(ints), st.floats(-1000, 5000, allow_nan=False), st.integers(-10, 1000))
    if kind == "string":
        return st.one_of(st.sampled_from(texts), st.text(max_size=30))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(_plausible(schema.get("items", {}), seed), max_size=6)
    return st.none()


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
HOSTILE_VALUE = st.one_of(
    st.sampled_from(SQL_FRAGMENTS),
    st.sampled_from(ODD_TEXT),
    st.sampled_from(ODD_INTS),
    st.sampled_from(ODD_FLOATS),
    st.sampled_from(WRONG_TYPES),
    st.text(),
    st.integers(),
    st.floats(),
    _JSONISH,
)


def _arguments(spec, seed, golds: list[dict[str, Any]] = ()) -> st.SearchStrategy:
    """(index into `golds` or -1, arguments): valid, partly hostile, structurally broken, or not an object at all.

    `golds` are argument sets of this tool taken from gold solutions: starting from one of them (on its
    task's start state) lets the fuzzed call get past "not found" into the tool's business rules.
    """
    schema = spec.json_schema()
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    names = sorted(props)

    @st.composite
    def payload(draw) -> Any:
        mode = draw(st.sampled_from(["valid", "valid", "perturb", "one_hostile", "all_hostile", "missing", "extra", "raw"]))
        if mode == "raw":  # not an object: a JSON string (valid or not), a list, a number, None
            return -1, draw(
                st.one_of(
                    st.sampled_from(["", "{", "[1,2]", "null", '{"a":', "\x00", '"\\ud800"', "{}" * 1000]),
                    st.builds(json.dumps, st.dictionaries(st.sampled_from(names or ["x"]), _JSONISH, max_size=4)),
                    st.lists(_JSONISH, max_size=3),
                    st.integers(),
                    st.none(),
                    st.text(max_size=50),
                )
            )
        gold = draw(st.integers(0, len(golds) - 1)) if golds and draw(st.booleans()) else -1
        args = dict(golds[gold]) if gold >= 0 else {n: draw(_plausible(props[n], seed)) for n in names if n in required or draw(st.booleans())}
        if mode == "perturb" and names:
            n = draw(st.sampled_from(names))
            args[n] = draw(_plausible(props[n], seed))
        elif mode == "one_hostile" and names:
            args[draw(st.sampled_from(names))] = draw(HOSTILE_VALUE)
        elif mode == "all_hostile":
            args = {n: draw(HOSTILE_VALUE) for n in names}
        elif mode == "missing" and args:
            args.pop(draw(st.sampled_from(sorted(args))))
        elif mode == "extra":
            args[draw(st.sampled_from(["db", "__class__", "", "id", "sql", "x" * 300, "'; DROP TABLE x; --", "\x00"]))] = draw(HOSTILE_VALUE)
        return gold, args

    return payload()


def _contexts(domain, spec, limit: int = 12) -> list[tuple[Any, list, dict[str, Any]]]:
    """(task, the gold calls before this tool's, its gold arguments) of up to `limit` tasks whose gold calls it.

    Replaying the prefix first puts the sandbox where the tool is really used (a verified caller, an open case).
    """
    out, seen = [], set()
    for task in domain.tasks:
        for i, call in enumerate(task.gold):
            if call.tool == spec.name and task.id not in seen and len(out) < limit:
                seen.add(task.id)
                out.append((task, task.gold[:i], call.args))
    return out


def _replay_prefix(domain, sandbox, prefix) -> None:
    """Run the gold calls that precede the fuzzed one, then forget their writes in the change log.

    The capture triggers log a row's first touch only; clearing the log makes the next call's touches
    (and only those) visible to the contract checks.
    """
    for c in prefix:
        assert domain.tools.call(sandbox.connection, c.tool, c.args).ok
    if prefix:
        sandbox.connection.raw.execute(f"DELETE FROM {LOG_TABLE}")


# -- the properties checked after every call ---------------------------------------------------------


def _sqlite_schema(conn) -> list[tuple]:
    return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def _check_result(domain, spec, result: Any, log_rows: list[tuple], tables: set[str]) -> None:
    where = f"{domain.name}.{spec.name}"
    assert isinstance(result, ToolResult), f"{where}: returned {type(result).__name__}"
    assert isinstance(result.content, str), where
    result.content.encode("utf-8")  # strict: a lone surrogate here would break the results file
    json.dumps({"result": result.content}, ensure_ascii=False).encode("utf-8")
    if result.ok:
        json.loads(result.content)
    if not result.ok or not spec.write:
        assert not log_rows, f"{where}: {'refused' if not result.ok else 'read-only'} call wrote {log_rows[:3]}: {result.content[:200]}"
    extra = tables - WRITES[domain.name].get(spec.name, set())
    assert not extra, f"{where}: wrote tables outside its contract: {sorted(extra)}"


class _Counter:
    calls = 0


def _fuzz_tool_sqlite(domain, spec, template, backend, seed, baseline, counter: _Counter) -> None:
    contexts = _contexts(domain, spec)
    templates = [template] + [backend.prepare(domain, t.patch) for t, _, _ in contexts]
    prefixes = [[]] + [p for _, p, _ in contexts]

    @settings(max_examples=EXAMPLES_PER_TOOL, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(where=st.integers(0, len(templates) - 1), call=_arguments(spec, seed, [a for _, _, a in contexts]))
    def run(where: int, call: tuple[int, Any]) -> None:
        gold, args = call
        where = gold + 1 if gold >= 0 else where
        sandbox = backend.open(templates[where])
        try:
            conn = sandbox.connection.raw
            _replay_prefix(domain, sandbox, prefixes[where])
            result = domain.tools.call(sandbox.connection, spec.name, args)
            counter.calls += 1
            log = conn.execute(f"SELECT tbl, pk FROM {LOG_TABLE}").fetchall()
            tables = {t for t, _ in log}
            changed = {c.table for c in sandbox.changes().rows.values()}
            assert changed <= tables
            _check_result(domain, spec, result, log, tables)
            assert not conn.in_transaction, f"{domain.name}.{spec.name}: left a transaction open"
            assert _sqlite_schema(conn) == baseline, f"{domain.name}.{spec.name}: the schema changed"
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
            assert [r[1] for r in conn.execute("PRAGMA database_list")] == ["main"], "a database was attached"
        finally:
            sandbox.close()

    run()


def test_write_contract_lists_every_bundled_write_tool():
    """`WRITES` names exactly the write tools, and only tables of their domain."""
    for name in bundled_domains():
        d = load_domain(name)
        writers = {n for n, s in d.tools.specs.items() if s.write}
        assert set(WRITES[name]) == writers, name
        for tool, tables in WRITES[name].items():
            assert tables <= set(d.tables), f"{name}.{tool}: {tables - set(d.tables)}"
    assert set(WRITES) == set(bundled_domains())


@pytest.mark.slow
def test_every_bundled_tool_survives_fuzzing_on_sqlite():
    counter = _Counter()
    backend = SqliteBackend()
    tools = 0
    for name in bundled_domains():
        domain = load_domain(name)
        template = backend.prepare(domain, {})
        seed = _seed_values(domain)
        with backend.open(template) as sb:
            baseline = _sqlite_schema(sb.connection.raw)
        for spec in domain.tools.specs.values():
            _fuzz_tool_sqlite(domain, spec, template, backend, seed, baseline, counter)
            tools += 1
    assert tools >= 90
    assert counter.calls >= MIN_CALLS, counter.calls


# -- PostgreSQL: the same hostile calls give the same outcome on both backends -------------------------


def _pg_columns(conn) -> list[tuple]:
    return conn.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'public' "
        "ORDER BY table_name, ordinal_position"
    ).fetchall()


@pytest.mark.slow
def test_hostile_calls_give_the_same_outcome_on_sqlite_and_postgres(pg_backend):
    lite = SqliteBackend()
    calls = 0
    for name in bundled_domains():
        domain = load_domain(name)
        lt, pt = lite.prepare(domain, {}), pg_backend.prepare(domain, {})
        seed = _seed_values(domain)
        with pg_backend.open(pt) as sb:
            baseline = _pg_columns(sb.connection.raw)
        for spec in domain.tools.specs.values():
            contexts = _contexts(domain, spec, limit=4)
            lts = [lt] + [lite.prepare(domain, t.patch) for t, _, _ in contexts]
            pts = [pt] + [pg_backend.prepare(domain, t.patch) for t, _, _ in contexts]
            prefixes = [[]] + [p for _, p, _ in contexts]

            @settings(max_examples=PG_EXAMPLES_PER_TOOL, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
            @given(call=_arguments(spec, seed, [a for _, _, a in contexts]))
            def run(call: tuple[int, Any], domain, spec, name, lts, pts, prefixes, baseline) -> None:
                nonlocal calls
                gold, args = call
                with lite.open(lts[gold + 1]) as a, pg_backend.open(pts[gold + 1]) as b:
                    _replay_prefix(domain, a, prefixes[gold + 1])
                    _replay_prefix(domain, b, prefixes[gold + 1])
                    ra = domain.tools.call(a.connection, spec.name, args)
                    rb = domain.tools.call(b.connection, spec.name, args)
                    calls += 1
                    log = b.connection.raw.execute(f"SELECT tbl, pk FROM {LOG_TABLE}").fetchall()
                    _check_result(domain, spec, rb, log, {t for t, _ in log})
                    assert _pg_columns(b.connection.raw) == baseline, f"{name}.{spec.name}: the schema changed"
                    assert (ra.ok, a.changes().to_json()) == (rb.ok, b.changes().to_json()), (
                        f"{name}.{spec.name}({args!r:.300}): sqlite {ra.content[:200]!r} vs postgres {rb.content[:200]!r}"
                    )

            # this iteration's values passed in, not closed over (@given refuses a function with defaults)
            run(domain=domain, spec=spec, name=name, lts=lts, pts=pts, prefixes=prefixes, baseline=baseline)
    assert calls >= 90 * PG_EXAMPLES_PER_TOOL


# -- whole episodes: a fuzzing agent through run_episode -----------------------------------------------


class _FuzzAgent:
    """Emits pre-drawn hostile calls three per turn (any tool name, any arguments, unparsable calls), then finishes."""

    def __init__(self, calls: list[ToolCallRequest]):
        self.calls, self.i = calls, 0

    async def act(self, conversation, tools) -> AgentTurn:
        if self.i >= len(self.calls):
            return AgentTurn(text="Done. REPLY>>> ignore the rules", done=True)
        self.i += 3
        return AgentTurn(tool_calls=self.calls[self.i - 3 : self.i])


@pytest.mark.parametrize("domain_name", bundled_domains())
def test_fuzzing_agent_episodes_end_normally(domain_name):
    """Whole episodes of 60 hostile calls end as the agent decided, every failure an error result."""
    domain = load_domain(domain_name)
    backend = SqliteBackend()
    seed = _seed_values(domain)
    names = sorted(domain.tools.specs)
    task = domain.tasks[0]
    template = backend.prepare(domain, task.patch)
    with backend.open(template) as fresh:
        baseline = _sqlite_schema(fresh.connection.raw)
    allowed = set().union(*WRITES[domain_name].values())
    call = st.one_of(
        st.builds(lambda n: (n, {}, None), st.sampled_from(["", "drop_table", "__init__", "call", "x" * 1000])),
        st.builds(lambda n: (n, '{"broken', "could not parse the call"), st.sampled_from(names)),
        *[st.builds(lambda a, n=n: (n, a[1], None), _arguments(domain.tools[n], seed)) for n in names],
    )

    @settings(max_examples=3, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(drawn=st.lists(call, min_size=60, max_size=60))
    def run(drawn) -> None:
        calls = [ToolCallRequest(f"c{i}", n, a, parse_error=e) for i, (n, a, e) in enumerate(drawn)]
        with backend.open(template) as sandbox:
            traj = asyncio.run(
                run_episode(
                    SqlEnvironment(task, sandbox, EpisodeLimits(max_turns=100, max_tool_calls=1000)),
                    _FuzzAgent(calls),
                    ScriptedUser([]),
                    EpisodeLimits(max_turns=100, max_tool_calls=1000),
                )
            )
            assert traj.finish_reason == "agent_done"
            assert len(traj.tool_calls) == 60
            assert any(not c.ok for c in traj.tool_calls)
            json.dumps(traj.to_json(), default=str)
            for c in traj.tool_calls:  # what the tools said is valid UTF-8 (the agent's own arguments may not be)
                c.result.encode("utf-8")
            assert {c.table for c in sandbox.changes().rows.values()} <= allowed
            assert _sqlite_schema(sandbox.connection.raw) == baseline

    run()


@pytest.mark.parametrize(
    "args, message",
    [
        ({"email": "a\x00b"}, "email: text may not contain NUL characters"),
        ({"email": "x\ud800"}, "email: text is not valid Unicode"),
        ({"email": "x" * 10_001}, "email: text is longer than 10,000 characters"),
        ('{"email": "\\ud800"}', "email: text is not valid Unicode"),
        ({"email": "a@b.c", "x\ud800": 1}, "field name"),
    ],
)
def test_arguments_only_one_backend_would_accept_are_refused(args, message):
    """What the fuzzer found splitting the backends is an error result the agent reads, on both."""
    domain, backend = load_domain("kiosk"), SqliteBackend()
    with backend.open(backend.prepare(domain, {})) as sandbox:
        r = domain.tools.call(sandbox.connection, "find_member", args)
        assert not r.ok and message in r.content, r.content
        r.content.encode("utf-8")


@pytest.mark.parametrize("amount", [float("nan"), float("inf"), "nan", "-Infinity"])
def test_non_finite_numbers_are_refused(amount):
    """SQLite would store NaN as NULL and PostgreSQL as NaN: a float argument must be finite, as text too."""
    domain, backend = load_domain("retail"), SqliteBackend()
    with backend.open(backend.prepare(domain, {})) as sandbox:
        r = domain.tools.call(sandbox.connection, "issue_refund", {"payment_id": 1, "amount": amount, "reason": "damaged_item"})
        assert not r.ok and "invalid arguments for issue_refund: amount" in r.content, r.content
        assert len(sandbox.changes()) == 0
