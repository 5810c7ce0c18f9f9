"""Writing a file the person named on the command line (``compile -o``, ``export -o``,
a bundle's files): all of it or nothing, and never through or over something that is not a
regular file."""
from __future__ import annotations

import os
import stat


def write_file(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path``: to a fresh temporary name in the same folder, then
    renamed over it, so a reader sees the old file or the whole new one. OSError with the
    reason when ``path`` is a link, a folder, a device, a FIFO or a socket (a rename would
    replace it: ``-o /dev/null`` as root would leave a regular file there for everyone), or
    when writing fails; the temporary name is gone either way."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = ("a symbolic link" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                else "a device, FIFO or socket")
        raise OSError(0, f"it is {kind}, not a regular file; name a file to write (or - for standard output)")
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
