"""Shared by the benchmarks: leave nothing behind on the host."""
import os


def remove_project_cache(project: str) -> None:
    """Remove the per-project cache folder (and its marker) that runs in ``project`` made
    under the default cache root; the benchmark's own temporary folder is removed apart."""
    from sbxc import cache
    from sbxc.runtime import cachedir

    uid = os.getuid()
    pid = cache.project_id(os.path.realpath(project))
    try:
        root_fd = cachedir.open_root(cache.default_root(uid), uid, create=False)
    except (cachedir.Unsafe, OSError):
        return
    try:
        cachedir.remove_tree(root_fd, pid)
        try:
            os.unlink(pid + cachedir.MARKER_SUFFIX, dir_fd=root_fd)
        except FileNotFoundError:
            pass
    finally:
        os.close(root_fd)
