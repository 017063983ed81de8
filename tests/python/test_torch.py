"""Kiln against PyTorch: from_torch on an MLP and a small CNN with batch_norm (eval mode) matches
the module's outputs; three train_steps of examples/mlp.kiln from the module's weights match
three torch.optim.SGD steps; a from_torch(train=True) model trains as torch does; a module's own
state_dict loads into the model compiled from it; wd_exclude against torch's parameter groups.
Skipped, saying so, without torch."""
import os

import numpy as np
import pytest

import kiln
from conftest import EXAMPLES


def close(got, want, what, rel=1e-4):
    """|kiln - torch| within rel of the output's magnitude."""
    scale = max(float(np.abs(want).max()), 1e-6)
    err = float(np.abs(got - want).max())
    assert err <= rel * scale, "%s: max abs diff %.3g, %.3g of the output's magnitude %.3g" % (what, err, err / scale, scale)


def steps_against_torch(torch, m, forward, opt, steps, shape, classes):
    """steps train_steps of m against as many opt steps of forward's module on the same random
    batches (inputs of shape, labels below classes): each step's loss within 1e-5."""
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        x, label = torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g)
        loss = m.train_step(x, label)
        opt.zero_grad()
        ref = torch.nn.functional.cross_entropy(forward(x), label)
        ref.backward()
        opt.step()
        assert abs(loss - ref.item()) <= 1e-5 * max(1.0, abs(ref.item())), "step %d: loss %g, torch %g" % (step, loss, ref.item())


def mlp_module(torch):
    class MLP(torch.nn.Module):
        """examples/mlp.kiln in torch, its layers named as the model names them."""

        def __init__(self):
            super().__init__()
            self.hidden, self.logits = torch.nn.Linear(784, 128), torch.nn.Linear(128, 10)

        def forward(self, image):
            return self.logits(torch.relu(self.hidden(image)))
    return MLP()


def cnn_module(torch):
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                              torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 5))
    net.train()
    with torch.no_grad():                      # running statistics that are not 0 and 1
        for _ in range(3):
            net(torch.randn(8, 3, 8, 8) * 2 + 1)
    return net.eval()


def test_from_torch_mlp(torch):
    torch.manual_seed(0)
    net = mlp_module(torch).eval()
    x = torch.randn(4, 784)
    m = kiln.from_torch(net, x)
    assert [t.name for t in m.inputs] == ["image"] and m.outputs[0].shape == (4, 10)
    with torch.no_grad():
        want = net(x).numpy()
    close(m.predict(x), want, "mlp")
    close(m(image=x.numpy()), want, "mlp by name")
    assert set(m.state_dict()) == {"hidden.weight", "hidden.bias", "logits.weight", "logits.bias"}


def test_from_torch_cnn_batch_norm(torch):
    torch.manual_seed(0)
    net = cnn_module(torch)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.randn(4, 3, 8, 8)
    m = kiln.from_torch(net, x)
    assert not net.training
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items()), "from_torch changed the module"
    with torch.no_grad():
        want = net(x).numpy()
    close(m.predict(x), want, "cnn")
    # the module's own state_dict (num_batches_tracked included) loads into the model
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(0.5)
        net[1].running_mean.add_(0.25)
        want = net(x).numpy()
    m.load_state_dict(net.state_dict())
    close(m.predict(input=x), want, "cnn after load_state_dict")
    assert "1.running_mean" in m.renamed


def test_mlp_example_three_sgd_steps(torch):
    """examples/mlp.kiln (sgd lr 0.1, momentum 0.9) from a torch module's weights: three
    train_steps against three torch.optim.SGD steps on the same batches."""
    torch.manual_seed(0)
    net = mlp_module(torch)
    m = kiln.compile(os.path.join(EXAMPLES, "mlp.kiln"), dims={"batch": 8})
    m.load_state_dict(net.state_dict())
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    steps_against_torch(torch, m, net, opt, 3, (8, 784), 10)
    got = m.state_dict()
    for k, v in net.state_dict().items():
        close(got[k], v.numpy(), "%s after three steps" % k)


def test_from_torch_train(torch):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    x, label = torch.randn(6, 12), torch.tensor([0, 3, 1, 2, 2, 0])
    m = kiln.from_torch(net, x, train="softmax_cross_entropy sgd(lr=0.2, momentum=0.5)")
    assert [t.name for t in m.train_inputs] == ["input_", "label"] and m.lr == 0.2
    opt = torch.optim.SGD(net.parameters(), lr=0.2, momentum=0.5)
    for step in range(3):
        loss = m.train_step(input=x, label=label)
        opt.zero_grad()
        ref = torch.nn.functional.cross_entropy(net(x), label)
        ref.backward()
        opt.step()
        assert abs(loss - ref.item()) <= 1e-5 * max(1.0, abs(ref.item())), "step %d" % step
    with torch.no_grad():
        close(m.predict(x), net(x).numpy(), "after training")
    assert kiln.from_torch(net, x, train=True).train_inputs[1].name == "label"


def test_from_torch_refusals(torch):
    with pytest.raises(TypeError, match="torch.nn.Module"):
        kiln.from_torch(lambda x: x, torch.zeros(2))
    with pytest.raises(TypeError, match="example_inputs"):
        kiln.from_torch(torch.nn.ReLU(), "x")

    class Unsupported(torch.nn.Module):
        def forward(self, x):
            return torch.argmax(x, 1).float()
    with pytest.raises(kiln.KilnError, match="unsupported ONNX op ArgMax"):
        kiln.from_torch(Unsupported(), torch.zeros(2, 3))


def test_from_torch_transformer_encoder(torch):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(2, 10, 32)
    m = kiln.from_torch(enc, x)
    with torch.no_grad():
        want = enc(x).numpy()
    close(m.predict(src=x), want, "transformer encoder")


