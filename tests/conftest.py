import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PLANTED = ROOT / "tests" / "planted"
# The call limit where a planted candidate hangs: the whole limit is spent, and the toy's calls take milliseconds
HANG_TIMEOUT_S = 6.0

# Tests run kernels through Triton's interpreter on the CPU, whatever the machine has.
os.environ.setdefault("D2K_TEST_DEVICE", "cpu")


@pytest.fixture(scope="session")
def toy_task():
    from d2kbench.suite import load_task

    return load_task(FIXTURES / "toy_axpy")
