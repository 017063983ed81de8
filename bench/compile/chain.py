#!/usr/bin/env python3
"""chain.py N OPS [--repeat] -- an elementwise chain of N nodes as a .kiln model on stdout,
for timing `kiln compile` on large graphs (README's compile-time figures).

OPS is a comma-separated list drawn from relu, tanh, sigmoid, mul, add: each node applies one,
picked at random (seed 1), mul and add with a random constant; --repeat cycles through OPS in
order with fixed constants instead, so the fused groups repeat and are compiled once.

  bench/compile/chain.py 100000 relu,mul,add > /tmp/c.kiln
  /usr/bin/time -f '%e s %M KB' build/tools/kiln compile /tmp/c.kiln -o /tmp/libc.so
"""
import random
import sys


def node(prev, op, rnd, repeat):
    if op in ("relu", "tanh", "sigmoid"):
        return f"{op}({prev})"
    c = (0.9 if op == "mul" else 0.1) if repeat else (rnd.uniform(0.5, 1.5) if op == "mul" else rnd.uniform(-0.5, 0.5))
    return f"{prev} {'*' if op == 'mul' else '+'} {c:.4f}"


def main(argv):
    if len(argv) < 3 or not argv[1].isdigit():
        sys.exit(__doc__)
    n, ops, repeat = int(argv[1]), argv[2].split(","), "--repeat" in argv[3:]
    bad = [o for o in ops if o not in ("relu", "tanh", "sigmoid", "mul", "add")]
    if bad:
        sys.exit(f"chain.py: unknown op {bad[0]} (relu, tanh, sigmoid, mul, add)")
    rnd = random.Random(1)
    out = ["dim batch = 64", "model chain {", "  input x : f32[batch, 256]"]
    prev = "x"
    for i in range(n):
        op = ops[i % len(ops)] if repeat else rnd.choice(ops)
        out.append(f"  v{i} = {node(prev, op, rnd, repeat)}")
        prev = f"v{i}"
    out += [f"  output {prev}", "}"]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv)