def test_state_dict_back_into_torch(torch):
    torch.manual_seed(0)
    net = cnn_module(torch)
    x, label = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    m = kiln.from_torch(net, x, train="softmax_cross_entropy sgd(lr=0.1)")
    m.train_step(x, label)
    sd = m.state_dict(source_names=True)
    assert "0.weight" in sd and "1.running_mean" in sd
    missing, unexpected = net.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    assert unexpected == [] and all(k.endswith("num_batches_tracked") for k in missing)
    with torch.no_grad():
        close(m.predict(x), net(x).numpy(), "the module after loading the trained weights")


def test_from_torch_names(torch):
    """Inputs after forward's parameters, outputs y0, y1 ... or a dict's keys."""
    class Two(torch.nn.Module):
        def forward(self, x, z):
            return torch.relu(x), x + z

    class Keys(torch.nn.Module):
        def forward(self, x):
            return {"pos": torch.relu(x), "squash": torch.tanh(x)}
    x, z = torch.randn(2, 3), torch.randn(2, 3)
    m = kiln.from_torch(Two(), (x, z))
    assert [t.name for t in m.inputs] == ["x", "z"] and [t.name for t in m.outputs] == ["y0", "y1"]
    got = m(x, z=z)
    close(got["y1"], (x + z).numpy(), "x + z")
    m = kiln.from_torch(Keys(), x)
    assert set(m(x)) == {"pos", "squash"}
    close(m(x)["squash"], torch.tanh(x).numpy(), "tanh")
    m = kiln.from_torch(Two(), (x, z), input_names=["a", "b"], output_names=["p", "q"])
    assert [t.name for t in m.inputs] == ["a", "b"] and set(m(a=x, b=z)) == {"p", "q"}


def test_compile_onnx_file(torch, tmp_path):
    """An .onnx file through kiln.compile: a symbolic batch bound by dims, the .so written with
    the ONNX weights inside, train= as kiln import --train takes it."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, torch.zeros(2, 6), str(path), opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    x = torch.randn(5, 6)
    with torch.no_grad():
        want = net(x).numpy()
    m = kiln.compile(path, dims={"batch": 5})
    assert m.inputs[0].shape == (5, 6)
    close(m.predict(x), want, "onnx file")
    so = kiln.compile(str(path), dims={"batch": 5}, output=tmp_path / "libnet.so")
    close(so.predict(x), want, "onnx .so")
    close(kiln.load(tmp_path / "libnet.so").predict(x), want, "onnx .so loaded again")
    t = kiln.compile(path, dims={"batch": 5}, train="softmax_cross_entropy sgd(lr=0.1)")
    assert [i.name for i in t.train_inputs] == ["x", "label"]
    assert t.train_step(x, [0, 1, 2, 0, 1]) > 0


WD_EXCLUDE = """
dim batch = 8
model wdx {
  input x : f32[batch, 6]
  input label : i32[batch]
  h = fully_connected(x, num_hidden=8)
  n = layer_norm(relu(h))
  logits = fully_connected(n, num_hidden=3)
  loss = softmax_cross_entropy(logits, label)
  output logits
  train loss with OPTIMIZER wd_exclude=EXCLUDE
}
"""


@pytest.mark.parametrize("optimizer,exclude", [("adamw(lr=0.05, wd=0.3)", "bias,norm"), ("adamw(lr=0.05, wd=0.3)", "norm"),
                                               ("sgd(lr=0.2, momentum=0.9, wd=0.1, nesterov=true)", "bias"),
                                               ("adam(lr=0.05, wd=0.2)", "bias, norm")])
def test_wd_exclude(torch, optimizer, exclude):
    """wd_exclude=bias,norm against torch's two parameter groups (the usual recipe: biases and
    norm weights without weight decay): five steps, losses and weights."""
    torch.manual_seed(0)
    net = torch.nn.ModuleDict({"h": torch.nn.Linear(6, 8), "n": torch.nn.LayerNorm(8), "logits": torch.nn.Linear(8, 3)})
    with torch.no_grad():                       # norm weights away from 1 and 0, so decay would show
        net["n"].weight.uniform_(0.5, 1.5), net["n"].bias.uniform_(-0.5, 0.5)
    m = kiln.compile(WD_EXCLUDE.replace("OPTIMIZER", optimizer).replace("EXCLUDE", exclude))
    rename = {"n.weight": "n.gamma", "n.bias": "n.beta"}
    m.load_state_dict({rename.get(k, k): v for k, v in net.state_dict().items()})
    kinds = {"bias": ("h.bias", "logits.bias"), "norm": ("n.weight", "n.bias")}
    skip = {name for kind in exclude.replace(" ", "").split(",") for name in kinds[kind]}
    name, args = optimizer.split("(")
    a = dict(kv.split("=") for kv in args.rstrip(")").replace(" ", "").split(","))
    wd = float(a.pop("wd"))
    groups = [{"params": [p for k, p in net.named_parameters() if k not in skip], "weight_decay": wd},
              {"params": [p for k, p in net.named_parameters() if k in skip], "weight_decay": 0.0}]
    if name == "sgd":
        opt = torch.optim.SGD(groups, lr=float(a["lr"]), momentum=float(a["momentum"]), nesterov=True)
    else:
        opt = (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(groups, lr=float(a["lr"]))
    steps_against_torch(torch, m, lambda x: net["logits"](net["n"](torch.relu(net["h"](x)))), opt, 5, (8, 6), 3)
    got = m.state_dict()
    for k, v in net.state_dict().items():
        close(got[rename.get(k, k)], v.numpy(), "%s after five steps (%s, wd_exclude=%s)" % (k, optimizer, exclude))
