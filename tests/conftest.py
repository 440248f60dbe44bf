"""The test process runs torch on one thread, as the grading workers do (grader/dispatch/dispatch.py).

The tensors here are tiny: on a 2-core machine that also runs kernels, a second thread mostly waits
for the first. The hidden verdict of 08.transformer on a wrong model took 3.0 s on one thread and
7 to 28 s on two, with other work beside it (tests/test_do_nothing.py grades a dozen of those).
"""

import torch

torch.set_num_threads(1)
