"""Kiln's training against PyTorch's, whole models (issue 32): examples/mlp.kiln and a small
examples/transformer.kiln (dims made small by kiln.compile's dims=), their train statement
rewritten to each optimizer (SGD with momentum, Nesterov SGD with weight decay, AdamW) with each
schedule (step, multistep, exponential, cosine with warmup, onecycle) and clip_norm: 15 cases
per model. Each trains 20 steps in Kiln (m.train_step) and in torch (the model written with
torch.nn.functional, torch.optim, torch.optim.lr_scheduler stepped after each optimizer.step(),
torch.nn.utils.clip_grad_norm_ before it) from the same initial weights (Kiln's, its biases and
layer_norm gammas and betas redrawn at random, loaded with load_state_dict and copied into torch)
on the same random batches. Checked: before every step, and after the last, the lr Kiln will use
(m.lr) is the optimizer's lr under the scheduler; every step's loss is torch's; after the 20
steps every weight is torch's; clip_norm clipped (torch's gradient norm above it) at some steps
and not at others. Float32 on both sides; the tolerances (LR_REL, LOSS_REL, WEIGHT_REL, NOISE_ABS)
and why AdamW's eps is 1e-5 are said below. Skipped, saying so, without torch."""
import os
import re
import sys

import numpy as np
import pytest

import kiln
from conftest import EXAMPLES

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from torch_sched import torch_scheduler  # noqa: E402

# torch 1.13's SequentialLR (the cosine warmup) warns about its own scheduler.step(0) call.
pytestmark = pytest.mark.filterwarnings("ignore:The epoch parameter in `scheduler.step\\(\\)`:UserWarning")

STEPS = 20
# The lr: Kiln's float32 against torch's float64; exponential's compounds a rounding a step
# (measured: 5.3e-7 after 20 steps, the others 1.1e-7 or less).
LR_REL = 1e-5
# Losses (relative to max(|loss|, 1)) and weights after 20 steps (relative to the tensor's max
# |w|, as test_torch.py's close()): the two sides sum in different orders, and each step's
# differences feed the next. Measured: weights at most 3.1e-5 (the MLP's hidden.weight under
# AdamW, where torch's own float32 is as far off its float64), 6e-6 or less elsewhere; losses
# 3.8e-7.
LOSS_REL = 1e-4
WEIGHT_REL = 1e-4
# A weight whose gradient is 0 in exact arithmetic (the attention's key bias: adding q . b_k to
# every score of a row leaves the row's softmax as it was) moves by its weight decay, the same
# on both sides, and by rounding noise, a different noise on each side, which AdamW scales up
# to lr * noise / eps a step: it is compared within NOISE_ABS absolute, far below one step's lr
# (measured: 1.2e-6).
NOISE_ABS = 1e-4
NOISE_ONLY = {"enc.a.k.bias"}

