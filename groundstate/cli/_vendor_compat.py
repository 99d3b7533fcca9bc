"""The one place groundstate imports another project's private names: typer's usage-error classes.

typer (0.26 on) carries its own copy of click in the private `typer._click` and exports `BadParameter`, `Exit`, `Abort`
and `TyperException`, but not `UsageError` (what its parser raises for an unknown option or command, a bad or missing
value) nor `NoArgsIsHelpError` (a group called without a command: its help, not an error). `cli.common` turns the first
into one `error:` line and lets the second through. `tests/unit/test_vendor_compat.py` fails, naming what moved, when a
typer release renames or stops raising them.
"""

from __future__ import annotations

from typer._click.exceptions import NoArgsIsHelpError, UsageError

__all__ = ["NoArgsIsHelpError", "UsageError"]
