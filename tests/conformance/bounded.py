"""bounded.py -- the conformance cases again with the batch axis a bounded dim (issue 30).

The fixed cases run one op's kernels on the lowered graph (kiln_opcheck); the compiled model
with bounded dims holds every size at the bound and patches each step's shapes and params per
call. So here ops run through whole compiled models at an extent N below the bound B, against
torch at N: a kernel that sized or cached something at the bound, a size attribute left at
the bound, a workspace planned there, shows as a wrong value. Many cases share one model (a
process costs more than its ops), each case's tensors prefixed `cK_`:

    dim batch = 1..8
    model bounded_1 {
      input c0_x_in : f32[batch, 5]     # a batched input: its N rows given
      param c0_x_d : f32[batch, 5]      # zeros, so c0_x is c0_x_in; its update is the gradient
      input c0_og : f32[batch, 5]
      c0_x = c0_x_in + c0_x_d
      c0_y = exp(c0_x)
      output c0_y
      loss = sum(c0_y * c0_og) + ...
      train loss with sgd(lr=1.0)
    }

Forward: `kiln run` (JIT; the extent from the .npy inputs' rows, the weights from a
safetensors file written here). Backward: `kiln_opcheck_at N` (opcheck_at.c) runs one train_step at N
through the C API (kiln train shuffles rows and loads no weights); with plain SGD at lr 1 the
zero param `cK_x_d` becomes minus x's gradient (only its first N rows may change) and an op's
own param w becomes w - grad. Where an output's shape is not `batch` or fixed on every axis
(`reshape` to `3 * batch`) there is no `og` input to declare, and the case's loss term is
sum(y * y) (out_grad 2y). Cases whose bounding the compiler refuses are checked to be refused.
"""
import json
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import torch
import torch.nn.functional as F

B, N = 8, 3           # the bound, and the extent every case runs at (its batch rows)
MAX_IO = 60           # kiln run takes at most 64 inputs and 64 outputs: a model holds fewer
SUM_TOL = (1e-4, 2e-5)


class Case:
    def __init__(self, name, body, arrays, ref, train_ref, tol, backward, check, env=None):
        self.name, self.body, self.arrays, self.ref, self.tol = name, body, arrays, ref, tol
        self.env = env or {}
        self.train_ref = train_ref or ref
        self.backward, self.check = backward, check
        self.notes = []
        self.batched = {k for k, v in arrays.items() if "." not in k and v.ndim and v.shape[0] == N}


