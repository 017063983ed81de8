"""Every example compiled from Python computes what `kiln run` computes from the same file and
inputs (both JIT-compile with the same passes and seed 0, so bit for bit); a model written to a
.so by kiln.compile(output=) and loaded back computes the same again."""
import glob
import os
import subprocess

import numpy as np
import pytest

import kiln
from conftest import EXAMPLES

BATCH = 4
INDEX_RANGE = {("transformer", "tokens"): 1000}   # the vocabulary


def inputs_for(name, m, rng):
    arrays = {}
    for t in m.inputs:
        if t.dtype == np.int32:
            arrays[t.name] = rng.integers(0, INDEX_RANGE.get((name, t.name), 2), t.shape).astype(np.int32)
        else:
            arrays[t.name] = rng.standard_normal(t.shape).astype(np.float32)
    return arrays


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(EXAMPLES, "*.kiln"))), ids=os.path.basename)
def test_example_equals_kiln_run(path, kiln_cli, tmp_path, rng):
    name = os.path.basename(path)[:-5]
    m = kiln.compile(path, dims={"batch": BATCH})
    ins = inputs_for(name, m, rng)
    got = m.predict(**ins)
    got = got if isinstance(got, dict) else {m.outputs[0].name: got}
    cmd = [kiln_cli, "run", path, "-D", "batch=%d" % BATCH]
    for k, v in ins.items():
        np.save(tmp_path / (k + ".npy"), v)
        cmd += ["--input", "%s=%s" % (k, tmp_path / (k + ".npy"))]
    for t in m.outputs:
        cmd += ["--output", "%s=%s" % (t.name, tmp_path / ("out_" + t.name + ".npy"))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for t in m.outputs:
        want = np.load(tmp_path / ("out_" + t.name + ".npy"))
        assert got[t.name].shape == want.shape and got[t.name].dtype == want.dtype
        assert np.array_equal(got[t.name], want), "%s: %s differs from kiln run's (max abs diff %g)" % (
            name, t.name, np.abs(got[t.name] - want).max())


def test_output_so_and_load(tmp_path, rng):
    path = os.path.join(EXAMPLES, "mlp.kiln")
    jit = kiln.compile(path, dims={"batch": (1, 8)})
    so = tmp_path / "libmlp.so"
    aot = kiln.compile(path, dims={"batch": (1, 8)}, output=so)
    assert so.is_file() and (tmp_path / "mlp.h").is_file()
    assert "int64_t batch" in (tmp_path / "mlp.h").read_text()
    again = kiln.load(str(so))
    x = rng.standard_normal((5, 784)).astype(np.float32)
    for m in (aot, again):
        assert m.dims == {"batch": (1, 8)}
        assert np.array_equal(m.predict(x), jit.predict(x))


def test_load_recompiled_same_path(tmp_path):
    """A .so rewritten at the same path is the new model when loaded again (the loader would
    hand back the old one under the same name)."""
    so = tmp_path / "libm.so"
    a = kiln.compile("dim n = 4\nmodel m {\n  input x : f32[n]\n  y = x * 2\n  output y\n}\n", output=so)
    b = kiln.compile("dim n = 4\nmodel m {\n  input x : f32[n]\n  y = x * 3\n  output y\n}\n", output=so)
    x = np.ones(4, np.float32)
    assert a.predict(x).tolist() == [2] * 4
    assert b.predict(x).tolist() == [3] * 4
    assert kiln.load(so).predict(x).tolist() == [3] * 4
