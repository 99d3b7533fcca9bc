"""The grader matches inserted rows up to the order their generated ids were given in, and never more than that."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.grading.grader import grade, replay
from groundstate.state.changes import ChangeSet, RowChange, _rename, align_inserted, diff
from groundstate.tasks import Task
from groundstate.worlds.attempt import play
from groundstate.worlds.domain import Domain, load_domain

PK = {"tickets": ["id"], "notes": ["id"], "staff": ["id"]}
REFS = {"tickets": [("notes", "ticket_id")], "staff": [("tickets", "staff_id")]}


def cs(*rows: tuple[str, int, dict | None, dict | None]) -> ChangeSet:
    return ChangeSet.from_changes(RowChange(t, (k,), before, after) for t, k, before, after in rows)


def ticket(i: int, subject: str, staff: int = 7, **extra) -> tuple:
    return ("tickets", i, None, {"id": i, "subject": subject, "staff_id": staff, **extra})


def note(i: int, ticket_id: int, body: str) -> tuple:
    return ("notes", i, None, {"id": i, "ticket_id": ticket_id, "body": body})


GOLDEN = cs(ticket(100, "printer"), ticket(101, "vpn"), note(50, 100, "toner"), note(51, 101, "token"))


def test_inserts_made_in_the_other_order_match_with_their_references():
    swapped = cs(ticket(100, "vpn"), ticket(101, "printer"), note(50, 101, "toner"), note(51, 100, "token"))
    assert diff(GOLDEN, swapped)  # keyed, they differ
    aligned = align_inserted(GOLDEN, swapped, PK, REFS)
    assert diff(GOLDEN, aligned) == [] and aligned.rows == GOLDEN.rows


def test_a_reference_to_the_wrong_new_row_is_not_renamed_away():
    # the notes point at the other ticket than the golden state's: no renaming makes the two equal
    crossed = cs(ticket(100, "vpn"), ticket(101, "printer"), note(50, 100, "toner"), note(51, 101, "token"))
    assert align_inserted(GOLDEN, crossed, PK, REFS) is crossed and diff(GOLDEN, crossed)


def test_rows_that_differ_beyond_their_keys_are_compared_keyed():
    other = cs(ticket(100, "vpn"), ticket(101, "printers"), note(50, 101, "toner"), note(51, 100, "token"))
    assert align_inserted(GOLDEN, other, PK, REFS) is other


def test_a_new_id_in_a_column_without_a_declared_foreign_key_blocks_renaming():
    # `escalated_from` holds a ticket id but declares no foreign key, so a renaming cannot follow it. The attempt opened
    # vpn first, escalated from itself (100): renaming its tickets makes it equal to the golden state (asserted, so the
    # test is not vacuous), yet vpn escalates from the wrong ticket: the change sets must compare keyed
    golden = cs(ticket(100, "printer", escalated_from=None), ticket(101, "vpn", escalated_from=100))
    wrong = cs(ticket(100, "vpn", escalated_from=100), ticket(101, "printer", escalated_from=None))
    assert _rename(wrong, {"tickets": {100: 101, 101: 100}}, PK, REFS).rows == golden.rows
    assert align_inserted(golden, wrong, PK, REFS) is wrong
    golden_text = cs(ticket(100, "printer", memo=None), ticket(101, "vpn", memo="see ticket 100"))
    as_text = cs(ticket(100, "vpn", memo="see ticket 100"), ticket(101, "printer", memo=None))
    assert _rename(as_text, {"tickets": {100: 101, 101: 100}}, PK, REFS).rows == golden_text.rows
    assert align_inserted(golden_text, as_text, PK, REFS) is as_text


def test_alike_rows_are_tried_in_every_order_and_updates_of_old_rows_follow_the_renaming():
    refs = {**REFS, "tickets": [("notes", "ticket_id"), ("staff", "last_ticket")]}
    golden = cs(ticket(100, "same"), ticket(101, "same"), note(50, 101, "second"))
    mine = cs(ticket(100, "same"), ticket(101, "same"), note(50, 100, "second"))
    assert align_inserted(golden, mine, PK, refs).rows == golden.rows  # the two alike tickets tried both ways
    staff = ("staff", 7, {"id": 7, "last_ticket": None})
    golden = cs(ticket(100, "printer"), ticket(101, "vpn"), (*staff, {"id": 7, "last_ticket": 101}))
    mine = cs(ticket(100, "vpn"), ticket(101, "printer"), (*staff, {"id": 7, "last_ticket": 100}))
    assert align_inserted(golden, mine, PK, refs).rows == golden.rows
    wrong = cs(ticket(100, "vpn"), ticket(101, "printer"), (*staff, {"id": 7, "last_ticket": 101}))
    assert align_inserted(golden, wrong, PK, refs) is wrong


def test_the_grader_passes_independent_writes_in_the_other_order_on_every_backend(backend):
    domain = load_domain("banking")
    task = domain.task("banking-stolen-wallet-001")
    gold = [c.model_dump() for c in task.gold]

    def reward(calls):
        out = asyncio.run(play(task, domain, ScriptedAgent(calls), ScriptedUser(task.user.script), backend=backend))
        assert out.verdict.system_error is None
        return out.verdict.state_reward

    swapped = gold[:5] + [gold[6], gold[5]] + gold[7:]  # replace card 92, dispute entry 6484: both insert ledger rows
    assert reward(swapped) == 1
    wrong = [dict(c) for c in swapped]
    wrong[5] = {**gold[6], "args": {**gold[6]["args"], "provisional_credit": False}}
    assert reward(wrong) == 0


def _keyed(*rows: tuple) -> ChangeSet:
    return ChangeSet.from_changes(RowChange(t, k if isinstance(k, tuple) else (k,), b, a) for t, k, b, a in rows)


def T(i: int, subject: str, **extra) -> tuple:
    return ("tickets", i, None, {"id": i, "subject": subject, **extra})


def _passes(golden: ChangeSet, mine: ChangeSet, pk: dict, refs: dict) -> bool:
    return diff(golden, align_inserted(golden, mine, pk, refs)) == []


def test_wrong_work_found_by_the_hostile_review_still_fails():
    swapped = (T(100, "vpn"), T(101, "printer"))
    golden = (T(100, "printer"), T(101, "vpn"))
    ext = ("details", 100, None, {"ticket_id": 100, "prio": "urgent"}), ("details", 101, None, {"ticket_id": 101, "prio": "low"})
    # a one-to-one table keyed by the ticket's id, with or without a foreign key, whatever its name sorts as: the
    # urgent flag must stay on the printer ticket
    for name in ("details", "tickets_ext"):
        rows = tuple((name, *r[1:]) for r in ext)
        pk = {"tickets": ["id"], name: ["ticket_id"]}
        for refs in ({"tickets": [(name, "ticket_id")]}, {}):
            assert not _passes(_keyed(*golden, *rows), _keyed(*swapped, *rows), pk, refs), (name, refs)
    # a composite key holding a ticket id without a foreign key
    tags = ("ticket_tags", (100, "hw"), None, {"ticket_id": 100, "tag": "hw"}), ("ticket_tags", (101, "net"), None, {"ticket_id": 101, "tag": "net"})
    pk = {"tickets": ["id"], "ticket_tags": ["ticket_id", "tag"]}
    assert not _passes(_keyed(*golden, *tags), _keyed(*swapped, *tags), pk, {})
    # ... which, declared, renames with the ticket: the right work passes
    moved = ("ticket_tags", (101, "hw"), None, {"ticket_id": 101, "tag": "hw"}), ("ticket_tags", (100, "net"), None, {"ticket_id": 100, "tag": "net"})
    assert _passes(_keyed(*golden, *tags), _keyed(*swapped, *moved), pk, {"tickets": [("ticket_tags", "ticket_id")]})
    # an id stored as text in a declared column, or standing in a compared text however it is written
    note = ("notes", 50, None, {"id": 50, "ticket_id": "100", "body": "toner"})
    assert not _passes(_keyed(*golden, note), _keyed(*swapped, note), {"tickets": ["id"], "notes": ["id"]}, {"tickets": [("notes", "ticket_id")]})
    for text in ("Escalated ticket 100.", "refs 100.0", '{"ticket":100.0}', "ids 100,101"):
        log = ("log", 9, None, {"id": 9, "msg": text})
        assert not _passes(_keyed(*golden, log), _keyed(*swapped, log), {"tickets": ["id"], "log": ["id"]}, {}), text
    dated = ("log", 9, None, {"id": 9, "msg": "2026-05-10"})  # an ISO date is not a number: 10 is no ticket id here
    pk = {"tickets": ["id"], "log": ["id"]}
    assert _passes(_keyed(T(10, "printer"), T(11, "vpn"), dated), _keyed(T(10, "vpn"), T(11, "printer"), dated), pk, {})


def test_keys_that_are_not_generated_integers_compare_keyed_without_crashing():
    for golden, mine in (
        (
            _keyed(("codes", "a", None, {"code": "a"}), ("codes", 1, None, {"code": 1})),
            _keyed(("codes", "a", None, {"code": "a"}), ("codes", 2, None, {"code": 2})),
        ),
        (
            _keyed(("codes", None, None, {"code": None}), ("codes", "b", None, {"code": "b"})),
            _keyed(("codes", None, None, {"code": None}), ("codes", "c", None, {"code": "c"})),
        ),
    ):
        assert align_inserted(golden, mine, {"codes": ["code"]}, {}) is mine


# -- #32.1: only a new row's own key is exempt from the undeclared-id check ------------------------------------------


def _wrong_but_renamable(golden: ChangeSet, mine: ChangeSet, pk: dict, refs: dict) -> bool:
    """Some renaming of the inserted ids makes `mine` equal to `golden` (so the check, not luck, must refuse it)."""
    tables = sorted({t for (t, _), c in golden.rows.items() if c.before is None and len(pk[t]) == 1})
    ids = {t: sorted(k[0] for (u, k), c in golden.rows.items() if u == t and c.before is None) for t in tables}
    for perms in itertools.product(*(itertools.permutations(ids[t]) for t in tables)):
        renaming = {t: dict(zip(ids[t], p, strict=True)) for t, p in zip(tables, perms, strict=True)}
        if _rename(mine, renaming, pk, refs).rows == golden.rows:
            return True
    return False


def E(i: int, subject: str, escalated_from: int | None = None, key: str = "id", **extra) -> tuple:
    """A new ticket, keyed by the column `key`."""
    return ("tickets", i, None, {key: i, "subject": subject, "escalated_from": escalated_from, **extra})


def wrong_references(key: str) -> dict[str, tuple[tuple, tuple]]:
    """(golden rows, attempt rows) where the attempt points `escalated_from` at the wrong ticket, yet a renaming of the
    new tickets' ids alone would make the two equal."""
    old = {key: 5, "subject": "old", "escalated_from": None}
    return {
        # gold: printer, then vpn escalated from printer. The attempt: vpn first, escalated from itself, then printer
        "self reference": ((E(100, "printer", key=key), E(101, "vpn", 100, key)), (E(100, "vpn", 100, key), E(101, "printer", key=key))),
        # gold also opens mail; the attempt opens mail first and escalates vpn from it: a third ticket
        "third ticket": (
            (E(100, "printer", key=key), E(101, "vpn", 100, key), E(102, "mail", key=key)),
            (E(100, "mail", key=key), E(101, "printer", key=key), E(102, "vpn", 100, key)),
        ),
        # an old ticket escalated from the new printer ticket, in the attempt from the new vpn ticket
        "old row refers to a new one": (
            (E(100, "printer", key=key), E(101, "vpn", key=key), ("tickets", 5, old, {**old, "escalated_from": 100})),
            (E(100, "vpn", key=key), E(101, "printer", key=key), ("tickets", 5, old, {**old, "escalated_from": 100})),
        ),
    }


