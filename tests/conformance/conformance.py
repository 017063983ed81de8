#!/usr/bin/python3
"""conformance.py -- every op of the registry against PyTorch (SPEC section 2), forward and
gradient, plus SGD and Adam against torch.optim.

Each case writes a one-op .kiln model and its input tensors (.npy) into a temporary folder,
runs kiln_opcheck (tests/conformance/opcheck.c) on it, and compares the outputs, the aux
states after the call and the gradient of every float input with torch's forward and
autograd given the same out_grad. Usage:

    conformance.py KILN_OPCHECK [--kiln KILN --opcheck-at KILN_OPCHECK_AT] [--quick] [-k SUBSTRING] [-v]

--quick runs one shape per op family (the sanitizer build); -k keeps only the cases whose name
contains SUBSTRING. With --kiln, the ops run again through compiled models whose batch is a
bounded dim, at an extent below the bound (bounded.py; their names start with "bounded").
Exit status: 0 all passed, 1 a failure, 77 when torch is not installed.

Tolerance. A value passes when |kiln - torch| <= rtol*|torch| + atol*scale, where scale is
max(1, max|torch|) over the whole tensor: float32 sums computed in a different order differ by
a few ulps of the largest term, not of the (possibly cancelled) result, so the absolute slack
follows the tensor's magnitude. Defaults rtol = 1e-4, atol = 1e-5; cases that need more say
why where they set it.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("conformance: skipped: python3-torch is not installed (apt-get install python3-torch)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from torch_sched import torch_scheduler  # noqa: E402
from bounded import bounded_cases  # noqa: E402

torch.set_num_threads(1)
RTOL, ATOL = 1e-4, 1e-5
# Reductions over K terms (GEMM, convolution, broadcast-gradient sums, norm statistics): float32
# accumulation in another order differs by up to ~K ulps of the largest term in the worst case.
SUM_TOL = (1e-4, 2e-5)


class Runner:
    def __init__(self, exe, quick, pattern, verbose):
        self.exe, self.quick, self.pattern, self.verbose = exe, quick, pattern, verbose
        self.passed = self.failed = self.skipped = 0
        self.root = tempfile.mkdtemp(prefix="kiln-conf-")
        self.n = 0
        self.notes = []
        self.rng = np.random.default_rng(20240531)

    # ---- helpers for building cases ----
    def randn(self, *shape, lo=-2.0, hi=2.0):
        return self.rng.uniform(lo, hi, size=shape).astype(np.float32)

    def away(self, *shape, lo=0.5, hi=2.0):
        """Values with |v| in [lo, hi] and a random sign: away from a singular point at 0."""
        mag = self.rng.uniform(lo, hi, size=shape)
        sign = np.where(self.rng.uniform(size=shape) < 0.5, -1.0, 1.0)
        return (mag * sign).astype(np.float32)

    def ints(self, lo, hi, *shape):
        return self.rng.integers(lo, hi, size=shape).astype(np.int32)

    # ---- one case ----
    def case(self, name, body, arrays, ref, grads=None, train=False, tol=(RTOL, ATOL),
             aux=None, backward=True, check=None):
        """body: the model's statements, computing `y`. arrays: tensor name -> ndarray; names
        without a dot become `input`s, dotted ones are the op's auto-created params and aux.
        ref(T) computes y in torch from T (name -> tensor; float ones require grad).
        grads: kiln arg name -> tensor name whose gradient it must equal (default: every
        float array, by its name). aux: aux tensor names whose state after the call
        ref leaves in T. check(dir, T, y_torch) -> error string or None, for custom checks."""
        if self.pattern and self.pattern not in name:
            return
        self.n += 1
        d = os.path.join(self.root, "c%04d" % self.n)
        os.mkdir(d)
        try:
            err = self._run_case(d, body, arrays, ref, grads, train, tol, aux, backward, check)
        except Exception as e:  # a broken case is a failure, not a crash of the suite
            err = "%s: %s" % (type(e).__name__, e)
        if err:
            self.failed += 1
            print("FAIL %s: %s\n     model kept in %s" % (name, err, d))
        else:
            self.passed += 1
            print("ok   %s%s" % (name, "".join("\n     note: " + n for n in self.notes)))
            shutil.rmtree(d)
        self.notes = []

    def _model(self, body, arrays):
        decls = []
        for k, v in arrays.items():
            if "." in k:
                continue
            dt = "i32" if v.dtype == np.int32 else "f32"
            decls.append("  input %s : %s[%s]" % (k, dt, ", ".join(str(s) for s in v.shape)))
        return "model m {\n%s\n  %s\n  output y\n}\n" % ("\n".join(decls), body)

    @staticmethod
    def _torch(arrays, ref, og, dtype):
        """y and the inputs' tensors (with .grad after backward) from ref at dtype."""
        T = {}
        for k, v in arrays.items():
            t = torch.tensor(v)
            if v.dtype == np.float32:
                t = t.to(dtype)
                if "moving" not in k:
                    t.requires_grad_(True)
            T[k] = t
        y = ref(T)
        if og is not None:
            y.backward(torch.tensor(og).to(y.dtype))
        return T, y

    def _run_case(self, d, body, arrays, ref, grads, train, tol, aux, backward, check):
        with open(os.path.join(d, "m.kiln"), "w") as f:
            f.write(self._model(body, arrays))
        for k, v in arrays.items():
            np.save(os.path.join(d, k + ".npy"), v)
        T, y = self._torch(arrays, ref, None, torch.float32)
        og = None
        if backward and y.requires_grad:
            og = self.rng.uniform(-1, 1, size=tuple(y.shape)).astype(np.float32)
            np.save(os.path.join(d, "out_grad.npy"), og)
            T, y = self._torch(arrays, ref, og, torch.float32)
        cmd = [self.exe, os.path.join(d, "m.kiln"), d] + (["--train"] if train else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return "kiln_opcheck exit %d: %s" % (p.returncode, p.stderr.strip())
        if check:
            return check(d, T, y)
        if grads is None:
            grads = {k: k for k, v in arrays.items() if v.dtype == np.float32 and "moving" not in k}
        err = self._compare_all(d, arrays, T, y, og, grads, aux, tol)
        if err:
            # Where torch's own float32 rounding is the larger error (kiln accumulates some
            # statistics in double), kiln must then match torch evaluated in float64.
            T64, y64 = self._torch(arrays, ref, og, torch.float64)
            if self._compare_all(d, arrays, T64, y64, og, grads, aux, tol) is None:
                self.notes.append("matches torch in float64; float32 torch differs: " + err)
                return None
        return err

    def _compare_all(self, d, arrays, T, y, og, grads, aux, tol):
        err = self.compare("out", np.load(os.path.join(d, "out.npy")), y.detach().numpy(), tol)
        for a in aux or []:
            err = err or self.compare(a, np.load(os.path.join(d, a + ".after.npy")), T[a].numpy(), tol)
        if og is None:
            return err
        for arg, tname in grads.items():
            want = T[tname].grad
            want = np.zeros(arrays[tname].shape, np.float32) if want is None else want.numpy()
            err = err or self.compare("grad_" + arg, np.load(os.path.join(d, "grad_%s.npy" % arg)), want, tol)
        return err

    @staticmethod
    def compare(what, got, want, tol):
        rtol, atol = tol
        if got.shape != want.shape:
            return "%s: shape %s, torch %s" % (what, got.shape, want.shape)
        want = want.astype(np.float64)
        got = got.astype(np.float64)
        fin = np.isfinite(want)
        scale = max(1.0, float(np.max(np.abs(want[fin])))) if fin.any() else 1.0
        # Non-finite torch values (inf gradients at singular points, NaN) must match exactly.
        with np.errstate(invalid="ignore"):
            close = np.abs(got - want) <= rtol * np.abs(want) + atol * scale
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        bad = np.where(fin, ~close, ~same)
        if not bad.any():
            return None
        i = np.unravel_index(np.argmax(bad), bad.shape)
        return "%s: %d of %d differ; at %s kiln %.8g torch %.8g (rtol %g, atol %g x %.3g)" % (
            what, int(bad.sum()), bad.size, tuple(int(j) for j in i), got[i], want[i], rtol, atol, scale)

    def optim(self, name, kind, attrs, shape, steps, sched=None):
        """`steps` updates of one weight tensor by kiln and by torch.optim on the same gradients,
        with the lr of each step from `sched` ((name, attrs), as the train clause's schedule) and
        torch.optim.lr_scheduler."""
        if self.pattern and self.pattern not in name:
            return
        self.n += 1
        d = os.path.join(self.root, "c%04d" % self.n)
        os.mkdir(d)
        w = self.randn(*shape)
        gs = [self.randn(*shape) for _ in range(steps)]
        np.save(os.path.join(d, "w.npy"), w)
        for i, g in enumerate(gs):
            np.save(os.path.join(d, "g%d.npy" % (i + 1)), g)
        with open(os.path.join(d, "optim.txt"), "w") as f:
            for k, v in attrs.items():
                f.write("%s %r\n" % (k, v))
            f.write("steps %d\n" % steps)
            if sched:
                f.write("sched_%s 1\n" % sched[0])
                for k, v in sched[1].items():
                    for x in (v if isinstance(v, tuple) else (v,)):
                        f.write("%s %r\n" % ("milestone" if k == "milestones" else k, x))
        tw = torch.nn.Parameter(torch.tensor(w))
        a = dict(attrs)
        lr = a.pop("lr")
        a.pop("clip_norm", None)
        if kind == "sgd":
            opt = torch.optim.SGD([tw], lr=lr, momentum=a.get("momentum", 0), weight_decay=a.get("wd", 0),
                                  nesterov=bool(a.get("nesterov", 0)))
        else:
            betas = (a.get("beta1", 0.9), a.get("beta2", 0.999))
            cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
            opt = cls([tw], lr=lr, betas=betas, eps=a.get("eps", 1e-8), weight_decay=a.get("wd", 0))
        scheduler = torch_scheduler(torch, opt, sched) if sched else None
        p = subprocess.run([self.exe, "--optim", kind, d], capture_output=True, text=True)
        err = None if p.returncode == 0 else "kiln_opcheck exit %d: %s" % (p.returncode, p.stderr.strip())
        for i, g in enumerate(gs):
            if err:
                break
            tw.grad = torch.tensor(g)
            if "clip_norm" in attrs:
                torch.nn.utils.clip_grad_norm_([tw], attrs["clip_norm"])
            opt.step()
            if scheduler:
                scheduler.step()
            err = self.compare("w after step %d" % (i + 1), np.load(os.path.join(d, "w%d.npy" % (i + 1))),
                               tw.detach().numpy(), (RTOL, ATOL))
        if err:
            self.failed += 1
            print("FAIL %s: %s\n     kept in %s" % (name, err, d))
        else:
            self.passed += 1
            print("ok   %s" % name)
            shutil.rmtree(d)


def shp(s):
    return "[" + ",".join(str(x) for x in s) + "]"


# ---- the cases, one function per op family ----

def binary_cases(R):
    # (a shape, b shape): same shape, trailing broadcast, both sides broadcasting, scalar.
    shapes = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), ()), ((1, 3), (2, 1, 3)),
              ((4, 3, 5), (4, 1, 5)), ((64, 129), (64, 129)), ((3, 4), (1, 4))]
    if R.quick:
        shapes = shapes[1:3]
    ops = {
        "add": (lambda a, b: a + b, "a + b"), "sub": (lambda a, b: a - b, "a - b"),
        "mul": (lambda a, b: a * b, "a * b"), "div": (lambda a, b: a / b, "a / b"),
        "pow": (lambda a, b: torch.pow(a, b), "a ** b"),
        "maximum": (torch.maximum, "maximum(a, b)"), "minimum": (torch.minimum, "minimum(a, b)"),
    }
    for op, (fn, expr) in ops.items():
        for sa, sb in shapes:
            a = R.randn(*sa)
            b = R.away(*sb) if op == "div" else R.randn(*sb)
            if op == "pow":   # a > 0 so that d/db = out * log(a) exists
                a = R.randn(*sa, lo=0.3, hi=2.0)
            # Broadcast gradients are sums over the broadcast axes.
            R.case("%s %s %s" % (op, shp(sa), shp(sb)), "y = " + expr, {"a": a, "b": b},
                   lambda T, fn=fn: fn(T["a"], T["b"]), tol=SUM_TOL)
        # Named call form and a constant operand (a rank-0 const tensor in the graph).
    R.case("mul const 2.5 * x", "y = 2.5 * x", {"x": R.randn(3, 4)}, lambda T: 2.5 * T["x"], grads={"b": "x"})
    R.case("pow const x ** 2", "y = x ** 2", {"x": R.randn(3, 4)}, lambda T: T["x"] ** 2, grads={"a": "x"})
    # pow's edges: a negative base with integer exponents (d/db is NaN there in torch), 0 ** 2.
    a = np.array([-2, -1.5, 0, 2, 0.5], np.float32)
    b = np.array([3, 2, 2, 0.5, -1], np.float32)
    R.case("pow edges", "y = a ** b", {"a": a, "b": b}, lambda T: torch.pow(T["a"], T["b"]))
    # Ties: torch.maximum / minimum split the gradient equally between a and b when a == b.
    a = R.randn(2, 3)
    b = a.copy()
    b[0] += 1.0
    for op, fn in (("maximum", torch.maximum), ("minimum", torch.minimum)):
        R.case("%s ties" % op, "y = %s(a, b)" % op, {"a": a, "b": b}, lambda T, fn=fn: fn(T["a"], T["b"]))


