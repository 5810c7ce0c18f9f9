"""The command's stderr when sbxc's own stderr is a terminal: a pseudo-terminal of sbxc's,
relayed to the caller's terminal (docs/decisions.md, "stderr on a terminal").

Why: sbxc reads the command's stderr to know what went wrong (the network hint, the rule
that refused a path). A pipe would do that, but the command would then see that its
stderr is no terminal and change how it writes (no colours, no progress bars, buffered
output). A pseudo-terminal keeps ``isatty(2)`` true and lets sbxc read what is written.

Its slave side takes no part in output processing: OPOST is off, so the bytes reach the
caller's terminal exactly as written and that terminal applies its own settings (a
program that put it in raw mode through stdin still gets raw output). No input ever
arrives on it (sbxc never writes the master), and the command's stdin and stdout stay the
caller's. The window size follows the caller's terminal (at the start, and on SIGWINCH).
A TIOCSTI on it can only push bytes into this pseudo-terminal's own input, which nobody
reads.

Only imported when stderr is a terminal: ``termios`` and ``fcntl`` are not on the hot
path of a run whose stderr is a pipe or a file.
"""
import os


def open_relay(caller_fd: int = 2):
    """(master, slave) of a fresh pseudo-terminal set up as above, or None when none can
    be had (no /dev/ptmx, every pty in use): the command then gets the caller's terminal
    itself, as sbxc's stderr is, and sbxc cannot read what it writes there."""
    import termios

    try:
        master, slave = os.openpty()
    except OSError:
        return None
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST
        attrs[3] &= ~(termios.ECHO | termios.ICANON | termios.ISIG | termios.IEXTEN)
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
    except (OSError, termios.error):
        os.close(master)
        os.close(slave)
        return None
    copy_size(caller_fd, master)
    return master, slave


def copy_size(src: int, master: int) -> None:
    """The window size of terminal ``src`` onto the pseudo-terminal (TIOCSWINSZ on the
    master sets the pair's size); nothing when ``src`` has none."""
    import fcntl
    import termios

    try:
        size = fcntl.ioctl(src, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(master, termios.TIOCSWINSZ, size)
    except OSError:
        pass
