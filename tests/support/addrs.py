"""Public addresses for the classifier tests, computed, never written down: no test holds
an address literal off loopback, so none could send anything off this machine even if a
check broke (the tests that use these only classify them; nothing connects to them).

The candidates are the addresses just outside each of sbxc's special ranges
(``sbxc.hostnames``: one before its first, one after its last). The standard library,
an independent view, decides which of them count: only those it calls global and that
are neither multicast nor site-local (ranges sbxc refuses on purpose, where the two
views differ). Edges that sbxc's arithmetic got wrong would then be refused by sbxc
where the standard library calls them public: the tests see it.
"""
import ipaddress

from sbxc import hostnames


def _candidates():
    for nets, bits, version in ((hostnames._V4_SPECIAL, 32, 4), (hostnames._V6_SPECIAL, 128, 6)):
        top = (1 << bits) - 1
        for net, shift in nets:
            first, last = net << shift, ((net + 1) << shift) - 1
            for value in (first - 1, last + 1):
                if 0 <= value <= top:
                    yield ipaddress.ip_address(value) if version == 4 else ipaddress.IPv6Address(value)


def public_edges() -> list:
    """The candidates the standard library calls public, as text, in the table's order."""
    out = []
    for addr in _candidates():
        if addr.is_global and not addr.is_multicast and not getattr(addr, "is_site_local", False):
            if str(addr) not in out:
                out.append(str(addr))
    return out


def public_v4() -> str:
    """One public IPv4 address (the first such edge)."""
    return next(a for a in public_edges() if ":" not in a)
