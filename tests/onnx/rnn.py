#!/usr/bin/python3
"""rnn.py -- ONNX LSTM, GRU and RNN, which the importer unrolls over the sequence
(frontend/onnx/onnx_rnn.c):
  * torch's nn.LSTM, nn.GRU and nn.RNN exported at opset 13 (GRU with linear_before_reset = 1,
    as torch writes it): one and two layers, batch_first False and True, one direction and
    both, the initial states absent or given as inputs; every output (the sequence, h_n and
    c_n) through `kiln run` against torch, within 1e-4 of the output's largest magnitude;
  * built with onnx.helper against numpy: GRU with linear_before_reset = 0 and B absent, a
    reverse LSTM with B and sequence_lens all the sequence's length, an LSTM whose Y is left
    unnamed (only Y_h read);
  * one train_step of an imported LSTM and of a GRU (each followed by a Linear on its last step,
    `kiln import --train "softmax_cross_entropy sgd(lr=0.1, momentum=0.9)"`) against one
    torch.optim.SGD step: the loss and every weight after the step (W, R, Wb and Rb trained
    apart, as torch's weight_ih, weight_hh, bias_ih and bias_hh);
  * refusals, exit 1 with a message naming the node: clip, activations other than the
    defaults, LSTM's peepholes, layout = 1, sequence_lens shorter than the sequence.

    rnn.py KILN
The .so of the train step is driven through its C ABI with ctypes in a child process that does
not import torch (`rnn.py --step ...`), as tests/onnx/training.py does.
Exit status: 0 passed, 1 a failure, 77 (skipped, with the reason) without python3-onnx or torch.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

try:
    import numpy as np
except ImportError as e:
    print("onnx rnn: skipped: %s (apt-get install python3-numpy)" % e)
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

if sys.argv[1:2] == ["--step"]:
    from so_step import step  # noqa: E402
    sys.exit(step(*sys.argv[2:7]))

try:
    import onnx
    import torch
    from onnx import TensorProto, helper, numpy_helper
    from st_read import read_safetensors
    from import_refused import import_refused
except ImportError as e:
    print("onnx rnn: skipped: %s (apt-get install python3-onnx python3-torch)" % e)
    sys.exit(77)

torch.set_num_threads(1)
warnings.filterwarnings("ignore")               # torch's export warnings about batch_first
KILN = sys.argv[1]
failed = 0
tmp = tempfile.mkdtemp(prefix="kiln-onnx-rnn-")
rng = np.random.default_rng(3)


def fail(msg):
    global failed
    failed += 1
    print("FAIL:", msg)


def kiln_run(path, inputs, outputs):
    """kiln run of the model on inputs (name -> array); the named outputs, or None."""
    args = [KILN, "run", path]
    for name, a in inputs.items():
        np.save(os.path.join(tmp, name + ".npy"), a)
        args += ["--input", "%s=%s" % (name, os.path.join(tmp, name + ".npy"))]
    for name in outputs:
        args += ["--output", "%s=%s" % (name, os.path.join(tmp, "out_" + name + ".npy"))]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        fail("kiln run %s: exit %d\n%s" % (path, r.returncode, r.stderr))
        return None
    return [np.load(os.path.join(tmp, "out_" + name + ".npy")) for name in outputs]


def compare(case, got, want, names=("y", "h", "c")):
    if got is None:
        return
    worst = []
    for name, g, w in zip(names, got, want):
        scale = float(np.abs(w).max())
        if g.shape != w.shape:
            return fail("%s: %s has shape %s, torch's %s" % (case, name, g.shape, w.shape))
        d = float(np.abs(g - w).max())
        if d > 1e-4 * scale:
            return fail("%s: %s differs by %.3g (max |torch| %.3g)" % (case, name, d, scale))
        worst.append("%s %.2g" % (name, d))
    print("ok %-40s worst abs diff: %s" % (case, ", ".join(worst)))


class Wrap(torch.nn.Module):
    """The torch module with its initial states as inputs when given."""

    def __init__(self, rnn, states):
        super().__init__()
        self.rnn, self.states = rnn, states

    def forward(self, x, *init):
        y, h = self.rnn(x, (init if len(init) > 1 else init[0]) if init else None)
        return (y,) + (h if isinstance(h, tuple) else (h,))


def torch_case(kind, layers, batch_first, bidir, states):
    torch.manual_seed(layers * 8 + batch_first * 4 + bidir * 2 + states)
    T, B, I, H = 5, 3, 4, 6
    rnn = getattr(torch.nn, kind)(I, H, num_layers=layers, batch_first=batch_first, bidirectional=bidir)
    x = torch.randn((B, T, I) if batch_first else (T, B, I))
    d = 2 if bidir else 1
    init = [torch.randn(layers * d, B, H) for _ in range(2 if kind == "LSTM" else 1)] if states else []
    outs = ["y", "h", "c"][:3 if kind == "LSTM" else 2]
    names = ["x"] + ["h0", "c0"][:len(init)]
    case = "%s layers=%d batch_first=%d bidirectional=%d states=%d" % (kind, layers, batch_first, bidir, states)
    path = os.path.join(tmp, "model.onnx")
    m = Wrap(rnn, states)
    with torch.no_grad():
        want = [t.numpy() for t in m(x, *init)]
        torch.onnx.export(m, (x, *init), path, opset_version=13, input_names=names, output_names=outs)
    ops = [n.op_type for n in onnx.load(path).graph.node]
    if ops.count(kind) != layers:
        return fail("%s: torch exported %d %s nodes: %s" % (case, ops.count(kind), kind, ops))
    compare(case, kiln_run(path, dict(zip(names, [x.numpy()] + [t.numpy() for t in init])), outs), want)


for kind in ("LSTM", "GRU", "RNN"):
    for layers, batch_first, bidir, states in ((1, False, False, False), (2, False, True, False), (1, True, True, True),
                                               (2, True, False, True), (2, False, True, True)):
        if kind == "RNN" and layers == 2 and not bidir:
            continue
        torch_case(kind, layers, batch_first, bidir, states)


# ---- built with onnx.helper, against numpy (ONNX's equations, gate orders i o f c and z r h) ----

def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def np_gru(x, w, r, b, lbr, h):
    hs = []
    H = r.shape[1]
    wb, rb = (b[:3 * H], b[3 * H:]) if b is not None else (np.zeros(3 * H), np.zeros(3 * H))
    for t in range(x.shape[0]):
        gx, gh = x[t] @ w.T + wb, h @ r.T + rb
        z, rr = sigmoid(gx[:, :H] + gh[:, :H]), sigmoid(gx[:, H:2 * H] + gh[:, H:2 * H])
        if lbr:
            ht = np.tanh(gx[:, 2 * H:] + rr * gh[:, 2 * H:])
        else:
            ht = np.tanh(gx[:, 2 * H:] + (rr * h) @ r[2 * H:].T + rb[2 * H:])
        h = (1 - z) * ht + z * h
        hs.append(h)
    return np.stack(hs), h


def np_lstm(x, w, r, b, h, c, order):
    H = r.shape[1]
    ys = [None] * x.shape[0]
    for t in order:
        g = x[t] @ w.T + h @ r.T + b[:4 * H] + b[4 * H:]
        i, o, f, cc = sigmoid(g[:, :H]), sigmoid(g[:, H:2 * H]), sigmoid(g[:, 2 * H:3 * H]), np.tanh(g[:, 3 * H:])
        c = f * c + i * cc
        h = o * np.tanh(c)
        ys[t] = h
    return np.stack(ys), h, c


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def helper_path(case, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    path = os.path.join(tmp, case + ".onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)
    return path


T, B, I, H = 4, 2, 3, 5
x = rng.standard_normal((T, B, I)).astype(np.float32)
for lbr in (0, 1):
    w = rng.standard_normal((1, 3 * H, I)).astype(np.float32)
    r = rng.standard_normal((1, 3 * H, H)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")]
    node = helper.make_node("GRU", ["X", "W", "R"], ["Y", "Y_h"], name="gru", hidden_size=H, linear_before_reset=lbr)
    path = helper_path("gru%d" % lbr, [node], [vi("X", [T, B, I])], [vi("Y", [T, 1, B, H]), vi("Y_h", [1, B, H])], inits)
    y, h = np_gru(x.astype(np.float64), w[0], r[0], None, lbr, np.zeros((B, H)))
    got = kiln_run(path, {"X": x}, ["Y", "Y_h"])
    compare("GRU linear_before_reset=%d, no B (numpy)" % lbr, got, [y[:, None].astype(np.float32), h[None].astype(np.float32)])

w = rng.standard_normal((1, 4 * H, I)).astype(np.float32)
r = rng.standard_normal((1, 4 * H, H)).astype(np.float32)
b = rng.standard_normal((1, 8 * H)).astype(np.float32)
lens = np.full(B, T, np.int32)
inits = [numpy_helper.from_array(a, nm) for a, nm in ((w, "W"), (r, "R"), (b, "B"), (lens, "lens"))]
node = helper.make_node("LSTM", ["X", "W", "R", "B", "lens"], ["Y", "Y_h", "Y_c"], name="lstm_rev", hidden_size=H, direction="reverse")
path = helper_path("lstm_rev", [node], [vi("X", [T, B, I])], [vi("Y", [T, 1, B, H]), vi("Y_h", [1, B, H]), vi("Y_c", [1, B, H])], inits)
y, h, c = np_lstm(x.astype(np.float64), w[0], r[0], b[0], np.zeros((B, H)), np.zeros((B, H)), range(T - 1, -1, -1))
compare("LSTM reverse, B, sequence_lens (numpy)", kiln_run(path, {"X": x}, ["Y", "Y_h", "Y_c"]),
        [a.astype(np.float32) for a in (y[:, None], h[None], c[None])])
node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["", "Y_h"], name="lstm_noy", hidden_size=H)
path = helper_path("lstm_noy", [node], [vi("X", [T, B, I])], [vi("Y_h", [1, B, H])], inits[:3])
y, h, c = np_lstm(x.astype(np.float64), w[0], r[0], b[0], np.zeros((B, H)), np.zeros((B, H)), range(T))
got = kiln_run(path, {"X": x}, ["Y_h"])
compare("LSTM with Y unnamed (numpy)", got, [h[None].astype(np.float32)], ("h",))


# ---- refusals ----

def expect_error(case, node, *needles, inits=None):
    G = 4 if node.op_type == "LSTM" else 3
    inits = inits or [numpy_helper.from_array(rng.standard_normal((1, G * H, I)).astype(np.float32), "W"),
                      numpy_helper.from_array(rng.standard_normal((1, G * H, H)).astype(np.float32), "R")]
    path = helper_path(case, [node], [vi("X", [T, B, I])], [vi("Y_h", [1, B, H])], inits)
    err, first = import_refused(KILN, path, os.path.join(tmp, case + ".kiln"),
                                ("node '%s' (%s)" % (node.name, node.op_type), "not supported") + needles)
    if err:
        return fail("%s: %s" % (case, err))
    print("ok %-40s %s" % (case, first.split("error: ")[-1]))


expect_error("clip", helper.make_node("LSTM", ["X", "W", "R"], ["", "Y_h"], name="l_clip", hidden_size=H, clip=3.0), "clip")
expect_error("activations", helper.make_node("GRU", ["X", "W", "R"], ["", "Y_h"], name="g_act", hidden_size=H,
                                             activations=["Relu", "Tanh"]), "activations")
expect_error("layout", helper.make_node("GRU", ["X", "W", "R"], ["", "Y_h"], name="g_layout", hidden_size=H, layout=1), "layout")
p = numpy_helper.from_array(np.ones((1, 3 * H), np.float32), "P")
lw = [numpy_helper.from_array(rng.standard_normal((1, 4 * H, I)).astype(np.float32), "W"),
      numpy_helper.from_array(rng.standard_normal((1, 4 * H, H)).astype(np.float32), "R")]
expect_error("peepholes", helper.make_node("LSTM", ["X", "W", "R", "", "", "", "", "P"], ["", "Y_h"], name="l_peep", hidden_size=H),
             "peepholes", inits=lw + [p])
short = numpy_helper.from_array(np.array([T, T - 1], np.int32), "lens")
expect_error("sequence_lens", helper.make_node("LSTM", ["X", "W", "R", "", "lens"], ["", "Y_h"], name="l_lens", hidden_size=H),
             "sequence_lens", inits=lw + [short])


# ---- one train step against torch.optim.SGD ----

def child_env(so):
    env = dict(os.environ)
    ldd = subprocess.run(["ldd", so], capture_output=True, text=True).stdout
    pre = [ln.split("=>")[1].split()[0] for ln in ldd.splitlines() if "=>" in ln and ("libasan" in ln or "libubsan" in ln)]
    if pre:
        env["LD_PRELOAD"] = " ".join(pre)
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    return env


class Classifier(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(4, 6, num_layers=2, bidirectional=True)
        self.fc = torch.nn.Linear(12, 5)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[-1])


def onnx_order(kind, t):
    """torch's gate blocks (i f g o; r z n) in ONNX's order (i o f c; z r h)."""
    parts = torch.chunk(t, 4 if kind == "LSTM" else 3, dim=0)
    order = (0, 3, 1, 2) if kind == "LSTM" else (1, 0, 2)
    return torch.cat([parts[i] for i in order], 0).numpy()


def train_case(kind):
    torch.manual_seed(1)
    net = Classifier(kind)
    x, label = torch.randn(5, 4, 4), torch.tensor([0, 3, 1, 4])
    d = os.path.join(tmp, "train_" + kind)
    os.mkdir(d)
    path, text, so = (os.path.join(d, f) for f in ("net.onnx", "net.kiln", "libnet.so"))
    torch.onnx.export(net, x, path, opset_version=13, input_names=["x"], output_names=["scores"])
    r = subprocess.run([KILN, "import", path, "-o", text, "--train", "softmax_cross_entropy sgd(lr=0.1, momentum=0.9)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return fail("train %s: kiln import --train: exit %d\n%s" % (kind, r.returncode, r.stderr))
    r = subprocess.run([KILN, "compile", text, "-o", so], capture_output=True, text=True)
    if r.returncode != 0:
        return fail("train %s: kiln compile: exit %d\n%s" % (kind, r.returncode, r.stderr))
    xin, lin, before, after = (os.path.join(d, f) for f in ("x.npy", "label.npy", "net.safetensors", "after.safetensors"))
    np.save(xin, x.numpy())
    np.save(lin, label.numpy().astype(np.int32))
    r = subprocess.run([sys.executable, __file__, "--step", so, xin, lin, before, after], capture_output=True, text=True,
                       env=child_env(so))
    if r.returncode != 0:
        return fail("train %s: the .so's load, train_step or save failed (exit %d)\n%s" % (kind, r.returncode, r.stderr[-1500:]))
    loss = float(r.stdout.strip())
    # each torch parameter (ONNX's gate order) is the Kiln param that starts with its values
    start, got = read_safetensors(before), read_safetensors(after)
    params = {nm: (onnx_order(kind, p.detach()) if nm.startswith("rnn.") else p.detach().numpy().copy())
              for nm, p in net.named_parameters()}
    match = {nm: [k for k, v in start.items() if v.shape == want.shape and np.array_equal(v, want)] for nm, want in params.items()}
    for nm, ks in match.items():
        if len(ks) != 1:
            return fail("train %s: %s is %d of the imported weights (%s), not one" % (kind, nm, len(ks), ks))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    ref = torch.nn.functional.cross_entropy(net(x), label)
    ref.backward()
    opt.step()
    if abs(loss - ref.item()) > 1e-5 * max(1.0, abs(ref.item())):
        fail("train %s: the loss differs: kiln %.7g, torch %.7g" % (kind, loss, ref.item()))
    worst = 0.0
    for nm, p in net.named_parameters():
        want = onnx_order(kind, p.detach()) if nm.startswith("rnn.") else p.detach().numpy()
        have = got[match[nm][0]]
        diff = float(np.abs(have - want).max())
        worst = max(worst, diff)
        if not np.allclose(have, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max()))):
            fail("train %s: %s after one step differs from torch's (worst abs diff %.3g)" % (kind, nm, diff))
    print("ok train %-34s loss kiln %.7g, torch %.7g; %d weights after one SGD step: worst abs diff %.3g" %
          (kind, loss, ref.item(), len(params), worst))


train_case("LSTM")
train_case("GRU")

shutil.rmtree(tmp)
print("onnx rnn: %s" % ("passed" if not failed else "%d failure(s)" % failed))
sys.exit(1 if failed else 0)
