"""The Model API on a small model with two outputs and a bounded dim (conftest.TWO_OUT): calling
conventions, out=, bounded extents, train_step and lr, weights files and state_dict, the
conversions of inputs and their refusals, every error path, threads."""
import os
import pathlib
import threading

import numpy as np
import pytest

import kiln
from conftest import EXAMPLES, TWO_OUT


def data(rng, n=4):
    return rng.standard_normal((n, 6)).astype(np.float32), (np.arange(n) % 3).astype(np.int32)


# ---- description and calling ----

def test_description(two):
    assert two.name == "two"
    assert [(t.name, t.shape, t.dtype) for t in two.inputs] == [("x", ("batch", 6), np.float32)]
    assert [(t.name, t.shape) for t in two.outputs] == [("prob", ("batch", 3)), ("h", ("batch", 5))]
    assert [t.name for t in two.train_inputs] == ["x", "label"]
    assert two.dims == {"batch": (1, 16)}
    assert [w.name for w in two.weights] == ["h.weight", "h.bias", "logits.weight", "logits.bias"]
    assert two.inputs[0].type == "f32[batch, 6]" and two.inputs[0].bound == (16, 6)
    assert "predict(x: f32[batch, 6])" in repr(two)


def test_calling_conventions(two, rng):
    x, _ = data(rng)
    a = two.predict(x)
    assert set(a) == {"prob", "h"} and a["prob"].shape == (4, 3) and a["h"].shape == (4, 5)
    np.testing.assert_allclose(a["prob"].sum(1), 1, rtol=1e-6)
    for b in (two(x), two.predict(x=x), two.predict({"x": x})):
        assert all(np.array_equal(a[k], b[k]) for k in a)


def test_out_arrays(two, rng):
    x, _ = data(rng)
    want = two.predict(x)
    prob, h = np.empty((4, 3), np.float32), np.empty((4, 5), np.float32)
    got = two.predict(x, out={"prob": prob, "h": h})
    assert got["prob"] is prob and got["h"] is h
    assert np.array_equal(prob, want["prob"]) and np.array_equal(h, want["h"])
    got = two.predict(x, out=[None, h])
    assert got["h"] is h and np.array_equal(got["prob"], want["prob"])
    with pytest.raises(TypeError, match="out= array for 'prob' must be a writeable C-contiguous f32\\[4, 3\\]; got float64"):
        two.predict(x, out={"prob": np.empty((4, 3))})
    with pytest.raises(TypeError, match="got float32\\[3, 3\\]"):
        two.predict(x, out={"prob": np.empty((3, 3), np.float32)})
    with pytest.raises(TypeError, match="names nope"):
        two.predict(x, out={"nope": prob})
    one = kiln.compile(os.path.join(EXAMPLES, "mlp.kiln"), dims={"batch": 2})
    y = np.empty((2, 10), np.float32)
    assert one.predict(np.zeros((2, 784), np.float32), out=y) is y


def test_bounded_equals_fixed(two, rng):
    """Each extent gives what a model compiled at that batch gives, predict and train_step."""
    bounded = kiln.compile(TWO_OUT)
    for n in (1, 3, 16):
        fixed = kiln.compile(TWO_OUT, dims={"batch": n})
        assert fixed.dims == {} and fixed.inputs[0].shape == (n, 6)
        fixed.load_state_dict(bounded.state_dict())
        x, label = data(rng, n)
        a, b = bounded.predict(x), fixed.predict(x)
        assert a["prob"].shape == (n, 3)
        assert all(np.array_equal(a[k], b[k]) for k in a)
        assert bounded.train_step(x, label) == fixed.train_step(x, label)
        assert all(np.array_equal(v, fixed.state_dict()[k]) for k, v in bounded.state_dict().items())


def test_bounded_refusals(two):
    for n in (0, 17):
        with pytest.raises(TypeError, match=r"input 'x' has shape \[%d, 6\].*wants f32\[batch, 6\] with batch = 1..16" % n):
            two.predict(np.zeros((n, 6), np.float32))
    with pytest.raises(TypeError, match=r"shape \[4, 7\]"):
        two.predict(np.zeros((4, 7), np.float32))


def test_dims_bound_a_fixed_dim():
    m = kiln.compile(os.path.join(EXAMPLES, "mlp.kiln"), dims={"batch": (2, 8)})
    assert m.dims == {"batch": (2, 8)}
    assert m.predict(np.zeros((5, 784), np.float32)).shape == (5, 10)
    with pytest.raises(TypeError, match="batch = 2..8"):
        m.predict(np.zeros((1, 784), np.float32))


