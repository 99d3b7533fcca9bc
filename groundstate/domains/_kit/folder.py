"""A domain's own folder, as its seed and its task generator read it: the business date of its domain.yaml, a fresh
import of one of its Python files, and the loaded `Domain` (its tables in schema order, its write tools).

This is the kit's only import of the domain loader.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path
from types import ModuleType

from groundstate.tasks import read_data_file
from groundstate.worlds.domain import DOMAINS_DIR, Domain, DomainConfig, load_domain


def business_date(folder: Path | str) -> dt.date:
    """`today` of the domain's domain.yaml (the loader's default when it has none): the date its seed computes its dates
    from, the same date the loader gives its tools and its task generator."""
    return DomainConfig.model_validate(read_data_file(Path(folder) / "domain.yaml")).today


def sibling(folder: Path | str, name: str) -> ModuleType:
    """A fresh import of the domain's `<name>.py` (its seed or tools), for its seed's or generator's own use.

    It stays out of `sys.modules`, so it never replaces the copy the domain loader imported.
    """
    folder = Path(folder)
    spec = importlib.util.spec_from_file_location(f"groundstate_domain_{folder.name}_{name}_for_kit", folder / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {folder / f'{name}.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def domain_of(folder: Path | str) -> Domain:
    """The loaded `Domain` of a domain folder: a bundled domain by its name (the loader's cache then serves
    the instance the caller loaded already), any other folder by its path."""
    folder = Path(folder).resolve()
    if (DOMAINS_DIR / folder.name).resolve() == folder:
        domain = load_domain(folder.name)
        if domain.path.resolve() == folder:  # not a same-named folder in the working directory
            return domain
    return load_domain(str(folder))


def table_order(folder: Path | str) -> tuple[str, ...]:
    """The domain's tables in schema.sql's order, each after the tables it references: the order patch rows go in."""
    return tuple(domain_of(folder).tables)


def write_tools(folder: Path | str) -> frozenset[str]:
    """Names of the domain's write tools (`@tool(write=True)`), read from its loaded toolset."""
    return frozenset(name for name, spec in domain_of(folder).tools.specs.items() if spec.write)
