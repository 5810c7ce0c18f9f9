"""Which entries of a root a test run wrote: the ones whose name or content (a plan, a
journal record, a cache's project marker) names a given text, such as a path of the run's
own. Other sbxc users on the machine may write the same root meanwhile; only what names
the text counts."""


def naming(paths, text: str) -> list:
    """The entries of ``paths`` (sorted) whose path or first 4 MiB of content holds ``text``."""
    hits = []
    for path in sorted(paths):
        if text in path:
            hits.append(path)
            continue
        try:
            with open(path, "rb") as f:
                if text.encode() in f.read(1 << 22):
                    hits.append(path)
        except OSError:
            pass  # a folder, or gone
    return hits
