"""The start's side of the warm pool's keeper (``session_keeper``): one question over its
socket, what it last said of itself (for ``session list`` and ``doctor``), and telling
keepers to leave. Loaded on every pool start: ``_socket`` only (``socket`` would bring
``enum`` and ``selectors``), nothing of the keeper itself.
"""
from __future__ import annotations

import os

SOCK = "keeper.sock"
NOTE = "keeper"
ANSWER_TIMEOUT_S = 0.1
_SO_PEERCRED = 17
_SOL_SOCKET = 1


def _mnt_ns() -> bytes:
    try:
        return os.readlink("/proc/self/ns/mnt").encode()
    except OSError:
        return b"?"


def ask(key_fd: int, size: int):
    """(connection, vouched names) from the keeper of the pool folder ``key_fd``, or
    (None, None) when there is none, it is not ours, or it does not answer in time."""
    import _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        s.settimeout(ANSWER_TIMEOUT_S)
        # Through the checked descriptor: the path stays short (sun_path holds 108 bytes)
        # and no folder on the way can be swapped for a link.
        s.connect(f"/proc/self/fd/{key_fd}/{SOCK}")
        cred = s.getsockopt(_SOL_SOCKET, _SO_PEERCRED, 12)
        if int.from_bytes(cred[4:8], "little" if _little() else "big") != os.getuid():
            s.close()
            return None, None
        s.sendall(b"ask " + _mnt_ns() + b" " + str(int(size)).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n") and len(data) < 1 << 16:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        words = data.decode("ascii", "replace").split()
        if not words or words[0] not in ("clean", "dirty") or not data.endswith(b"\n"):
            s.close()
            return None, None
        return s, set(words[1:]) if words[0] == "clean" else set()
    except OSError:
        s.close()
        return None, None


def _little() -> bool:
    import sys

    return sys.byteorder == "little"


def done(conn, took: bool) -> None:
    if conn is None:
        return
    try:
        if took:
            conn.sendall(b"took\n")
    except OSError:
        pass
    conn.close()


def note(key_fd: int) -> dict:
    """What the keeper of ``key_fd`` last said of itself (``state``: watching, gave up,
    none; ``why``), ``state=none`` when no keeper holds the pool now."""
    from .sessions import try_lock

    got = _read_note(key_fd)
    try:
        fd = os.open("refill.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=key_fd)
    except OSError:
        fd = -1
    try:
        alive = fd >= 0 and not try_lock(fd)
    finally:
        if fd >= 0:
            os.close(fd)
    if got.get("state") == "gave up":
        return got
    if not alive:
        return {"state": "none"}
    return got or {"state": "starting"}


def _read_note(key_fd: int) -> dict:
    try:
        fd = os.open(NOTE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=key_fd)
    except OSError:
        return {}
    try:
        data = os.read(fd, 1 << 14).decode("utf-8", "replace")
    finally:
        os.close(fd)
    return dict(line.partition("=")[::2] for line in data.splitlines() if "=" in line)


def write_note(key_fd: int, **fields) -> None:
    """The keeper's note, replaced whole (temporary name, then rename)."""
    tmp = f".note-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=key_fd)
    try:
        os.write(fd, "".join(f"{k}={str(v).replace(chr(10), ' ')}\n" for k, v in sorted(fields.items())).encode())
    finally:
        os.close(fd)
    os.rename(tmp, NOTE, src_dir_fd=key_fd, dst_dir_fd=key_fd)


def stop_keepers(store_fd: int, wait_s: float = 30.0) -> None:
    """Tell every keeper of the store to leave, and wait until each has (its refill lock
    is free): for tests and benchmarks that remove the store afterwards."""
    import _socket
    import time

    from .sessions import try_lock

    try:
        pfd = os.open("pool", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=store_fd)
    except FileNotFoundError:
        return
    try:
        for key in os.listdir(pfd):
            try:
                kfd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            except OSError:
                continue
            try:
                s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
                try:
                    s.settimeout(2)
                    s.connect(f"/proc/self/fd/{kfd}/{SOCK}")
                    s.sendall(b"quit\n")
                    s.recv(16)
                except OSError:
                    pass
                finally:
                    s.close()
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline:
                    try:
                        lfd = os.open("refill.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=kfd)
                    except OSError:
                        break
                    try:
                        if try_lock(lfd):
                            break
                    finally:
                        os.close(lfd)
                    time.sleep(0.05)
            finally:
                os.close(kfd)
    finally:
        os.close(pfd)
