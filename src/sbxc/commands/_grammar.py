"""The command line's one grammar: every command's options as data, and one parser for all.

``exec`` parses with this module on every run, so it imports nothing but the leaf
``sbxc.layout`` (no argparse, re or json: each costs start-up time), and holds ``exec``'s
own entry; the table of the other commands is ``_args``, built on the same grammar. The
other commands, ``sbxc help``, every ``--help`` and the shell completions read that table,
so a flag means the same wherever it is accepted (docs/cli.md):

- ``--name=VALUE`` always works; ``--name VALUE`` too for a flag that needs a value.
- ``--network`` takes an optional value. The word after it is taken as its value when it
  is one (``true``, ``off`` ...); a word that is none of them is a usage error, never the
  command or the policy: ``sbxc exec --network make`` cannot be read two ways.
- Options are spelled out (no abbreviations); a flag given twice with different values
  (unless it is one that ``repeat``s, such as ``session start --stage``), two flags that
  exclude each other, and a stray word are usage errors.
"""
from ..layout import BACKEND_CHOICES

NETWORK_ON = ("true", "on", "yes", "1")
NETWORK_OFF = ("false", "off", "no", "0")


class Usage(Exception):
    """A command line that does not fit the grammar: exit 2 (125 on ``exec``)."""


class HelpAsked(Exception):
    """``-h``/``--help`` before ``--``: the command's help, exit 0."""


class Flag:
    """One option. ``metavar`` None: a switch. ``optional``: the value may be left out
    (then it is ``const``). ``choices``: the only values accepted (case-insensitive when
    ``fold``). ``dest``: the key in the parsed result; ``const`` what a switch stores.
    ``repeat``: may be given more than once; the result is the list of values in order
    (empty when never given)."""

    __slots__ = ("name", "metavar", "choices", "optional", "const", "dest", "help", "short", "fold", "path",
                 "repeat")

    def __init__(self, name, help, metavar=None, choices=(), optional=False, const=True, dest=None,
                 short=None, fold=False, path=False, repeat=False):
        self.name = name
        self.help = help
        self.metavar = metavar
        self.choices = choices
        self.optional = optional
        self.const = const
        self.dest = dest or name.lstrip("-").replace("-", "_")
        self.short = short
        self.fold = fold
        self.path = path
        """Completion offers file names for the value."""
        self.repeat = repeat

    def takes_value(self) -> bool:
        return self.metavar is not None

    def spelling(self) -> str:
        if self.metavar is None:
            return self.name
        if self.optional:
            return f"{self.name}[=" + "|".join(self.choices[:1] + NETWORK_OFF[:1]) + "]"
        return f"{self.name} {self.metavar}"


class Positional:
    """One word after the options. ``many``: the last positional only, it takes every word
    left (a list, maybe empty); unlike exec's ``rest`` the options may still follow it."""

    __slots__ = ("name", "help", "required", "choices", "path", "dest", "many")

    def __init__(self, name, help, required=False, choices=(), path=False, dest=None, many=False):
        self.name = name
        self.dest = dest or name.lower()
        self.help = help
        self.required = required
        self.choices = choices
        self.path = path
        self.many = many

    def spelling(self) -> str:
        word = self.name + ("..." if self.many else "")
        return word if self.required else f"[{word}]"


class Command:
    __slots__ = ("name", "summary", "flags", "positionals", "exits", "rest", "subcommands", "exclusive", "notes")

    def __init__(self, name, summary, flags=(), positionals=(), exits=(), rest=None, subcommands=(),
                 exclusive=(), notes=()):
        self.name = name
        self.summary = summary
        self.flags = flags
        self.positionals = positionals
        self.exits = exits
        self.rest = rest
        """exec only: what the words after the options are (the command)."""
        self.subcommands = subcommands
        """``cache path|clear``: each a Command whose name is the verb."""
        self.exclusive = exclusive
        """Groups of dests of which at most one may be given."""
        self.notes = notes


def _network():
    return Flag("--network", "on or off for this run; beats the policy's network: (a list of rules included)",
                metavar="BOOL", choices=NETWORK_ON + NETWORK_OFF, optional=True, const="on", fold=True)


POLICY = Flag("--policy", "the policy file (default: sandbox.policy.yaml here or in the nearest parent)",
              metavar="P", path=True)
