"""The warm pool's keeper: a background process per project pool that watches the project
with inotify, so that ``session start`` can learn in one round trip, whatever the
project's size, that a ready copy is still a copy of the project as it is now.

The order that makes the answer sound: the keeper installs its watches on every entry of
the project first (top down: each folder's watch is in place before the folder is
listed, so a name swapped while the walk goes on is an event at a folder already
watched), and only then verifies the ready copies it finds with the full check
(``session_copy.project_unchanged``) or makes new ones. A change made after the watches
were installed is an event; one made before is in the copy or fails the check. A copy is
*vouched* for while no event at all has arrived since the watches were installed.

What an answer rests on (kernel facts):

- fsnotify queues an event from inside the system call that made the change (write,
  truncate, fallocate, chmod, chown, utimes, setxattr, link, unlink, rename, mkdir...),
  before it returns; the keeper reads its queue dry after the question arrived, so every
  change whose call returned before the question is seen.
- A folder's watch reports its entries' events only for changes made through a name in
  that folder. A file with a second name elsewhere (a hard link, possibly made after the
  copy: ``link`` reports to the new name's folder and to the file's own watchers only)
  is written unseen by folder watches, so every entry's own inode is watched too.
- A write through a shared writable mapping (``mmap``) makes no event at all; the mapping
  holds the open file, so its release (``munmap``, exit) reports ``IN_CLOSE_WRITE``.
  docs/sessions.md says what that leaves.
- Mounts make no inotify event: the keeper polls ``/proc/self/mountinfo`` (which reports
  any change of the mount table) and counts a mount at or under the project as a change;
  each answer also checks that the project's path still leads to the folder watched, and
  that the asker lives in the keeper's mount namespace.
- Watches on a network or FUSE file system miss changes made elsewhere; the keeper
  watches only projects wholly on one local file system (``LOCAL_FS``), with no mount
  inside it.
- A full event queue reports ``IN_Q_OVERFLOW``, a removed watch ``IN_IGNORED``: both are
  events, so both mean "changed".

Any event, error or doubt makes the keeper answer ``dirty`` (the start then does the full
check itself, or copies afresh); after a quiet moment it installs its watches again and
verifies its copies with the full check, as at its start. It leaves after ``IDLE_S``
without a question, when its pool folder is removed, or when told to by ``stop_keepers``.
It gives up (and says why in ``pool/<key>/keeper``, which ``session list`` shows) when the
project cannot be watched: then the pool works as without it, every start doing the full
check.

Talking to it (``session_ask``, the start's side): a Unix stream socket
``pool/<key>/keeper.sock`` in the 0700 pool folder of the sessions store (reached through
the store's checked descriptor, never through a path that could be swapped), mode 0700
(owner only); each side checks that the other runs as its own uid (``SO_PEERCRED``). A question is ``ask <mount namespace> <pool size>``; the answer is
``clean NAME...`` (the ready copies vouched for) or ``dirty``. The asker that took a copy
says ``took`` or just closes; either way the keeper counts its copies again and refills.
"""
from __future__ import annotations

import os

from .session_ask import _SO_PEERCRED, _SOL_SOCKET, ANSWER_TIMEOUT_S, SOCK, _little, _mnt_ns, write_note

IDLE_S = 600.0
QUIET_S = 1.0
TICK_S = 1.0
LOCAL_FS = ("ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs")

_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
# modify, attrib, close_write, moved_from, moved_to, create, delete, delete_self, move_self
_CHANGES = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000


class GiveUp(Exception):
    """The project cannot be watched soundly: ``args[0]`` says why, for ``session list``."""


class Changed(Exception):
    """The project changed while its watches were being installed."""


# ------------------------------------------------------------------ watching

