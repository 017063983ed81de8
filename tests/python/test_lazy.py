"""Lazy arrays against NumPy: making them, ops as functions and operators, reading (.numpy(),
np.asarray, printing, DLPack), kiln.grad against torch.autograd, kiln.export compiled back."""
import numpy as np
import pytest

import kiln


@pytest.fixture
def xs(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    return a, b


def test_make_and_read(xs):
    a, _ = xs
    x = kiln.array(a)
    assert x.shape == (3, 4) and x.dtype == np.float32 and x.ndim == 2 and x.size == 12 and len(x) == 3
    assert np.array_equal(x.numpy(), a) and np.array_equal(np.asarray(x), a)
    assert kiln.array(np.arange(3)).dtype == np.int32 and kiln.array([1.5]).dtype == np.float32
    assert kiln.array(a.astype(np.float64)).dtype == np.float32
    assert np.array_equal(kiln.zeros((2, 3)).numpy(), np.zeros((2, 3), np.float32))
    assert np.array_equal(kiln.ones(4, dtype=np.int32).numpy(), np.ones(4, np.int32))
    u = kiln.uniform((1000,), low=-2, high=3, seed=7).numpy()
    assert u.min() >= -2 and u.max() < 3 and np.array_equal(u, kiln.uniform((1000,), -2, 3, seed=7).numpy())
    n = kiln.normal((4000,), mean=1, std=2, seed=3).numpy()
    assert abs(n.mean() - 1) < 0.15 and abs(n.std() - 2) < 0.15
    assert str(x) == str(a) and repr(x) == "kiln." + repr(a)
    assert float(kiln.array(2.5)) == 2.5


def test_ops_against_numpy(xs):
    a, b = xs
    x, w = kiln.array(a), kiln.array(b)
    y = kiln.relu(x * 2 - 1)
    assert y.shape == (3, 4) and y.is_lazy
    cases = [
        (y, np.maximum(a * 2 - 1, 0)),
        (x @ w, a @ b),
        (x.T, a.T),
        (-x + 3 / (abs(x) + 1), -a + 3 / (np.abs(a) + 1)),
        (2 - x, 2 - a),
        (np.float32(2) * x, 2 * a),
        (x ** 2, a ** 2),
        (kiln.sum(x, axis=(1,)), a.sum(1)),
        (x.mean(axis=0, keepdims=True), a.mean(0, keepdims=True)),
        (x.max(), a.max()),
        (kiln.exp(kiln.tanh(x)), np.exp(np.tanh(a))),
        (kiln.softmax(x), np.exp(a) / np.exp(a).sum(1, keepdims=True)),
        (x.reshape(2, 6), a.reshape(2, 6)),
        (kiln.concat(x, x), np.concatenate([a, a], 1)),
        (kiln.concat(x, x, dim=0), np.concatenate([a, a], 0)),   # dim: a keyword that names an argument
        (kiln.fully_connected(x, w.T, kiln.ones(5), num_hidden=5), a @ b + 1),
        (kiln.transpose(x, axes=(1, 0)), a.T),
    ]
    kiln.compute(*(c[0] for c in cases))
    for i, (got, want) in enumerate(cases):
        assert not got.is_lazy
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=2e-6, err_msg="case %d" % i)
    assert isinstance(np.ones((3, 4), np.float32) + x, kiln.Array)


def test_conv_and_pool():
    x = kiln.array(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    k = kiln.ones((2, 1, 3, 3))
    y = kiln.convolution(x, k, num_filter=2, kernel=(3, 3), pad=(1, 1), no_bias=True)
    assert y.shape == (1, 2, 4, 4)
    p = kiln.pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max")
    assert p.numpy().reshape(-1).tolist() == [5, 7, 13, 15]


def test_grad_against_torch(torch, xs):
    a, b = xs
    x, w = kiln.array(a), kiln.array(b)
    loss = kiln.mean(kiln.square(kiln.tanh(x @ w) - 0.5))
    gx, gw = kiln.grad(loss, [x, w])
    assert gx.shape == a.shape and gw.shape == b.shape
    ta, tb = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    ref = ((torch.tanh(ta @ tb) - 0.5) ** 2).mean()
    ref.backward()
    np.testing.assert_allclose(float(loss), ref.item(), rtol=1e-6)
    np.testing.assert_allclose(gx.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gw.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert kiln.grad(loss, x).shape == a.shape
    assert torch.equal(torch.from_dlpack(x), torch.from_numpy(a))


def test_export_compiles_back(tmp_path, xs):
    a, b = xs
    x, w = kiln.array(a), kiln.array(b)
    y = kiln.relu(x @ w) * 0.5
    path = tmp_path / "net.kiln"
    weights = kiln.export(path, {"y": y}, inputs={"x": x})
    assert weights == str(tmp_path / "net.safetensors")
    m = kiln.compile(path)
    m.load_weights(weights)
    assert [t.name for t in m.inputs] == ["x"] and m.outputs[0].name == "y"
    np.testing.assert_allclose(m.predict(a), y.numpy(), rtol=1e-6)


def test_errors(xs):
    a, b = xs
    x = kiln.array(a)
    with pytest.raises(kiln.KilnError, match="matmul"):
        x @ x                                     # [3, 4] @ [3, 4]
    with pytest.raises(TypeError, match="has no input or attribute colour"):
        kiln.relu(x, colour=1)
    with pytest.raises(TypeError, match="at most 1 inputs"):
        kiln.relu(x, x)
    with pytest.raises(kiln.KilnError, match="must be given as an array"):
        kiln.fully_connected(x, num_hidden=3)     # arrays create no parameters
    with pytest.raises(TypeError):
        kiln.array(np.array(["a"]))
    with pytest.raises(ValueError):
        kiln.zeros((0, 2))
    with pytest.raises(TypeError, match="dtype"):
        kiln.zeros(3, dtype=np.float64)
    with pytest.raises(ValueError):
        kiln.exp(x * float("inf"))
    with pytest.raises(TypeError):
        kiln.grad(1.0, [x])


def test_every_op_is_a_function():
    for name in ("relu", "convolution", "pooling", "batch_norm", "layer_norm", "softmax_cross_entropy", "embedding",
                 "sum", "max", "slice", "pad", "concat", "matmul", "dropout"):
        f = getattr(kiln, name)
        assert callable(f) and f.__name__ == name and f.__doc__.startswith("kiln.%s(" % name)
    assert set(kiln.lazy.OPS) <= set(dir(kiln))