BACKEND = Flag("--backend", "the backend; beats the policy's backend:", metavar="B", choices=BACKEND_CHOICES)
NETWORK = _network()
NO_NETWORK = Flag("--no-network", "same as --network=false", const="off", dest="network")
HELP = Flag("--help", "this help", short="-h")


def _format(*choices):
    return Flag("--format", "output format (default text)", metavar="FORMAT", choices=("text",) + choices)


ROOT = Flag("--root", "the cache root (absolute; default: the policy's cache.root, else /var/tmp/sbxc-{uid}, "
            "or $SBXC_ROOT)", metavar="ROOT", path=True)
PROJECT = Flag("--project", "the project folder (default: the current folder's project)", metavar="DIR", path=True)
POLICY_FLAGS = (POLICY, BACKEND, NETWORK, NO_NETWORK)
"""Accepted with one meaning by exec, compile, print-config and explain."""

USAGE_EXIT = "2 usage error"
INTERNAL = "3 sbxc itself broke (one line: internal error)"

EXEC = Command(
    "exec", "run CMD in the sandbox",
    flags=(POLICY, Flag("--plan", "a compiled plan file (from compile -o) instead of a policy", metavar="F", path=True),
           BACKEND, NETWORK, NO_NETWORK,
           Flag("--session", "run in a session's workspace (sbxc session start prints the ID)", metavar="ID"),
           Flag("--ephemeral", "run in a fresh session's workspace, discarded afterwards"),
           _format("json"),
           Flag("--status-fd", "with --format json: write the run's JSON status to this open descriptor "
                "(default 2, stderr, which the command can write too; another descriptor is never "
                "passed to the command)", metavar="N"), HELP),
    rest="CMD...",
    exits=("CMD's own status (128+N when it died of signal N)",
           "125 sbxc refused or failed before CMD ran (usage errors included: 2 could be CMD's own)",
           "126 CMD found but not executable", "127 CMD not found"),
    exclusive=(("policy", "plan"), ("session", "ephemeral")),
    notes=("The command starts at the first word that is not an option, or after --.",
           "--format json: one JSON object after the run (did the command run, its status, the hosts the "
           "proxy refused with the rule to add, sbxc's warnings); see docs/output-formats.md."),
)

def _close(word, names):
    """A name that differs from ``word`` by a typo or a prefix (no difflib on this path)."""
    for n in names:
        if n.startswith(word) and len(word) >= 3:
            return n
    for n in names:
        if len(n) == len(word) and sum(a != b for a, b in zip(n, word)) <= 1:
            return n
        if sorted(n) == sorted(word):
            return n
    return ""


def unknown(what, word, names, where="") -> str:
    """``unknown option '--netwrok' for exec; did you mean --network? (choose from: ...)``."""
    shown = word if len(word) <= 60 else word[:57] + "..."
    near = _close(word, names)
    tail = f"; did you mean {near}?" if near else ""
    return f"unknown {what} {shown!r}{where}{tail} (choose from: {', '.join(names)})"


def _value(flag, value):
    """The value as stored (``--network``'s words as ``on``/``off``), or None when it is not one of the choices."""
    if flag.choices:
        v = value.lower() if flag.fold else value
        if v not in flag.choices:
            return None
        if flag.name == NETWORK.name:
            return "on" if v in NETWORK_ON else "off"
        return v
    return value