class Watch:
    """inotify watches on every entry of ``project`` (see the module text); ``changed()``
    reads the queue dry and says whether anything at all arrived."""

    def __init__(self, project: str):
        import ctypes

        self.project = project
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self.fd < 0:
            e = ctypes.get_errno()
            raise GiveUp("no inotify instance left (fs.inotify.max_user_instances)" if e == 24
                         else f"inotify_init1 failed ({os.strerror(e)})")
        try:
            self._install()
        except BaseException:
            os.close(self.fd)
            raise

    def _limit(self) -> int:
        try:
            with open("/proc/sys/fs/inotify/max_user_watches", "rb") as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return 8192

    def _add(self, path: str, mask: int) -> None:
        import ctypes

        if self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask) < 0:
            e = ctypes.get_errno()
            if e == 28:  # ENOSPC: the user's watches are used up
                raise GiveUp(f"the inotify watch limit was reached (fs.inotify.max_user_watches = {self.max})")
            if e in (2, 20, 40):  # gone, or no longer a folder / now a link: changed meanwhile
                raise Changed()
            raise GiveUp(f"{path} cannot be watched ({os.strerror(e)})")
        self.count += 1
        if self.count > self.budget:
            raise GiveUp(f"the project has more than {self.budget} entries, half of the inotify watch limit "
                         f"(fs.inotify.max_user_watches = {self.max})")

    def _install(self) -> None:
        import stat as st_

        from .session_copy import _mount_of

        self.max = self._limit()
        self.budget = max(1, self.max // 2)  # the rest stays for the person's editors and tools
        self.count = 0
        kind = _mount_of(self.project)[1]
        if kind not in LOCAL_FS:
            raise GiveUp(f"the project lies on {kind or 'an unknown'} file system, where changes made elsewhere "
                         "would not be seen")
        # The top through a descriptor: the watch is on exactly the folder whose identity
        # each answer compares with what the project's path leads to then.
        top = os.open(self.project, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            st = os.fstat(top)
            self.top = (st.st_dev, st.st_ino)
            self._add(f"/proc/self/fd/{top}", _CHANGES | _IN_ONLYDIR)
        finally:
            os.close(top)
        todo = [self.project]
        while todo:
            path = todo.pop()
            try:
                it = os.scandir(path)
            except (FileNotFoundError, NotADirectoryError):
                raise Changed() from None
            except OSError as e:
                raise GiveUp(f"{path} cannot be listed ({e.strerror})") from None
            with it:
                for e in it:
                    child = path + "/" + e.name
                    try:
                        s = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        raise Changed() from None
                    if s.st_dev != self.top[0]:
                        raise GiveUp(f"{child} is on another file system (a mount inside the project)")
                    if st_.S_ISDIR(s.st_mode):
                        # Watched before it is listed: a name it gains or loses from now on
                        # is an event, whatever the walk is doing elsewhere.
                        self._add(child, _CHANGES | _IN_ONLYDIR | _IN_DONT_FOLLOW)
                        todo.append(child)
                    else:
                        self._add(child, _CHANGES | _IN_DONT_FOLLOW)
            if self.changed():
                raise Changed()

    def mounted_inside(self) -> bool:
        """Whether anything is mounted at or under the project (in this mount namespace)."""
        inside = self.project.rstrip("/") + "/"
        try:
            with open("/proc/self/mountinfo", "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return True
        for line in lines:
            fields = line.split(" - ")[0].split()
            mp = fields[4].replace("\\040", " ") if len(fields) > 4 else ""
            if mp == self.project or mp.startswith(inside):
                return True
        return False

    def changed(self) -> bool:
        got = False
        while True:
            try:
                if not os.read(self.fd, 1 << 16):
                    return got
                got = True
            except BlockingIOError:
                return got

    def top_moved(self) -> bool:
        try:
            st = os.stat(self.project)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self.top

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ------------------------------------------------------------------ keeping

class Keeper:
    """One keeper's state (see the module text). The pool's own operations come from
    ``session_start``: ``make(name)`` makes the ready copy ``e-<name>`` (run in a child
    process), ``verify(name)`` is the full check of a ready copy (False: it was removed),
    ``entries()`` the ready copies there now."""

    def __init__(self, key_fd: int, busy_fd: int, project: str, size: int, make, verify, entries):
        self.key_fd, self.project, self.size = key_fd, project, size
        self.make, self.verify, self.entries = make, verify, entries
        self.watch = None
        self.mounts = None
        self.listener = None
        self.vouched = set()
        self.dirty = True
        self.last_event = 0.0
        self.child = None  # (pid, pidfd, entry name, no event yet when it started)
        self.conns = {}
        self.quit = False
        self.busy_fd = busy_fd  # flock is per open file: the refill's own, held until armed
        self.mnt_ns = _mnt_ns()

    def busy(self, on: bool) -> None:
        import fcntl

        fcntl.flock(self.busy_fd, fcntl.LOCK_EX if on else fcntl.LOCK_UN)

    def _unwatch(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        if self.mounts is not None:
            self.mounts.close()
            self.mounts = None

    def arm(self) -> None:
        """Watches first, then the full check of every ready copy found (see the module
        text); then the socket, so no question waits on a keeper that cannot answer yet."""
        import time

        self._unwatch()
        self.vouched = set()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            _unlink(self.key_fd)
        # Opened before the walk: a mount made while it runs is a change of the table.
        self.mounts = open("/proc/self/mountinfo", "rb")
        try:
            self.watch = Watch(self.project)
        except Changed:
            self.dirty, self.last_event = True, time.monotonic()
            return
        if self.watch.mounted_inside():
            raise GiveUp("something is mounted inside the project")
        self.dirty = False
        for name in self.entries():
            if self.verify(name):
                self.vouched.add(name)
        self.note_changes()
        write_note(self.key_fd, state="watching", pid=os.getpid(), watches=self.watch.count)
        self.listener = listen(self.key_fd)

    def note_changes(self) -> None:
        import time

        if self.watch is None or self.watch.changed():
            self.vouched = set()
            self.dirty, self.last_event = True, time.monotonic()

    def clean_now(self) -> bool:
        """The answer's own checks, on top of every event queued so far."""
        self.note_changes()
        if not self.dirty and self.watch.top_moved():
            self.vouched = set()
            self.dirty = True
        return not self.dirty

    def answer(self, conn, line: bytes) -> None:
        words = line.split()
        if words[:1] == [b"quit"]:
            self.quit = True
            conn.sendall(b"bye\n")
            return
        if len(words) != 3 or words[0] != b"ask":
            return
        if words[2].isdigit():
            self.size = min(int(words[2]), 16)
        ok = self.clean_now() and words[1] == self.mnt_ns
        here = set(self.entries()) if ok else set()
        names = sorted(n for n in self.vouched if n in here)
        conn.sendall((("clean " + " ".join(names)) if ok else "dirty").encode() + b"\n")

    def start_copy(self) -> None:
        from .sessions import new_id

        name = new_id()
        self.busy(True)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for c in list(self.conns) + [self.listener]:
                    if c is not None:
                        c.close()
                self.make(name)
                code = 0
            finally:
                os._exit(code)
        self.child = (pid, os.pidfd_open(pid), "e-" + name, not self.dirty)

    def child_done(self) -> None:
        pid, pfd, name, clean = self.child
        os.close(pfd)
        _, status = os.waitpid(pid, 0)
        self.child = None
        self.busy(False)
        self.note_changes()
        # Made wholly after the watches were in place, with no event since: vouched.
        if status == 0 and clean and not self.dirty:
            self.vouched.add(name)

    def run(self) -> None:
        import select
        import time

        idle_until = time.monotonic() + IDLE_S
        while not self.quit:
            now = time.monotonic()
            if now >= idle_until and self.child is None:
                return
            try:
                if os.fstat(self.key_fd).st_nlink == 0:
                    return  # the pool folder was removed: nothing left to keep
            except OSError:
                return
            if self.dirty and self.child is None and now - self.last_event >= QUIET_S:
                self.busy(True)
                try:
                    self.arm()
                finally:
                    self.busy(False)
                continue
            if self.child is None and not self.dirty and 0 < self.size and len(self.entries()) < self.size:
                self.start_copy()
            fds = {}
            if self.listener is not None:
                fds[self.listener.fileno()] = "listen"
            if self.watch is not None:
                fds[self.watch.fd] = "events"
            if self.mounts is not None:
                fds[self.mounts.fileno()] = "mounts"
            if self.child is not None:
                fds[self.child[1]] = "child"
            for c in self.conns:
                fds[c.fileno()] = c
            poll = select.poll()
            for fd, what in fds.items():
                poll.register(fd, select.POLLPRI if what == "mounts" else select.POLLIN)
            for fd, ev in poll.poll((QUIET_S / 2 if self.dirty else TICK_S) * 1000):
                what = fds[fd]
                if what == "events":
                    self.note_changes()
                elif what == "mounts":
                    # The mount table changed somewhere: a change of the project only when a
                    # mount now sits at or under it (each answer checks the path as well).
                    self.mounts.close()
                    self.mounts = open("/proc/self/mountinfo", "rb")
                    if self.watch is None or self.watch.mounted_inside():
                        self._unwatch()
                        self.note_changes()
                elif what == "child":
                    self.child_done()
                elif what == "listen":
                    self.accept()
                    idle_until = time.monotonic() + IDLE_S
                else:
                    self.read_from(what)

    def accept(self) -> None:
        import _socket

        try:
            fd, _ = self.listener._accept()
        except OSError:
            return
        c = _socket.socket(fileno=fd)
        try:
            cred = c.getsockopt(_SOL_SOCKET, _SO_PEERCRED, 12)
            if int.from_bytes(cred[4:8], "little" if _little() else "big") != os.getuid():
                c.close()
                return
        except OSError:
            c.close()
            return
        c.settimeout(ANSWER_TIMEOUT_S)
        self.conns[c] = b""

    def read_from(self, c) -> None:
        try:
            data = c.recv(4096)
        except OSError:
            data = b""
        if not data:
            del self.conns[c]
            c.close()
            return  # a start that may have taken a copy is done: the loop counts again
        buf = self.conns[c] + data
        while b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            try:
                self.answer(c, line)
            except OSError:
                pass
        self.conns[c] = buf[-4096:]

    def close(self) -> None:
        import signal

        if self.child is not None:
            os.kill(self.child[0], signal.SIGKILL)
            self.child_done()
        for c in self.conns:
            c.close()
        self.conns = {}
        if self.listener is not None:
            self.listener.close()
            _unlink(self.key_fd)
        self._unwatch()


def _unlink(key_fd: int) -> None:
    try:
        os.unlink(SOCK, dir_fd=key_fd)
    except FileNotFoundError:
        pass


def listen(key_fd: int):
    """The keeper's socket, owner only (0700: a 0077 umask around ``bind``), in the 0700 pool folder."""
    import _socket

    _unlink(key_fd)
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    old = os.umask(0o077)
    try:
        s.bind(f"/proc/self/fd/{key_fd}/{SOCK}")
    finally:
        os.umask(old)
    s.listen(16)
    return s
