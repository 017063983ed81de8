"""onnx_models.py — the models Kiln is compared on through ONNX, built one way for the
conformance suite (tests/onnx/models.py) and the benchmark (bench/onnx): torchvision
classifiers by name (inception_v3 at 299x299, every other at 224x224) and "bert", a BERT-style
encoder (nn.TransformerEncoder: 6 layers, d_model 512, 8 heads, feed-forward 2048, sequence
128, batch first).

Weights come from seed 0 (a Linear initialised to all zeros, ViT's head, is drawn at random
instead, or the output would be all zeros). A freshly initialised BatchNorm keeps mean 0 and variance 1, a deep
network's activations are then far from that, and its outputs shrink to around 1e-14:
comparing two engines on such outputs proves nothing. So build() calibrates every batch_norm's
running statistics on a few random batches (train mode with momentum None: their cumulative
average), then returns the model in eval mode with statistics that match its own activations.
"""
import torch
import torchvision

BENCH = ("resnet18 resnet50 mobilenet_v2 squeezenet1_1 vgg11_bn mobilenet_v3_large efficientnet_b1 mnasnet1_0 "
         "densenet169 shufflenet_v2_x0_5 regnet_x_400mf inception_v3 convnext_tiny vit_b_16 bert").split()


def example(name, batch, seed=2):
    """A random input for model `name` at batch `batch`."""
    g = torch.Generator().manual_seed(seed)
    if name == "bert":
        return torch.randn(int(batch), 128, 512, generator=g)
    side = 299 if name == "inception_v3" else 224
    return torch.randn(int(batch), 3, side, side, generator=g)


def calibrate_batch_norm(model, make_batch, batches=4):
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    if norms:
        model.train()
        with torch.no_grad():
            for i in range(batches):
                model(make_batch(i))
    for m in norms:
        m.momentum = 0.1
    return model.eval()


def build(name, prepare=None):
    """Model `name` from seed 0, prepare(model) applied if given, then its batch_norm
    statistics calibrated, in eval mode."""
    torch.manual_seed(0)
    if name == "bert":
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
        m = torch.nn.TransformerEncoder(layer, 6)
    elif name == "inception_v3":
        m = torchvision.models.inception_v3(aux_logits=False, init_weights=True)
    else:
        m = getattr(torchvision.models, name)()
    g = torch.Generator().manual_seed(3)
    for mod in m.modules():   # ViT's head starts at zero: an all-zero output compares nothing
        if isinstance(mod, torch.nn.Linear) and not mod.weight.detach().any():
            mod.weight.data = torch.randn(mod.weight.shape, generator=g) * 0.02
    if prepare:
        prepare(m)
    return calibrate_batch_norm(m, lambda i: example(name, 2, seed=100 + i))