@pytest.mark.parametrize("key", ["id", "case_no"])
@pytest.mark.parametrize("case", sorted(wrong_references("id")))
def test_an_undeclared_reference_to_a_new_row_of_the_same_table_blocks_renaming(case, key):
    golden_rows, mine_rows = wrong_references(key)[case]
    golden, mine, pk = _keyed(*golden_rows), _keyed(*mine_rows), {"tickets": [key]}
    assert _wrong_but_renamable(golden, mine, pk, {})  # not vacuous: only the check stands between it and a pass
    assert not _passes(golden, mine, pk, {})
    # declared, the same column follows the renaming, and the wrong reference shows
    assert not _passes(golden, mine, pk, {"tickets": [("tickets", "escalated_from")]})


def test_a_declared_self_reference_follows_the_renaming():
    pk, refs = {"tickets": ["id"]}, {"tickets": [("tickets", "escalated_from")]}
    golden = _keyed(E(100, "printer"), E(101, "vpn", 100), E(102, "mail"))
    for right in (
        _keyed(E(100, "vpn", 101), E(101, "printer"), E(102, "mail")),
        _keyed(E(100, "mail"), E(101, "vpn", 102), E(102, "printer")),
    ):
        assert _passes(golden, right, pk, refs)
        assert not _passes(golden, right, pk, {})  # undeclared: compared keyed (a false negative, never a false positive)