# ---- training, weights ----

def test_train_step_and_lr(rng):
    m = kiln.compile(TWO_OUT)
    x, label = data(rng, 8)
    assert m.lr == 0.5
    losses = [m.train_step(x, label) for _ in range(5)]
    assert isinstance(losses[0], float) and losses[-1] < losses[0]
    with pytest.raises(kiln.KilnError, match="must be finite and > 0"):
        m.lr = 0.0
    assert m.lr == 0.5
    half = kiln.compile(TWO_OUT)
    half.load_state_dict(m.state_dict())
    half.lr = 0.25
    assert half.lr == 0.25
    before = m.state_dict()
    m.train_step(x=x, label=label)
    half.train_step(x, label)
    for k, v in before.items():     # sgd without momentum: the step is lr * gradient
        np.testing.assert_allclose(half.state_dict()[k] - v, 0.5 * (m.state_dict()[k] - v), rtol=1e-4, atol=1e-7)
    m.lr = 0.1
    assert m.lr == 0.1
    with pytest.raises(TypeError):
        m.lr = "fast"
    with pytest.raises(ValueError):
        m.lr = float("nan")


def test_lr_follows_the_schedule(rng):
    """m.lr is the next step's lr: the schedule's (StepLR here), and setting it restarts the
    schedule from the value set."""
    m = kiln.compile(TWO_OUT.replace("sgd(lr=0.5)", "adamw(lr=0.4) schedule step(step_size=2, gamma=0.5)"))
    x, label = data(rng, 8)
    seen = []
    for _ in range(5):
        seen.append(m.lr)
        m.train_step(x, label)
    assert seen == [0.4, 0.4, 0.2, 0.2, 0.1]
    m.lr = 1.0
    seen = []
    for _ in range(3):
        seen.append(m.lr)
        m.train_step(x, label)
    assert seen == [1.0, 1.0, 0.5]


RESUME = """
dim batch = 8
model resume {
  input x : f32[batch, 6]
  input label : i32[batch]
  h = dropout(relu(fully_connected(x, num_hidden=7)), p=0.3)
  logits = fully_connected(h, num_hidden=3)
  loss = softmax_cross_entropy(logits, label)
  output logits
  train loss with OPTIM
}
"""


@pytest.mark.parametrize("optim", ["sgd(lr=0.1, momentum=0.9, nesterov=true) schedule step(step_size=3, gamma=0.5)",
                                   "adam(lr=0.01, wd=0.01)", "adamw(lr=0.02) schedule cosine(total=10, warmup=2)",
                                   "sgd(lr=0.05)"])
def test_save_state_resumes_bit_for_bit(rng, tmp_path, optim):
    """k steps, save_state, load_state into a fresh model (another seed), m more steps: the
    weights and losses of k + m steps straight, dropout's masks and the schedule included."""
    src = RESUME.replace("OPTIM", optim)
    batches = [data(rng, 8) for _ in range(7)]
    straight = kiln.compile(src, seed=3)
    want = [straight.train_step(*b) for b in batches]
    first = kiln.compile(src, seed=3)
    got = [first.train_step(*b) for b in batches[:4]]
    first.save_state(tmp_path / "s.safetensors")
    second = kiln.compile(src, seed=99)
    second.load_state(tmp_path / "s.safetensors")
    assert second.lr == first.lr
    got += [second.train_step(*b) for b in batches[4:]]
    assert got == want
    for k, v in straight.state_dict().items():
        assert np.array_equal(second.state_dict()[k], v), k


def test_clip_norm_bounds_the_step(rng):
    """clip_norm: with plain SGD at lr 1 the step over every parameter together is the
    gradients' global norm, clipped to clip_norm (torch.nn.utils.clip_grad_norm_)."""
    for clip, bounded in ((0.01, True), (1e6, False)):
        m = kiln.compile(TWO_OUT.replace("sgd(lr=0.5)", "sgd(lr=1) clip_norm=%g" % clip))
        before = m.state_dict()
        m.train_step(*data(rng, 8))
        step = np.sqrt(sum(float(np.sum((m.state_dict()[k] - v).astype(np.float64) ** 2)) for k, v in before.items()))
        if bounded:
            assert abs(step - clip) < 1e-5, step
        else:
            assert step > 0.01, step


