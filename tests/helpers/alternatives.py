"""Correct answers written differently from the reference: every check must accept them.

One module per notebook (tests/helpers/alternatives_NN.py), each with its ALTERNATIVES by check name.
"""

from .alternatives_00 import ALTERNATIVES as ALTERNATIVES_00
from .alternatives_01 import ALTERNATIVES as ALTERNATIVES_01
from .alternatives_02 import ALTERNATIVES as ALTERNATIVES_02
from .alternatives_03 import ALTERNATIVES as ALTERNATIVES_03
from .alternatives_04 import ALTERNATIVES as ALTERNATIVES_04
from .alternatives_04 import RoPEReal, rotation_matrix_complex, rotation_matrix_exp
from .alternatives_05 import ALTERNATIVES as ALTERNATIVES_05
from .alternatives_06 import ALTERNATIVES as ALTERNATIVES_06
from .alternatives_07 import ALTERNATIVES as ALTERNATIVES_07
from .alternatives_07 import RMSNormOneOverSqrt
from .alternatives_08 import ALTERNATIVES as ALTERNATIVES_08
from .alternatives_09 import ALTERNATIVES as ALTERNATIVES_09
from .alternatives_10 import ALTERNATIVES as ALTERNATIVES_10
from .alternatives_11 import ALTERNATIVES as ALTERNATIVES_11

ALTERNATIVES = {
    **ALTERNATIVES_00,
    **ALTERNATIVES_01,
    **ALTERNATIVES_02,
    **ALTERNATIVES_03,
    **ALTERNATIVES_04,
    **ALTERNATIVES_05,
    **ALTERNATIVES_06,
    **ALTERNATIVES_07,
    **ALTERNATIVES_08,
    **ALTERNATIVES_09,
    **ALTERNATIVES_10,
    **ALTERNATIVES_11,
}

__all__ = ["ALTERNATIVES", "RMSNormOneOverSqrt", "RoPEReal", "rotation_matrix_complex", "rotation_matrix_exp"]