class Bounded:
    """Collects cases, then runs them in models of up to MAX_IO inputs and outputs."""

    def __init__(self, R, kiln, at_exe):
        self.R, self.kiln, self.at_exe = R, kiln, at_exe
        self.cases = []

    # ---- building ----
    def case(self, name, body, arrays, ref, train_ref=None, tol=SUM_TOL, backward=True, check=None, env=None):
        """As Runner.case: body computes `y` from the arrays; a non-dotted array whose first
        axis is N is batched. train_ref: torch in train mode where it differs (batch_norm).
        check(grads, og) -> (error or None, the case's term of the step's loss) replaces the
        gradient comparison (dropout). env: variables for kiln's processes (KILN_CONV), which
        put the case in a model of its own environment."""
        if self.R.pattern and self.R.pattern not in "bounded " + name:
            return
        self.cases.append(Case(name, body, arrays, ref, train_ref, tol, backward, check, env))

    def refused(self, name, body, arrays, why):
        """A case whose bounding the compiler must refuse, its message holding `why`."""
        if self.R.pattern and self.R.pattern not in "bounded " + name:
            return
        d = self._dir()
        c = Case(name, body, arrays, None, None, None, False, None)
        with open(os.path.join(d, "m.kiln"), "w") as f:
            f.write(self._text("refused", [c], [None]))
        p = subprocess.run([self.kiln, "check", os.path.join(d, "m.kiln")], capture_output=True, text=True)
        first = next((ln for ln in p.stderr.splitlines() if "error:" in ln), p.stderr.strip())
        if p.returncode != 0 and why in p.stderr:
            self.R.skipped += 1
            print("skip bounded %s: the compiler refuses batch = 1..%d: %s" % (name, B, first.split("error: ")[-1]))
            shutil.rmtree(d)
        else:
            self.R.failed += 1
            print("FAIL bounded %s: expected a refusal naming '%s', got exit %d: %s\n     model kept in %s" % (
                name, why, p.returncode, first, d))

    # ---- running ----
    def run(self):
        packs = []
        for env in dict.fromkeys(tuple(sorted(c.env.items())) for c in self.cases):
            packs += self._packs([c for c in self.cases if tuple(sorted(c.env.items())) == env])
        for p in packs:
            try:
                self._run_pack(p)
            except Exception as e:  # a broken case fails its model's cases, not the suite
                for c in p:
                    self._report(c.name, "%s: %s" % (type(e).__name__, e))

    @staticmethod
    def _packs(cases):
        """The cases in order, cut into models of at most MAX_IO inputs and outputs."""
        packs, pack, nin = [], [], 0
        for c in cases:
            k = sum(1 for n in c.arrays if "." not in n)
            if pack and (nin + k > MAX_IO or len(pack) + 1 > MAX_IO):
                packs.append(pack)
                pack, nin = [], 0
            pack.append(c)
            nin += k
        return packs + ([pack] if pack else [])

    def _dir(self):
        self.R.n += 1
        d = os.path.join(self.R.root, "b%04d" % self.R.n)
        os.mkdir(d)
        return d

    def _run_pack(self, cases):
        d = self._dir()
        plans = [self._plan(c) for c in cases]
        with open(os.path.join(d, "m.kiln"), "w") as f:
            f.write(self._text("bounded_%d" % self.R.n, cases, plans))
        w0 = self._write_arrays(d, cases, plans)
        env = dict(os.environ, **cases[0].env)
        errs = self._forward(d, cases, env)
        train = any(p["og"] is not None for p in plans)
        w1, loss, err = self._train(d, env) if train else (None, None, None)
        bad = 0
        for i, (c, p) in enumerate(zip(cases, plans)):
            bad += self._report(c.name, errs[i] or err or self._grads(c, p, i, w0, w1), c.notes)
        if train and not err and all(p["loss"] is not None for p in plans if p["og"] is not None):
            # the step's loss: the cases' forward in train mode, each against its out_grad
            want = sum(p["loss"] for p in plans if p["og"] is not None)
            e = self.R.compare("train_step loss", np.array(loss), np.array(want), SUM_TOL)
            bad += self._report("train_step loss of %d cases" % len(cases), e)
        if bad:
            print("     bounded model kept in %s" % d)
        else:
            shutil.rmtree(d)

    def _report(self, name, err, notes=()):
        if err:
            self.R.failed += 1
            print("FAIL bounded %s: %s" % (name, err))
        else:
            self.R.passed += 1
            print("ok   bounded %s%s" % (name, "".join("\n     note: " + n for n in notes)))
        return 1 if err else 0

    # ---- one case: its shapes, out_grad and torch's results ----
    def _plan(self, c):
        """The output's axes as the model writes them (torch's shape at N and N + 1 rows tell
        which follow the batch) and its out_grad: random, "square" (2y) or None (no backward)."""
        y = self._ref_at(c.arrays, c.ref)
        y1 = self._ref_at(self._one_more_row(c), c.ref)
        dims = []
        for s0, s1 in zip(y.shape, y1.shape):
            a = s1 - s0
            dims.append(str(s0) if a == 0 else "batch" if (a, s0) == (1, N) else None)
        p = {"dims": dims, "og": None, "loss": None}
        if not c.backward:
            return p
        if None in dims:
            p["og"] = "square"
            c.notes.append("out_grad 2y: the output's shape %s is not batch or fixed on each axis" % (
                ", ".join(self._form(s0, s1) for s0, s1 in zip(y.shape, y1.shape))))
        else:
            p["og"] = self.R.rng.uniform(-1, 1, size=y.shape).astype(np.float32)
        return p

    @staticmethod
    def _form(s0, s1):
        a = s1 - s0
        b = s0 - a * N
        return str(s0) if a == 0 else "%s%s" % ("batch" if a == 1 else "%d * batch" % a, " + %d" % b if b else "")

    @staticmethod
    def _one_more_row(c):
        return {k: np.concatenate([v, v[-1:]]) if k in c.batched else v for k, v in c.arrays.items()}

    @staticmethod
    def _ref_at(arrays, ref):
        with torch.no_grad():
            T = {k: torch.tensor(v) for k, v in arrays.items()}
            return ref(T)

    # ---- the model text and its files ----
    def _text(self, name, cases, plans):
        decls, body, outs, terms = [], [], [], []
        for i, (c, p) in enumerate(zip(cases, plans)):
            pre = "c%d_" % i
            self._inputs_text(c, pre, decls, body)
            names = [k for k in c.arrays if "." not in k] + ["y"]
            body.append("  " + re.sub(r"(?<![\w.\"])(%s)(?![\w\"])" % "|".join(map(re.escape, names)),
                                      lambda m: pre + m.group(1), c.body))
            outs.append("  output %sy" % pre)
            if p and isinstance(p["og"], np.ndarray):
                decls.append("  input %sog : f32[%s]" % (pre, ", ".join(p["dims"])))
                terms.append("sum(%sy * %sog)" % (pre, pre))
            elif p and p["og"] is not None:
                terms.append("sum(%sy * %sy)" % (pre, pre))
        train = ["  loss = " + " + ".join(terms), "  train loss with sgd(lr=1.0)"] if terms else []
        return "dim batch = 1..%d\nmodel %s {\n%s\n}\n" % (B, name, "\n".join(decls + body + outs + train))

    @staticmethod
    def _inputs_text(c, pre, decls, body):
        """Each input array as an input; a float one plus its zero param, whose update after
        the step is the gradient (an input has none)."""
        for k, v in c.arrays.items():
            if "." in k:
                continue
            dims = ["batch" if k in c.batched else str(v.shape[0])] + [str(s) for s in v.shape[1:]] if v.ndim else []
            t = "%s[%s]" % ("i32" if v.dtype == np.int32 else "f32", ", ".join(dims))
            if v.dtype == np.int32:
                decls.append("  input %s%s : %s" % (pre, k, t))
                continue
            decls.append("  input %s%s_in : %s" % (pre, k, t))
            decls.append("  param %s%s_d : %s" % (pre, k, t))
            body.append("  %s%s = %s%s_in + %s%s_d" % (pre, k, pre, k, pre, k))

    def _write_arrays(self, d, cases, plans):
        """Each input's .npy (N rows) and w.safetensors (every param: the ops' own, the zero
        gradient probes at the bound's rows, batch_norm's statistics)."""
        w = {}
        for i, (c, p) in enumerate(zip(cases, plans)):
            pre = "c%d_" % i
            for k, v in c.arrays.items():
                if "." in k:
                    w[pre + k] = v
                elif v.dtype == np.int32:
                    np.save(os.path.join(d, pre + k + ".npy"), v)
                else:
                    np.save(os.path.join(d, pre + k + "_in.npy"), v)
                    rows = (B,) + v.shape[1:] if k in c.batched else v.shape
                    w[pre + k + "_d"] = np.zeros(rows, np.float32)
            if isinstance(p["og"], np.ndarray):
                np.save(os.path.join(d, pre + "og.npy"), p["og"])
        write_safetensors(os.path.join(d, "w.safetensors"), w)
        return w

    def _forward(self, d, cases, env):
        """kiln run on the N rows; then each output against torch (predict's ref)."""
        cmd = [self.kiln, "run", os.path.join(d, "m.kiln"), "--weights", os.path.join(d, "w.safetensors")]
        for i, c in enumerate(cases):
            pre = "c%d_" % i
            for k, v in c.arrays.items():
                if "." not in k:
                    name = pre + k + ("" if v.dtype == np.int32 else "_in")
                    cmd += ["--input", "%s=%s" % (name, os.path.join(d, name + ".npy"))]
            cmd += ["--output", "%sy=%s" % (pre, os.path.join(d, pre + "y.out.npy"))]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            return ["kiln run exit %d: %s" % (p.returncode, p.stderr.strip())] * len(cases)
        errs = []
        for i, c in enumerate(cases):
            got = np.load(os.path.join(d, "c%d_y.out.npy" % i))
            errs.append(self._match(c, lambda T, y: self.R.compare("out", got, y.detach().numpy(), c.tol), None, c.ref))
        return errs

    def _train(self, d, env):
        p = subprocess.run([self.at_exe, str(N), os.path.join(d, "m.kiln"), d], capture_output=True, text=True, env=env)
        if p.returncode != 0:
            return None, None, "kiln_opcheck_at exit %d: %s" % (p.returncode, p.stderr.strip())
        loss = float(p.stdout.split()[-1])
        return read_safetensors(os.path.join(d, "w1.safetensors")), loss, None

    def _match(self, c, cmp, og, ref):
        """cmp(T, y) against torch in float32, else in float64 (noted), as Runner._run_case."""
        T, y = self._torch(c, ref, og, torch.float32)
        err = cmp(T, y)
        if err:
            T64, y64 = self._torch(c, ref, og, torch.float64)
            if cmp(T64, y64) is None:
                c.notes.append("matches torch in float64; float32 torch differs: " + err)
                return None
        return err

    def _torch(self, c, ref, og, dtype):
        """y and the tensors (with .grad) from ref; og "square" is 2y (loss sum(y * y))."""
        if isinstance(og, str):
            T, y = self.R._torch(c.arrays, ref, None, dtype)
            og = (2 * y.detach()).numpy()
        return self.R._torch(c.arrays, ref, og, dtype)

    # ---- gradients from the update ----
    @staticmethod
    def _updates(c, pre, w0, w1):
        """Each float array's gradient read off the SGD step at lr 1 (batch_norm's moving
        statistics: their values after it), or an error string."""
        got = {}
        for k, v in c.arrays.items():
            if v.dtype != np.float32:
                continue
            if "." in k:
                after = w1[pre + k].astype(np.float64)
                got[k] = after if "moving" in k else w0[pre + k].astype(np.float64) - after
                continue
            upd = w1[pre + k + "_d"]
            if k in c.batched and np.any(upd[N:] != 0):
                return "the step changed rows %d.. of %s_d, beyond the extent %d" % (N, pre + k, N)
            got[k] = -upd[:N].astype(np.float64) if k in c.batched else -upd.astype(np.float64)
        return got

    def _grads(self, c, p, i, w0, w1):
        """Case i's gradients (and moving statistics) after the step against torch's from
        train_ref with the same out_grad; p["loss"] gets the case's term of the step's loss."""
        og = p["og"]
        if og is None:
            return None
        got = self._updates(c, "c%d_" % i, w0, w1)
        if isinstance(got, str):
            return got
        if c.check:
            err, p["loss"] = c.check(got, og)
            return err
        T, y = self._torch(c, c.train_ref, og, torch.float32)
        y = y.detach().numpy().astype(np.float64)
        p["loss"] = float(np.sum(y * (og if isinstance(og, np.ndarray) else y)))

        def cmp(T, y):
            for k, g in got.items():
                want = T[k] if "moving" in k else T[k].grad
                want = np.zeros(c.arrays[k].shape) if want is None else want.detach().numpy()
                e = self.R.compare(("after " if "moving" in k else "grad ") + k, g, want, c.tol)
                if e:
                    return e
            return None
        return self._match(c, cmp, og, c.train_ref)


