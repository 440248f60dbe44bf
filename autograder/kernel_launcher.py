"""A grading kernel's entry point: ipykernel, once what every notebook imports is imported.

`python -m autograder.kernel_launcher -f CONNECTION_FILE` is ipykernel's own launcher with torch,
matplotlib and this package imported first, and the operations of the library functions the checks
forbid traced (core.forbidden_operations), so that a kernel started ahead of its notebook
(kernels.py) has done the slow part of its start-up (about 2 s) before the notebook needs it.
Nothing is bound in the notebook's namespace: the notebook's own `import torch` finds the module
in `sys.modules`, as any second import does.
"""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # As ipykernel_launcher: the working folder leaves sys.path while the kernel loads (the kernel
    # puts it back), so that a file of the student's cannot stand in for a module imported here.
    if sys.path[0] == "" or Path(sys.path[0]) == Path.cwd():
        del sys.path[0]
    # What ipykernel sets before any notebook runs; matplotlib reads it when it is first imported.
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")

    import matplotlib.pyplot  # noqa: F401
    import torch  # noqa: F401
    from ipykernel import kernelapp

    import autograder  # noqa: F401
    import autograder.selfstudy  # noqa: F401
    from autograder.checks import CHECKS
    from autograder.core import forbidden_operations

    # Traced here, ahead of the notebook and before any of its code can stand in for a library function.
    for check in CHECKS.values():
        forbidden_operations(check.forbidden_uses)

    kernelapp.launch_new_instance()
