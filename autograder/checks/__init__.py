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
    if not module.name.startswith("_")  # _toolkit: what several notebooks' checks share
    for check in importlib.import_module(f"{__name__}.{module.name}").CHECKS
]
_NAMES = [c.name for c in _ALL]
if len(set(_NAMES)) != len(_NAMES):
    raise ImportError(f"two checks share a name: {sorted({n for n in _NAMES if _NAMES.count(n) > 1})}")
# In notebook order, and within a notebook in the order of its questions (the sort is stable).
CHECKS: dict[str, Check] = {c.name: c for c in sorted(_ALL, key=lambda c: c.name.split(".")[0])}