def test_load_state_refusals(rng, tmp_path):
    m = kiln.compile(RESUME.replace("OPTIM", "adam(lr=0.01)"))
    m.train_step(*data(rng, 8))
    m.save(tmp_path / "w.safetensors")
    m.save_state(tmp_path / "s.safetensors")
    before = m.state_dict()
    with pytest.raises(kiln.KilnError, match="not a state file"):
        m.load_state(tmp_path / "w.safetensors")
    other = kiln.compile(RESUME.replace("OPTIM", "sgd(lr=0.1, momentum=0.9)"))
    with pytest.raises(kiln.KilnError, match="another optimizer"):
        other.load_state(tmp_path / "s.safetensors")
    with pytest.raises(kiln.KilnError, match="not of 'two'"):
        kiln.compile(TWO_OUT).load_state(tmp_path / "s.safetensors")
    with pytest.raises(kiln.KilnError, match="unexpected tensor"):   # a state file is not a weights file
        m.load_weights(tmp_path / "s.safetensors")
    raw = (tmp_path / "s.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(raw[:len(raw) - 10])
    with pytest.raises(kiln.KilnError):
        m.load_state(tmp_path / "cut.safetensors")
    for k, v in before.items():
        assert np.array_equal(m.state_dict()[k], v), k


def test_save_load_weights(rng, tmp_path):
    m = kiln.compile(TWO_OUT)
    x, label = data(rng)
    path = tmp_path / "w.safetensors"
    m.save(path)
    want = m.predict(x)["prob"]
    m.train_step(x, label)
    assert not np.array_equal(m.predict(x)["prob"], want)
    m.load_weights(str(path))
    assert np.array_equal(m.predict(x)["prob"], want)
    with pytest.raises(kiln.KilnError, match="nothere"):
        m.load_weights(tmp_path / "nothere.safetensors")
    with pytest.raises(kiln.KilnError):
        m.save(tmp_path / "no" / "dir" / "w.safetensors")
    other = kiln.compile(os.path.join(EXAMPLES, "mlp.kiln"), dims={"batch": 2})
    with pytest.raises(kiln.KilnError, match="missing"):
        other.load_weights(path)     # another model's file: refused, nothing changed


def test_state_dict_round_trip(rng):
    m = kiln.compile(TWO_OUT, seed=1)
    sd = m.state_dict()
    assert list(sd) == ["h.weight", "h.bias", "logits.weight", "logits.bias"]
    assert sd["h.weight"].shape == (5, 6) and sd["h.weight"].dtype == np.float32
    x, label = data(rng)
    want = m.predict(x)["prob"]
    m.train_step(x, label)
    assert m.load_state_dict(sd) == ([], [])
    assert all(np.array_equal(v, m.state_dict()[k]) for k, v in sd.items())
    assert np.array_equal(m.predict(x)["prob"], want)
    # float64 values convert; a partial dict with strict=False keeps the rest
    m.load_state_dict({"h.bias": np.ones(5)}, strict=False)
    got = m.state_dict()
    assert np.array_equal(got["h.bias"], np.ones(5, np.float32)) and np.array_equal(got["h.weight"], sd["h.weight"])
    seeded = kiln.compile(TWO_OUT, seed=2).state_dict()
    assert not np.array_equal(seeded["h.weight"], sd["h.weight"])


def test_state_dict_refusals():
    m = kiln.compile(TWO_OUT)
    sd = m.state_dict()
    with pytest.raises(kiln.KilnError, match="missing: logits.bias"):
        m.load_state_dict({k: v for k, v in sd.items() if k != "logits.bias"})
    with pytest.raises(kiln.KilnError, match="unknown: extra"):
        m.load_state_dict(dict(sd, extra=np.zeros(1)))
    with pytest.raises(TypeError, match=r"'h.bias' has shape \[4\]"):
        m.load_state_dict(dict(sd, **{"h.bias": np.zeros(4, np.float32)}))
    with pytest.raises(TypeError):
        m.load_state_dict([1, 2])
    assert all(np.array_equal(v, m.state_dict()[k]) for k, v in sd.items())


# ---- conversions ----

def test_conversions(two, rng):
    x, label = data(rng)
    want = two.predict(x)["prob"]
    assert np.array_equal(two.predict(x.astype(np.float64))["prob"], want)       # float64 -> float32
    assert np.array_equal(two.predict(x.tolist())["prob"], want)                  # nested lists
    assert np.array_equal(two.predict(np.asfortranarray(x))["prob"], want)        # not contiguous: copied
    wide = np.zeros((4, 12), np.float32)
    wide[:, ::2] = x
    assert np.array_equal(two.predict(wide[:, ::2])["prob"], want)               # strided view

    class Interface:
        def __init__(self, a):
            self.__array_interface__ = a.__array_interface__
            self.keep = a

    class DLPack:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    assert np.array_equal(two.predict(Interface(x))["prob"], want)
    assert np.array_equal(two.predict(DLPack(x))["prob"], want)
    m1, m2 = kiln.compile(TWO_OUT), kiln.compile(TWO_OUT)
    assert m1.train_step(x, label) == m2.train_step(x, label.astype(np.int64))  # int64 -> int32


def test_no_copy_for_the_right_dtype(two):
    from kiln._convert import as_input
    x = np.zeros((4, 6), np.float32)
    assert as_input(x, np.dtype(np.float32), "x", "f32") is x
    assert as_input(x.astype(np.float64), np.dtype(np.float32), "x", "f32") is not x


def test_conversion_refusals(two):
    x = np.zeros((4, 6), np.float32)
    with pytest.raises(TypeError, match="train_step of 'two': input 'label': got float32\\[4\\]; the model wants i32\\[batch\\]"):
        two.train_step(x, np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="input 'x': got complex128"):
        two.predict(x.astype(np.complex128))
    with pytest.raises(TypeError, match="input 'x': got <U1"):
        two.predict(np.full((4, 6), "a"))
    with pytest.raises(TypeError, match="input 'x'"):
        two.predict(object())
    with pytest.raises(ValueError, match="input 'label': values .* do not fit int32"):
        two.train_step(x, np.array([0, 1, 2, 2 ** 40]))


def test_torch_tensors_in(two, torch, rng):
    x, label = data(rng)
    want = two.predict(x)["prob"]
    t = torch.from_numpy(x).requires_grad_(True)
    assert np.array_equal(two.predict(t)["prob"], want)
    assert np.array_equal(two.predict(torch.from_numpy(x).double())["prob"], want)
    m1, m2 = kiln.compile(TWO_OUT), kiln.compile(TWO_OUT)
    assert m1.train_step(x, label) == m2.train_step(torch.from_numpy(x), torch.from_numpy(label).long())


# ---- errors ----

def test_argument_errors(two):
    x = np.zeros((4, 6), np.float32)
    with pytest.raises(TypeError, match="predict of 'two': missing input x"):
        two.predict()
    with pytest.raises(TypeError, match="train_step of 'two': missing input label"):
        two.train_step(x)
    with pytest.raises(TypeError, match="has no input 'y'; its inputs are x"):
        two.predict(y=x)
    with pytest.raises(TypeError, match="takes 1 input \\(x\\); 2 were given"):
        two.predict(x, x)
    with pytest.raises(TypeError, match="input 'x' given twice"):
        two.predict(x, x=x)


def test_model_errors(rng):
    with pytest.raises(kiln.KilnError) as e:
        kiln.compile("model x {\n  input a : f32[2]\n  b = relu(a, foo=1)\n  output b\n}\n")
    assert "<text>:3:15: error: relu takes no attributes" in str(e.value) and "^" in str(e.value)
    with pytest.raises(kiln.KilnError, match="cannot open 'nothere.kiln'"):
        kiln.compile("nothere.kiln")
    with pytest.raises(kiln.KilnError, match="no dim named 'bat'; did you mean 'batch'"):
        kiln.compile(os.path.join(EXAMPLES, "mlp.kiln"), dims={"bat": 3})
    with pytest.raises(TypeError):
        kiln.compile(os.path.join(EXAMPLES, "mlp.kiln"), dims={"batch": "8"})
    with pytest.raises(ValueError):
        kiln.compile(os.path.join(EXAMPLES, "mlp.kiln"), dims={"batch": 0})
    with pytest.raises(ValueError):
        kiln.compile(os.path.join(EXAMPLES, "mlp.kiln"), dims={"batch": (0, 4)})
    with pytest.raises(ValueError, match="opt"):
        kiln.compile(TWO_OUT, opt=5)
    with pytest.raises(ValueError, match="target"):
        kiln.compile(TWO_OUT, target="tpu")
    with pytest.raises(TypeError):
        kiln.compile(42)
    with pytest.raises(kiln.KilnError, match="no such file"):
        kiln.load("/nonexistent/libx.so")
    libm = "/lib/x86_64-linux-gnu/libm.so.6"
    if os.path.exists(libm):
        with pytest.raises(kiln.KilnError, match="is not a Kiln model"):
            kiln.load(libm)
    m = kiln.compile(TWO_OUT)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    with pytest.raises(kiln.KilnError, match="label 7 of row 2 is outside \\[0, 3\\)"):
        m.train_step(x, np.array([0, 1, 7]))
    no_train = kiln.compile("model p {\n  input a : f32[2]\n  b = relu(a)\n  output b\n}\n")
    with pytest.raises(kiln.KilnError, match="has no train statement"):
        no_train.train_step(np.zeros(2, np.float32))
    m.close()
    with pytest.raises(kiln.KilnError, match="was closed"):
        m.predict(x)


def test_several_models_in_text_and_paths():
    text = TWO_OUT + "\nmodel other {\n  input a : f32[3]\n  b = relu(a)\n  output b\n}\n"
    with pytest.raises(kiln.KilnError, match="several models; name one"):
        kiln.compile(text)
    m = kiln.compile(text, model="other")
    assert m.predict(np.array([-1, 0, 2])).tolist() == [0, 0, 2]
    assert kiln.compile(pathlib.Path(EXAMPLES) / "mlp.kiln").name == "mlp"


def test_abi_check():
    from kiln import _abi
    api = _abi.Api()
    api.abi = b"kiln-model-0"
    assert "was built for ABI 'kiln-model-0'" in _abi.check_abi(api, "x.so")


# ---- threads ----

def test_two_threads_two_models(rng):
    a, b = kiln.compile(os.path.join(EXAMPLES, "lenet.kiln"), dims={"batch": 4}), kiln.compile(TWO_OUT)
    xa = rng.standard_normal((4, 1, 28, 28)).astype(np.float32)
    xb, _ = data(rng)
    want_a, want_b = a.predict(xa), b.predict(xb)["prob"]
    bad = []

    def run(m, x, want, key):
        for _ in range(50):
            got = m.predict(x)
            if not np.array_equal(got[key] if key else got, want):
                bad.append(m.name)

    threads = [threading.Thread(target=run, args=(a, xa, want_a, None)), threading.Thread(target=run, args=(b, xb, want_b, "prob")),
               threading.Thread(target=run, args=(b, xb, want_b, "prob"))]   # and one model from two threads
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_no_leak_over_many_calls(rng):
    """10,000 predict calls leave the resident set where it was after the first 1,000."""
    m = kiln.compile("dim n = 16\nmodel tiny {\n  input x : f32[n]\n  y = relu(x)\n  output y\n}\n")
    x = rng.standard_normal(16).astype(np.float32)
    out = np.empty(16, np.float32)

    def rss_kb():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    for _ in range(1000):
        m.predict(x)
        m.predict(x, out=out)
    before = rss_kb()
    for _ in range(10000):
        m.predict(x)
    assert rss_kb() - before < 2048, "RSS grew by %d kB over 10,000 predict calls" % (rss_kb() - before)


def test_cuda_target_without_a_driver():
    """target='cuda' builds a .so for the GPU; without a driver, creating it is a KilnError."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a CUDA driver is installed here")
    except OSError:
        pass
    with pytest.raises(kiln.KilnError, match="cannot create model 'm': no CUDA driver|target is off|CUDA"):
        kiln.compile("dim n = 4\nmodel m {\n  input x : f32[n]\n  y = x * 2\n  output y\n}\n", target="cuda")


def test_calls_release_the_gil(rng):
    """While one long train_step runs in a thread, Python code runs in another without a pause as
    long as the call: a held GIL would stop it for the length of the call."""
    import time
    m = kiln.compile(os.path.join(EXAMPLES, "resnet.kiln"), dims={"batch": 32})
    x = rng.standard_normal((32, 3, 32, 32)).astype(np.float32)
    label = (np.arange(32) % 10).astype(np.int32)
    m.train_step(x, label)
    t0 = time.perf_counter()
    m.train_step(x, label)
    call = time.perf_counter() - t0
    done = threading.Event()

    def work():
        m.train_step(x, label)
        done.set()
    t = threading.Thread(target=work)
    last, gap = time.perf_counter(), 0.0
    t.start()
    while not done.is_set():
        now = time.perf_counter()
        gap, last = max(gap, now - last), now
    t.join()
    assert gap < 0.5 * call, "Python paused %.0f ms during a %.0f ms train_step" % (gap * 1e3, call * 1e3)
