"""dp_python.py — Model.set_comm through mpi4py, under `mpirun -np 2 python3 dp_python.py`: each
rank compiles examples/mlp.kiln at batch 4 from its own seed, joins MPI.COMM_WORLD and trains
three steps on its 4 rows of each step's 8; rank 0 then trains one model at batch 8 from seed 1
(rank 0's) on all 8 and compares: the losses (train_step returns the mean over the ranks) and
every weight within 1e-4 of the magnitude (the ranks' gradients are summed in another order:
last bits). Exits 77, saying why, without mpi4py. KILN_LIBRARY names this build's libkiln."""
import os
import sys

try:
    import numpy as np
    from mpi4py import MPI
except ImportError as e:
    print("SKIPPED: %s (apt-get install python3-mpi4py python3-numpy)" % e)
    sys.exit(77)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import kiln  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
path = os.path.join(ROOT, "examples", "mlp.kiln")
rng = np.random.default_rng(7)
data = [(rng.standard_normal((4 * size, 784)).astype(np.float32), rng.integers(0, 10, 4 * size).astype(np.int32))
        for _ in range(3)]
m = kiln.compile(path, dims={"batch": 4}, seed=1 + rank)
m.set_comm(bucket_bytes=65536)
losses = [m.train_step(x[4 * rank:4 * rank + 4], y[4 * rank:4 * rank + 4]) for x, y in data]
mine = m.state_dict()
m.set_comm(False)
failed = 0
if rank == 0:
    one = kiln.compile(path, dims={"batch": 4 * size}, seed=1)
    lone = [one.train_step(x, y) for x, y in data]
    for s, (a, b) in enumerate(zip(losses, lone)):
        if abs(a - b) > 1e-4 * max(1.0, abs(b)):
            print("FAIL: step %d: loss %g over the ranks, %g alone" % (s, a, b))
            failed += 1
    worst = 0.0
    for k, v in one.state_dict().items():
        d = float(np.abs(mine[k] - v).max()) / max(1e-3, float(np.abs(v).max()))
        worst = max(worst, d)
        if d > 1e-4:
            print("FAIL: %s differs from one process's: %.3g of its magnitude" % (k, d))
            failed += 1
    print("set_comm from Python on %d ranks: losses %s, alone %s; weights' worst difference %.2g" %
          (size, ["%.5f" % v for v in losses], ["%.5f" % v for v in lone], worst))
failed = comm.allreduce(failed)
sys.exit(1 if failed else 0)
