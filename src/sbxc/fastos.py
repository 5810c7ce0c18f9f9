"""``os`` for the modules on ``sbxc exec``'s hot path, without importing ``os``.

Importing ``os`` costs about a millisecond of every run here, most of it
``_collections_abc`` (two dozen abstract classes, built for ``os.environ``'s mapping type)
and ``posixpath``. The hot path needs none of that: its calls are the ``posix`` module's
own, plus a handful of path functions and the environment as a dict. So::

    from ..fastos import os

gives the real ``os`` whenever it was imported already (any process that is not a bare
``sbxc exec``: the other commands, the tests, a compile on a plan-cache miss), and
otherwise a module made of ``posix``'s functions and constants, ``environ`` (the
environment sbxc was started with, decoded as ``os.environ`` decodes it), ``fsencode``,
``fsdecode``, ``devnull`` and ``path`` (below). Nothing on the hot path writes to the
environment; a changed ``environ`` would not reach ``putenv``.

``path`` has what the hot path uses, with ``posixpath``'s results for every input
(tests/test_fastos.py compares them over generated paths and folder trees with symlinks,
loops included): ``join``, ``dirname``, ``basename``, ``normpath``, ``abspath``,
``realpath`` (not strict: a missing tail stays as written, a loop stops resolving where it
closes), ``exists``, ``lexists``, ``isfile``, ``isdir``, ``islink``. Only for ``str``
paths: every caller on the hot path passes text.
"""
import sys

__all__ = ["os"]


def _path_module(posix):
    mod = type(sys)("sbxc.fastos.path")

    def join(a, *p):
        path = a
        for b in p:
            if b.startswith("/"):
                path = b
            elif not path or path.endswith("/"):
                path += b
            else:
                path += "/" + b
        return path

    def dirname(p):
        i = p.rfind("/") + 1
        head = p[:i]
        if head and head != "/" * len(head):
            head = head.rstrip("/")
        return head

    def basename(p):
        return p[p.rfind("/") + 1:]

    def split(p):
        i = p.rfind("/") + 1
        head, tail = p[:i], p[i:]
        if head and head != "/" * len(head):
            head = head.rstrip("/")
        return head, tail

    def normpath(path):
        if not path:
            return "."
        # POSIX keeps exactly two leading slashes; one, or three and more, become one.
        initial = 2 if path.startswith("//") and not path.startswith("///") else (1 if path.startswith("/") else 0)
        parts = []
        for comp in path.split("/"):
            if comp in ("", "."):
                continue
            if comp != ".." or (not initial and not parts) or (parts and parts[-1] == ".."):
                parts.append(comp)
            elif parts:
                parts.pop()
        out = "/" * initial + "/".join(parts)
        return out or "."

    def abspath(path):
        if not path.startswith("/"):
            path = join(posix.getcwd(), path)
        return normpath(path)

    def _lstat_mode(path):
        try:
            return posix.lstat(path).st_mode
        except (OSError, ValueError):
            return None

    def _stat_mode(path):
        try:
            return posix.stat(path).st_mode
        except (OSError, ValueError):
            return None

    def exists(path):
        return _stat_mode(path) is not None

    def lexists(path):
        return _lstat_mode(path) is not None

    def isfile(path):
        m = _stat_mode(path)
        return m is not None and m & 0o170000 == 0o100000

    def isdir(path):
        m = _stat_mode(path)
        return m is not None and m & 0o170000 == 0o040000

    def islink(path):
        m = _lstat_mode(path)
        return m is not None and m & 0o170000 == 0o120000

    def realpath(filename):
        # Component by component from the left. A link's target is resolved the same way
        # (relative to the folder it is in); each link's answer is remembered, and a link
        # met again while its own answer is still being worked out is a loop: the result
        # is then the path so far with the rest appended unresolved, as posixpath gives.
        seen = {}

        def walk(resolved, rest):
            if rest.startswith("/"):
                rest = rest[1:]
                resolved = "/"
            while rest:
                name, _, rest = rest.partition("/")
                if not name or name == ".":
                    continue
                if name == "..":
                    if resolved:
                        resolved, name = split(resolved)
                        if name == "..":
                            resolved = join(resolved, "..", "..")
                    else:
                        resolved = ".."
                    continue
                new = join(resolved, name)
                try:
                    m = posix.lstat(new).st_mode
                except OSError:  # a NUL byte (ValueError) goes on to the caller, as in posixpath
                    m = None
                if m is None or m & 0o170000 != 0o120000:
                    resolved = new
                    continue
                if new in seen:
                    known = seen[new]
                    if known is not None:
                        resolved = known
                        continue
                    return join(new, rest), False  # a loop
                seen[new] = None
                try:
                    target = posix.readlink(new)
                except OSError:  # no longer a link (raced): taken as what it is now
                    del seen[new]
                    resolved = new
                    continue
                resolved, ok = walk(resolved, target)
                if not ok:
                    return join(resolved, rest), False
                seen[new] = resolved
            return resolved, True

        path, _ok = walk("", filename)
        return abspath(path)

    for f in (join, dirname, basename, split, normpath, abspath, exists, lexists, isfile, isdir, islink, realpath):
        setattr(mod, f.__name__, f)
    mod.sep = "/"
    return mod


def _lean_os():
    import posix

    mod = type(sys)("sbxc.fastos.os")
    mod.__dict__.update(posix.__dict__)
    mod.__name__, mod.__doc__, mod.__spec__, mod.__loader__ = "sbxc.fastos.os", None, None, None
    encoding = sys.getfilesystemencoding()

    def fsencode(name):
        return name.encode(encoding, "surrogateescape") if isinstance(name, str) else name

    def fsdecode(name):
        return name.decode(encoding, "surrogateescape") if isinstance(name, bytes) else name

    mod.environ = {fsdecode(k): fsdecode(v) for k, v in posix.environ.items()}
    mod.fsencode = fsencode
    mod.fsdecode = fsdecode
    mod.devnull = "/dev/null"
    mod.sep = "/"
    mod.path = _path_module(posix)
    return mod


os = sys.modules.get("os") or _lean_os()
