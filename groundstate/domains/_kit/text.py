"""Words and amounts as people say them, for the tasks' instructions, users and rubrics; money computed in whole cents."""

from __future__ import annotations

import datetime as dt
import re

# What a simulated user opens and closes with, and how they sound: a domain's generator may set its own.
GREETINGS = ["Hi,", "Hello,", "Hey there,", "Good morning,", "Hi there,"]
CLOSINGS = ["That's all, thank you!", "No, that's everything. Thanks!", "That's it, thanks for your help.", "Nothing else, thanks."]
TONES = ["polite and brief", "a little impatient", "friendly and chatty", "precise; answers exactly what is asked"]


def rubric(question: str, fact: str) -> str:
    """A yes/no question about the final reply that names the fact it must state, quoted: `rubric("Does the reply
    give the refund, {}?", "$42.50")` is `Does the reply give the refund, "$42.50"?`."""
    return question.format(f'"{fact}"')


def facts(rubric_text: str) -> list[str]:
    """The quoted facts of a rubric (`rubric`): what a reply must state for it to be judged yes."""
    return re.findall(r'"([^"]+)"', rubric_text)


def said(phrase: str) -> str:
    """A user's own words quoted inside their context (which speaks to them in the second person)."""
    return f'(in your words: "{phrase}")'


def cap(text: str) -> str:
    """`text` with its first letter upper-cased (the rest unchanged, unlike `str.capitalize`)."""
    return text[0].upper() + text[1:]


def long_date(d: dt.date | str) -> str:
    """A date (or ISO date text) as people write it: "June 5, 2026"."""
    d = dt.date.fromisoformat(d) if isinstance(d, str) else d
    return f"{d:%B} {d.day}, {d.year}"


# -- money: amounts are computed in whole cents, so sums and differences are exact ----------------------


def cents(x: float) -> int:
    return int(round(x * 100))


def dollars(c: int) -> float:
    return round(c / 100, 2)


def money(x: float) -> str:
    """An amount as people read it: "$1,234.50"."""
    return f"${x:,.2f}"
