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
torn down when the command ends). Built-in modules only, compiled into the interpreter
(``posix``, ``_socket``, ``_signal``, ``sys``): nothing is read from disk beyond what the
interpreter's own start reads. ``os`` alone (with ``stat``, ``posixpath`` and
``_collections_abc``) cost ~1.6 ms of each start here, ``socket`` pulls in ``enum`` and
more. No sbxc import; started with ``-I -S`` (no site, no user paths). What remains is the
interpreter's start (~7-10 ms inside the sandbox), which every run with host rules pays
before the command starts.
"""
import sys

import _signal
import _socket
import posix

_FS = sys.getfilesystemencoding()


def _execvp(cmd) -> None:
    """``os.execvp`` without ``os``: the same search of ``PATH`` (the default
    ``/bin:/usr/bin`` when unset) and the same error kept: the first that is not "no such
    file", else the last."""
    name = cmd[0]
    if "/" in name:
        posix.execv(name, cmd)
    path = posix.environ.get(b"PATH")
    dirs = (path.decode(_FS, "surrogateescape") if path is not None else "/bin:/usr/bin").split(":")
    last = saved = None
    for folder in dirs:
        try:
            posix.execv(folder + "/" + name if folder else name, cmd)
        except (FileNotFoundError, NotADirectoryError) as e:
            last = e
        except OSError as e:
            last = e
            if saved is None:
                saved = e
    raise saved if saved is not None else (last or FileNotFoundError(2, "No such file or directory"))

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
        posix.close(fd)


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
    pid = posix.fork()
    if pid == 0:
        try:
            # A Ctrl-C or hang-up for the command's group must not end the relay the
            # command may still use while it cleans up.
            for sig in (_signal.SIGINT, _signal.SIGQUIT, _signal.SIGHUP, _signal.SIGTERM):
                _signal.signal(sig, _signal.SIG_IGN)
            devnull = posix.open("/dev/null", posix.O_RDWR)
            for fd in (0, 1, 2):
                posix.dup2(devnull, fd)
            _serve(lst, path)
        finally:
            posix._exit(0)
    lst.close()
    try:
        _execvp(cmd)
    except OSError as e:
        sys.stderr.write(f"bwrap: execvp {cmd[0]}: {e.strerror}\n")
        return 127 if isinstance(e, FileNotFoundError) else 126
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv))
