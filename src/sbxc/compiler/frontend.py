"""Reading policy files: builtin profiles from the package, user files only when they may be trusted.

A policy file decides what a sandboxed command may touch, so it is read only when no one
but the caller (or root) could have written it or any symlink on the way to it.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Optional

from ..layout import PACKAGE_DIR, builtin_policy_path

from .diagnostics import Diagnostic, diag
from .plan import Span
from .source import point
from .yamltree import MAX_BYTES, YMap, YSeq, decode_source, load_yaml


# ---------------------------------------------------------------- reading files

# The package's own files are read by path (``layout.PACKAGE_DIR``), not through
# ``importlib.resources``: that asks the module's loader, and the launcher's loader of the
# hot-path bundle (scripts/write-launcher) has no resource reader.

def builtin_names() -> list[str]:
    try:
        return sorted(n[:-5] for n in os.listdir(os.path.join(PACKAGE_DIR, "policies")) if n.endswith(".yaml"))
    except OSError:
        return []


def read_builtin(name: str) -> Optional[bytes]:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
        return None
    try:
        with open(builtin_policy_path(name), "rb") as f:
            return f.read()
    except OSError:
        return None


def open_regular(path: str, dir_fd=None, follow: bool = True):
    """(descriptor open for reading, stat) of a regular file, or (-1, stat) for anything
    else, without ever opening anything else for reading: opening a device runs its
    driver (a watchdog reboots the host, a serial port raises DTR) and opening a FIFO
    connects a reader. O_PATH opens the name only; the kind is read from what it names,
    and only a regular file is then opened, through /proc/self/fd (the same inode, so no
    rename in between can swap it). Raises OSError. Where there is no O_PATH (macOS), the
    kind is read by stat first and the open is O_NONBLOCK|O_NOCTTY (a rare race remains)."""
    import os
    import stat

    nofollow = 0 if follow else os.O_NOFOLLOW
    o_path = getattr(os, "O_PATH", 0)
    if o_path:
        pfd = os.open(path, o_path | nofollow | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            st = os.fstat(pfd)
            if not stat.S_ISREG(st.st_mode):
                return -1, st
            return os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_CLOEXEC), st
        finally:
            os.close(pfd)
    st = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow)
    if not stat.S_ISREG(st.st_mode):
        return -1, st
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | nofollow | os.O_CLOEXEC,
                 dir_fd=dir_fd)
    return fd, os.fstat(fd)


def read_file(path: str, diags: list[Diagnostic], span: Optional[Span] = None) -> Optional[bytes]:
    """Read at most MAX_BYTES + 1 bytes (so a huge or endless file costs nothing)."""
    import os

    try:
        fd, _st = open_regular(path)
    except OSError as e:
        diags.append(diag("SBX001", span or point(path, 0, 0), what=path, why=e.strerror or str(e)))
        return None
    if fd < 0:
        diags.append(diag("SBX001", span or point(path, 0, 0), what=path, why="not a regular file"))
        return None
    try:
        return _read_fd(fd, path, diags, span or point(path, 0, 0))
    except OSError as e:
        diags.append(diag("SBX001", span or point(path, 0, 0), what=path, why=e.strerror or str(e)))
        return None
    finally:
        os.close(fd)


def _read_fd(fd: int, path: str, diags: list[Diagnostic], at: Span) -> Optional[bytes]:
    import os

    chunks, total = [], 0
    try:
        while total <= MAX_BYTES:
            b = os.read(fd, min(1 << 16, MAX_BYTES + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
    except OSError as e:
        diags.append(diag("SBX001", at, what=path, why=e.strerror or str(e)))
        return None
    return b"".join(chunks)


# ---------------------------------------------------------------- whose file is it

def _owner_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _entry_problem(what: str, st, folder: str, dst, uid: int) -> str:
    """Why an entry (the policy file, or a symlink met on the way to it) with stat ``st``
    in ``folder`` with stat ``dst`` could have been written by someone other than the
    caller or root; "" when it could not.

    Only the caller and root may own the entry and its folder. Nobody else may write the
    entry, nor the folder (they could rename the entry away and put their own in its
    place), except in a sticky folder such as /tmp, where only an entry's owner can
    rename or delete it: there the entry must be the caller's, since the folder lets
    anyone create names the caller might look for.
    """
    import stat

    trusted = (uid, 0)
    if st.st_uid not in trusted:
        return f"{what} is owned by {_owner_name(st.st_uid)}"
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
        return f"{what} is writable by {'others' if st.st_mode & 0o002 else 'its group'} (mode {stat.S_IMODE(st.st_mode):04o})"
    if dst.st_uid not in trusted:
        return f"its folder {folder} is owned by {_owner_name(dst.st_uid)}"
    if dst.st_mode & 0o022:
        who = "others" if dst.st_mode & 0o002 else "its group"
        if not dst.st_mode & stat.S_ISVTX:
            return f"its folder {folder} is writable by {who} and not sticky (mode {stat.S_IMODE(dst.st_mode):04o})"
        if st.st_uid != uid:
            return (f"its folder {folder} is writable by {who} (sticky) and {what} is not yours "
                    f"but {_owner_name(st.st_uid)}'s")
    return ""


def _links_problem(path: str, uid: int) -> str:
    """Check every symlink met while resolving ``path`` like the file itself: a link
    someone else controls chooses which file the caller's run compiles."""
    import os

    from ..linkwalk import links_on_the_way

    links, _final = links_on_the_way(path)  # missing or a loop: opening it reports that
    for place, st, folder in links:
        try:
            dst = os.stat(folder)
        except OSError:
            return ""
        why = _entry_problem(f"the symlink {place}", st, folder, dst, uid)
        if why:
            return why
    return ""


