"""Help texts made from the command table (``_args.COMMANDS``): ``sbxc help``, every
``--help``, the usage lines; and ``run_parse``, the parse-or-print-help step of every
command but ``exec``. Kept apart from the parser, which ``exec`` loads on every run."""
from ._args import COMMANDS, HELP, Command, HelpAsked, Parsed, Usage, parse

def usage_line(cmd: Command, parent: str = "", prefix: str = "usage: ") -> str:
    words = [f"sbxc {parent + ' ' if parent else ''}{cmd.name}"]
    if cmd.subcommands:
        words.append("|".join(s.name for s in cmd.subcommands))
        words.append("[OPTIONS]")
    for f in cmd.flags:
        if f is not HELP:
            words.append(f"[{f.spelling()}]" + ("..." if f.repeat else ""))
    for p in cmd.positionals:
        words.append(p.spelling())
    if cmd.rest:
        words.append(f"[--] {cmd.rest}")
    return prefix + " ".join(words)


def _flag_rows(flags) -> list:
    rows = []
    for f in flags:
        left = (f"{f.short}, " if f.short else "") + f.spelling()
        text = f.help
        if f.choices and not f.optional:
            text += f" ({'|'.join(f.choices)})"
        elif f.optional:
            text += f"; {f.name} alone means true, values: {', '.join(f.choices)}"
        if f.repeat:
            text += " (repeatable)"
        rows.append((left, text))
    return rows


def command_help(cmd: Command, parent: str = "") -> str:
    lines = [usage_line(cmd, parent), "", cmd.summary[:1].upper() + cmd.summary[1:] + "."]
    rows = [(p.name + ("..." if p.many else ""), p.help + (f" ({'|'.join(p.choices)})" if p.choices else "")) for p in cmd.positionals]
    if cmd.rest:
        rows.append((cmd.rest, "the command to run and its arguments"))
    if rows:
        lines += ["", "arguments:"] + [f"  {a:<22} {b}" for a, b in rows]
    for sub in cmd.subcommands:
        lines += ["", f"sbxc {cmd.name} {sub.name}: {sub.summary}"]
        if sub.positionals:
            lines.append(f"  {usage_line(sub, cmd.name, prefix='')}")
        lines += [f"  {p.name + ('...' if p.many else ''):<22} {p.help}" for p in sub.positionals]
        lines += [f"  {a:<22} {b}" for a, b in _flag_rows(f for f in sub.flags if f is not HELP)]
        if sub.exits and sub.exits != cmd.exits:
            lines.append("  exit status: " + "; ".join(sub.exits))
    lines += ["", "options:"] + [f"  {a:<22} {b}" for a, b in _flag_rows(cmd.flags)]
    for note in cmd.notes:
        lines += ["", note]
    if cmd.exits:
        lines += ["", "exit status:"] + [f"  {e}" for e in cmd.exits]
    return "\n".join(lines) + "\n"


def top_help() -> str:
    lines = ["usage: sbxc COMMAND [OPTIONS]", "", "commands:"]
    for c in COMMANDS:
        lines.append(f"  {c.name:<14} {c.summary}")
    lines += ["", "sbxc help COMMAND (or sbxc COMMAND --help) lists a command's options and exit codes.",
              "--policy, --backend and --network mean the same on compile, exec, print-config and explain.",
              "", "Per-session workspaces:"]
    for c in COMMANDS:
        if c.name == "session":
            lines.append(f"  {usage_line(c, prefix='')}")
    lines.append("  sbxc exec --session ID -- CMD (or exec --ephemeral): run CMD in a session's workspace")
    return "\n".join(lines) + "\n"


def run_parse(cmd: Command, argv, stdout, stderr, parent: str = ""):
    """``(args, None)``, or ``(None, exit code)``: the help printed and 0, or one usage line and 2."""
    try:
        return Parsed(parse(cmd, argv)), None
    except HelpAsked:
        stdout.write(command_help(cmd, parent))
        return None, 0
    except Usage as e:
        name = f"sbxc {parent + ' ' if parent else ''}{cmd.name}"
        stderr.write(f"{name}: {e} (see: sbxc help {parent or cmd.name})\n")
        return None, 2