def write_safetensors(path, tensors):
    """The safetensors layout: an 8-byte little-endian header length, the JSON header (dtype,
    shape, data_offsets per tensor), then the raw little-endian data."""
    header, blobs, off = {}, [], 0
    for k, v in tensors.items():
        b = np.ascontiguousarray(v).astype("<f4" if v.dtype == np.float32 else "<i4").tobytes()
        header[k] = {"dtype": "F32" if v.dtype == np.float32 else "I32", "shape": list(v.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        dt = {"F32": "<f4", "I32": "<i4"}[v["dtype"]]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt).reshape(v["shape"])
    return out


# ---- the cases: at least one per op whose first input has a leading batch axis ----

def binary_cases(R, K):
    ops = {"add": ("a + b", lambda a, b: a + b), "sub": ("a - b", lambda a, b: a - b),
           "mul": ("a * b", lambda a, b: a * b), "div": ("a / b", lambda a, b: a / b),
           "pow": ("a ** b", torch.pow), "maximum": ("maximum(a, b)", torch.maximum),
           "minimum": ("minimum(a, b)", torch.minimum)}
    # both batched, and a fixed operand broadcast over the batch (its gradient sums over the rows)
    for op, (expr, fn) in ops.items():
        for sb in ((N, 2, 4), (4,)):
            a = R.randn(N, 2, 4, lo=0.3) if op == "pow" else R.randn(N, 2, 4)
            b = R.away(*sb) if op == "div" else R.randn(*sb)
            K.case("%s [batch,2,4] %s" % (op, shp(sb)), "y = " + expr, {"a": a, "b": b},
                   lambda T, fn=fn: fn(T["a"], T["b"]))
    K.case("mul const 2.5 * x", "y = 2.5 * x", {"x": R.randn(N, 4)}, lambda T: 2.5 * T["x"])


def unary_cases(R, K):
    def with_zeros(x):
        x = x.copy()
        x.flat[::5] = 0.0
        return x
    fns = {"neg": (torch.neg, None), "abs": (torch.abs, with_zeros), "exp": (torch.exp, None),
           "log": (torch.log, "pos"), "sqrt": (torch.sqrt, "pos"), "rsqrt": (torch.rsqrt, "pos"),
           "square": (torch.square, None), "sin": (torch.sin, None), "cos": (torch.cos, None),
           "sign": (torch.sign, with_zeros), "reciprocal": (torch.reciprocal, "away"),
           "relu": (F.relu, with_zeros), "sigmoid": (torch.sigmoid, None), "tanh": (torch.tanh, None),
           "softplus": (F.softplus, None), "gelu": (F.gelu, None), "erf": (torch.erf, None),
           "silu": (F.silu, None), "hard_sigmoid": (F.hardsigmoid, "kinks"), "hard_swish": (F.hardswish, "kinks")}
    for op, (fn, dom) in fns.items():
        x = R.randn(N, 2, 5, lo=-4, hi=4)
        if dom == "pos":
            x = R.randn(N, 2, 5, lo=0.2, hi=4)
        elif dom == "away":
            x = R.away(N, 2, 5)
        elif dom == "kinks":      # 0.1 away from +-3, where torch's gradient is a convention
            x = np.where(np.abs(np.abs(x) - 3) < 0.1, x * 0.9, x).astype(np.float32)
        elif dom:
            x = dom(x)
        K.case("%s [batch,2,5]" % op, "y = %s(x)" % op, {"x": x}, lambda T, fn=fn: fn(T["x"]))
    x = R.randn(N, 6, lo=-5, hi=5)
    K.case("leaky_relu slope=0.2", "y = leaky_relu(x, slope=0.2)", {"x": x}, lambda T: F.leaky_relu(T["x"], 0.2))
    K.case("clip [-0.5, 1]", "y = clip(x, a_min=-0.5, a_max=1.0)", {"x": x}, lambda T: torch.clamp(T["x"], -0.5, 1.0))
    K.case("smooth_l1 sigma=2", "y = smooth_l1(x, sigma=2.0)", {"x": x},
           lambda T: F.smooth_l1_loss(T["x"], torch.zeros_like(T["x"]), reduction="none", beta=0.25))
    K.case("hard_sigmoid alpha=0.2 beta=0.5", "y = hard_sigmoid(x, alpha=0.2, beta=0.5)",
           {"x": np.where(np.abs(np.abs(x) - 2.5) < 0.1, x * 0.9, x).astype(np.float32)},
           lambda T: torch.clamp(0.2 * T["x"] + 0.5, 0.0, 1.0))
    for act, fn in {"relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "softrelu": F.softplus}.items():
        K.case("activation %s" % act, 'y = activation(x, act_type="%s")' % act, {"x": R.randn(N, 4, lo=-4, hi=4)},
               lambda T, fn=fn: fn(T["x"]))


def reduce_cases(R, K):
    # over an inner axis (the batch stays), over the batch axis itself (mean divides by the
    # extent, a param the runtime patches), and over everything
    refs = {"sum": lambda x, d, k: torch.sum(x, d, keepdim=k), "mean": lambda x, d, k: torch.mean(x, d, keepdim=k),
            "max": lambda x, d, k: torch.amax(x, d, keepdim=k), "min": lambda x, d, k: torch.amin(x, d, keepdim=k),
            "prod": lambda x, d, k: torch.prod(x, d[0], keepdim=k),
            "logsumexp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
            "norm": lambda x, d, k: torch.linalg.vector_norm(x, 2, dim=d, keepdim=k)}
    for op, fn in refs.items():
        for axis, keep in (((1,), False), ((0,), True), ((2,), True)):
            x = R.away(N, 4, 5, lo=0.8, hi=1.25) if op == "prod" else R.randn(N, 4, 5)
            K.case("%s axis=%d keepdims=%s" % (op, axis[0], keep),
                   "y = %s(x, axis=(%d,)%s)" % (op, axis[0], ", keepdims=true" if keep else ""), {"x": x},
                   lambda T, fn=fn, axis=axis, keep=keep: fn(T["x"], axis, keep))
    for op in ("sum", "mean"):
        K.case("%s all axes" % op, "y = %s(x)" % op, {"x": R.randn(N, 4, 5)},
               lambda T, op=op: getattr(torch, op)(T["x"]))
    K.case("norm ord=1 axis=(1, 2)", "y = norm(x, ord=1, axis=(1, 2))", {"x": R.randn(N, 4, 5)},
           lambda T: torch.linalg.vector_norm(T["x"], 1, dim=(1, 2)))
    for op, fn in (("softmax", F.softmax), ("log_softmax", F.log_softmax)):
        for axis in (-1, 0):      # axis 0: over the batch
            K.case("%s axis=%d" % (op, axis), "y = %s(x, axis=%d)" % (op, axis), {"x": R.randn(N, 6, lo=-5, hi=5)},
                   lambda T, fn=fn, a=axis: fn(T["x"], dim=a))


def layout_cases(R, K):
    x = R.randn(N, 3, 4)
    K.case("reshape (batch * 3, 4)", "y = reshape(x, shape=(batch * 3, 4))", {"x": x}, lambda T: T["x"].reshape(-1, 4))
    K.case("reshape (-1, 4)", "y = reshape(x, shape=(-1, 4))", {"x": x}, lambda T: T["x"].reshape(-1, 4))
    K.case("reshape (batch, 2, 6)", "y = reshape(x, shape=(batch, 2, 6))", {"x": x}, lambda T: T["x"].reshape(-1, 2, 6))
    K.case("reshape (4, -1)", "y = reshape(x, shape=(4, -1))", {"x": x}, lambda T: T["x"].reshape(4, -1))
    K.case("flatten 4-D", "y = flatten(x)", {"x": R.randn(N, 3, 2, 2)}, lambda T: torch.flatten(T["x"], 1))
    K.case("transpose default", "y = transpose(x)", {"x": x}, lambda T: T["x"].permute(2, 1, 0))
    K.case("transpose (1,0,2)", "y = transpose(x, axes=(1, 0, 2))", {"x": x}, lambda T: T["x"].permute(1, 0, 2))
    K.case("transpose (0,2,3,1)", "y = transpose(x, axes=(0, 2, 3, 1))", {"x": R.randn(N, 3, 4, 5)},
           lambda T: T["x"].permute(0, 2, 3, 1))
    for ax in (0, 2, -1):
        K.case("expand_dims axis=%d" % ax, "y = expand_dims(x, axis=%d)" % ax, {"x": x},
               lambda T, ax=ax: torch.unsqueeze(T["x"], ax))
    K.case("squeeze axis=2", "y = squeeze(x, axis=2)", {"x": R.randn(N, 3, 1, 4)}, lambda T: torch.squeeze(T["x"], 2))
    K.case("broadcast_to (batch, 3, 4)", "y = broadcast_to(x, shape=(batch, 3, 4))", {"x": R.randn(N, 1, 4)},
           lambda T: torch.broadcast_to(T["x"], (T["x"].shape[0], 3, 4)))
    K.case("slice axis=1 [1,3)", "y = slice(x, axis=1, begin=1, end=3)", {"x": x}, lambda T: T["x"][:, 1:3])
    K.case("slice axis=2 step=2", "y = slice(x, axis=2, begin=0, end=4, step=2)", {"x": x}, lambda T: T["x"][:, :, 0:4:2])
    K.case("slice axis=2 step=-1", "y = slice(x, axis=2, begin=0, end=4, step=-1)", {"x": x},
           lambda T: T["x"].flip(2))
    K.case("slice the batch axis [0,1)", "y = slice(x, axis=0, begin=0, end=1)", {"x": x}, lambda T: T["x"][0:1])
    K.case("concat dim=1", "y = concat(x0, x1, dim=1)", {"x0": R.randn(N, 2, 2), "x1": R.randn(N, 1, 2)},
           lambda T: torch.cat([T["x0"], T["x1"]], 1))
    K.case("concat the batch axis", "y = concat(x0, x1, dim=0)", {"x0": R.randn(N, 3), "x1": R.randn(N, 3)},
           lambda T: torch.cat([T["x0"], T["x1"]], 0))
    for s, pads, mode in (((N, 3, 4), (1, 2), "constant"), ((N, 3, 5), (2, 3), "reflect"),
                          ((N, 3, 4, 5), (2, 0, 1, 3), "replicate"), ((N, 2, 3), (0, 1, 1, 0, 2, 1), "constant")):
        attrs = "pad=(%s)%s" % (", ".join(map(str, pads)), "" if mode == "constant" else ', mode="%s"' % mode)
        K.case("pad %s %s %s" % (shp(s), pads, mode), "y = pad(x, %s)" % attrs, {"x": R.randn(*s)},
               lambda T, p=pads, m=mode: F.pad(T["x"], p, mode=m))


def gemm_cases(R, K):
    for sa, sb, ta, tb in (((N, 3, 4), (N, 4, 5), 0, 0), ((N, 3, 4), (4, 5), 0, 0), ((N, 4, 3), (5, 4), 1, 1),
                           ((N, 4), (4, 5), 0, 0), ((N, 4), (5, 4), 0, 1)):
        attrs = (", transpose_a=true" if ta else "") + (", transpose_b=true" if tb else "")
        K.case("matmul %s %s ta=%d tb=%d" % (shp(sa), shp(sb), ta, tb), "y = matmul(a, b%s)" % attrs,
               {"a": R.randn(*sa), "b": R.randn(*sb)},
               lambda T, ta=ta, tb=tb: torch.matmul(T["a"].transpose(-1, -2) if ta else T["a"],
                                                    T["b"].transpose(-1, -2) if tb else T["b"]))
    K.case("matmul [4,batch] [batch,5]: the batch contracted", "y = matmul(a, b, transpose_a=true)",
           {"a": R.randn(N, 4), "b": R.randn(N, 5)}, lambda T: T["a"].t() @ T["b"])
    for s, h, nb, flat in (((N, 6), 3, False, True), ((N, 3, 2, 2), 5, True, True), ((N, 3, 4), 5, False, False)):
        in_dim = int(np.prod(s[1:])) if flat else s[-1]
        arrays = {"x": R.randn(*s), "y.weight": R.randn(h, in_dim)}
        if not nb:
            arrays["y.bias"] = R.randn(h)
        attrs = "num_hidden=%d" % h + (", no_bias=true" if nb else "") + ("" if flat else ", flatten=false")
        K.case("fully_connected %s h=%d no_bias=%s flatten=%s" % (shp(s), h, nb, flat),
               "y = fully_connected(x, %s)" % attrs, arrays,
               lambda T, nb=nb, flat=flat: F.linear(torch.flatten(T["x"], 1) if flat else T["x"], T["y.weight"],
                                                    None if nb else T["y.bias"]))


def conv_cases(R, K):
    """Each shape under the shape rule's choice, then forced onto im2col and onto the direct
    blocked convolution (KILN_CONV, read when the model is compiled and when it runs): each
    plans its workspace at the bound."""
    for mode in (None, "im2col", "direct"):
        conv_mode_cases(R, K, mode)


def conv_mode_cases(R, K, mode):
    # (data shape, filters, kernel, stride, pad, dilate, groups, no_bias): 1-D, 2-D, grouped,
    # depthwise, Winograd's 3x3 with 16 channels, start and end pads apart, a larger workspace
    conv = [((N, 4, 9), 6, (3,), (2,), (1,), (2,), 2, False),
            ((N, 3, 6, 6), 4, (3, 3), (1, 1), (0, 0), (1, 1), 1, False),
            ((N, 4, 7, 8), 6, (3, 2), (2, 1), (1, 1), (1, 2), 2, False),
            ((N, 6, 9, 9), 6, (3, 3), (1, 1), (1, 1), (1, 1), 6, True),
            ((N, 16, 8, 8), 16, (3, 3), (1, 1), (1, 1), (1, 1), 1, False),
            ((N, 3, 6, 7), 4, (3, 3), (1, 1), (0, 1, 2, 0), (1, 1), 1, False),
            ((N, 8, 12, 12), 16, (3, 3), (2, 2), (1, 1), (1, 1), 1, True),
            ((N, 32, 9, 9), 32, (3, 3), (1, 1), (1, 1), (1, 1), 2, False)]
    for s, f, k, st, pd, dl, g, nb in conv:
        arrays = {"x": R.randn(*s), "y.weight": R.randn(f, s[1] // g, *k)}
        if not nb:
            arrays["y.bias"] = R.randn(f)
        sp = len(k)
        fpad = [v for i in reversed(range(sp)) for v in (pd[i], pd[sp + i])] if len(pd) == 2 * sp else None
        fn = F.conv1d if sp == 1 else F.conv2d

        def ref(T, fn=fn, st=st, pd=pd, dl=dl, g=g, nb=nb, fpad=fpad):
            x = F.pad(T["x"], fpad) if fpad else T["x"]
            return fn(x, T["y.weight"], None if nb else T["y.bias"], stride=st, padding=0 if fpad else pd,
                      dilation=dl, groups=g)
        attrs = "num_filter=%d, kernel=%s, stride=%s, pad=%s, dilate=%s, num_group=%d%s" % (
            f, tup(k), tup(st), tup(pd), tup(dl), g, ", no_bias=true" if nb else "")
        K.case("convolution %s f=%d k=%s s=%s p=%s d=%s g=%d%s" % (
               shp(s), f, k, st, pd, dl, g, " [KILN_CONV=%s]" % mode if mode else ""),
               "y = convolution(x, %s)" % attrs, arrays, ref, env={"KILN_CONV": mode} if mode else None)


def pool_cases(R, K):
    # (data shape, kernel, stride or None, pad, pool type, count_include_pad, ceil_mode)
    pools = [((N, 3, 6, 6), (2, 2), None, (0, 0), "max", True, False),
             ((N, 2, 7, 7), (3, 3), (2, 2), (1, 1), "avg", True, False),
             ((N, 3, 8), (2,), None, (0,), "avg", True, False),
             ((N, 2, 7, 6), (3, 3), (2, 2), (1, 1), "avg", False, True),
             ((N, 2, 6, 8), (3, 3), (2, 2), (0, 0), "max", True, True)]
    fns = {("max", 1): F.max_pool1d, ("max", 2): F.max_pool2d, ("avg", 1): F.avg_pool1d, ("avg", 2): F.avg_pool2d}
    for s, k, st, pd, pt, cip, ceil in pools:
        attrs = 'kernel=%s, pad=%s, pool_type="%s"' % (tup(k), tup(pd), pt) + (", stride=%s" % tup(st) if st else "")
        attrs += (", count_include_pad=false" if not cip else "") + (", ceil_mode=true" if ceil else "")
        kw = {"count_include_pad": cip} if pt == "avg" else {}
        K.case("pooling %s %s k=%s s=%s p=%s count_include_pad=%s ceil_mode=%s" % (pt, shp(s), k, st, pd, cip, ceil),
               "y = pooling(x, %s)" % attrs, {"x": R.randn(*s)},
               lambda T, fn=fns[(pt, len(k))], k=k, st=st, pd=pd, ceil=ceil, kw=kw:
                   fn(T["x"], k, stride=st or k, padding=pd, ceil_mode=ceil, **kw))
    for pt in ("max", "avg"):
        K.case("pooling global %s" % pt, 'y = pooling(x, global_pool=true, pool_type="%s")' % pt,
               {"x": R.randn(N, 3, 4, 5)},
               lambda T, pt=pt: (torch.amax if pt == "max" else torch.mean)(T["x"], (2, 3), keepdim=True))


def norm_cases(R, K):
    """batch_norm and layer_norm, then dropout, embedding and softmax_cross_entropy."""
    # batch_norm: predict on the moving statistics (kiln run), train_step on the batch's N rows
    # (their statistics, and the moving ones updated with them: torch's unbiased variance)
    for s, axis in (((N, 3, 5), 1), ((N, 5, 3), -1), ((N, 4), 1)):
        ax = axis % len(s)
        C = s[ax]
        arrays = {"x": R.randn(*s, lo=-3, hi=5), "y.gamma": R.randn(C), "y.beta": R.randn(C),
                  "y.moving_mean": R.randn(C), "y.moving_var": R.randn(C, lo=0.5, hi=2)}

        def ref(T, train, ax=ax):
            x = T["x"] if ax == 1 else torch.movedim(T["x"], ax, 1)
            y = F.batch_norm(x, T["y.moving_mean"], T["y.moving_var"], T["y.gamma"], T["y.beta"], training=train,
                             momentum=0.1, eps=1e-5)
            return y if ax == 1 else torch.movedim(y, 1, ax)
        K.case("batch_norm %s axis=%d" % (shp(s), axis), "y = batch_norm(x%s)" % (", axis=%d" % axis if axis != 1 else ""),
               arrays, lambda T, r=ref: r(T, False), train_ref=lambda T, r=ref: r(T, True))
    for s in ((N, 6), (N, 2, 8)):
        D = s[-1]
        arrays = {"x": R.randn(*s, lo=-3, hi=5), "y.gamma": R.randn(D), "y.beta": R.randn(D)}
        K.case("layer_norm %s" % shp(s), "y = layer_norm(x)", arrays,
               lambda T, D=D: F.layer_norm(T["x"], (D,), T["y.gamma"], T["y.beta"], 1e-5))

    # dropout: identity in predict; in train_step the gradient is out_grad times a mask whose
    # values are 0 or 1/(1-p) (torch's mask comes from another generator); its term of the
    # step's loss, sum(x * mask * og), is then sum(x * grad)
    x = R.randn(N, 40)

    def mask_check(got, og, p=0.5):
        mask = got["x"] / og
        if not np.all(np.isclose(mask, 0) | np.isclose(mask, 1 / (1 - p), rtol=1e-5)):
            return "grad x / out_grad holds values other than 0 and 1/(1-p)", None
        keep = float(np.mean(~np.isclose(mask, 0)))
        return None if 0.3 < keep < 0.7 else "keep rate %.2f of 0.5" % keep, float(np.sum(x * got["x"]))
    K.case("dropout p=0.5", "y = dropout(x, p=0.5)", {"x": x}, lambda T: T["x"] * 1.0, check=mask_check)
    idx = R.ints(0, 7, N, 4)
    idx.flat[0] = idx.flat[-1]          # a repeated index: gradients add up
    K.case("embedding [batch,4] input_dim=7 output_dim=3", "y = embedding(idx, input_dim=7, output_dim=3)",
           {"idx": idx, "y.weight": R.randn(7, 3)}, lambda T: F.embedding(T["idx"].long(), T["y.weight"]))
    K.case("softmax_cross_entropy [batch,5]: the mean over the extent", "y = softmax_cross_entropy(x, label)",
           {"x": R.randn(N, 5, lo=-4, hi=4), "label": R.ints(0, 5, N)},
           lambda T: F.cross_entropy(T["x"], T["label"].long()))


def refused_cases(R, K):
    """Bounding the batch here is refused by the compiler, which says why."""
    x = R.randn(N, 3, 4)
    K.refused("reshape (6, 4): a fixed size over the batch", "y = reshape(x, shape=(6, 4))", {"x": x}, "reshape")
    K.refused("squeeze all: the batch axis squeezed at batch 1", "y = squeeze(x)", {"x": R.randn(N, 3, 1, 4)}, "rank")
    K.refused("slice the batch axis [0,2): past batch 1", "y = slice(x, axis=0, begin=0, end=2)", {"x": x}, "batch=1")


def shp(s):
    return "[" + ",".join("batch" if i == 0 and x == N else str(x) for i, x in enumerate(s)) + "]"


def tup(v):
    return "(%s%s)" % (", ".join(map(str, v)), "," if len(v) == 1 else "")


def bounded_cases(R, kiln, at_exe, quick):
    """Every family's cases in as few models as kiln run takes; --quick (the sanitizer build):
    the ops with params alone (fully_connected, convolution under the shape rule's choice,
    batch_norm, layer_norm, embedding), one model."""
    K = Bounded(R, kiln, at_exe)
    families = [gemm_cases, conv_cases, norm_cases] if quick else \
        [binary_cases, unary_cases, reduce_cases, layout_cases, gemm_cases, conv_cases, pool_cases, norm_cases]
    for fam in families:
        fam(R, K)
    if quick:
        K.cases = [c for c in K.cases if not c.env and any("." in k for k in c.arrays)]
    else:
        refused_cases(R, K)
    K.run()