def test_a_number_that_may_name_another_tables_row_blocks_renaming():
    # `asset` declares nothing: 100 may be asset 100 (untouched) or the new ticket 100; the grader cannot tell, so it
    # compares keyed. A composite key holding a new id blocks too; an old row's key does not (it existed before them)
    golden = _keyed(E(100, "printer", asset=None), E(101, "vpn", asset=100))
    mine = _keyed(E(100, "vpn", asset=100), E(101, "printer", asset=None))
    pk = {"tickets": ["id"]}
    assert _wrong_but_renamable(golden, mine, pk, {}) and not _passes(golden, mine, pk, {})
    pk = {"tickets": ["id"], "watch": ["ticket_id", "staff_id"]}
    old_watch = ("watch", (3, 100), {"ticket_id": 3, "staff_id": 100, "on": 0}, {"ticket_id": 3, "staff_id": 100, "on": 1})
    assert _passes(_keyed(E(100, "printer"), E(101, "vpn"), old_watch), _keyed(E(100, "vpn"), E(101, "printer"), old_watch), pk, {})
    new_watch = ("watch", (3, 100), None, {"ticket_id": 3, "staff_id": 100, "on": 1})
    assert not _passes(_keyed(E(100, "printer"), E(101, "vpn"), new_watch), _keyed(E(100, "vpn"), E(101, "printer"), new_watch), pk, {})


