"""The command table: every command's options, arguments and exit codes (``_grammar``
holds the grammar and ``exec``'s own entry; ``exec`` reads its command line with that
alone, so a run builds no other command's table). Help, completion and every other
command take their tables from here."""
from ._grammar import (  # noqa: F401 (the grammar's names, for every command)
    BACKEND, Command, EXEC, Flag, HELP, HelpAsked, INTERNAL, NETWORK, NETWORK_OFF, NETWORK_ON, NO_NETWORK,
    POLICY, POLICY_FLAGS, PROJECT, Parsed, Positional, ROOT, USAGE_EXIT, Usage, _close, _flag_value,
    _format, _network, _value, parse, unknown,
)

COMPILE = Command(
    "compile", "check a policy and compile it to a plan",
    flags=(POLICY, BACKEND, NETWORK, NO_NETWORK,
           Flag("--check", "print diagnostics and the enforcement report instead of the plan"),
           Flag("--verbose", "with --check: every rule's verdict on every backend", short="-v"),
           Flag("--strict", "treat partial enforcement on the selected backend as an error"),
           Flag("--no-accept", "with --check: do not accept policy files a sandboxed command may have written "
                "(for hooks and scripts, whose output no one reads)"),
           _format("json", "sarif"),
           Flag("--output", "write the plan file here (- for stdout, the default without --check)",
                metavar="PLAN", short="-o", path=True), HELP),
    positionals=(Positional("POLICY", "the policy file (same as --policy)", path=True, dest="policy_arg"),),
    exits=("0 clean (warnings allowed)", "1 errors in the policy, or a rule the selected backend cannot enforce",
           USAGE_EXIT, INTERNAL),
    notes=("--format sarif needs --check (SARIF 2.1.0, for code-scanning tools).",),
)
PRINT_CONFIG = Command(
    "print-config", "every resolved setting, where it came from and what it beat",
    flags=POLICY_FLAGS + (_format("json"), HELP),
    exits=("0 the policy compiles", "1 the policy has errors (a run would refuse)", USAGE_EXIT, INTERNAL),
)
EXPLAIN = Command(
    "explain", "what the command may do with PATH on each backend, and the rule that decides",
    flags=POLICY_FLAGS + (_format("json"), HELP),
    positionals=(Positional("PATH", "the path to ask about (relative: to the current folder)", required=True,
                            path=True),),
    exits=("0 explained", "1 the policy has errors", USAGE_EXIT, INTERNAL),
)
DOCTOR = Command(
    "doctor", "what this host can enforce; cache sizes",
    flags=(Flag("--root", "the cache root to list (absolute; default: the current project's, else "
                "/var/tmp/sbxc-{uid}, or $SBXC_ROOT)", metavar="ROOT", path=True), _format("json"), HELP),
    exits=("0 a Linux backend works here (always on macOS)", "1 no Linux backend works", USAGE_EXIT, INTERNAL),
)
CACHE = Command(
    "cache", "the per-project dependency cache",
    subcommands=(
        Command("path", "print the project's cache folder", flags=(PROJECT, ROOT, HELP)),
        Command("clear", "empty the project's cache (or every one)",
                flags=(PROJECT, Flag("--all", "every project's cache under the root, and leftover throwaway caches"),
                       Flag("--id", "one project folder by its name under the root (as doctor lists it)",
                            metavar="ID"), ROOT, HELP),
                exclusive=(("project", "all", "id"),)),
    ),
    flags=(HELP,),
    exits=("0 done", "1 something could not be removed (one line names it)", USAGE_EXIT, INTERNAL),
)
SCHEMA = Command("schema", "JSON Schema of the policy file, for editors", flags=(HELP,),
                 exits=("0", USAGE_EXIT))
COMPLETION = Command(
    "completion", "shell completion script (source it from your shell's start-up file)",
    flags=(HELP,), positionals=(Positional("SHELL", "the shell", required=True, choices=("bash", "zsh")),),
    exits=("0", USAGE_EXIT))
HELP_CMD = Command("help", "a command's options and exit codes", flags=(HELP,),
                   positionals=(Positional("COMMAND", "the command"),), exits=("0", USAGE_EXIT))

