"""Per-run folders: made fresh for one run, locked while it lasts, reaped once a run that
was killed left them behind. Landlock's stand-ins for ``tmpfs`` rules
(``sbxc-run-<16 hex>``, in the rule's folder or /tmp) and the throwaway cache roots
(``sbxc-throwaway-<uid>-<16 hex>``, in /var/tmp or /tmp) are both such folders, and both
are reaped by ``reap``.

A folder is held by an flock on its descriptor for as long as its run lasts; the lock
dies with the process, however it ends. One that is unlocked and older than
``STALE_AFTER`` was left by a run that was killed before its clean-up. The age rule
covers the few microseconds between a folder's mkdir and its lock.

Hot path (only with per-run folders): ``os`` and ``fcntl``; ``time`` when reaping.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)

from ..layout import RUN_DIR_PREFIX
from .errors import Refusal

STALE_AFTER = 60.0
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def reap(base_fd: int, prefix: str, uid: int, *, now: float | None = None, name_len: int = 0,
         remove: bool = True, runc: str = "") -> tuple[list, list]:
    """This user's folders in ``base_fd`` whose names start with ``prefix`` (and are
    ``name_len`` long, when given), that no run holds and that are older than
    STALE_AFTER: ``(names, errors)``. With ``remove`` each is deleted while its lock is
    held (a run starting meanwhile makes a new name, and no second reaper takes it);
    ``errors`` holds an OSError per folder that could not be removed entirely. Without,
    they are only listed. Entries that are links, files or someone else's are never
    touched. ``runc`` (the path of the system's runc, found by the caller): the folders are
    OCI bundles in a folder no sandbox can write (the plans folder's): a container left in
    one is deleted first (``_end_containers``). Never for a folder a sandboxed command may
    have written (Landlock's stand-ins, /tmp): runc would act on a state file the command
    planted."""
    import fcntl
    import time

    now = time.time() if now is None else now
    try:
        list_fd = os.open(".", _O_DIR, dir_fd=base_fd)
    except OSError:
        return [], []
    try:
        with os.scandir(list_fd) as it:
            names = [e.name for e in it if e.name.startswith(prefix) and (not name_len or len(e.name) == name_len)]
    except OSError:
        return [], []
    finally:
        os.close(list_fd)
    found, errors = [], []
    for name in names:
        try:
            fd = os.open(name, _O_DIR, dir_fd=base_fd)
        except OSError:
            continue  # a link, a file, gone: not a folder sbxc made
        try:
            st = os.fstat(fd)
            if st.st_uid != uid or now - st.st_mtime < STALE_AFTER:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a running sbxc holds it
            if remove:
                _end_fifo_waits(fd)
                if runc:
                    _end_containers(fd, name, runc)
                from .trees import remove_tree  # only with a stale folder to remove

                try:
                    remove_tree(base_fd, name)
                except OSError as e:
                    errors.append(e)
                    continue
            found.append(name)
        finally:
            os.close(fd)  # the lock goes last
    return found, errors


def reap_run_dirs(base: str, now: float | None = None, runc: str = "") -> int:
    """Remove the stale per-run folders in ``base`` (best effort); how many were removed.
    ``runc``: as for ``reap``."""
    try:
        base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        return len(reap(base_fd, RUN_DIR_PREFIX, os.geteuid(), now=now, name_len=len(RUN_DIR_PREFIX) + 16,
                        runc=runc)[0])
    finally:
        os.close(base_fd)


def make_run_dir(base: str, runc: str = "") -> tuple[str, int]:
    """A fresh 0700 per-run folder with a random name in ``base``, opened and checked
    without following symlinks (``base`` may be shared, e.g. /tmp), and locked for as long
    as the returned descriptor stays open. Stale ones in ``base`` are reaped first
    (``runc``: as for ``reap``)."""
    import fcntl

    reap_run_dirs(base, runc=runc)
    for _ in range(16):
        name = RUN_DIR_PREFIX + os.urandom(8).hex()
        path = base.rstrip("/") + "/" + name
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        try:
            fd = os.open(path, _O_DIR)
        except OSError:
            fd = -1
        st = os.fstat(fd) if fd >= 0 else None
        if st is None or st.st_uid != os.geteuid():
            if fd >= 0:
                os.close(fd)
            raise Refusal(f"the per-run folder {path} is not the folder sbxc made", "check who else writes to " + base)
        # A reaper sees the folder unlocked between the mkdir and this flock; the age rule
        # (STALE_AFTER) covers that window.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return path, fd
    raise Refusal(f"could not make a per-run folder in {base}", "check that it is writable")


def _end_fifo_waits(dir_fd: int) -> None:
    """A FIFO in a stale folder may have a reader blocked in its open for good: runc
    waiting for the config of a run whose sbxc died before writing it (``oci_gate``). An
    open for writing ends that wait and the close right after gives it end of file, so
    it ends without having made anything; nothing is written. Only the folder's own
    entries (the gate's FIFO is ``config.json`` at the top), never following a link."""
    import stat

    try:
        with os.scandir(dir_fd) as it:
            fifos = [e.name for e in it if stat.S_ISFIFO(e.stat(follow_symlinks=False).st_mode)]
    except OSError:
        return
    for name in fifos:
        # Opened as a path first and checked to be a FIFO on that descriptor, then opened
        # for real through it: an entry swapped for a device meanwhile is never opened.
        try:
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC))
        except OSError:
            pass
        finally:
            os.close(fd)


CONTAINER_PREFIX = "sbxc-"
"""The id sbxc gives a run's runc container (``oci_run``): this and the bundle folder's
16 hex digits."""
_MAX_STATE = 4 << 20


def container_id(folder_name: str) -> str:
    """The container id of the bundle folder ``folder_name`` (``sbxc-run-<16 hex>``)."""
    return CONTAINER_PREFIX + folder_name[len(RUN_DIR_PREFIX):]


def _end_containers(dir_fd: int, name: str, runc: str) -> None:
    """A stale OCI bundle (``name``, in the plans folder's ``runs`` folder, which no sandbox
    can write) can hold a container whose sbxc and watcher were both killed (SIGKILL to
    their process group) before the run ended: its first process waits on runc's exec
    fifo, or the command runs on, unsupervised; as root runc made a cgroup for it. The
    bundle is runc's ``--root``, so the container's state is ``<id>/state.json`` in it:
    `runc delete --force <id>` ends the process and removes the cgroup, before the folder
    goes. Only the one id this bundle's run had, only with a state file that runc wrote
    (a regular file of this user's, with no hooks: runc runs a state's poststop hooks on
    delete), and the caller's runc (from the system program folders, ``probe.host_program``).
    Best effort: a runc that cannot be found, fails or hangs (5 s) leaves the process."""
    import stat

    cid = container_id(name)
    try:
        fd = os.open(cid + "/state.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > _MAX_STATE:
            return
        data = os.read(fd, _MAX_STATE + 1)
    except OSError:
        return
    finally:
        os.close(fd)
    import json
    import subprocess

    try:
        state = json.loads(data)
    except ValueError:
        return
    if not isinstance(state, dict) or _names_hooks(state):
        return  # sbxc's configs have none
    try:
        root = os.readlink(f"/proc/self/fd/{dir_fd}")  # the folder, opened without following a link
    except OSError:
        return
    rootless = ["--rootless", "true"] if os.geteuid() != 0 else []
    try:
        subprocess.run([runc, "--root", root, *rootless, "delete", "--force", cid], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5, env=dict(os.environ))
    except (OSError, subprocess.SubprocessError):
        pass


def _names_hooks(state: dict) -> bool:
    """Whether a runc state names any hook. runc (Go's encoding/json) matches a key to its
    field ignoring case, so every spelling of ``config`` and ``hooks`` counts."""
    for key, config in state.items():
        if isinstance(key, str) and key.lower() == "config":
            if not isinstance(config, dict):
                return True
            for name, hooks in config.items():
                if isinstance(name, str) and name.lower() == "hooks":
                    if not isinstance(hooks, dict) or any(hooks.values()):
                        return True
    return False

