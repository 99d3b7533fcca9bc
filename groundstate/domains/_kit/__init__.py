"""The domain kit: what the bundled domains' `seed.py` and `taskgen.py` share, so that each domain's files hold only
its own content (its tables and rows, its phrasing, its templates). docs/DOMAINS.md documents it.

- `seed`: building seed rows (`People` with unique emails, the shared name lists, `scaled` counts, dates, `renumber`,
  `unique`, `group_by`, `round_money`);
- `tasks`: building tasks (`WorldIndex`, `Patch`, `call`, the driver `generate`);
- `text`: words and amounts as people say them (`rubric`, `said`, `long_date`, `money`, cents);
- `folder`: the domain's own folder (its business date, a fresh import of its seed or tools, its loaded tables and
  write tools): the kit's only import of the domain loader.

Everything that draws does so from the rng it is given, in a fixed order: the same seed gives the same rows and tasks,
byte for byte. Domains import names from here (`from groundstate.domains._kit import WorldIndex, call`).
"""

from groundstate.domains._kit.folder import business_date, domain_of, sibling, table_order, write_tools
from groundstate.domains._kit.seed import (
    EMAIL_DOMAINS,
    FIRST_NAMES,
    LAST_NAMES,
    People,
    Rows,
    add_years,
    day_between,
    digits,
    end_of_month,
    first_of_month,
    group_by,
    iso,
    phone,
    renumber,
    round_money,
    routing_number,
    scaled,
    unique,
)
from groundstate.domains._kit.tasks import BODY_KEYS, MAX_DRAWS, Patch, Template, WorldIndex, call, generate, task_id
from groundstate.domains._kit.text import CLOSINGS, GREETINGS, TONES, cap, cents, dollars, facts, long_date, money, rubric, said

__all__ = [
    "BODY_KEYS",
    "CLOSINGS",
    "EMAIL_DOMAINS",
    "FIRST_NAMES",
    "GREETINGS",
    "LAST_NAMES",
    "MAX_DRAWS",
    "TONES",
    "Patch",
    "People",
    "Rows",
    "Template",
    "WorldIndex",
    "add_years",
    "business_date",
    "call",
    "cap",
    "cents",
    "day_between",
    "digits",
    "dollars",
    "domain_of",
    "end_of_month",
    "facts",
    "first_of_month",
    "generate",
    "group_by",
    "iso",
    "long_date",
    "money",
    "phone",
    "renumber",
    "round_money",
    "routing_number",
    "rubric",
    "said",
    "scaled",
    "sibling",
    "table_order",
    "task_id",
    "unique",
    "write_tools",
]