def _flag_value(cmd: Command, flag: Flag, w: str, eq: str, value: str, words: list, i: int):
    """(the value ``flag`` gets at ``words[i]``, the index of the last word it used)."""
    n = len(words)
    if not flag.takes_value():
        if eq:
            raise Usage(f"{flag.name} takes no value (got {w!r})")
        value = flag.const
    elif eq:
        got = _value(flag, value)
        if got is None:
            raise Usage(f"{w!r}: {flag.name} takes one of {', '.join(flag.choices)}")
        value = got
    elif flag.optional:
        nxt = words[i + 1] if i + 1 < n else None
        got = _value(flag, nxt) if nxt is not None and not nxt.startswith("-") else None
        if got is not None:
            value = got
            i += 1
        elif nxt is None or nxt.startswith("-"):
            value = flag.const
        else:
            # The one place a word could be read two ways: as this flag's value or as
            # what follows it (the command, a policy). Neither guess is safe.
            raise Usage(f"{flag.name} {nxt!r}: {nxt!r} is not a value of {flag.name} "
                        f"({' or '.join(flag.choices[:1] + NETWORK_OFF[:1])}); write {flag.name}=true or "
                        f"{flag.name}=false" + (", and put the command after --" if cmd.rest else ""))
    else:
        if i + 1 >= n or (words[i + 1].startswith("-") and words[i + 1] != "-"):
            raise Usage(f"{flag.name} needs a value ({flag.metavar})" + (
                f", not the option {words[i + 1]!r}; write {flag.name}=VALUE for a value that starts with -"
                if i + 1 < n else ""))
        i += 1
        got = _value(flag, words[i])
        if got is None:
            raise Usage(f"{flag.name} {words[i]!r}: choose from {', '.join(flag.choices)}")
        value = got
    return value, i


def parse(cmd: Command, argv) -> dict:
    """The options and positionals of ``argv`` as ``{dest: value}`` (positionals by their
    lower-case name; exec's command as ``"cmd"``). Raises Usage or HelpAsked."""
    prefix = f"sbxc {cmd.name}"
    out = {f.dest: [] if f.repeat else None for f in cmd.flags}
    for p in cmd.positionals:
        out[p.dest] = [] if p.many else None
    by_name = {}
    for f in cmd.flags:
        by_name[f.name] = f
        if f.short:
            by_name[f.short] = f
    given = {}  # dest -> the spelling that set it
    positionals = []
    words = list(argv)
    i, n = 0, len(words)
    rest = None
    while i < n:
        w = words[i]
        if w == "--":
            if cmd.rest:
                rest = words[i + 1:]
            else:
                positionals += words[i + 1:]
            break
        if w == "-" or not w.startswith("-"):
            if cmd.rest:
                rest = words[i:]
                break
            positionals.append(w)
            i += 1
            continue
        if w.startswith("--"):
            name, eq, value = w.partition("=")
        elif len(w) > 2 and w[:2] in by_name and by_name[w[:2]].takes_value():
            name, eq, value = w[:2], "=", w[2:]  # -oPLAN
        else:
            name, eq, value = w, "", ""
        flag = by_name.get(name)
        if flag is None:
            raise Usage(unknown("option", name, [f.name for f in cmd.flags], f" for {cmd.name}"))
        if flag is HELP or flag.name == "--help":
            raise HelpAsked()
        value, i = _flag_value(cmd, flag, w, eq, value, words, i)
        if flag.repeat:
            out[flag.dest].append(value)
            given[flag.dest] = w
            i += 1
            continue
        if flag.dest in given and out[flag.dest] != value:
            raise Usage(f"{given[flag.dest]} and {w} disagree; give one")
        given[flag.dest] = w if not (flag.takes_value() and not eq and not flag.optional) else f"{w} {value}"
        out[flag.dest] = value
        i += 1
    for group in cmd.exclusive:
        both = [given[d].split()[0].split("=")[0] for d in group if d in given]
        if len(both) > 1:
            raise Usage(f"{' and '.join(both)} were both given; give one of them")
    fixed = cmd.positionals
    if fixed and fixed[-1].many:
        fixed = fixed[:-1]
        out[cmd.positionals[-1].dest] = positionals[len(fixed):]
        positionals = positionals[:len(fixed)]
    if len(positionals) > len(fixed):
        extra = positionals[len(fixed)]
        raise Usage(f"unexpected argument {extra!r}" + (
            f" ({cmd.positionals[0].name} is {positionals[0]!r})" if cmd.positionals else f"; {prefix} takes none"))
    for p, v in zip(fixed, positionals):
        if p.choices and v not in p.choices:
            raise Usage(unknown(p.name.lower(), v, list(p.choices)))
        out[p.dest] = v
    for p in cmd.positionals[len(positionals):]:
        if p.required and not (p.many and out[p.dest]):
            raise Usage(f"{p.name} is missing")
    if cmd.rest:
        out["cmd"] = rest or []
    return out


class Parsed(dict):
    """The parsed options, read as attributes (``args.policy``)."""

    __getattr__ = dict.__getitem__