def unary_cases(R):
    # Boundary values included where torch fixes a gradient convention: 0 for abs / sign / relu.
    def with_zeros(x):
        x = x.copy()
        x.flat[::5] = 0.0
        return x

    fns = {
        "neg": (torch.neg, None), "abs": (torch.abs, with_zeros), "exp": (torch.exp, None),
        "log": (torch.log, "pos"), "sqrt": (torch.sqrt, "pos"), "rsqrt": (torch.rsqrt, "pos"),
        "square": (torch.square, None), "sin": (torch.sin, None), "cos": (torch.cos, None),
        "sign": (torch.sign, with_zeros), "reciprocal": (torch.reciprocal, "away"),
        "relu": (F.relu, with_zeros), "sigmoid": (torch.sigmoid, None), "tanh": (torch.tanh, None),
        "softplus": (F.softplus, None), "gelu": (F.gelu, None),
    }
    shapes = [(7,), (3, 5), (2, 3, 4), (33, 65)] if not R.quick else [(3, 5)]
    for op, (fn, dom) in fns.items():
        for s in shapes:
            x = R.randn(*s, lo=-4, hi=4)
            if dom == "pos":
                x = R.randn(*s, lo=0.2, hi=4)
            elif dom == "away":
                x = R.away(*s)
            elif dom:
                x = dom(x)
            R.case("%s %s" % (op, shp(s)), "y = %s(x)" % op, {"x": x}, lambda T, fn=fn: fn(T["x"]))
    # Singular points: inf / NaN values and gradients must be the ones torch gives.
    for op in ("sqrt", "rsqrt", "log", "reciprocal"):
        x = np.array([0.0, 1.0, 4.0], np.float32)
        R.case("%s at 0" % op, "y = %s(x)" % op, {"x": x}, lambda T, op=op: getattr(torch, op)(T["x"]))
    # relu and activation(relu) keep NaN and -0 as torch does; the gradient passes at NaN
    # (torch's threshold_backward: 0 only where the output is <= 0).
    x = np.array([np.nan, -0.0, 0.0, -1.5, 2.0], np.float32)
    R.case("relu at NaN and +-0", "y = relu(x)", {"x": x}, lambda T: F.relu(T["x"]))
    R.case("activation relu at NaN and +-0", 'y = activation(x, act_type="relu")', {"x": x}, lambda T: F.relu(T["x"]))
    # softplus beyond torch's threshold (20) returns x itself; large negatives underflow.
    x = np.array([-30, -20.5, -1, 0, 1, 19.5, 20.5, 30], np.float32)
    R.case("softplus large |x|", "y = softplus(x)", {"x": x}, lambda T: F.softplus(T["x"]))
    R.case("exp large", "y = exp(x)", {"x": R.randn(4, 4, lo=-10, hi=10)}, lambda T: torch.exp(T["x"]))
    for slope in (0.01, 0.2):
        x = with_zeros(R.randn(3, 4))
        R.case("leaky_relu slope=%g" % slope, "y = leaky_relu(x, slope=%r)" % slope, {"x": x},
               lambda T, s=slope: F.leaky_relu(T["x"], s))
    R.case("leaky_relu default", "y = leaky_relu(x)", {"x": R.randn(5)}, lambda T: F.leaky_relu(T["x"]))
    # clip: torch.clamp passes the gradient where a_min <= x <= a_max, bounds included.
    x = R.randn(4, 5)
    x.flat[0], x.flat[1] = -0.5, 1.0
    R.case("clip [-0.5, 1]", "y = clip(x, a_min=-0.5, a_max=1.0)", {"x": x},
           lambda T: torch.clamp(T["x"], -0.5, 1.0))
    # smooth_l1(sigma) = F.smooth_l1_loss(x, 0, reduction='none', beta=1/sigma^2).
    for sigma in (1.0, 2.0, 0.5):
        x = R.randn(4, 6, lo=-5, hi=5)
        R.case("smooth_l1 sigma=%g" % sigma, "y = smooth_l1(x, sigma=%r)" % sigma, {"x": x},
               lambda T, s=sigma: F.smooth_l1_loss(T["x"], torch.zeros_like(T["x"]), reduction="none",
                                                   beta=1.0 / (s * s)))
    # At |x| == beta torch takes the linear branch (its test is |x| < beta); beta = 0.25 here.
    x = np.array([-0.25, 0.25, -0.2, 0.3, 0.0, 4.0], np.float32)
    R.case("smooth_l1 at the knee", "y = smooth_l1(x, sigma=2.0)", {"x": x},
           lambda T: F.smooth_l1_loss(T["x"], torch.zeros_like(T["x"]), reduction="none", beta=0.25))
    beyond_spec_unary_cases(R)
    acts = {"relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "softrelu": F.softplus}
    for act, fn in acts.items():
        for s in ([(3, 4), (2, 2, 5)] if not R.quick else [(3, 4)]):
            R.case("activation %s %s" % (act, shp(s)), 'y = activation(x, act_type="%s")' % act,
                   {"x": R.randn(*s, lo=-4, hi=4)}, lambda T, fn=fn: fn(T["x"]))


def beyond_spec_unary_cases(R):
    """The unary ops beyond SPEC section 2 (docs/language.md), which ONNX models use."""
    def off_kinks(x, kinks):
        # torch's gradient at a kink is a convention; samples stay 0.05 away from them here
        # and the kinks themselves are checked below.
        for k in kinks:
            x = np.where(np.abs(x - k) < 0.05, x + 0.1, x).astype(np.float32)
        return x
    fns = {"erf": (torch.erf, ()), "hard_sigmoid": (F.hardsigmoid, (-3, 3)),
           "hard_swish": (F.hardswish, (-3, 3)), "silu": (F.silu, ())}
    shapes = [(7,), (3, 5), (2, 3, 4), (33, 65)] if not R.quick else [(3, 5)]
    for op, (fn, kinks) in fns.items():
        for s in shapes:
            x = off_kinks(R.randn(*s, lo=-6, hi=6), kinks)
            R.case("%s %s" % (op, shp(s)), "y = %s(x)" % op, {"x": x}, lambda T, fn=fn: fn(T["x"]))
        # The kinks, 0 and values where the function saturates: torch's conventions there.
        x = np.array([-30, -6, -3, -1e-3, 0, 1e-3, 2.5, 3, 6, 30], np.float32)
        R.case("%s edges" % op, "y = %s(x)" % op, {"x": x}, lambda T, fn=fn: fn(T["x"]))
    # ONNX HardSigmoid's alpha and beta (its defaults 0.2, 0.5), and others.
    for alpha, beta in ((0.2, 0.5), (0.5, 0.25), (-0.3, 0.6)):
        x = off_kinks(R.randn(4, 6, lo=-5, hi=5), ((0 - beta) / alpha, (1 - beta) / alpha))
        R.case("hard_sigmoid alpha=%g beta=%g" % (alpha, beta),
               "y = hard_sigmoid(x, alpha=%r, beta=%r)" % (alpha, beta), {"x": x},
               lambda T, a=alpha, b=beta: torch.clamp(a * T["x"] + b, 0.0, 1.0))


def reduce_cases(R):
    shapes = [((3, 4, 5), None), ((3, 4, 5), (1,)), ((3, 4, 5), (0, 2)), ((6, 7), (-1,)), ((2, 3, 2, 3), (1, 3)),
              ((64, 300), (1,)), ((50, 40), None)]
    if R.quick:
        shapes = shapes[1:3]
    for op in ("sum", "mean", "max"):
        for s, axis in shapes:
            for keep in (False, True):
                attrs = ""
                if axis is not None:
                    attrs += ", axis=(%s%s)" % (", ".join(str(a) for a in axis), "," if len(axis) == 1 else "")
                attrs += ", keepdims=true" if keep else ""
                dims = tuple(range(len(s))) if axis is None else axis

                def ref(T, op=op, dims=dims, keep=keep):
                    if op == "sum":
                        return torch.sum(T["x"], dim=dims, keepdim=keep)
                    if op == "mean":
                        return torch.mean(T["x"], dim=dims, keepdim=keep)
                    return torch.amax(T["x"], dim=dims, keepdim=keep)
                R.case("%s %s axis=%s keepdims=%s" % (op, shp(s), axis, keep), "y = %s(x%s)" % (op, attrs),
                       {"x": R.randn(*s)}, ref, tol=SUM_TOL)
    # amax with ties: torch divides the gradient evenly among the maxima.
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [5, -1, 5, 4]], np.float32)
    R.case("max ties axis=1", "y = max(x, axis=1)", {"x": x}, lambda T: torch.amax(T["x"], dim=1))
    R.case("max ties all", "y = max(x)", {"x": x}, lambda T: torch.amax(T["x"]))
    R.case("sum scalar-axis", "y = sum(x, axis=1)", {"x": R.randn(3, 4)}, lambda T: torch.sum(T["x"], 1))