# (name, attributes) of each schedule, as the train clause writes them; torch_scheduler maps them.
SCHEDULES = {
    "step": ("step", {"step_size": 6, "gamma": 0.5}),
    "multistep": ("multistep", {"milestones": (3, 8, 15), "gamma": 0.3}),
    "exponential": ("exponential", {"gamma": 0.9}),
    "cosine": ("cosine", {"total": 25, "warmup": 4, "min_lr": 0.001}),
    "onecycle": ("onecycle", {"total": 20, "pct_start": 0.25, "div_factor": 10.0, "final_div_factor": 100.0}),
}
# (kind, attributes) of each optimizer, as the train clause writes them; torch_optimizer maps them.
# AdamW's eps is 1e-5, not torch's default 1e-8: Adam's first step moves a weight by
# lr * g / (|g| + eps), and a gradient that cancels to near 0 by chance (one of the MLP's
# hidden.weight, summed over the batch, is 9.3e-9 at the first step) has a float32 rounding of
# ~1e-9 on either side, which becomes lr * 1e-9 / eps of weight: 1e-3 of the weights' magnitude
# at eps 1e-8 (where torch's float32 itself is 1e-4 off its float64), 2e-5 at most at 1e-5.
OPTIMIZERS = {
    "sgd": ("sgd", {"lr": 0.1, "momentum": 0.9}),
    "nesterov": ("sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "wd": 0.01}),
    "adamw": ("adamw", {"lr": 0.01, "wd": 0.05, "eps": 1e-5}),
}
CASES = [(s, o) for s in SCHEDULES for o in OPTIMIZERS]


def kiln_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "(" + ", ".join(kiln_value(x) for x in v) + ")"
    return repr(v)


def train_clause(opt, sched, clip):
    """`train loss with OPT(...) schedule NAME(...) clip_norm=X`."""
    def call(name, attrs):
        return "%s(%s)" % (name, ", ".join("%s=%s" % (k, kiln_value(v)) for k, v in attrs.items()))
    return "train loss with %s schedule %s clip_norm=%r" % (call(*opt), call(*sched), clip)


def model_text(example, clause):
    """examples/EXAMPLE's text with its train statement replaced by `clause`."""
    with open(os.path.join(EXAMPLES, example)) as f:
        text = f.read()
    text, n = re.subn(r"^(\s*)train .*$", lambda mo: mo.group(1) + clause, text, flags=re.M)
    assert n == 1, "%s: expected one train statement" % example
    return text


def torch_optimizer(torch, params, opt):
    """torch.optim's equivalent of the train clause's optimizer (docs/language.md)."""
    kind, a = opt
    if kind == "sgd":
        return torch.optim.SGD(params, lr=a["lr"], momentum=a.get("momentum", 0), weight_decay=a.get("wd", 0),
                               nesterov=bool(a.get("nesterov", False)))
    assert kind == "adamw"
    return torch.optim.AdamW(params, lr=a["lr"], betas=(a.get("beta1", 0.9), a.get("beta2", 0.999)),
                             eps=a.get("eps", 1e-8), weight_decay=a.get("wd", 0.01))


def close(got, want, what, rel):
    """|kiln - torch| within rel of the magnitude of torch's value."""
    scale = max(float(np.abs(want).max()), 1e-6)
    err = float(np.abs(got - want).max())
    assert err <= rel * scale, "%s: max abs diff %.3g, %.3g of the magnitude %.3g" % (what, err, err / scale, scale)


def initial_weights(m, seed):
    """The model's own initial weights, with the biases (0) and layer_norm's gammas (1) and
    betas (0) redrawn at random so that they count too; loaded back into the model."""
    rng = np.random.default_rng(seed)
    w = m.state_dict()
    for k, v in w.items():
        if k.endswith((".bias", ".beta")):
            w[k] = (0.1 * rng.standard_normal(v.shape)).astype(np.float32)
        elif k.endswith(".gamma"):
            w[k] = (1 + 0.1 * rng.standard_normal(v.shape)).astype(np.float32)
    m.load_state_dict(w)
    return w


def train_both(torch, m, forward, batches, opt, sched, clip, seed):
    """len(batches) steps of m.train_step and of torch (forward(params, x) the model's logits in
    torch) from the same initial weights, comparing the lr and the loss at every step and every
    weight at the end. Returns torch's gradient norm (before clipping) at each step."""
    w0 = initial_weights(m, seed)
    params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in w0.items()}
    optimizer = torch_optimizer(torch, list(params.values()), opt)
    scheduler = torch_scheduler(torch, optimizer, sched)
    norms = []
    for step, (x, label) in enumerate(batches):
        want_lr = optimizer.param_groups[0]["lr"]
        assert abs(m.lr - want_lr) <= LR_REL * want_lr, "step %d: lr %.9g, torch %.9g" % (step, m.lr, want_lr)
        loss = m.train_step(x, label)
        optimizer.zero_grad()
        ref = torch.nn.functional.cross_entropy(forward(params, x), label)
        ref.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), clip)))
        optimizer.step()
        scheduler.step()
        want = ref.item()
        assert abs(loss - want) <= LOSS_REL * max(1.0, abs(want)), "step %d: loss %.9g, torch %.9g" % (step, loss, want)
    # The lr a next step would take: torch's, but for a onecycle whose total the steps reach,
    # where Kiln keeps the last step's lr (docs/language.md) and torch extrapolates its cosine
    # past the end (and raises at the next scheduler.step()).
    if not (sched[0] == "onecycle" and sched[1]["total"] <= len(batches)):
        want_lr = optimizer.param_groups[0]["lr"]
    assert abs(m.lr - want_lr) <= LR_REL * want_lr, "after the last step: lr %.9g, torch %.9g" % (m.lr, want_lr)
    got = m.state_dict()
    assert set(got) == set(params)
    for k, p in params.items():
        want = p.detach().numpy()
        if k in NOISE_ONLY:
            err = float(np.abs(got[k] - want).max())
            assert err <= NOISE_ABS, "%s (its gradient 0 but for rounding): max abs diff %.3g" % (k, err)
        else:
            close(got[k], want, "%s after %d steps" % (k, len(batches)), WEIGHT_REL)
    return norms


