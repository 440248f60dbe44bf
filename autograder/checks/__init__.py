"""Every graded question of the course, by name ("<notebook>.<question>").

Each module of this package holds the checks of one notebook in a list named CHECKS; a new
module is picked up by itself.
"""

import importlib
import pkgutil

from ..core import Check

CHECKS: dict[str, Check] = {
    check.name: check
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__))
    for check in importlib.import_module(f"{__name__}.{module}").CHECKS
}
