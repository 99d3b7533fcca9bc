"""The task-generation kit (groundstate/domains/_kit.py), on the small kiosk world."""

from __future__ import annotations

import random
import shutil

import pytest

from groundstate.domains import _kit
from groundstate.domains._kit import Patch, WorldIndex, call
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
