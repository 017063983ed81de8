#!/usr/bin/env python3
"""filemap.py — docs/architecture.md's file lists, and the check that they name every file.

  scripts/filemap.py            one line per source file of each layer, from the first
                                sentence of the file's opening comment (paste into
                                docs/architecture.md, then edit)
  scripts/filemap.py --check DOC
                                exit 1, listing them, when a source file of a layer is not
                                named in DOC as `name` (ctest docs.map runs this)
Run from anywhere in the repository; it lists the files git tracks."""
import os
import re
import subprocess
import sys

LAYERS = ['include', 'kernels', 'kernels/cuda', 'runtime', 'runtime/cuda', 'ir', 'frontend', 'frontend/onnx',
          'passes', 'exec', 'codegen', 'codegen/cpu', 'codegen/cuda', 'api', 'mpi', 'tools', 'python/kiln']
SOURCE = re.compile(r'\.(c|h|def|l|y|py|cu|cuh|cpp)$')


def layer_files(root):
    files = subprocess.check_output(['git', '-C', root, 'ls-files'], text=True).split()
    by = {d: [] for d in LAYERS}
    for f in files:
        d = os.path.dirname(f)
        if d in by and SOURCE.search(f):
            by[d].append(f)
    return {d: sorted(fs) for d, fs in by.items()}


def first_sentence(path):
    """The opening comment's first sentence, without the file's own name before it."""
    text = open(path, errors='replace').read(4000)
    m = re.match(r'\s*(?:/\*(.*?)\*/|((?:#[^\n]*\n)+)|((?://[^\n]*\n)+)|"""(.*?)""")', text, re.S)
    if not m:
        return '?'
    s = next(g for g in m.groups() if g)
    s = ' '.join(re.sub(r'^\s*(#|//|\*)\s?', '', s, flags=re.M).split())
    s = re.sub(r'^' + re.escape(os.path.basename(path)) + r'\s*[—-]+\s*', '', s)
    end = re.search(r'(.+?\.)(\s|$)', s)
    s = end.group(1) if end else s
    if len(s) > 150:
        s = re.sub(r'\s*\([^()]*\)', '', s)
    return s if len(s) <= 170 else s[:s.rfind(' ', 0, 165)] + ' …'


def main():
    root = subprocess.check_output(['git', 'rev-parse', '--show-toplevel'], text=True).strip()
    by = layer_files(root)
    if len(sys.argv) == 3 and sys.argv[1] == '--check':
        doc = open(sys.argv[2]).read()
        missing = [f for fs in by.values() for f in fs if '`%s`' % os.path.basename(f) not in doc]
        for f in missing:
            print('%s: not in %s (scripts/filemap.py prints a line for it)' % (f, sys.argv[2]))
        return 1 if missing else 0
    if len(sys.argv) != 1:
        print(__doc__.strip())
        return 2
    for d, fs in by.items():
        print('\n### %s/\n' % d)
        for f in fs:
            print('- `%s` — %s' % (os.path.basename(f), first_sentence(os.path.join(root, f))))
    return 0


if __name__ == '__main__':
    sys.exit(main())
