"""The domain kit (groundstate/domains/_kit/): the seed and task-generation parts, on the small kiosk world."""

from __future__ import annotations

import datetime as dt
import random
import shutil

import pytest

from groundstate.domains import _kit
from groundstate.domains._kit import Patch, People, WorldIndex, call
from groundstate.worlds.attempt import task_fingerprint
from groundstate.worlds.domain import Domain, load_domain


@pytest.fixture(scope="module")
def kiosk():
    return load_domain("kiosk")


@pytest.fixture
def index(kiosk) -> WorldIndex:
    return WorldIndex(kiosk.seed_rows(), kiosk.config.today, random.Random(0))


def test_the_domain_comes_from_the_loader(kiosk):
    assert _kit.domain_of(kiosk.path) is kiosk  # a bundled folder is served from the loader's cache
    assert _kit.table_order(kiosk.path) == ("kiosk_members", "kiosk_orders", "kiosk_notes")
    assert _kit.write_tools(kiosk.path) == {"cancel_kiosk_order", "set_member_tier", "add_member_credit", "add_member_note"}


def test_patch_orders_tables_merges_by_id_and_refuses_unknown_tables():
    patch = Patch(["a", "b"]).add("b", {"id": 1, "x": 1}).add("a", {"id": 7})
    stored = patch.set("b", {"id": 1, "y": 2})
    assert stored == {"id": 1, "x": 1, "y": 2} and patch.get("b", 1) is stored and patch.get("b", 2) is None
    assert list(patch.to_dict()) == ["a", "b"]
    assert Patch(["a"]).extend(patch).tables == patch.tables
    with pytest.raises(ValueError, match="not in the table order"):
        Patch(["a"]).add("c", {"id": 1}).to_dict()


def test_world_index_allocates_ids_above_the_seed_and_cycles(index, kiosk):
    top = max(o["id"] for o in kiosk.seed_rows()["kiosk_orders"])
    assert [index.new_id("kiosk_orders"), index.new_id("kiosk_orders")] == [top + 1, top + 2]
    assert index.new_id("kiosk_notes") == 1  # an empty seed table starts at 1
    assert [index.cycle("case", ["x", "y"]) for _ in range(3)] == ["x", "y", "x"]


def test_call_takes_an_argument_named_tool():
    assert call("pick", tool="hammer") == {"tool": "pick", "args": {"tool": "hammer"}}


def test_generate_numbers_tags_and_draws_a_duplicate_again(kiosk, index):
    drawn = iter([101, 101, 102])

    def t_cancel(g: WorldIndex) -> dict:
        order = next(drawn)
        return {
            "instruction": f"Cancel order {order}.",
            "user": {"script": []},
            "gold": [call("get_kiosk_order", order_id=order), call("cancel_kiosk_order", order_id=order)],
            "patch": Patch(_kit.table_order(kiosk.path)),
        }

    tasks = _kit.generate(kiosk.path, [("single_write", t_cancel, 2)], index)
    assert [t["id"] for t in tasks] == ["kiosk-cancel-001", "kiosk-cancel-002"]
    assert [t["instruction"] for t in tasks] == ["Cancel order 101.", "Cancel order 102."]
    assert tasks[0]["tags"] == ["calls:2", "writes:1"] and "patch" not in tasks[0]  # an empty patch is left out
    assert list(tasks[0]) == ["id", "family", "template", "tags", "instruction", "user", "gold"]


def test_generate_refuses_unknown_keys_unknown_tools_and_templates_that_repeat_themselves(kiosk, index):
    def t_typo(g: WorldIndex) -> dict:
        return {"instruction": "x", "user": {}, "gold": [], "chekcs": []}

    def t_same(g: WorldIndex) -> dict:
        return {"instruction": "always this", "user": {}, "gold": []}

    with pytest.raises(ValueError, match="unknown keys"):
        _kit.generate(kiosk.path, [("single_write", t_typo, 1)], index)

    def t_misspelt(g: WorldIndex) -> dict:
        return {"instruction": "y", "user": {}, "gold": [call("cancel_kiosk_ordr", order_id=1)]}

    with pytest.raises(RuntimeError, match="lower its count"):
        _kit.generate(kiosk.path, [("single_write", t_same, 2)], index)
    with pytest.raises(ValueError, match="unknown tools"):
        _kit.generate(kiosk.path, [("single_write", t_misspelt, 1)], index)


def test_text_and_money():
    assert _kit.long_date("2026-06-05") == "June 5, 2026" and _kit.cap("eMail") == "EMail"
    assert _kit.dollars(_kit.cents(19.99) * 3) == 59.97 and _kit.money(1234.5) == "$1,234.50"
    assert _kit.said("no") == '(in your words: "no")'


