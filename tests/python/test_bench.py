"""bench/overhead/python_overhead.py, the Python column of bench/overhead, still runs against this
package and checks its model's results (briefly: no timing is judged here)."""
import os
import subprocess
import sys

from conftest import REPO


def test_python_overhead_runs():
    r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "overhead", "python_overhead.py"), "0.002"],
                       capture_output=True, text=True, env=os.environ.copy(), timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    assert [w for w, _ in rows] == ["m.predict(x)", "m(x)", "m.predict(x, out=y)", "ctypes call alone"], r.stdout
    assert all(t.endswith(" us") and float(t[:-3]) > 0 for _, t in rows), r.stdout