def beyond_spec_reduce_cases(R):
    """The reductions beyond SPEC section 2 (docs/language.md), which ONNX's Reduce* ops use:
    min (torch.amin), prod (torch.prod), logsumexp (torch.logsumexp), norm (vector_norm)."""
    shapes = [((3, 4, 5), None), ((3, 4, 5), (1,)), ((3, 4, 5), (0, 2)), ((6, 7), (-1,)), ((2, 3, 2, 3), (1, 3)),
              ((64, 300), (1,)), ((50, 40), None)]
    if R.quick:
        shapes = shapes[1:3]

    def prod(x, dims, keep):
        # torch.prod takes one dim: the others one at a time, the last axis first
        nd = x.dim()
        for d in sorted((a % nd for a in dims), reverse=True):
            x = torch.prod(x, d, keepdim=True)
        return x if keep else x.reshape([n for i, n in enumerate(x.shape) if i not in [a % nd for a in dims]])
    refs = {"min": lambda x, d, k: torch.amin(x, dim=d, keepdim=k), "prod": prod,
            "logsumexp": lambda x, d, k: torch.logsumexp(x, dim=d, keepdim=k),
            "norm, ord=1": lambda x, d, k: torch.linalg.vector_norm(x, 1, dim=d, keepdim=k),
            "norm, ord=2": lambda x, d, k: torch.linalg.vector_norm(x, 2, dim=d, keepdim=k)}
    for op, fn in refs.items():
        name, _, extra = op.partition(", ")
        for s, axis in shapes:
            for keep in (False, True):
                attrs = ", " + extra if extra else ""
                if axis is not None:
                    attrs += ", axis=(%s%s)" % (", ".join(str(a) for a in axis), "," if len(axis) == 1 else "")
                attrs += ", keepdims=true" if keep else ""
                dims = tuple(range(len(s))) if axis is None else axis
                # products of up to 2000 factors near 1 (|x| in [0.8, 1.25]) stay normal floats
                x = R.away(*s, lo=0.8, hi=1.25) if name == "prod" else R.randn(*s)
                R.case("%s %s axis=%s keepdims=%s" % (op, shp(s), axis, keep), "y = %s(x%s)" % (name, attrs),
                       {"x": x}, lambda T, fn=fn, dims=dims, keep=keep: fn(T["x"], dims, keep), tol=SUM_TOL)
    # amin with ties: the gradient divides evenly among the minima.
    x = np.array([[1, 3, 1, 0], [2, 2, 2, 2], [5, -1, 5, -1]], np.float32)
    R.case("min ties axis=1", "y = min(x, axis=1)", {"x": x}, lambda T: torch.amin(T["x"], dim=1))
    # prod at zeros: one zero in a row passes the product of the others to it, two pass 0.
    x = np.array([[2, 0, 3, 4], [0, 5, 0, 1], [1, 2, -3, 4]], np.float32)
    R.case("prod zeros axis=1", "y = prod(x, axis=1)", {"x": x}, lambda T: torch.prod(T["x"], 1))
    R.case("prod zeros axis=0", "y = prod(x, axis=0)", {"x": x}, lambda T: torch.prod(T["x"], 0))
    R.case("prod zeros all", "y = prod(x)", {"x": x}, lambda T: torch.prod(T["x"]))
    # logsumexp where exp overflows float32, and with -inf entries.
    x = R.randn(4, 6, lo=80, hi=120)
    R.case("logsumexp large", "y = logsumexp(x, axis=1)", {"x": x}, lambda T: torch.logsumexp(T["x"], 1))
    x = R.randn(3, 5)
    x[0, 1] = x[2, :] = -np.inf
    R.case("logsumexp -inf", "y = logsumexp(x, axis=1)", {"x": x}, lambda T: torch.logsumexp(T["x"], 1))
    # norms at 0: ord 1's gradient is sign(0) = 0, ord 2's is 0 for a group of zeros.
    x = np.array([[0, 1, -2, 0], [0, 0, 0, 0], [3, 0, -4, 0]], np.float32)
    for o in (1, 2):
        R.case("norm ord=%d zeros" % o, "y = norm(x, ord=%d, axis=1)" % o, {"x": x},
               lambda T, o=o: torch.linalg.vector_norm(T["x"], o, dim=1))


