"""Every graded question of the course, by name ("<notebook>.<question>")."""

from ..core import Check
from . import rmsnorm, rope

CHECKS: dict[str, Check] = {c.name: c for module in (rope, rmsnorm) for c in module.CHECKS}