INIT = Command(
    "init", "write a commented starter sandbox.policy.yaml for the project here (never overwrites)",
    flags=(Flag("--network", "leave the network on in the policy (default: off)"),
           Flag("--stdout", "print the policy instead of writing the file"), HELP),
    exits=("0 written", "1 a policy already exists here, or it could not be written", USAGE_EXIT, INTERNAL),
)
EXPORT = Command(
    "export", "a Pod or Job, its seccomp profile and a NetworkPolicy carrying the policy",
    flags=(POLICY, NETWORK, NO_NETWORK,
           Flag("--kind", "the workload kind (default pod)", metavar="KIND", choices=("pod", "job")),
           Flag("--image", "the container image (default: the placeholder IMAGE)", metavar="IMAGE"),
           Flag("--name", "the workload's name (default: sbxc-<project folder>)", metavar="NAME"),
           Flag("--format", "output format (default yaml)", metavar="FORMAT", choices=("yaml", "json")),
           Flag("--output", "write the workload and the seccomp profile into DIR", metavar="DIR", short="-o",
                path=True),
           Flag("--strict", "treat partial enforcement on the target as an error (nothing is written)"), HELP),
    positionals=(Positional("TARGET", "what to export for", required=True, choices=("kubernetes",)),),
    exits=("0 written (the report on stderr)", "1 errors in the policy, or a rule the target cannot enforce "
           "(with --strict: or enforces only partly)",
           USAGE_EXIT, INTERNAL),
    notes=("The container's command, if any, follows --.",),
)
_SESSION_ID = Positional("ID", "the session (sbxc session start printed it; sbxc session list lists them)",
                         required=True)
_SESSION_FORMAT = _format("json")
REFUSED = "1 refused (one line says why)"
SESSION = Command(
    "session", "per-session workspaces: start, list, diff, apply, stop, drop",
    subcommands=(
        Command("start", "make a workspace (a copy of the project) and print its ID",
                flags=(Flag("--policy", "the policy whose workspace: settings apply (default: sandbox.policy.yaml "
                            "here or in the nearest parent)", metavar="P", path=True),
                       Flag("--from", "start from this snapshot (sbxc session stop --snapshot kept it)",
                            metavar="SNAPSHOT", dest="snapshot"),
                       Flag("--stage", "also copy host file SRC into the workspace at DEST (relative to it)", metavar="SRC:DEST", path=True, repeat=True),
                       _SESSION_FORMAT, HELP),
                exits=("0 started (the ID on stdout)", REFUSED, USAGE_EXIT, INTERNAL)),
        Command("list", "the sessions, snapshots and warm pool", flags=(_SESSION_FORMAT, HELP),
                exits=("0 listed", REFUSED, USAGE_EXIT, INTERNAL)),
        Command("diff", "what the session changed against the project", flags=(_SESSION_FORMAT, HELP),
                positionals=(_SESSION_ID,), exits=("0 shown", REFUSED, USAGE_EXIT, INTERNAL)),
        Command("apply", "copy the session's changes back to the project (all, or only PATH...)",
                flags=(_SESSION_FORMAT, HELP),
                positionals=(_SESSION_ID, Positional("PATH", "only these changed paths (relative to the project)",
                                                     many=True, path=True, dest="paths")),
                exits=("0 every change applied", "1 refused: any file refused (changed on the host too), or "
                       "the workspace is over workspace.max_bytes", USAGE_EXIT, INTERNAL)),
        Command("stop", "end the session and remove its workspace (or keep it as a snapshot)",
                flags=(Flag("--snapshot", "keep the workspace as the snapshot NAME", metavar="NAME"), HELP),
                positionals=(_SESSION_ID,),
                exits=("0 stopped", "1 refused, or the session was not stopped", USAGE_EXIT, INTERNAL)),
        Command("drop", "remove a snapshot", flags=(HELP,),
                positionals=(Positional("SNAPSHOT", "the snapshot's name", required=True, dest="name"),),
                exits=("0 removed", REFUSED, USAGE_EXIT, INTERNAL)),
    ),
    flags=(HELP,),
    exits=("0 done", "1 refused (apply: any file refused)", USAGE_EXIT, INTERNAL),
    notes=("Run commands in a session's workspace with sbxc exec --session ID -- CMD.",),
)

COMMANDS = (COMPILE, EXEC, PRINT_CONFIG, EXPLAIN, INIT, DOCTOR, CACHE, SESSION, SCHEMA, EXPORT, COMPLETION,
            HELP_CMD)
BY_NAME = {c.name: c for c in COMMANDS}
for _c in COMMANDS:  # the positional's choices, for help and completion
    if _c.name == "help":
        _c.positionals[0].choices = tuple(c.name for c in COMMANDS)
