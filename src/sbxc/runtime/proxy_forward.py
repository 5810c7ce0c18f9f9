"""The forwarder inside a bwrap sandbox with host rules: listens on a loopback TCP port of
the sandbox's own network namespace and relays each connection to the proxy's Unix socket
(bound into the sandbox), then execs the command.

    python -I -S proxy_forward.py SOCKET PORT CMD [ARGS...]

Run by bwrap as the sandbox's first program, under the same seccomp filter and mounts as
the command: it can do nothing the command could not. It listens before the command
starts (a client's first connection never finds the port closed), then forks: the child
serves; this process execs the command, so the command keeps bwrap's child pid, its exit
status and its signals. The server child ends with the sandbox (bwrap's PID namespace is
torn down when the command ends). Builtin modules only (``_socket``, ``_thread``, not
``socket`` and ``threading``, which pull in enum and more), no sbxc import, started with
``-I -S`` (no site, no user paths): it adds a few milliseconds to the start.
"""
import os
import sys

import _signal
import _socket
import _thread

_BUF = 1 << 18


def _pump(src, dst) -> None:
    buf = bytearray(_BUF)
    view = memoryview(buf)
    try:
        while True:
            n = src.recv_into(buf)
            if not n:
                break
            dst.sendall(view[:n])
    except OSError:
        pass
    try:
        dst.shutdown(_socket.SHUT_WR)
    except OSError:
        pass


def _pump_and_release(src, dst, lock) -> None:
    try:
        _pump(src, dst)
    finally:
        lock.release()


def _serve_one(conn, path: str) -> None:
    up = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError:
        conn.close()
        up.close()
        return
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(_pump_and_release, (up, conn, done))
    _pump(conn, up)
    done.acquire()  # the other direction has ended too
    conn.close()
    up.close()


def _serve(lst, path: str) -> None:
    while True:
        try:
            fd, _ = lst._accept()
        except InterruptedError:
            continue
        except OSError:
            return
        conn = _socket.socket(fileno=fd)
        conn.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        _thread.start_new_thread(_serve_one, (conn, path))


def main(argv) -> int:
    if len(argv) < 4:
        sys.stderr.write("sbxc: the network forwarder was started without a command; recompile the plan\n")
        return 125
    path, port, cmd = argv[1], int(argv[2]), argv[3:]
    lst = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    lst.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    try:
        lst.bind(("127.0.0.1", port))
        lst.listen(128)
    except OSError as e:
        sys.stderr.write(f"sbxc: the network forwarder could not listen on 127.0.0.1:{port} ({e.strerror}); "
                         "report this\n")
        return 125
    pid = os.fork()
    if pid == 0:
        try:
            # A Ctrl-C or hang-up for the command's group must not end the relay the
            # command may still use while it cleans up.
            for sig in (_signal.SIGINT, _signal.SIGQUIT, _signal.SIGHUP, _signal.SIGTERM):
                _signal.signal(sig, _signal.SIG_IGN)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            _serve(lst, path)
        finally:
            os._exit(0)
    lst.close()
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        sys.stderr.write(f"bwrap: execvp {cmd[0]}: {e.strerror}\n")
        return 127 if isinstance(e, FileNotFoundError) else 126
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv))
