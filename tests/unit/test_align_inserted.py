"""The grader matches inserted rows up to the order their generated ids were given in, and never more than that."""

from __future__ import annotations

import asyncio

from groundstate.agents.scripted import ScriptedAgent, ScriptedUser
from groundstate.attempt import play
from groundstate.domain import load_domain
from groundstate.state.changes import ChangeSet, RowChange, align_inserted, diff

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
    # `escalated_from` holds a ticket id but declares no foreign key: renaming the tickets would leave it pointing at
    # the wrong one, so the change sets are compared keyed (a false negative at worst, never a false positive)
    golden = cs(ticket(100, "printer", escalated_from=None), ticket(101, "vpn", escalated_from=100))
    swapped = cs(ticket(100, "vpn", escalated_from=101), ticket(101, "printer", escalated_from=None))
    assert align_inserted(golden, swapped, PK, REFS) is swapped
    as_text = cs(ticket(100, "vpn", memo="see ticket 101"), ticket(101, "printer", memo=None))
    golden_text = cs(ticket(100, "printer", memo=None), ticket(101, "vpn", memo="see ticket 100"))
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
