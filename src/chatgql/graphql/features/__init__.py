"""The API's feature modules. Each module here is one feature's API, whole: its types, its root
fields (classes named Query, Mutation and Subscription, those it has) and what it declares of them
(rate limits, prices). graphql/schema.py merges every module of this package into the roots, after
the house's own fields, in the modules' name order: a new feature is a new module here, and no
other file of the API lists it."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def feature_modules() -> tuple[ModuleType, ...]:
    """Every module of this package, imported, by name."""
    names = sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in names)