def layout_cases(R):
    x = R.randn(2, 3, 4)
    R.case("reshape [2,3,4]->[6,4]", "y = reshape(x, shape=(6, 4))", {"x": x}, lambda T: T["x"].reshape(6, 4))
    R.case("reshape -1", "y = reshape(x, shape=(4, -1))", {"x": x}, lambda T: T["x"].reshape(4, -1))
    R.case("reshape to 1-D", "y = reshape(x, shape=(-1,))", {"x": x}, lambda T: T["x"].reshape(-1))
    R.case("flatten 4-D", "y = flatten(x)", {"x": R.randn(2, 3, 2, 2)}, lambda T: torch.flatten(T["x"], 1))
    R.case("flatten 2-D", "y = flatten(x)", {"x": R.randn(3, 5)}, lambda T: torch.flatten(T["x"], 1))
    R.case("transpose default", "y = transpose(x)", {"x": x}, lambda T: T["x"].permute(2, 1, 0))
    R.case("transpose (1,0,2)", "y = transpose(x, axes=(1, 0, 2))", {"x": x}, lambda T: T["x"].permute(1, 0, 2))
    R.case("transpose (0,2,3,1)", "y = transpose(x, axes=(0, 2, 3, 1))", {"x": R.randn(2, 3, 4, 5)},
           lambda T: T["x"].permute(0, 2, 3, 1))
    R.case("transpose 2-D", "y = transpose(x)", {"x": R.randn(3, 7)}, lambda T: T["x"].t())
    for ax in (0, 2, 3, -1):
        R.case("expand_dims axis=%d" % ax, "y = expand_dims(x, axis=%d)" % ax, {"x": x},
               lambda T, ax=ax: torch.unsqueeze(T["x"], ax))
    s = R.randn(1, 3, 1, 4)
    R.case("squeeze all", "y = squeeze(x)", {"x": s}, lambda T: torch.squeeze(T["x"]))
    R.case("squeeze axis=2", "y = squeeze(x, axis=2)", {"x": s}, lambda T: torch.squeeze(T["x"], 2))
    R.case("squeeze axis=(0,2)", "y = squeeze(x, axis=(0, 2))", {"x": s},
           lambda T: torch.squeeze(torch.squeeze(T["x"], 2), 0))
    R.case("squeeze axis=-2", "y = squeeze(x, axis=-2)", {"x": s}, lambda T: torch.squeeze(T["x"], -2))
    # torch.squeeze of an axis whose size is not 1 returns the tensor unchanged; so does kiln.
    R.case("squeeze non-1 axis keeps it", "y = squeeze(x, axis=1)", {"x": s}, lambda T: torch.squeeze(T["x"], 1))
    for src, dst in (((3, 1), (2, 3, 4)), ((4,), (3, 4)), ((1, 1), (2, 5)), ((2, 3), (2, 3))):
        R.case("broadcast_to %s->%s" % (shp(src), shp(dst)), "y = broadcast_to(x, shape=(%s))" % ", ".join(map(str, dst)),
               {"x": R.randn(*src)}, lambda T, dst=dst: torch.broadcast_to(T["x"], dst), tol=SUM_TOL)
    for axis, b, e in ((0, 0, 1), (1, 1, 3), (2, 2, 4), (-1, 0, 4)):
        R.case("slice axis=%d [%d,%d)" % (axis, b, e), "y = slice(x, axis=%d, begin=%d, end=%d)" % (axis, b, e),
               {"x": x}, lambda T, a=axis, b=b, e=e: T["x"].narrow(a, b, e - b))
    R.case("slice default begin", "y = slice(x, axis=1, end=2)", {"x": x}, lambda T: T["x"].narrow(1, 0, 2))
    # (shape, axis, begin, end, step): inner runs and the last axis, up and down, a step past the range
    strided = [((3, 7, 6), 1, 1, 7, 3), ((2, 3, 4), 2, 1, 4, 2), ((2, 3, 4), -1, 0, 4, 3), ((2, 3, 4), 0, 0, 2, 5),
               ((2, 3, 4), 2, 0, 4, -1), ((3, 7, 6), 1, 0, 3, -2), ((2, 3, 4), -1, 1, 4, -2), ((3, 7, 6), 2, 0, 6, -4),
               ((3, 7, 6), 0, 0, 3, -1), ((5, 8), 0, 1, 5, 2)]
    for s, axis, b, e, st in strided if not R.quick else strided[:1] + strided[5:6]:
        R.case("slice %s axis=%d [%d,%d) step=%d" % (shp(s), axis, b, e, st),
               "y = slice(x, axis=%d, begin=%d, end=%d, step=%d)" % (axis, b, e, st), {"x": R.randn(*s)},
               lambda T, a=axis, b=b, e=e, st=st: strided_ref(T["x"], a, b, e, st))
    for dim, shapes in ((0, [(2, 3), (4, 3)]), (1, [(2, 3, 2), (2, 1, 2), (2, 4, 2)]), (2, [(2, 3, 1), (2, 3, 5)]),
                        (-1, [(3, 2), (3, 3)])):
        arrays = {"x%d" % i: R.randn(*sh) for i, sh in enumerate(shapes)}
        names = list(arrays)
        R.case("concat dim=%d %d pieces" % (dim, len(shapes)), "y = concat(%s, dim=%d)" % (", ".join(names), dim),
               arrays, lambda T, n=names, d=dim: torch.cat([T[k] for k in n], d), grads={k: k for k in names})
    R.case("concat default dim=1", "y = concat(a, b)", {"a": R.randn(2, 2), "b": R.randn(2, 3)},
           lambda T: torch.cat([T["a"], T["b"]], 1), grads={"x0": "a", "x1": "b"})


def strided_ref(t, axis, b, e, step):
    """slice with a step: x[..., b:e:step] for step > 0; step < 0 walks [b, e) from its end
    down, torch.flip of the narrowed range taking every -step-th (docs/language.md)."""
    idx = [slice(None)] * t.dim()
    if step > 0:
        idx[axis] = slice(b, e, step)
        return t[tuple(idx)]
    idx[axis] = slice(None, None, -step)
    return t.narrow(axis, b, e - b).flip(axis)[tuple(idx)]


