"""ddp_torch.py -- Kiln's data-parallel training against PyTorch DDP, under
`mpirun -np 2 python3 ddp_torch.py`: examples/resnet.kiln (batch_norm with per-rank statistics,
the default) compiled at batch 4 on each rank, joined to MPI.COMM_WORLD through Model.set_comm
(mpi4py), which gives every rank rank 0's weights; beside it, on each rank, the same network in
torch, started from those weights, wrapped in DistributedDataParallel over the gloo backend
(Debian's python3-torch). Both train 3 steps of SGD (momentum 0.9, weight decay 1e-4, the
example's train clause, with the lr set to 0.01 at run time) on the same split: rank r takes
rows 4r..4r+3 of each step's 8. At the example's lr 0.1 these random batches of 4 rows make
the training chaotic from the third step on, on one process as on two, Kiln and torch alike:
a difference in the last bits grows ~250-fold a step, and the comparison would measure that.

Compared on every rank: each step's loss (Kiln's train_step returns the mean over all ranks'
rows; torch's per-rank means are averaged through gloo), every weight after the 3 steps, and
the rank's own batch_norm running statistics (DDP's broadcast_buffers is off: with it on, DDP
copies rank 0's running statistics to every rank before each forward, which is neither
per-rank statistics nor synchronised ones; the weights do not depend on it).

Tolerance: each loss within 1e-4; each weight within 1e-2 of its tensor's largest magnitude.
The two sides sum every convolution's products in other orders (Kiln's Winograd and blocked
GEMMs, torch's oneDNN, gloo's and MPI's sums), so the last bits differ, ~1e-6 of the
magnitude after a step. The loss is a continuous function of the weights, but a gradient is
not: where a relu's input or a max pool's two candidates lie within those last bits, the two
sides route one element's gradient differently, and a batch_norm beta of a small channel then
moves by ~1e-3 of its magnitude in one step (on a Zen 4 at step 4 of 5: 7.2e-4, then 1.3e-3;
on a Zen 5 no such element came up in 5 steps: 1.5e-6). Which step meets one depends on the
CPU's kernels, so the weights' tolerance allows it, and 3 steps keep it from compounding. A
wrong reduction is far outside: after 3 steps (8.1e-7 on that Zen 4), gradients summed but not
divided by the world size (torch at twice the lr) differ by 0.61, one rank's gradients alone
(torch without DDP) by 0.94.

Exits 77, saying why, without mpi4py or torch; KILN_LIBRARY names this build's libkiln."""
import os
import sys
import tempfile

try:
    import numpy as np
    from mpi4py import MPI
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print("SKIPPED: %s (apt-get install python3-mpi4py python3-numpy python3-torch)" % e)
    sys.exit(77)
if not dist.is_available() or not dist.is_gloo_available():
    print("SKIPPED: this torch has no gloo backend for torch.distributed")
    sys.exit(77)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import kiln  # noqa: E402

ROWS, STEPS, LR, TOL_LOSS, TOL = 4, 3, 0.01, 1e-4, 1e-2
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
torch.set_num_threads(1)


class ConvBN(nn.Module):
    """conv_bn of resnet.kiln: a convolution without bias, then batch_norm (eps 1e-5; Kiln's
    momentum 0.9 keeps 0.9 of the old statistics, torch's momentum 0.1 takes 0.1 of the new)."""

    def __init__(self, cin, cout, stride=1, k=3):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)

    def forward(self, x):
        return self.bn(self.conv(x))


