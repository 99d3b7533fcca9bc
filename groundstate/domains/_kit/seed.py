"""What the domains' seeds share to build their rows: names and unique emails, scaled counts, dates, ids and rounding.

A seed's `generate(rng, scale)` draws every random choice from `rng`; so does everything here that draws, and in a
fixed order, so the same rng gives the same rows on every machine.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

Rows = dict[str, list[dict[str, Any]]]  # what a seed returns: table -> rows, tables in schema order

# The people of the bundled worlds; a domain may add its own (`[*FIRST_NAMES, "Kwame", ...]`).
FIRST_NAMES = [
    "Olivia",
    "Liam",
    "Emma",
    "Noah",
    "Ava",
    "Elijah",
    "Sophia",
    "James",
    "Isabella",
    "Lucas",
    "Mia",
    "Mateo",
    "Amelia",
    "Benjamin",
    "Harper",
    "Ethan",
    "Evelyn",
    "Daniel",
    "Aisha",
    "Omar",
    "Priya",
    "Arjun",
    "Mei",
    "Wei",
    "Yuki",
    "Hiro",
    "Sofia",
    "Diego",
    "Camila",
    "Javier",
    "Fatima",
    "Yusuf",
    "Chloe",
    "Henry",
    "Grace",
    "Samuel",
    "Nora",
    "Leo",
    "Zoe",
    "Gabriel",
    "Hannah",
    "Isaac",
    "Layla",
    "Caleb",
    "Ruby",
    "Owen",
    "Maya",
    "Julian",
    "Ines",
    "Tomas",
]
LAST_NAMES = [
    "Smith",
    "Johnson",
    "Garcia",
    "Martinez",
    "Brown",
    "Davis",
    "Lopez",
    "Wilson",
    "Anderson",
    "Thomas",
    "Taylor",
    "Moore",
    "Jackson",
    "Martin",
    "Lee",
    "Perez",
    "Thompson",
    "White",
    "Harris",
    "Clark",
    "Lewis",
    "Robinson",
    "Walker",
    "Young",
    "Allen",
    "King",
    "Wright",
    "Scott",
    "Nguyen",
    "Hill",
    "Flores",
    "Green",
    "Adams",
    "Nelson",
    "Baker",
    "Hall",
    "Rivera",
    "Campbell",
    "Mitchell",
    "Patel",
    "Kim",
    "Chen",
    "Singh",
    "Okafor",
    "Haddad",
    "Kowalski",
    "Rossi",
    "Novak",
    "Silva",
    "Tanaka",
]
EMAIL_DOMAINS = ["example.com", "example.net", "example.org", "mail.example.com"]


class People:
    """Draws people's names and gives each an email nobody else has: a namesake gets a number (`mia.chen2@…`), as mail
    providers do. `email_domain` is every address's domain (a company's), or None to draw one of `EMAIL_DOMAINS` per
    person."""

    def __init__(
        self,
        rng: random.Random,
        email_domain: str | None = None,
        first_names: Sequence[str] = FIRST_NAMES,
        last_names: Sequence[str] = LAST_NAMES,
    ):
        self.rng, self.email_domain, self.first_names, self.last_names = rng, email_domain, first_names, last_names
        self.emails: set[str] = set()

    def draw(self) -> tuple[str, str, str]:
        """(first name, last name, email) of a new person: the first name, the last name and the mail domain are drawn
        in that order."""
        first, last = self.rng.choice(self.first_names), self.rng.choice(self.last_names)
        domain = self.email_domain or self.rng.choice(EMAIL_DOMAINS)
        email, k = f"{first}.{last}@{domain}".lower(), 2
        while email in self.emails:
            email, k = f"{first}.{last}{k}@{domain}".lower(), k + 1
        self.emails.add(email)
        return first, last, email


def phone(rng: random.Random) -> str:
    """A fictional US phone number (555-…)."""
    return f"555-{rng.randint(200, 999)}-{rng.randint(1000, 9999)}"


def digits(rng: random.Random, shortest: int, longest: int) -> str:
    """A string of `shortest` to `longest` random digits (the length is drawn first): an account number."""
    return "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(shortest, longest)))


def routing_number(prefix: str) -> str:
    """A nine-digit ABA routing number: the eight-digit prefix and its check digit."""
    d = [int(c) for c in prefix]
    total = 3 * (d[0] + d[3] + d[6]) + 7 * (d[1] + d[4] + d[7]) + (d[2] + d[5])
    return prefix + str((10 - total % 10) % 10)


def unique(draw: Callable[[], str], taken: set[str]) -> str:
    """`draw()` again until it gives a value not in `taken`; the value is added to `taken`."""
    while True:
        value = draw()
        if value not in taken:
            taken.add(value)
            return value


def scaled(base: int, scale: float) -> int:
    """How many rows `base` becomes at `scale` (at least one)."""
    return max(1, round(base * scale))


def round_money(x: float) -> float:
    """An amount rounded to the cent, a half cent up (what float sums of prices would otherwise round down)."""
    return round(x + 1e-9, 2)


# -- dates: ISO text in the rows -----------------------------------------------------------------------


def iso(d: dt.date | None) -> str | None:
    return None if d is None else d.isoformat()


def day_between(rng: random.Random, lo: dt.date, hi: dt.date) -> dt.date:
    """A day from `lo` to `hi`, both included (`lo` when `hi` is before it)."""
    return lo + dt.timedelta(days=rng.randint(0, max(0, (hi - lo).days)))


def add_years(d: dt.date, years: int) -> dt.date:
    """The same day `years` later; 29 February becomes 28 February in a year that has none."""
    try:
        return d.replace(year=d.year + years)
    except ValueError:
        return d.replace(year=d.year + years, day=28)


def first_of_month(d: dt.date, months_ahead: int) -> dt.date:
    """The first day of the month `months_ahead` months after d's."""
    m = d.month - 1 + months_ahead
    return dt.date(d.year + m // 12, m % 12 + 1, 1)


def end_of_month(d: dt.date) -> dt.date:
    """The last day of d's month."""
    return (d.replace(day=28) + dt.timedelta(days=4)).replace(day=1) - dt.timedelta(days=1)


# -- rows ----------------------------------------------------------------------------------------------


def group_by(rows: Iterable[dict[str, Any]], key: str | Callable[[dict[str, Any]], Hashable]) -> dict[Any, list[dict[str, Any]]]:
    """The rows by the value of column `key` (or of `key(row)`), each group in the rows' order."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row[key] if isinstance(key, str) else key(row), []).append(row)
    return groups


def renumber(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, int]:
    """Sort `rows` in place by `key` and number their `id`s 1, 2, … in that order (a row without one gets it last);
    returns each row's old id -> its new one, for the rows that refer to them."""
    rows.sort(key=key)
    new: dict[Any, int] = {}
    for i, row in enumerate(rows, start=1):
        if "id" in row:
            new[row["id"]] = i
        row["id"] = i
    return new
