"""Text for a terminal that cannot pass for anything else: every character that does not
print (newlines, escape sequences, bytes that are not UTF-8, kept by surrogateescape)
written as an escape. A leaf: the compiler's diagnostics and the runtime's messages both
use it."""


def escaped(text: str, backslash: bool = True) -> str:
    """``text`` with each non-printing character as ``\\xNN`` (the byte itself for one that
    is not UTF-8), ``\\uNNNN`` or ``\\UNNNNNNNN``; with ``backslash`` the backslash too, so
    that an escape in the output always means one of these."""
    if text.isprintable() and not (backslash and "\\" in text):
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")  # a byte that is not UTF-8 (surrogateescape)
        elif (backslash and ch == "\\") or not ch.isprintable():
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
        else:
            out.append(ch)
    return "".join(out)
