"""install_dir.py PREFIX LIBDIR — where `cmake --install` puts the Python package (python/
CMakeLists.txt): the folder of this python3's own search path that lies under PREFIX
(/usr/lib/python3/dist-packages for /usr, /usr/local/lib/python3.X/dist-packages for /usr/local,
the user site for ~/.local), else PREFIX/lib/python3/dist-packages, which PYTHONPATH must then
name. Prints that folder, then the path of PREFIX/LIBDIR/libkiln.so relative to the installed
package, which _installed.py records so the package finds the library wherever PREFIX is moved."""
import os
import site
import sys


def package_dir(prefix):
    default = os.path.join(prefix, "lib", "python3", "dist-packages")
    found = []
    for p in sys.path + [site.getusersitepackages()]:
        p = os.path.abspath(p) if p else ""
        rel = os.path.relpath(p, prefix) if p.startswith(prefix + os.sep) else ""
        if rel.split(os.sep)[0] in ("lib", "lib64") and os.path.basename(p) in ("dist-packages", "site-packages"):
            found.append(p)
    return default if default in found or not found else found[0]


def main():
    prefix = os.path.abspath(sys.argv[1])
    libdir = sys.argv[2] if os.path.isabs(sys.argv[2]) else os.path.join(prefix, sys.argv[2])
    d = package_dir(prefix)
    print(d)
    print(os.path.relpath(os.path.join(libdir, "libkiln.so"), os.path.join(d, "kiln")))


main()
