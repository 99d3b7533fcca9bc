"""README's layout section matches the tree: every module of the package is named there, and everything named exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def layout_block() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Layout") :]
    start = section.index("```") + 3
    return section[start : section.index("```", start)].strip("\n").splitlines()


def named_modules(lines: list[str]) -> set[str]:
    """Module paths (relative to the repository) the package part of the block names."""
    out: set[str] = set()
    package = ""
    for line in lines[1:]:
        if not line.startswith(" "):
            break  # the package's part ends where benchmarks/, docs/ ... begin
        tokens = line.split()
        first = tokens[0]
        if first.endswith("/"):
            indent = len(line) - len(line.lstrip())
            package = first if indent <= 2 else package.split("/")[0] + "/" + first
            tokens = tokens[1:]
        elif line.startswith("  ") and not line.startswith("   "):
            package = ""
        for token in tokens:
            for name in re.findall(r"[\w]+\.py", token):
                out.add(f"groundstate/{package}{name}")
    return out


def test_every_module_is_named_and_every_name_exists():
    actual = {
        str(p.relative_to(REPO))
        for p in (REPO / "groundstate").rglob("*.py")
        if not re.match(r"groundstate/domains/[^/_][^/]*/", str(p.relative_to(REPO)))
    }
    named = named_modules(layout_block())
    missing = sorted(m for m in actual if m not in named and not m.endswith(("/__init__.py", "/__main__.py")))
    ghosts = sorted(m for m in named if m not in actual)
    assert not missing, f"README's layout does not name: {missing}"
    assert not ghosts, f"README's layout names what does not exist: {ghosts}"


def test_the_other_folders_it_names_exist():
    for line in layout_block():
        if line.startswith(" ") or line.startswith("groundstate/"):
            continue
        folder, rest = line.split(maxsplit=1)
        assert (REPO / folder).is_dir(), folder
        for name in re.findall(r"[\w.]+\.(?:py|md|sh)", rest):
            assert (REPO / folder / name).exists(), f"{folder}{name}"
        for sub in re.findall(r"\b(\w+)/", rest):
            if sub != "name":
                assert (REPO / folder / sub).is_dir(), f"{folder}{sub}/"


def test_every_extra_the_readme_installs_exists():
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    text = (REPO / "README.md").read_text(encoding="utf-8")
    named = {e for group in re.findall(r'pip install -e "\.\[([\w,]+)\]"', text) for e in group.split(",")}
    assert {"openai", "hf", "train", "mcp", "serving", "verl", "verifiers"} <= named
    assert named <= extras, named - extras