def check_clipped(norms, clip):
    clipped = sum(n > clip for n in norms)
    assert 0 < clipped < len(norms), "clip_norm=%g clipped at %d of %d steps (gradient norms %s)" % (
        clip, clipped, len(norms), ", ".join("%.3g" % n for n in norms))


# ---- examples/mlp.kiln ----

MLP_BATCH = 8
MLP_CLIP = 4.2          # the gradient norms run from 4.0 to 8.2: clipped at 16 to 19 steps of 20


def mlp_forward(torch, params, x):
    """examples/mlp.kiln in torch, by Kiln's parameter names (fully_connected's weight is
    [out, in], as torch.nn.Linear's)."""
    F = torch.nn.functional
    hidden = torch.relu(F.linear(x, params["hidden.weight"], params["hidden.bias"]))
    return F.linear(hidden, params["logits.weight"], params["logits.bias"])


@pytest.mark.parametrize("schedule,optimizer", CASES)
def test_mlp(torch, schedule, optimizer):
    opt, sched = OPTIMIZERS[optimizer], SCHEDULES[schedule]
    m = kiln.compile(model_text("mlp.kiln", train_clause(opt, sched, MLP_CLIP)), dims={"batch": MLP_BATCH})
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(MLP_BATCH, 784, generator=g), torch.randint(0, 10, (MLP_BATCH,), generator=g))
               for _ in range(STEPS)]
    norms = train_both(torch, m, lambda p, x: mlp_forward(torch, p, x), batches, opt, sched, MLP_CLIP, seed=1)
    check_clipped(norms, MLP_CLIP)


# ---- examples/transformer.kiln, made small ----

TF_DIMS = {"batch": 4, "seq": 16, "vocab": 50, "d_model": 32, "heads": 4, "d_ff": 64, "classes": 2}
TF_CLIP = 1.0           # the gradient norms run from 0.4 to 3.2: clipped at 5 to 13 steps of 20


def transformer_forward(torch, params, tokens):
    """examples/transformer.kiln in torch, by Kiln's parameter names: the token embedding plus
    the learned `pos`, one post-norm encoder block (q, k, v and output projections, softmax
    attention scaled by head_dim ** -0.5, layer_norm with eps 1e-5, a feed-forward network with
    the erf GELU), mean pooling over the sequence, a linear head."""
    F, P = torch.nn.functional, params
    heads = TF_DIMS["heads"]

    def lin(t, n):
        return F.linear(t, P[n + ".weight"], P[n + ".bias"])
    x = F.embedding(tokens, P["emb.weight"]) + P["pos"]
    b, s, d = x.shape

    def split(t):
        return t.reshape(b, s, heads, d // heads).transpose(1, 2)
    q, k, v = (split(lin(x, "enc.a." + n)) for n in "qkv")
    p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * (d / heads) ** -0.5, dim=-1)
    a = lin(torch.matmul(p, v).transpose(1, 2).reshape(b, s, d), "enc.a")
    n1 = F.layer_norm(x + a, (d,), P["enc.n1.gamma"], P["enc.n1.beta"], eps=1e-5)
    f2 = lin(F.gelu(lin(n1, "enc.f1")), "enc.f2")
    enc = F.layer_norm(n1 + f2, (d,), P["enc.gamma"], P["enc.beta"], eps=1e-5)
    return lin(enc.mean(dim=1), "logits")


@pytest.mark.parametrize("schedule,optimizer", CASES)
def test_transformer(torch, schedule, optimizer):
    opt, sched = OPTIMIZERS[optimizer], SCHEDULES[schedule]
    m = kiln.compile(model_text("transformer.kiln", train_clause(opt, sched, TF_CLIP)), dims=TF_DIMS)
    assert set(m.state_dict()) >= NOISE_ONLY
    g = torch.Generator().manual_seed(2)
    shape = (TF_DIMS["batch"], TF_DIMS["seq"])
    batches = [(torch.randint(0, TF_DIMS["vocab"], shape, generator=g),
                torch.randint(0, TF_DIMS["classes"], (TF_DIMS["batch"],), generator=g)) for _ in range(STEPS)]
    norms = train_both(torch, m, lambda p, x: transformer_forward(torch, p, x), batches, opt, sched, TF_CLIP, seed=2)
    check_clipped(norms, TF_CLIP)