def test_text_keys_with_a_self_reference_compare_keyed():
    pk = {"tickets": ["code"]}
    golden = _keyed(
        ("tickets", "T-1", None, {"code": "T-1", "subject": "printer", "escalated_from": None}),
        ("tickets", "T-2", None, {"code": "T-2", "subject": "vpn", "escalated_from": "T-1"}),
    )
    mine = _keyed(
        ("tickets", "T-1", None, {"code": "T-1", "subject": "vpn", "escalated_from": "T-1"}),
        ("tickets", "T-2", None, {"code": "T-2", "subject": "printer", "escalated_from": None}),
    )
    assert align_inserted(golden, mine, pk, {"tickets": [("tickets", "escalated_from")]}) is mine


# the issue's world: tickets escalated from other tickets, with the reference undeclared or declared
ESCALATION_TOOLS = '''
from groundstate.tools import ToolError, tool


@tool(write=True)
def open_ticket(db, subject: str, escalated_from: int | None = None) -> dict:
    """Open a ticket.

    Args:
        subject: What it is about.
        escalated_from: The ticket it escalates, if any.
    """
    new = db.insert("tickets", subject=subject, escalated_from=escalated_from)
    if escalated_from is not None and db.one("SELECT id FROM tickets WHERE id = ?", escalated_from) is None:
        raise ToolError(f"no ticket {escalated_from}")  # after the insert: a failed call whose insert is rolled back
    return {"ticket_id": new}


@tool(write=True)
def escalate(db, ticket_id: int, escalated_from: int) -> dict:
    """Record which ticket a ticket escalates.

    Args:
        ticket_id: The ticket.
        escalated_from: The ticket it escalates.
    """
    db.execute("UPDATE tickets SET escalated_from = ? WHERE id = ?", escalated_from, ticket_id)
    return {"ticket_id": ticket_id}
'''


