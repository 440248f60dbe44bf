"""Every graded question of the course, by name ("<notebook>.<question>").

Each module of this package holds the checks of one notebook in a list named CHECKS; a new
module is picked up by itself.
"""

import importlib
import pkgutil

from ..core import Check

_ALL = [
    check
    for module in pkgutil.iter_modules(__path__)
    for check in importlib.import_module(f"{__name__}.{module.name}").CHECKS
]
# In notebook order, and within a notebook in the order of its questions (the sort is stable).
CHECKS: dict[str, Check] = {c.name: c for c in sorted(_ALL, key=lambda c: c.name.split(".")[0])}
