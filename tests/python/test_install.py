"""Where the package finds libkiln: from the repository without KILN_LIBRARY (a build folder of
the checkout), and installed by `cmake --install` into a fresh prefix (the library found through
_installed.py, a model compiled to a .so with the installed archives)."""
import os
import shutil
import subprocess
import sys

import pytest

import kiln
from conftest import REPO

PROBE = ("import kiln, numpy as np; print(kiln.library_path); "
         "m = kiln.compile('dim n = 4\\nmodel m {\\n  input x : f32[n]\\n  y = x * 2\\n  output y\\n}\\n', output='libm.so'); "
         "print(m.predict(np.arange(4)).tolist())")


def env_without_kiln(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_LIBRARY", "PYTHONPATH", "KILN_LIB_DIR")}
    env.update(extra)
    return env


def test_from_the_repository(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import kiln; print(kiln.library_path)"], capture_output=True, text=True,
                       cwd=REPO, env=env_without_kiln(PYTHONPATH=os.path.join(REPO, "python")))
    assert r.returncode == 0, r.stderr
    path = r.stdout.strip()
    assert path.startswith(os.path.join(REPO, "build")) and path.endswith(os.path.join("api", "libkiln.so")), path


def test_kiln_library_must_exist():
    r = subprocess.run([sys.executable, "-c", "import kiln"], capture_output=True, text=True, cwd=REPO,
                       env=env_without_kiln(PYTHONPATH=os.path.join(REPO, "python"), KILN_LIBRARY="/nonexistent/libkiln.so"))
    assert r.returncode != 0 and "/nonexistent/libkiln.so (not there)" in r.stderr


def test_cmake_install(tmp_path):
    build = os.environ.get("KILN_BUILD_DIR") or os.path.dirname(os.path.dirname(kiln.library_path))
    cmake = shutil.which("cmake")
    if not cmake or not os.path.isfile(os.path.join(build, "cmake_install.cmake")):
        pytest.skip("no cmake, or %s is not a build folder (set KILN_BUILD_DIR)" % build)
    prefix = tmp_path / "prefix"
    r = subprocess.run([cmake, "--install", build, "--prefix", str(prefix)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    pkg = prefix / "lib" / "python3" / "dist-packages"
    assert (pkg / "kiln" / "__init__.py").is_file() and (pkg / "kiln" / "_installed.py").is_file()
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=work,
                       env=env_without_kiln(PYTHONPATH=str(pkg)))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert os.path.realpath(lines[0]) == os.path.realpath(prefix / "lib" / "libkiln.so")
    assert lines[1] == "[0.0, 2.0, 4.0, 6.0]"