def read_policy_file(path: str, diags: list[Diagnostic], span: Optional[Span] = None,
                     uid: Optional[int] = None) -> Optional[bytes]:
    """``read_file`` for a policy, which must be one only the caller (or root) could have
    written (SBX025), in the spirit of git's safe.directory.

    The folder is opened without following a link and the file is opened relative to it,
    and both are checked by ``fstat`` on what was opened: whatever is renamed on the way
    meanwhile, the bytes read come from a checked file in a checked folder.
    """
    import os
    import stat

    uid = os.geteuid() if uid is None else uid
    at = span or point(path, 0, 0)
    why = _links_problem(path, uid)
    if why:
        diags.append(_untrusted(path, why, at))
        return None
    real = os.path.realpath(path)
    why = _secret_place(real)
    if why:
        diags.append(_not_a_policy(path, real, why, at))
        return None
    folder, name = os.path.dirname(real), os.path.basename(real)
    try:
        # O_PATH needs no read permission on the folder; macOS has none, and reads it instead.
        dfd = os.open(folder, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        diags.append(diag("SBX001", at, what=path, why=e.strerror or str(e)))
        return None
    try:
        fd, st = open_regular(name, dir_fd=dfd, follow=False)
    except OSError as e:
        os.close(dfd)
        diags.append(diag("SBX001", at, what=path, why=e.strerror or str(e)))
        return None
    if fd < 0:
        os.close(dfd)
        diags.append(diag("SBX001", at, what=path, why="not a regular file"))
        return None
    try:
        dst = os.fstat(dfd)
        why = _entry_problem("the file", st, folder, dst, uid)
        if why:
            diags.append(_untrusted(path, why, at))
            return None
        why = _private_file(real, st, linked=real != os.path.abspath(path))
        if why:
            diags.append(_not_a_policy(path, real, why, at))
            return None
        return _read_fd(fd, path, diags, at)
    finally:
        os.close(fd)
        os.close(dfd)


def read_trusted(path: str, limit: int, uid: Optional[int] = None) -> tuple[Optional[bytes], str]:
    """A configuration file that sbxc reads to widen a policy (a toolchain's registries):
    at most ``limit`` bytes of it, under the rule policy files follow (``read_policy_file``):
    the file, its folder and every link on the way only the caller or root could have
    written. (None, "") when it is missing or no regular file; (None, why) when someone
    else could have written it, and then nothing of it is read."""
    import os

    uid = os.geteuid() if uid is None else uid
    why = _links_problem(path, uid)
    if why:
        return None, why
    real = os.path.realpath(path)
    folder, name = os.path.dirname(real), os.path.basename(real)
    try:
        dfd = os.open(folder, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None, ""
    fd = -1
    try:
        try:
            fd, st = open_regular(name, dir_fd=dfd, follow=False)
        except OSError:
            return None, ""
        if fd < 0:
            return None, ""
        why = _entry_problem("the file", st, folder, os.fstat(dfd), uid)
        if why:
            return None, why
        chunks, total = [], 0
        while total < limit:
            b = os.read(fd, min(1 << 16, limit - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
        return b"".join(chunks), ""
    except OSError:
        return None, ""
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(dfd)


# Kernel and runtime state: never a policy, and /proc/self/environ or a process's memory
# quoted in a YAML error would print secrets.
_STATE_FOLDERS = ("/proc", "/sys", "/dev", "/run")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _secret_place(real: str) -> str:
    """Why the real path of a policy file is a place for secrets, not policies ("" when it
    is not), judged before a byte is read: diagnostics quote policy lines, so a link named
    sandbox.policy.yaml that leads to a credential would print it."""
    for folder in _STATE_FOLDERS:
        if _under(real, folder):
            return f"it lies under {folder}, which holds kernel and process state"
    for masked in default_masks():
        if _under(real, masked):
            return f"it lies under {masked}, which builtin:default hides from every command as a credential"
    return ""


def _private_file(real: str, st, linked: bool) -> str:
    """Why a policy file that passed the ownership checks may still be a secret ("" when
    not). A policy holds nothing private, so a file others may not read is suspect where
    someone other than the person may have chosen it: reached through a symlink or a hard
    link (its name was put there; the file is some other file), or kept under /etc, where
    root's secrets (shadow, sudoers, private keys) are root-owned like every policy there."""
    if st.st_mode & 0o004:
        return ""
    if _under(real, "/etc"):
        return f"it lies under /etc and is not readable by everyone (mode {st.st_mode & 0o7777:04o}), as secrets are"
    if linked:
        return (f"it is reached through a symlink and is not readable by everyone (mode {st.st_mode & 0o7777:04o}), "
                "as secrets are")
    if st.st_nlink > 1:
        return (f"it has {st.st_nlink} names (hard links) and is not readable by everyone "
                f"(mode {st.st_mode & 0o7777:04o}), as secrets are")
    return ""


def default_masks() -> list:
    """The credential paths builtin:default masks, with ``~`` as this process's home: the
    one list of them (policies/default.yaml), read without Lark (plain words only)."""
    import os

    home = os.environ.get("HOME") or os.path.expanduser("~")
    out = []
    tree = _default_tree()
    entry = tree.get("filesystem") if isinstance(tree, YMap) else None
    for item in (entry[1].items if entry is not None and isinstance(entry[1], YSeq) else ()):
        words = str(getattr(item, "value", "")).split()
        if not words or words[0] not in ("mask", "mask?"):
            continue
        for w in words[1:]:
            if w.startswith("~/") and home.startswith("/"):
                out.append(os.path.normpath(home.rstrip("/") + w[1:]))
            elif w.startswith("/") and "$" not in w and "{" not in w:
                out.append(w)
    return out


@functools.lru_cache(maxsize=1)
def _default_tree():
    data = read_builtin("default") or b""
    diags: list[Diagnostic] = []
    src, usable = decode_source("builtin:default", data, diags)
    return load_yaml(src, diags) if src is not None and usable else None


def _not_a_policy(path: str, real: str, why: str, at: Span) -> Diagnostic:
    shown = path if real == path else f"{path} (which resolves to {real})"
    return diag("SBX025", at, path=shown, why=why + "; sbxc did not read it",
                hint="point --policy (or the link) at the policy file itself, kept in a folder of yours; "
                     "a policy holds nothing secret, so it may be readable by everyone (chmod o+r)")


def _untrusted(path: str, why: str, at: Span) -> Diagnostic:
    return diag("SBX025", at, path=path, why=why,
                hint="another user could have written it; move it to a folder of yours, fix its owner or "
                     "mode (chmod go-w), or pass --policy with a file you own (--policy builtin:default "
                     "for the builtin profile)")
