"""The forwarder inside a bwrap sandbox with host rules: listens on a loopback TCP port of
the sandbox's own network namespace and relays each connection to the proxy's Unix socket
(bound into the sandbox), then execs the command. It hands each accepted socket itself
to the proxy (SCM_RIGHTS) and keeps none: the traffic never passes through it.

    python -I -S proxy_forward.py SOCKET PORT CMD [ARGS...]

Run by bwrap as the sandbox's first program, under the same seccomp filter and mounts as
the command: it can do nothing the command could not. It listens before the command
starts (a client's first connection never finds the port closed), then forks: the child
serves; this process execs the command, so the command keeps bwrap's child pid, its exit
status and its signals. The server child ends with the sandbox (bwrap's PID namespace is
torn down when the command ends). Builtin modules only (``_socket``, not ``socket``, which
pulls in enum and more), no sbxc import, started with
``-I -S`` (no site, no user paths): it adds a few milliseconds to the start.
"""
import os
import sys

import _signal
import _socket

def _hand_over(fd: int, path: str) -> None:
    """Pass the accepted socket to the proxy (one 0 byte with SCM_RIGHTS) and let go of
    it: the proxy relays from it directly, so no byte of the traffic passes through here."""
    up = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        up.connect(path)
        up.sendmsg([b"\x00"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fd.to_bytes(4, sys.byteorder))])
    except OSError:
        pass  # the client sees its connection closed
    finally:
        up.close()
        os.close(fd)


def _serve(lst, path: str) -> None:
    while True:
        try:
            fd, _ = lst._accept()
        except InterruptedError:
            continue
        except OSError:
            return
        _hand_over(fd, path)


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