def test_draw_prefers_fresh_then_any_and_names_an_empty_pool(index):
    assert {index.draw([1, 2, 3], "number", lambda x: x == 2) for _ in range(20)} == {2}
    assert index.draw([1], "number", lambda x: False) == 1  # nobody fresh left: any of the pool
    with pytest.raises(RuntimeError, match="no clean order left for this template"):
        index.draw([], "clean order")
    rows = [{"id": i, "owner": i % 3} for i in range(7)]  # owners 0 (3 rows), 1 (2), 2 (2)
    group = index.draw_group(rows, "owner", 3, "owner", lambda o: True)
    assert sorted(r["id"] for r in group) == [0, 3, 6]


def test_the_simulated_user_draws_its_greeting_tone_and_closing_in_turn(kiosk):
    def fresh() -> WorldIndex:
        return WorldIndex(kiosk.seed_rows(), kiosk.config.today, random.Random(3))

    g, rng = fresh(), random.Random(3)
    greetings = [rng.choice(_kit.GREETINGS), rng.choice(_kit.GREETINGS)]
    assert g.opening("this is Ann.", "Ann here.") == rng.choice([f"{greetings[0]} this is Ann.", f"{greetings[1]} Ann here."])
    user = g.simulated_user("Ann, a member", "You want a refund.", ["Order 7."])
    assert user == {
        "persona": f"Ann, a member; {rng.choice(_kit.TONES)}.",
        "context": "You want a refund.",
        "script": ["Order 7.", rng.choice(_kit.CLOSINGS)],
    }


def test_people_get_unique_emails_and_namesakes_a_number():
    people = People(random.Random(0), "shop.test", first_names=["Ann"], last_names=["Lee"])
    assert [people.draw() for _ in range(3)] == [("Ann", "Lee", e) for e in ("ann.lee@shop.test", "ann.lee2@shop.test", "ann.lee3@shop.test")]
    drawn = People(random.Random(0)).draw()
    assert drawn[2].endswith(tuple(_kit.EMAIL_DOMAINS)) and drawn[0] in _kit.FIRST_NAMES and drawn[1] in _kit.LAST_NAMES


def test_seed_helpers():
    rows = [{"id": 7, "day": "b"}, {"id": 3, "day": "a"}, {"day": "c"}]
    assert _kit.renumber(rows, key=lambda r: r["day"]) == {3: 1, 7: 2} and [r["id"] for r in rows] == [1, 2, 3]
    assert _kit.group_by(rows, "day") == {"a": [rows[0]], "b": [rows[1]], "c": [rows[2]]}
    assert _kit.group_by(rows, lambda r: r["id"] % 2) == {1: [rows[0], rows[2]], 0: [rows[1]]}
    taken = {"a"}
    draws = iter("aab")
    assert _kit.unique(lambda: next(draws), taken) == "b" and taken == {"a", "b"}
    assert _kit.scaled(300, 0.001) == 1 and _kit.scaled(300, 2.0) == 600 and _kit.round_money(0.125) == 0.13
    assert _kit.add_years(dt.date(2024, 2, 29), 1) == dt.date(2025, 2, 28) and _kit.first_of_month(dt.date(2026, 11, 15), 2) == dt.date(2027, 1, 1)
    assert _kit.end_of_month(dt.date(2026, 2, 3)) == dt.date(2026, 2, 28) and _kit.iso(None) is None
    assert _kit.routing_number("02100002") == "021000021"  # a real ABA number: its check digit


def test_the_business_date_is_domain_yamls(kiosk):
    assert _kit.business_date(kiosk.path) == kiosk.config.today


def test_the_domain_version_counts_the_seed_by_its_rows(kiosk, tmp_path):
    """A seed.py rewritten to give the same rows is the same domain version (the same task fingerprints); other rows
    are another version."""
    folder = tmp_path / "kiosk"
    shutil.copytree(kiosk.path, folder, ignore=shutil.ignore_patterns("__pycache__"))
    seed = folder / "seed.py"
    seed.write_text(
        "# the same rows, written another way\n"
        + seed.read_text().replace("n_members = max(20, int(400 * scale))", "n_members = max(20, int(scale * 400))")
    )
    same = Domain(folder)
    assert same.content_hash == kiosk.content_hash
    assert [task_fingerprint(t, same) for t in same.tasks] == [task_fingerprint(t, kiosk) for t in kiosk.tasks]
    seed.write_text(seed.read_text().replace('"total": float(rng.randrange(5, 90))', '"total": float(rng.randrange(5, 91))'))
    assert Domain(folder).content_hash != kiosk.content_hash