def pad_cases(R):
    """pad beyond SPEC section 2 (docs/language.md): F.pad's tuple, last axis first."""
    cases = [((2, 3, 4), (1, 2), "constant", 0.0), ((2, 3, 4), (0, 0, 2, 1), "constant", 1.5),
             ((2, 3, 4, 5), (1, 0, 0, 2, 1, 1), "constant", -2.0), ((2, 3, 4), (1, 1, 1, 1, 1, 1), "constant", 0.0),
             ((3, 5), (-1, 2), "constant", 0.0), ((2, 3, 6), (-2, -1, 1, -1), "constant", 0.5),
             ((7,), (3, 0), "constant", 0.0), ((33, 70), (5, 9, 2, 0), "constant", 0.0),
             ((2, 3, 5), (2, 3), "reflect", None), ((2, 3, 4, 5), (1, 2, 3, 0), "reflect", None),
             ((1, 2, 3, 4, 5), (1, 1, 2, 0, 0, 2), "reflect", None),
             ((2, 3, 5), (4, 1), "replicate", None), ((2, 3, 4, 5), (2, 0, 1, 3), "replicate", None),
             ((1, 2, 3, 4, 5), (0, 1, 2, 2, 1, 0), "replicate", None)]
    if R.quick:
        cases = cases[1:2] + cases[5:6] + cases[9:10] + cases[12:13]
    for s, pads, mode, value in cases:
        attrs = "pad=(%s)" % ", ".join(map(str, pads))
        if mode != "constant":
            attrs += ', mode="%s"' % mode
        elif value:
            attrs += ", value=%r" % value
        kw = {"mode": mode} if mode != "constant" else {"value": value}
        # Reflect and replicate gradients add several output elements into one input element.
        R.case("pad %s %s %s" % (shp(s), pads, mode), "y = pad(x, %s)" % attrs, {"x": R.randn(*s)},
               lambda T, p=pads, kw=kw: F.pad(T["x"], p, **kw), tol=SUM_TOL)
    # torch pads only the last 1-3 axes of a 3-5-D tensor with reflect/replicate, kiln any axis:
    # every axis of a 3-D tensor, against torch on the same tensor viewed as 5-D.
    x = R.randn(3, 4, 2)
    for mode in ("reflect", "replicate"):
        R.case("pad every axis %s" % mode, 'y = pad(x, pad=(1, 0, 0, 3, 2, 1), mode="%s")' % mode, {"x": x},
               lambda T, m=mode: F.pad(T["x"].reshape(1, 1, 3, 4, 2), (1, 0, 0, 3, 2, 1), mode=m)[0, 0],
               tol=SUM_TOL)


def gemm_cases(R):
    mm = [((3, 4), (4, 5), 0, 0), ((4, 3), (4, 5), 1, 0), ((3, 4), (5, 4), 0, 1), ((4, 3), (5, 4), 1, 1),
          ((2, 3, 4), (2, 4, 5), 0, 0), ((2, 3, 4), (4, 5), 0, 0), ((3, 4), (2, 4, 5), 0, 0),
          ((2, 1, 3, 4), (3, 5, 4), 0, 1), ((16, 33), (33, 17), 0, 0), ((64, 256), (256, 48), 0, 0),
          ((3, 32, 64), (3, 40, 32), 1, 1),
          # one product with A transposed runs as one GEMM split by rows (ONNX's Gemm transA)
          ((256, 64), (256, 48), 1, 0), ((1, 40, 30), (20, 40), 1, 1)]
    if R.quick:
        mm = mm[3:6]
    for sa, sb, ta, tb in mm:
        def ref(T, ta=ta, tb=tb):
            a, b = T["a"], T["b"]
            return torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
        attrs = (", transpose_a=true" if ta else "") + (", transpose_b=true" if tb else "")
        R.case("matmul %s %s ta=%d tb=%d" % (shp(sa), shp(sb), ta, tb), "y = matmul(a, b%s)" % attrs,
               {"a": R.randn(*sa), "b": R.randn(*sb)}, ref, tol=SUM_TOL)
    fc = [((4, 6), 3, False, True), ((4, 6), 3, True, True), ((2, 3, 2, 2), 5, False, True),
          ((2, 3, 4), 5, False, False), ((5,), 3, False, False), ((8, 40), 16, False, True)]
    if R.quick:
        fc = fc[1:4]
    for s, h, nb, flat in fc:
        in_dim = int(np.prod(s[1:])) if flat else s[-1]
        arrays = {"x": R.randn(*s), "y.weight": R.randn(h, in_dim)}
        if not nb:
            arrays["y.bias"] = R.randn(h)

        def ref(T, nb=nb, flat=flat):
            x = torch.flatten(T["x"], 1) if flat else T["x"]
            return F.linear(x, T["y.weight"], None if nb else T["y.bias"])
        attrs = "num_hidden=%d" % h + (", no_bias=true" if nb else "") + ("" if flat else ", flatten=false")
        grads = {"data": "x", "weight": "y.weight"}
        if not nb:
            grads["bias"] = "y.bias"
        R.case("fully_connected %s h=%d no_bias=%s flatten=%s" % (shp(s), h, nb, flat),
               "y = fully_connected(x, %s)" % attrs, arrays, ref, grads=grads, tol=SUM_TOL)


def conv_cases(R):
    # (data shape, filters, kernel, stride, pad, dilate, groups, no_bias)
    conv = [((2, 3, 8), 4, (3,), (1,), (0,), (1,), 1, False),
            ((2, 4, 9), 6, (3,), (2,), (1,), (2,), 2, False),
            ((1, 2, 7), 3, (1,), (1,), (0,), (1,), 1, True),
            ((2, 3, 6, 6), 4, (3, 3), (1, 1), (0, 0), (1, 1), 1, False),
            ((2, 4, 7, 8), 6, (3, 2), (2, 1), (1, 1), (1, 2), 2, False),
            ((1, 4, 6, 6), 4, (3, 3), (1, 1), (1, 1), (1, 1), 4, True),
            ((2, 3, 9, 9), 5, (2, 3), (3, 2), (1, 0), (2, 1), 1, False),
            ((3, 8, 10, 10), 16, (3, 3), (1, 1), (1, 1), (1, 1), 1, False),
            ((4, 16, 12, 12), 32, (3, 3), (1, 1), (1, 1), (1, 1), 1, False),
            ((2, 6, 40), 9, (5,), (1,), (2,), (1,), 3, False),
            ((8, 4, 16, 16), 8, (3, 3), (1, 1), (1, 1), (1, 1), 1, False),   # several samples per GEMM chunk
            ((5, 3, 33, 33), 4, (1, 1), (2, 2), (0, 0), (1, 1), 1, True),
            ((3, 4, 700), 5, (7,), (1,), (3,), (1,), 1, False),
            # sizes that leave a channel vector part-filled, batch 1, and the ResNet's shapes
            ((1, 17, 7, 13), 33, (3, 3), (1, 1), (1, 1), (1, 1), 1, False),
            ((2, 20, 11, 9), 50, (5, 5), (1, 1), (0, 0), (1, 1), 1, False),
            ((2, 16, 12, 12), 32, (3, 3), (2, 2), (1, 1), (1, 1), 1, True),
            ((2, 16, 10, 10), 32, (1, 1), (2, 2), (0, 0), (1, 1), 1, True),
            ((1, 9, 10, 15), 18, (3, 2), (3, 3), (2, 1), (1, 1), 1, False),
            ((2, 8, 12, 15), 9, (3, 3), (2, 2), (1, 3), (2, 3), 1, False),
            ((2, 10, 33), 12, (3,), (1,), (1,), (1,), 1, False),
            # Winograd F(2x2, 3x3) (3x3 stride 1, even output, 16 to 128 input channels): part-
            # filled blocks unpadded, and the ResNet's last stage at batch 1
            ((2, 40, 10, 8), 36, (3, 3), (1, 1), (0, 0), (1, 1), 1, False),
            ((1, 64, 8, 8), 64, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),
            # depthwise (groups = channels, k_conv_dw.c): multiplier 1 and 2, stride 2,
            # dilation, padding, a 7x7 plane, 1-D
            ((2, 6, 9, 9), 6, (3, 3), (1, 1), (1, 1), (1, 1), 6, False),
            ((2, 4, 11, 10), 8, (3, 3), (2, 2), (1, 1), (1, 1), 4, False),
            ((1, 5, 13, 12), 10, (3, 3), (2, 2), (2, 3), (2, 2), 5, True),
            ((5, 8, 7, 7), 8, (3, 3), (1, 1), (1, 1), (1, 1), 8, False),
            ((3, 4, 30), 4, (5,), (2,), (2,), (1,), 4, False),
            ((2, 3, 17), 6, (3,), (1,), (2,), (2,), 3, True),
            # groups of whole 16-channel blocks (RegNet's; forward on the direct path,
            # k_cd_grouped_ok): batch 1, stride 2 with 32 a group, a 1x1 of 16 in and 32 out
            ((1, 32, 9, 9), 32, (3, 3), (1, 1), (1, 1), (1, 1), 2, False),
            ((2, 64, 8, 7), 64, (3, 3), (2, 2), (1, 1), (1, 1), 2, True),
            ((2, 48, 5, 5), 96, (1, 1), (1, 1), (0, 0), (1, 1), 3, False)]
    if R.quick:
        conv = [conv[1], conv[4], conv[13], conv[21], conv[-3]]
    # Each shape through the path the shape rule picks, then forced through the direct
    # (channel-blocked) convolution at the CPU's widest vector and at AVX2's (KILN_CONV reaches
    # kiln_opcheck through the environment; grouped shapes take the direct grouped path,
    # k_conv_dw.c, at the same vector widths), then the grouped shapes forced onto im2col.
    for mode in (None, "direct", "direct-avx2", "grouped-im2col"):
        shapes = [c for c in conv if c[6] > 1] if mode == "grouped-im2col" else conv
        with_env({"KILN_CONV": mode}, conv_mode_cases, R, shapes, " [KILN_CONV=%s]" % mode if mode else "")
    R.case("convolution defaults", "y = convolution(x, num_filter=2, kernel=(3, 3))",
           {"x": R.randn(1, 2, 5, 5), "y.weight": R.randn(2, 2, 3, 3), "y.bias": R.randn(2)},
           lambda T: F.conv2d(T["x"], T["y.weight"], T["y.bias"]),
           grads={"data": "x", "weight": "y.weight", "bias": "y.bias"}, tol=SUM_TOL)
    conv_asym_cases(R)