class ResNet(nn.Module):
    """resnet.kiln's model: the blocks keyed by the Kiln names of their batch_norms."""

    def __init__(self):
        super().__init__()
        cb = {"stem": (3, 16, 1, 3)}
        for blk, cin, c, down in (("s1a", 16, 16, 0), ("s1b", 16, 16, 0), ("s2a", 16, 32, 1),
                                  ("s2b", 32, 32, 0), ("s3a", 32, 64, 1), ("s3b", 64, 64, 0)):
            cb[blk + ".a"] = (cin, c, 2 if down else 1, 3)
            cb[blk + ".b"] = (c, c, 1, 3)
            if down:
                cb[blk + ".s"] = (cin, c, 2, 1)
        self.names = list(cb)
        self.cb = nn.ModuleDict({n.replace(".", "_"): ConvBN(*a) for n, a in cb.items()})
        self.fc = nn.Linear(64, 10)

    def unit(self, name, x):
        return self.cb[name.replace(".", "_")](x)

    def forward(self, x):
        x = F.relu(self.unit("stem", x))
        for blk in ("s1a", "s1b", "s2a", "s2b", "s3a", "s3b"):
            b = self.unit(blk + ".b", F.relu(self.unit(blk + ".a", x)))
            s = self.unit(blk + ".s", x) if blk + ".s" in self.names else x
            x = F.relu(s + b)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def pairs(self):
        """(Kiln name, torch tensor) of every weight and running statistic."""
        for n in self.names:
            u = self.cb[n.replace(".", "_")]
            yield n + ".c.weight", u.conv.weight
            yield n + ".gamma", u.bn.weight
            yield n + ".beta", u.bn.bias
            yield n + ".moving_mean", u.bn.running_mean
            yield n + ".moving_var", u.bn.running_var
        yield "logits.weight", self.fc.weight
        yield "logits.bias", self.fc.bias


rng = np.random.default_rng(11)
data = [(rng.standard_normal((ROWS * size, 3, 32, 32)).astype(np.float32),
         rng.integers(0, 10, ROWS * size).astype(np.int32)) for _ in range(STEPS)]
mine = slice(ROWS * rank, ROWS * rank + ROWS)

m = kiln.compile(os.path.join(ROOT, "examples", "resnet.kiln"), dims={"batch": ROWS}, seed=1 + rank)
m.lr = LR      # as torch's below; the schedule-free example keeps it
m.set_comm()   # MPI.COMM_WORLD; rank 0's weights to every rank
start = m.state_dict()
net = ResNet()
with torch.no_grad():
    for k, t in net.pairs():
        t.copy_(torch.from_numpy(start[k]))

path = None
if rank == 0:
    fd, path = tempfile.mkstemp(prefix="kiln-ddp-")
    os.close(fd)
    os.unlink(path)   # the file store creates it
path = comm.bcast(path)
dist.init_process_group("gloo", init_method="file://" + path, rank=rank, world_size=size)
ddp = nn.parallel.DistributedDataParallel(net, broadcast_buffers=False)
opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9, weight_decay=1e-4)

failed = 0
for s, (x, y) in enumerate(data):
    lk = m.train_step(x[mine], y[mine])
    opt.zero_grad()
    loss = F.cross_entropy(ddp(torch.from_numpy(x[mine])), torch.from_numpy(y[mine]).long())
    loss.backward()
    opt.step()
    lt = loss.detach().clone()
    dist.all_reduce(lt)
    lt = float(lt) / size
    if abs(lk - lt) > TOL_LOSS * max(1.0, abs(lt)):
        print("FAIL: rank %d step %d: loss %.6f from Kiln, %.6f from DDP" % (rank, s, lk, lt))
        failed += 1

after = m.state_dict()
worst, worst_name = 0.0, ""
for k, t in net.pairs():
    ref = t.detach().numpy()
    d = float(np.abs(after[k] - ref).max()) / max(1e-3, float(np.abs(ref).max()))
    if d > worst:
        worst, worst_name = d, k
    if d > TOL:
        print("FAIL: rank %d: %s differs from DDP's by %.3g of its magnitude" % (rank, k, d))
        failed += 1
m.set_comm(False)
dist.destroy_process_group()
if rank == 0 and os.path.exists(path):
    os.unlink(path)
worst = comm.gather((worst, worst_name, rank))
failed = comm.allreduce(failed)
if rank == 0:
    w = max(worst)
    print("ResNet on %d ranks, per-rank batch_norm, %d steps: %s DDP (gloo); worst difference %.2g of the "
          "magnitude (%s, rank %d), tolerance %g" % (size, STEPS, "matches" if not failed else "DIFFERS from",
                                                     w[0], w[1], w[2], TOL))
sys.exit(1 if failed else 0)
