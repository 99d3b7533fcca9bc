"""The false-negative audit: valid alternative solutions must pass, invalid ones are recognised, and a check that
punishes a valid alternative is found."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from groundstate.audits.alternatives import REWORD_PREFIX, audit
from groundstate.state.sqlite import SqliteBackend
from groundstate.tasks import TaskFileError
from groundstate.worlds.domain import Domain, load_domain

SHOP = Path(__file__).parents[1] / "fixtures" / "shop"


def outcomes(task_id: str, domain: Domain) -> dict[str, tuple[str, str]]:
    report = asyncio.run(audit(domain.task(task_id), domain, SqliteBackend()))
    assert not report.problems, report.problems
    return {r.description: (r.outcome, r.reason) for r in report.results}


def shop_copy(tmp_path: Path, tasks: str | None = None, config: str = "") -> Domain:
    shop = tmp_path / "shop"
    shutil.copytree(SHOP, shop)
    if tasks is not None:
        (shop / "tasks" / "basic.yaml").write_text(tasks)
    if config:
        (shop / "domain.yaml").write_text((shop / "domain.yaml").read_text() + config)
    return Domain(shop)


def test_reads_added_repeated_and_writes_reordered_are_accepted():
    got = outcomes("shop-multi", Domain(SHOP))
    assert got["find_customer(email='c3@example.com') added before call 0"][0] == "accepted"
    assert got["find_customer(email='c3@example.com') added after the last call"][0] == "accepted"
    assert got["call 0 (find_customer) made twice"][0] == "accepted"
    # set_tier writes customers 3, set_total orders 3: disjoint rows, either order; set_total and cancel_order both
    # write orders 3, so they are never swapped
    assert got["calls 1 (set_tier) and 2 (set_total) swapped"][0] == "accepted"
    assert not any("2 (set_total) and 3 (cancel_order)" in d for d in got)
    assert {o for o, _ in got.values()} == {"accepted"}


def test_rewording_free_text_is_accepted_and_a_check_on_its_wording_is_a_false_negative(tmp_path):
    got = outcomes("shop-refuse", Domain(SHOP))
    assert got["call 1 (add_note): body reworded"][0] == "accepted"
    text = (SHOP / "tasks" / "basic.yaml").read_text()
    old = '      - {tool: add_note, args: {customer_id: 2, body: "Refused cancellation: order 2 already shipped."}}\n'
    check = (
        '    checks:\n      - {sql: "SELECT body FROM notes WHERE customer_id = 2", expect: [["Refused cancellation: order 2 already shipped."]]}\n'
    )
    domain = shop_copy(tmp_path, text.replace(old, old + check, 1))
    outcome, reason = outcomes("shop-refuse", domain)["call 1 (add_note): body reworded"]
    assert outcome == "false_negative" and "check 0 failed" in reason and REWORD_PREFIX in reason


def test_independent_inserts_in_the_other_order_pass_though_their_ids_trade_places(tmp_path):
    tasks = """tasks:
  - id: two-notes
    instruction: Note on customers 1 and 2 that they called.
    gold:
      - {tool: add_note, args: {customer_id: 1, body: "Called about delivery."}}
      - {tool: add_note, args: {customer_id: 2, body: "Called about billing."}}
    family: multi_step
"""
    domain = shop_copy(tmp_path, tasks)
    got = outcomes("two-notes", domain)
    assert got["calls 0 (add_note) and 1 (add_note) swapped"] == ("accepted", "passes")


def test_writes_that_depend_on_each_other_are_invalid_not_false_negatives():
    got = outcomes("banking-freeze-card-001", load_domain("banking"))
    outcome, reason = got["calls 0 (verify_account_holder) and 2 (set_card_freeze) swapped"]
    assert outcome == "invalid" and "call 2 (set_card_freeze) returned differently" in reason
    assert (
        got[
            "call 0 (verify_account_holder): email upper ('"
            + load_domain("banking").task("banking-freeze-card-001").gold[0].args["email"].upper()
            + "')"
        ][0]
        == "accepted"
    )
    assert {o for o, _ in got.values()} <= {"accepted", "invalid"}


def test_a_rewording_is_valid_only_where_it_changes_free_text_alone():
    from groundstate.audits.alternatives import _free_text_only
    from groundstate.state.changes import ChangeSet, RowChange

    def note(body: str, author: str = "agent") -> ChangeSet:
        return ChangeSet.from_changes([RowChange("notes", (9,), None, {"id": 9, "body": body, "author": author})])

    free = {"notes": frozenset({"body"})}
    gold = note("Refused: shipped.")
    assert _free_text_only(gold, note(REWORD_PREFIX + "Refused: shipped."), free) is None
    # the same words stored in a compared column too: the argument is data (a payee's name, an address), not wording
    assert "notes.author, which the domain compares exactly" in _free_text_only(gold, note("x", author="x"), free)
    assert _free_text_only(gold, note("Refused: shipped."), free) == "the argument does not reach the final state"
    assert "which the domain compares exactly" in _free_text_only(gold, ChangeSet(), free)  # the row is not written at all


def test_a_declared_equivalence_the_tools_do_not_honour_is_a_false_negative(tmp_path):
    # shop's find_customer matches e-mail exactly: declaring e-mail case-insensitive is a lie the audit catches
    domain = shop_copy(tmp_path, config="equivalent_args:\n  email: [upper]\n")
    outcome, reason = outcomes("shop-multi", domain)["call 0 (find_customer): email upper ('C3@EXAMPLE.COM')"]
    assert outcome == "false_negative" and "does not read" in reason


def test_an_equivalence_on_a_parameter_no_tool_has_is_a_load_error(tmp_path):
    with pytest.raises(TaskFileError, match=r"domain.yaml: field 'equivalent_args.emial': no tool has a parameter 'emial'"):
        shop_copy(tmp_path, config="equivalent_args:\n  emial: [upper]\n")
    with pytest.raises(TaskFileError, match=r"domain.yaml: field 'equivalent_args.email\[0\]'"):
        shop_copy(tmp_path / "b", config="equivalent_args:\n  email: [reversed]\n")


def test_swapping_inserts_that_a_later_call_names_by_id_is_invalid(tmp_path):
    # gold: two notes, then the first one deleted by its id; swapped, that id is the other customer's note
    tools = (
        (SHOP / "tools.py").read_text()
        + '''

@tool(write=True)
def delete_note(db, note_id: int) -> dict:
    """Delete a note.

    Args:
        note_id: The note.
    """
    if db.execute("DELETE FROM notes WHERE id = ?", note_id) == 0:
        raise ToolError(f"no note {note_id}")
    return {"deleted": note_id}
'''
    )
    first = max((r["id"] for r in Domain(SHOP).seed_rows().get("notes", [])), default=0) + 1
    tasks = f"""tasks:
  - id: note-then-delete
    instruction: Note on customers 1 and 2 that they called, then remove the first note again.
    gold:
      - {{tool: add_note, args: {{customer_id: 1, body: "Called about delivery."}}}}
      - {{tool: add_note, args: {{customer_id: 2, body: "Called about billing."}}}}
      - {{tool: delete_note, args: {{note_id: {first}}}}}
    family: multi_step
"""
    domain = shop_copy(tmp_path, tasks)
    (domain.path / "tools.py").write_text(tools)
    outcome, reason = outcomes("note-then-delete", Domain(domain.path))["calls 0 (add_note) and 1 (add_note) swapped"]
    assert outcome == "invalid" and "call 2 (delete_note) names an id that the swapped writes create" in reason