def conv_asym_cases(R):
    # Start and end pads that differ (pad = every start, then every end): torch convolves
    # F.pad's output with no padding of its own. Every shape under each algorithm KILN_CONV can
    # force — the shape rule's choice, im2col for everything, the direct blocked convolution at
    # each instruction set (Winograd on the 3x3 stride-1 shapes with 16 or more channels) and
    # with Winograd off, and the grouped shapes on the direct grouped path and on im2col.
    # (data shape, filters, kernel, stride, pad (starts, then ends), dilate, groups, no_bias)
    conv = [((2, 3, 8), 4, (3,), (2,), (0, 2), (1,), 1, False),
            ((2, 4, 11), 6, (3,), (1,), (2, 1), (2,), 2, True),
            ((2, 3, 6, 7), 4, (3, 3), (1, 1), (0, 1, 2, 0), (1, 1), 1, False),
            ((2, 4, 9, 8), 6, (3, 2), (2, 3), (2, 0, 0, 3), (2, 1), 2, False),
            ((2, 9, 11, 12), 17, (3, 3), (2, 2), (0, 2, 3, 1), (1, 2), 1, False),
            ((2, 4, 10, 10), 8, (1, 1), (2, 2), (0, 0, 1, 1), (1, 1), 1, False),    # 1x1, end pads only
            # Winograd F(2x2, 3x3): a start or end of 0 and 2; a start of 3, where the data
            # gradient declines it (its flipped pad 2 - 3 would be negative)
            ((1, 16, 8, 8), 16, (3, 3), (1, 1), (0, 1, 2, 1), (1, 1), 1, False),
            ((2, 24, 6, 10), 20, (3, 3), (1, 1), (2, 0, 0, 2), (1, 1), 1, True),
            ((2, 16, 6, 6), 16, (3, 3), (1, 1), (3, 1, 1, 1), (1, 1), 1, False),
            # depthwise and grouped (k_conv_dw.c): multiplier 2 with dilation, groups of 4, 1-D
            ((2, 6, 11, 8), 6, (3, 3), (2, 2), (1, 0, 0, 1), (1, 1), 6, False),
            ((2, 6, 13, 15), 12, (3, 3), (2, 2), (0, 3, 2, 0), (2, 2), 6, True),
            ((2, 8, 10, 11), 12, (3, 3), (1, 2), (1, 0, 0, 2), (2, 1), 2, False),
            ((3, 4, 30), 4, (5,), (2,), (0, 3), (1,), 4, False)]
    if R.quick:
        conv = [conv[3], conv[6], conv[10]]
    grouped = [c for c in conv if c[6] > 1]
    for mode, shapes in ((None, conv), ("im2col", conv), ("direct", conv), ("direct-avx2", conv),
                         ("direct-generic", conv), ("grouped-im2col", grouped), ("grouped-direct", grouped)):
        with_env({"KILN_CONV": mode}, conv_mode_cases, R, shapes, " [KILN_CONV=%s]" % mode if mode else "")
    winograd = [c for c in conv if c[2] == (3, 3) and c[3] == (1, 1) and c[1] >= 16]
    with_env({"KILN_CONV": "direct", "KILN_WINOGRAD": "0"}, conv_mode_cases, R, winograd,
             " [KILN_CONV=direct KILN_WINOGRAD=0]")


