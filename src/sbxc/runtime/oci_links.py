"""The symlinks an OCI bundle's rootfs holds (``backends.oci``: the links on the way to a
rule's path as the policy spelled it, ``/bin -> usr/bin`` on a merged-/usr system), made
before runc mounts anything, by the runner in its per-run rootfs and by
``sbxc compile --backend oci -o`` in the bundle it writes.

The rootfs is a folder sbxc has just made in a folder of its own (0700, or the one the
user named for ``-o``): no one else can put anything in it. A link's location never lies
below another link (each was met while resolving, so the folders above it are real), and
the folders above it are made as plain folders (0755, as runc makes mount points). A link
grants nothing: what it leads to is what the mounts put there.
"""
from ..fastos import os  # the hot path's os (sbxc.fastos)


def make_links(rootfs: str, links) -> list:
    """Make each ``[link, target]`` under ``rootfs``; the paths made (links, then the
    folders made for them, deepest first), for removal. An entry already there as the
    same link is kept. Raises OSError when one cannot be made."""
    made = []
    for link, target in links:
        if not link.startswith("/") or "/../" in link + "/" or "\x00" in link + target:
            raise OSError(f"not a link an OCI rootfs can hold: {link!r}")
        where = rootfs + link
        parent = where.rsplit("/", 1)[0]
        todo = []
        while parent != rootfs and not os.path.isdir(parent):
            todo.append(parent)
            parent = parent.rsplit("/", 1)[0]
        for d in reversed(todo):
            os.mkdir(d, 0o755)
            made.append(d)
        try:
            os.symlink(target, where)
        except FileExistsError:
            if not os.path.islink(where) or os.readlink(where) != target:
                raise
            continue
        made.append(where)
    # Links first, then folders, deepest first: the order to remove them in.
    return [p for p in made if os.path.islink(p)] + sorted((p for p in made if not os.path.islink(p)),
                                                            key=len, reverse=True)
