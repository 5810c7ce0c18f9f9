"""Shared by the benchmarks: leave nothing behind on the host."""
import os


def remove_project_cache(project: str) -> None:
    """Remove the per-project cache folder (and its marker) that runs in ``project`` made
    under the default cache root; the benchmark's own temporary folder is removed apart."""
    from sbxc import cache
    from sbxc.runtime import cachedir

    cachedir.remove_project_at(cache.default_root(os.getuid()), os.path.realpath(project), os.getuid())
