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


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def make_links(rootfs: str, links) -> list:
    """Make each ``[link, target]`` under ``rootfs``; the paths made (links, then the
    folders made for them, deepest first), for removal. An entry already there as the
    same link is kept. Every step goes through a folder descriptor opened without
    following links, so a link already in the rootfs (a bundle folder someone else could
    write, for ``compile -o``) is never followed out of it. Raises OSError when a link
    cannot be made."""
    made = []
    for link, target in links:
        if not link.startswith("/") or "/../" in link + "/" or "/./" in link + "/" or "\x00" in link + target:
            raise OSError(f"not a link an OCI rootfs can hold: {link!r}")
        parts = [p for p in link.split("/") if p]
        fd = os.open(rootfs, _DIR)
        try:
            at = rootfs
            for part in parts[:-1]:
                at += "/" + part
                try:
                    nxt = os.open(part, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made.append(at)
                    nxt = os.open(part, _DIR, dir_fd=fd)  # ELOOP/ENOTDIR for a link or a file: refused
                os.close(fd)
                fd = nxt
            try:
                os.symlink(target, parts[-1], dir_fd=fd)
            except FileExistsError:
                if os.readlink(parts[-1], dir_fd=fd) != target:
                    raise
                continue
            made.append(at + "/" + parts[-1])
        finally:
            os.close(fd)
    # Links first, then folders, deepest first: the order to remove them in.
    links_made = [p for p in made if os.path.islink(p)]
    return links_made + sorted((p for p in made if p not in links_made), key=len, reverse=True)
