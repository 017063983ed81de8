"""import_refused.py -- the check the ONNX tests share for a model kiln import must refuse:
exit 1, every needle in the message, and no file written."""
import os
import subprocess


def import_refused(kiln, path, out, needles):
    """None when `kiln import PATH -o OUT` refused as it must; else what went wrong. On
    success also the message's first line, as the second value."""
    r = subprocess.run([kiln, "import", path, "-o", out], capture_output=True, text=True)
    if r.returncode != 1:
        return "exit %d, expected 1\n%s" % (r.returncode, r.stderr), None
    if os.path.exists(out):
        return "a failed import wrote %s" % out, None
    for n in needles:
        if n not in r.stderr:
            return "the message lacks %r:\n%s" % (n, r.stderr), None
    return None, r.stderr.splitlines()[0]