@pytest.fixture(scope="module")
def escalations(tmp_path_factory) -> dict[str, Domain]:
    out = {}
    for kind, column in (("undeclared", "escalated_from INTEGER"), ("declared", "escalated_from INTEGER REFERENCES tickets (id)")):
        folder = tmp_path_factory.mktemp(kind)
        (folder / "domain.yaml").write_text(f"name: escalations_{kind}\ntoday: '2026-03-01'\n")
        (folder / "schema.sql").write_text(f"CREATE TABLE tickets (id INTEGER PRIMARY KEY, subject TEXT NOT NULL, {column});\n")
        (folder / "seed.py").write_text(
            "def generate(rng, scale=1.0):\n    return {'tickets': [{'id': i, 'subject': f'old {i}', 'escalated_from': None} for i in range(1, 6)]}\n"
        )
        (folder / "tools.py").write_text(ESCALATION_TOOLS)
        out[kind] = Domain(folder)
    return out


def _open(subject: str, escalated_from: int | None = None) -> dict:
    return {"tool": "open_ticket", "args": {"subject": subject, **({} if escalated_from is None else {"escalated_from": escalated_from})}}


def _escalate(ticket: int, escalated_from: int) -> dict:
    return {"tool": "escalate", "args": {"ticket_id": ticket, "escalated_from": escalated_from}}


# new tickets get ids 6, 7, 8 (after the five seeded ones). Golds: printer, then vpn escalated from printer; the same
# and mail; printer and vpn, and old ticket 1 escalated from printer
GOLDS = {
    "two": [_open("printer"), _open("vpn", 6)],
    "three": [_open("printer"), _open("vpn", 6), _open("mail")],
    "old": [_open("printer"), _open("vpn"), _escalate(1, 6)],
}
ATTEMPTS = [  # (gold, calls, reward with the reference undeclared, reward with it declared)
    ("two", GOLDS["two"], 1, 1),
    ("two", [_open("printer", 99), *GOLDS["two"]], 1, 1),  # a failed call's insert is rolled back: the same ids
    ("two", [_open("vpn", 6), _open("printer")], 0, 0),  # vpn first, escalated from itself
    ("two", [_open("printer"), _open("vpn", 7)], 0, 0),  # right order, escalated from itself
    ("two", [_open("vpn"), _open("printer"), _escalate(6, 7)], 0, 1),  # right work in the other order: undeclared, keyed
    ("three", [_open("mail"), _open("printer"), _open("vpn", 6)], 0, 0),  # vpn escalated from a third ticket
    ("three", [_open("mail"), _open("vpn"), _open("printer"), _escalate(7, 8)], 0, 1),
    ("old", [_open("vpn"), _open("printer"), _escalate(1, 6)], 0, 0),  # an old ticket escalated from the wrong new one
    ("old", [_open("vpn"), _open("printer"), _escalate(1, 7)], 0, 1),
]


@pytest.mark.parametrize("kind", ["undeclared", "declared"])
def test_the_grader_rejects_every_wrong_escalation_on_every_backend(backend, escalations, kind):
    domain = escalations[kind]
    got, want = [], []
    for i, (gold, calls, undeclared, declared) in enumerate(ATTEMPTS):
        task = Task(id=f"escalate-{gold}", domain=domain.name, instruction="Open the tickets.", gold=GOLDS[gold])
        with backend.open(backend.prepare(domain, task.patch)) as sandbox:
            replay(sandbox, calls)
            verdict = grade(task, sandbox)
        assert verdict.system_error is None, verdict.system_error
        got.append((i, verdict.state_reward))
        want.append((i, undeclared if kind == "undeclared" else declared))
    assert got == want
