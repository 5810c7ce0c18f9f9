"""pyseccomp, imported so that loading libseccomp can run no program the caller's PATH
chooses.

pyseccomp finds the library with ``ctypes.util.find_library`` when first imported. That
asks ``/sbin/ldconfig`` first; where the library is not in the loader's cache it falls
back to running ``gcc``/``cc``, ``ld`` and ``objdump``, found on ``PATH``. sbxc runs
outside the sandbox, and a ``PATH`` entry that a sandboxed command could write (a relative
one, the project's ``node_modules/.bin``, ...) would then start that command's program
with the caller's rights on the next plan-cache miss. The import runs with the system
program folders alone on ``PATH``; the caller's is put back after.
"""
import os
import sys

SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def load():
    """The pyseccomp module (ImportError or OSError as pyseccomp raises them)."""
    mod = sys.modules.get("pyseccomp")
    if mod is not None:
        return mod
    had = "PATH" in os.environ
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = SYSTEM_PATH
    try:
        import pyseccomp
    finally:
        if had:
            os.environ["PATH"] = saved
        else:
            del os.environ["PATH"]
    return pyseccomp
