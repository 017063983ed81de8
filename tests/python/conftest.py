"""conftest.py — shared set-up of the Python package's tests (tests/python, CTest label python).

The package under test is python/kiln of this checkout and the library is $KILN_LIBRARY (CTest
sets both, to this build's libkiln.so); the kiln command line, which some tests compare
with, is $KILN_CLI, else tools/kiln beside the library's build folder."""
import os
import shutil
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import kiln  # noqa: E402

EXAMPLES = os.path.join(REPO, "examples")

# A small model with two outputs, a bounded dim and a train statement, as text.
TWO_OUT = """
dim batch = 1..16
model two {
  input x : f32[batch, 6]
  input label : i32[batch]
  h = relu(fully_connected(x, num_hidden=5))
  logits = fully_connected(h, num_hidden=3)
  prob = softmax(logits)
  loss = softmax_cross_entropy(logits, label)
  output prob
  output h
  train loss with sgd(lr=0.5)
}
"""


@pytest.fixture(scope="session")
def kiln_cli():
    cli = os.environ.get("KILN_CLI")
    if not cli:
        cand = os.path.join(os.path.dirname(os.path.dirname(kiln.library_path)), "tools", "kiln")
        cli = cand if os.path.isfile(cand) else shutil.which("kiln")
    if not cli or not os.path.isfile(cli):
        pytest.skip("the kiln command line is not found (set KILN_CLI)")
    return cli


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch", reason="python3-torch is not installed (apt-get install python3-torch)")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def two():
    return kiln.compile(TWO_OUT)