def with_env(env, fn, *args):
    """fn(*args) with the environment variables of env set (a None value: unset), then restored."""
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        fn(*args)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def conv_mode_cases(R, conv, suffix):
    for s, f, k, st, pd, dl, g, nb in conv:
        arrays = {"x": R.randn(*s), "y.weight": R.randn(f, s[1] // g, *k)}
        if not nb:
            arrays["y.bias"] = R.randn(f)
        fn = F.conv1d if len(k) == 1 else F.conv2d
        sp = len(k)
        # every start then every end -> F.pad's tuple, last axis first
        fpad = [v for i in reversed(range(sp)) for v in (pd[i], pd[sp + i])] if len(pd) == 2 * sp else None

        def ref(T, fn=fn, st=st, pd=pd, dl=dl, g=g, nb=nb, fpad=fpad):
            x = F.pad(T["x"], fpad) if fpad else T["x"]
            return fn(x, T["y.weight"], None if nb else T["y.bias"], stride=st, padding=0 if fpad else pd, dilation=dl,
                      groups=g)
        tup = lambda v: "(%s%s)" % (", ".join(map(str, v)), "," if len(v) == 1 else "")
        attrs = "num_filter=%d, kernel=%s, stride=%s, pad=%s, dilate=%s, num_group=%d%s" % (
            f, tup(k), tup(st), tup(pd), tup(dl), g, ", no_bias=true" if nb else "")
        grads = {"data": "x", "weight": "y.weight"}
        if not nb:
            grads["bias"] = "y.bias"
        # Each output sums C/g * prod(kernel) products and the weight gradient sums over N*OH*OW.
        R.case("convolution %s f=%d k=%s s=%s p=%s d=%s g=%d no_bias=%s%s" % (shp(s), f, k, st, pd, dl, g, nb, suffix),
               "y = convolution(x, %s)" % attrs, arrays, ref, grads=grads, tol=SUM_TOL)


def pool_cases(R):
    # (data shape, kernel, stride or None, pad)
    pools = [((2, 3, 8), (2,), None, (0,)), ((2, 2, 9), (3,), (2,), (1,)),
             ((2, 3, 6, 6), (2, 2), None, (0, 0)), ((1, 2, 7, 7), (3, 3), (2, 2), (1, 1)),
             ((2, 2, 8, 5), (3, 2), (1, 2), (1, 0)), ((4, 8, 32, 32), (2, 2), None, (0, 0))]
    if R.quick:
        pools = pools[1::2]
    for pt in ("max", "avg"):
        for s, k, st, pd in pools:
            sp = len(k)
            tup = lambda v: "(%s%s)" % (", ".join(map(str, v)), "," if len(v) == 1 else "")
            attrs = 'kernel=%s, pad=%s, pool_type="%s"' % (tup(k), tup(pd), pt)
            if st:
                attrs += ", stride=%s" % tup(st)
            fn = {("max", 1): F.max_pool1d, ("max", 2): F.max_pool2d,
                  ("avg", 1): F.avg_pool1d, ("avg", 2): F.avg_pool2d}[(pt, sp)]

            def ref(T, fn=fn, k=k, st=st, pd=pd, pt=pt):
                kw = {"count_include_pad": True} if pt == "avg" else {}
                return fn(T["x"], k, stride=st or k, padding=pd, **kw)
            R.case("pooling %s %s k=%s s=%s p=%s" % (pt, shp(s), k, st, pd), "y = pooling(x, %s)" % attrs,
                   {"x": R.randn(*s)}, ref, grads={"data": "x"})
    # Beyond SPEC section 2 (docs/language.md): count_include_pad=False divides by the input
    # elements a window holds; ceil_mode rounds the output size up, the last window hanging past
    # the (padded) input and counting only what it holds of it (torch's rule, both modes).
    extra = [((2, 3, 7, 6), (3, 3), (2, 2), (1, 1)), ((1, 2, 6, 8), (3, 3), (2, 2), (0, 0)),
             ((2, 2, 9), (4,), (3,), (2,)), ((1, 2, 7, 7), (2, 3), (2, 2), (1, 1)), ((2, 4, 33, 31), (3, 3), (2, 2), (1, 1))]
    if R.quick:
        extra = extra[:2]
    for pt in ("avg", "max"):
        for s, k, st, pd in extra:
            for cip, ceil in ((False, False), (True, True), (False, True)):
                if pt == "max" and not ceil:
                    continue                  # count_include_pad is an average's alone
                sp = len(k)
                tup = lambda v: "(%s%s)" % (", ".join(map(str, v)), "," if len(v) == 1 else "")
                attrs = 'kernel=%s, stride=%s, pad=%s, pool_type="%s", ceil_mode=%s' % (
                    tup(k), tup(st), tup(pd), pt, "true" if ceil else "false")
                attrs += ", count_include_pad=false" if not cip else ""
                fn = {("max", 1): F.max_pool1d, ("max", 2): F.max_pool2d,
                      ("avg", 1): F.avg_pool1d, ("avg", 2): F.avg_pool2d}[(pt, sp)]

                def ref(T, fn=fn, k=k, st=st, pd=pd, pt=pt, cip=cip, ceil=ceil):
                    kw = {"count_include_pad": cip} if pt == "avg" else {}
                    return fn(T["x"], k, stride=st, padding=pd, ceil_mode=ceil, **kw)
                R.case("pooling %s %s k=%s s=%s p=%s count_include_pad=%s ceil_mode=%s" % (pt, shp(s), k, st, pd, cip, ceil),
                       "y = pooling(x, %s)" % attrs, {"x": R.randn(*s)}, ref, grads={"data": "x"})
    # Start and end pads that differ (pad = every start, then every end): torch pools F.pad's
    # output; without count_include_pad the divisor is the same pool of ones (the elements of
    # the input each window holds).
    asym = [((2, 3, 5, 6), (2, 2), (1, 1), (0, 0, 1, 1)), ((1, 2, 7, 6), (3, 3), (2, 2), (1, 0, 0, 1)),
            ((2, 2, 9), (4,), (3,), (2, 1))]
    for s, k, st, pd in asym if not R.quick else asym[:1]:
        sp = len(k)
        tp = []
        for i in reversed(range(sp)):
            tp += [pd[i], pd[sp + i]]
        tup = lambda v: "(%s%s)" % (", ".join(map(str, v)), "," if len(v) == 1 else "")
        avg = F.avg_pool1d if sp == 1 else F.avg_pool2d
        mx = F.max_pool1d if sp == 1 else F.max_pool2d
        for pt, cip, ceil in (("avg", False, False), ("avg", True, False), ("avg", False, True), ("max", True, True)):
            attrs = 'kernel=%s, stride=%s, pad=%s, pool_type="%s", ceil_mode=%s, count_include_pad=%s' % (
                tup(k), tup(st), tup(pd), pt, "true" if ceil else "false", "true" if cip else "false")

            def ref(T, k=k, st=st, tp=tp, pt=pt, cip=cip, ceil=ceil, avg=avg, mx=mx):
                x = T["x"]
                if pt == "max":
                    return mx(F.pad(x, tp, value=-float("inf")), k, stride=st, ceil_mode=ceil)
                y = avg(F.pad(x, tp), k, stride=st, ceil_mode=ceil)
                return y if cip else y / avg(F.pad(torch.ones_like(x), tp), k, stride=st, ceil_mode=ceil)
            R.case("pooling %s %s k=%s s=%s pad=%s count_include_pad=%s ceil_mode=%s" % (pt, shp(s), k, st, pd, cip, ceil),
                   "y = pooling(x, %s)" % attrs, {"x": R.randn(*s)}, ref, grads={"data": "x"})
    # Max pooling ties (small integers) with overlapping windows: torch routes each window's
    # gradient to the first maximum in scan order, and overlapping windows add up.
    x = R.ints(0, 3, 2, 2, 6, 6).astype(np.float32)
    R.case("pooling max ties overlapping", 'y = pooling(x, kernel=(3, 3), stride=(1, 1), pool_type="max")', {"x": x},
           lambda T: F.max_pool2d(T["x"], 3, stride=1), grads={"data": "x"})
    x = R.ints(0, 3, 2, 3, 9).astype(np.float32)
    R.case("pooling max ties 1-D padded", 'y = pooling(x, kernel=(4,), stride=(2,), pad=(2,), pool_type="max")',
           {"x": x}, lambda T: F.max_pool1d(T["x"], 4, stride=2, padding=2), grads={"data": "x"})
    for pt in ("max", "avg"):
        for s in ((2, 3, 5), (2, 3, 4, 5)):
            dims = tuple(range(2, len(s)))

            def ref(T, pt=pt, dims=dims):
                return torch.amax(T["x"], dims, keepdim=True) if pt == "max" else torch.mean(T["x"], dims, keepdim=True)
            R.case("pooling global %s %s" % (pt, shp(s)), 'y = pooling(x, global_pool=true, pool_type="%s")' % pt,
                   {"x": R.randn(*s)}, ref, grads={"data": "x"}, tol=SUM_TOL)


def norm_cases(R):
    bn = [((4, 3), 1), ((4, 3, 5), 1), ((2, 3, 4, 4), 1), ((4, 5, 3), 2), ((3, 4, 2), -1)]
    if R.quick:
        bn = bn[1:3]
    for s, axis in bn:
        ax = axis % len(s)
        C = s[ax]
        for mom, eps in ((0.9, 1e-5), (0.7, 1e-3)):
            arrays = {"x": R.randn(*s, lo=-3, hi=5), "y.gamma": R.randn(C), "y.beta": R.randn(C),
                      "y.moving_mean": R.randn(C), "y.moving_var": R.randn(C, lo=0.5, hi=2)}
            attrs = "momentum=%r, eps=%r" % (mom, eps) + (", axis=%d" % axis if axis != 1 else "")

            def to_nc(x, ax=ax):      # F.batch_norm wants channels on axis 1
                return x if ax == 1 else torch.movedim(x, ax, 1)

            def ref(T, train, ax=ax, mom=mom, eps=eps):
                y = F.batch_norm(to_nc(T["x"]), T["y.moving_mean"], T["y.moving_var"], T["y.gamma"], T["y.beta"],
                                 training=train, momentum=1.0 - mom, eps=eps)
                return y if ax == 1 else torch.movedim(y, 1, ax)
            grads = {"data": "x", "gamma": "y.gamma", "beta": "y.beta"}
            # kiln momentum m is torch momentum 1 - m; the batch statistics are sums over N*spatial.
            R.case("batch_norm train %s axis=%d momentum=%g" % (shp(s), axis, mom),
                   "y = batch_norm(x, %s)" % attrs, arrays, lambda T, r=ref: r(T, True), grads=grads, train=True,
                   aux=["y.moving_mean", "y.moving_var"], tol=SUM_TOL)
            R.case("batch_norm predict %s axis=%d eps=%g" % (shp(s), axis, eps), "y = batch_norm(x, %s)" % attrs,
                   arrays, lambda T, r=ref: r(T, False), backward=False, aux=["y.moving_mean", "y.moving_var"])
    ln = [(4, 6), (2, 3, 8), (5, 1), (3, 40)]
    if R.quick:
        ln = ln[1:2]
    for s in ln:
        for eps in (1e-5, 1e-2):
            D = s[-1]
            arrays = {"x": R.randn(*s, lo=-3, hi=5), "y.gamma": R.randn(D), "y.beta": R.randn(D)}
            R.case("layer_norm %s eps=%g" % (shp(s), eps), "y = layer_norm(x, eps=%r)" % eps, arrays,
                   lambda T, D=D, eps=eps: F.layer_norm(T["x"], (D,), T["y.gamma"], T["y.beta"], eps),
                   grads={"data": "x", "gamma": "y.gamma", "beta": "y.beta"}, tol=SUM_TOL)


def dropout_cases(R):
    for p in (0.5, 0.2):
        R.case("dropout predict p=%g" % p, "y = dropout(x, p=%r)" % p, {"x": R.randn(4, 5)},
               lambda T, p=p: F.dropout(T["x"], p, training=False), backward=False)

    # Train: torch's mask comes from another generator, so check the structure instead:
    # mask in {0, 1/(1-p)}, out == x * mask, grad == out_grad * mask, keep rate near 1 - p.
    def check(d, T, y, p):
        mask = np.load(os.path.join(d, "mask.npy"))
        x = np.load(os.path.join(d, "x.npy"))
        og = np.load(os.path.join(d, "out_grad.npy"))
        scale = np.float32(1.0 / (1.0 - p))
        if not np.all((mask == 0) | (mask == scale)):
            return "mask holds values other than 0 and 1/(1-p)"
        keep = float(np.mean(mask != 0))
        if abs(keep - (1 - p)) > 0.05:
            return "keep rate %.3f, expected %.3f" % (keep, 1 - p)
        return (R.compare("out", np.load(os.path.join(d, "out.npy")), x * mask, (RTOL, ATOL))
                or R.compare("grad_x", np.load(os.path.join(d, "grad_x.npy")), og * mask, (RTOL, ATOL)))
    for p in (0.5, 0.1):
        R.case("dropout train p=%g" % p, "y = dropout(x, p=%r)" % p, {"x": R.randn(40, 50)},
               lambda T: T["x"] * 1.0, train=True, check=lambda d, T, y, p=p: check(d, T, y, p))


def softmax_cases(R):
    shapes = [((4, 5), None), ((2, 3, 4), 1), ((2, 3, 4), 0), ((3, 6), -1), ((8, 1000), -1)]
    if R.quick:
        shapes = shapes[1:2]
    for op, fn in (("softmax", F.softmax), ("log_softmax", F.log_softmax)):
        for s, axis in shapes:
            attrs = "" if axis is None else ", axis=%d" % axis
            R.case("%s %s axis=%s" % (op, shp(s), axis), "y = %s(x%s)" % (op, attrs), {"x": R.randn(*s, lo=-5, hi=5)},
                   lambda T, fn=fn, a=axis: fn(T["x"], dim=-1 if a is None else a))
        x = R.randn(3, 4) * 200   # large logits: stable evaluation
        R.case("%s large logits" % op, "y = %s(x)" % op, {"x": x}, lambda T, fn=fn: fn(T["x"], dim=-1))
    emb = [((5,), 7, 3), ((2, 4), 5, 6), ((3, 3, 2), 4, 2)]
    if R.quick:
        emb = emb[1:2]
    for s, n, dim in emb:
        arrays = {"idx": R.ints(0, n, *s), "y.weight": R.randn(n, dim)}
        arrays["idx"].flat[0] = arrays["idx"].flat[-1]    # a repeated index: gradients add up
        R.case("embedding %s input_dim=%d output_dim=%d" % (shp(s), n, dim),
               "y = embedding(idx, input_dim=%d, output_dim=%d)" % (n, dim), arrays,
               lambda T: F.embedding(T["idx"].long(), T["y.weight"]), grads={"weight": "y.weight"})
    for n, c in ((4, 5), (1, 3), (16, 10)) if not R.quick else ((4, 5),):
        lab = R.ints(0, c, n)
        R.case("softmax_cross_entropy N=%d C=%d" % (n, c), "y = softmax_cross_entropy(x, label)",
               {"x": R.randn(n, c, lo=-4, hi=4), "label": lab},
               lambda T: F.cross_entropy(T["x"], T["label"].long()), grads={"logits": "x"})
    R.case("softmax_cross_entropy large logits", "y = softmax_cross_entropy(x, label)",
           {"x": R.randn(3, 4) * 300, "label": R.ints(0, 4, 3)},
           lambda T: F.cross_entropy(T["x"], T["label"].long()), grads={"logits": "x"})


def optim_cases(R):
    shape = (5, 7)
    for steps in (1, 5):
        R.optim("sgd plain steps=%d" % steps, "sgd", {"lr": 0.1}, shape, steps)
        R.optim("sgd momentum steps=%d" % steps, "sgd", {"lr": 0.05, "momentum": 0.9}, shape, steps)
        R.optim("sgd momentum wd steps=%d" % steps, "sgd", {"lr": 0.05, "momentum": 0.9, "wd": 0.01}, shape, steps)
        R.optim("adam default steps=%d" % steps, "adam", {"lr": 0.001}, shape, steps)
        R.optim("adam wd steps=%d" % steps, "adam",
                {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "wd": 0.05}, shape, steps)
    R.optim("adam many steps=30", "adam", {"lr": 0.01, "wd": 0.001}, shape, 30)
    R.optim("sgd many steps=30", "sgd", {"lr": 0.02, "momentum": 0.5, "wd": 0.001}, shape, 30)
    R.optim("sgd nesterov steps=20", "sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": 1}, shape, 20)
    R.optim("sgd nesterov wd steps=20", "sgd", {"lr": 0.05, "momentum": 0.8, "wd": 0.01, "nesterov": 1}, shape, 20)
    R.optim("adamw torch's wd steps=20", "adamw", {"lr": 0.01, "wd": 0.01}, shape, 20)
    R.optim("sgd clip_norm steps=20", "sgd", {"lr": 0.1, "momentum": 0.9, "clip_norm": 1.5}, shape, 20)
    R.optim("adamw clip_norm steps=20", "adamw", {"lr": 0.01, "wd": 0.01, "clip_norm": 0.3}, shape, 20)
    R.optim("adamw wd steps=20", "adamw", {"lr": 0.003, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "wd": 0.3}, shape, 20)
    # 20 steps of each schedule with SGD, Nesterov SGD and AdamW (torch.optim.lr_scheduler).
    scheds = [("step", {"step_size": 6, "gamma": 0.5}), ("multistep", {"milestones": (3, 8, 15), "gamma": 0.3}),
              ("exponential", {"gamma": 0.9}), ("cosine", {"total": 20}), ("cosine", {"total": 25, "warmup": 5, "min_lr": 0.001}),
              ("onecycle", {"total": 20}), ("onecycle", {"total": 22, "pct_start": 0.25, "div_factor": 10.0, "final_div_factor": 100.0})]
    opts = [("sgd", {"lr": 0.1}), ("sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": 1}), ("adamw", {"lr": 0.01, "wd": 0.05})]
    for sn, sa in scheds:
        for kind, attrs in opts:
            label = "%s%s schedule %s(%s) steps=20" % (kind, " nesterov" if attrs.get("nesterov") else "", sn,
                                                          ", ".join("%s=%s" % kv for kv in sa.items()))
            R.optim(label, kind, attrs, shape, 20, (sn, sa))


FAMILIES = [binary_cases, unary_cases, reduce_cases, beyond_spec_reduce_cases, layout_cases, pad_cases, gemm_cases, conv_cases, pool_cases,
            norm_cases, dropout_cases, softmax_cases, optim_cases]


def main(argv):
    args = argv[1:]
    if not args or args[0].startswith("-"):
        print("usage: conformance.py KILN_OPCHECK [--kiln KILN --opcheck-at KILN_OPCHECK_AT] [--quick] [-k SUBSTRING]",
              file=sys.stderr)
        return 2
    exe = os.path.abspath(args[0])
    quick = "--quick" in args or os.environ.get("KILN_CONFORMANCE_QUICK") == "1"
    pattern = args[args.index("-k") + 1] if "-k" in args else None
    kiln = os.path.abspath(args[args.index("--kiln") + 1]) if "--kiln" in args else None
    at_exe = os.path.abspath(args[args.index("--opcheck-at") + 1]) if "--opcheck-at" in args else None
    R = Runner(exe, quick, pattern, "-v" in args)
    try:
        for fam in FAMILIES:
            fam(R)
        if kiln and at_exe:
            bounded_cases(R, kiln, at_exe, quick)
        else:
            print("conformance: the bounded-dims part skipped: no --kiln and --opcheck-at given")
    finally:
        if R.failed == 0:
            shutil.rmtree(R.root, ignore_errors=True)
    tail = ", %d skipped" % R.skipped if R.skipped else ""
    print("conformance: %d passed, %d failed%s" % (R.passed, R.failed, tail))
    return 1 if R.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
