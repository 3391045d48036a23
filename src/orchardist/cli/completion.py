"""Shell completion scripts for bash, zsh and fish, generated from the argument parser.

``orchardist completion bash`` prints a script to ``source``; commands, their options, the
choices of options that have them, file names where a command takes a plan file, and run and
task ids where a command takes a run (and a task): those the script asks ``orchardist
__complete run`` and ``orchardist __complete task RUN`` for as it completes (:func:`ids`).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Option:
    """One option of a command."""

    flags: tuple[str, ...]
    help: str
    takes_value: bool
    choices: tuple[str, ...]


@dataclass(frozen=True)
class Command:
    """One subcommand: its options and whether its positional arguments are files."""

    name: str
    help: str
    options: tuple[Option, ...]
    files: bool
    ids: tuple[str, ...] = ()  # what its positionals are, in order: "run", then "task"


def commands(parser: argparse.ArgumentParser) -> tuple[list[Option], list[Command]]:
    """The parser's global options and its subcommands."""
    found: list[Command] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                positional = [a for a in sub._actions if not a.option_strings]
                files = any(a.dest == "plan" for a in positional)
                ids = tuple(
                    "task" if a.dest == "tasks" else a.dest
                    for a in positional
                    if a.dest in ("run", "task", "tasks")
                )
                options = tuple(_options(sub))
                found.append(Command(name, helps.get(name, ""), options, files, ids))
    return _options(parser), found


def _options(parser: argparse.ArgumentParser) -> list[Option]:
    result = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        choices = tuple(str(c) for c in action.choices) if action.choices else ()
        result.append(
            Option(tuple(action.option_strings), action.help or "", action.nargs != 0, choices)
        )
    return result


def ids(argv: list[str]) -> int:
    """``orchardist __complete run|task [RUN] [-C REPO]``: the repository's run ids, newest
    first, or the task ids of RUN (default: the newest run), one a line. Quiet and exit 0
    whatever goes wrong, and never creates a store: a completion is no place for errors."""
    from ..errors import OrchardistError

    repo = argv[argv.index("-C") + 1] if "-C" in argv[:-1] else "."
    words = [w for i, w in enumerate(argv) if w != "-C" and (i == 0 or argv[i - 1] != "-C")]
    try:
        for found in _ids(words, repo):
            print(found)
    except (OrchardistError, OSError):
        pass
    return 0


def _ids(words: list[str], repo: str) -> list[str]:
    from ..runs.start import Workspace

    ws = Workspace.existing(Path(repo)) if words else None
    if ws is None:
        return []
    if words[0] == "run":
        return [run.id for run in ws.store.runs()]
    run = ws.resolve_run(words[1] if len(words) > 1 and words[1] else None)
    return [t.task_id for t in ws.store.tasks(run.id)]


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell``."""
    top, cmds = commands(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](top, cmds)


def _short(text: str) -> str:
    """A help text fit for any shell's description field: one line, no quoting trouble."""
    text = re.sub(r"[\[\]'\"`:\\$]", "", text.split(". ")[0]).strip()
    return re.sub(r"\s+", " ", text)[:70]


# After the command's own cases: the positionals before the word being completed (a run, then
# a task), and their ids from `orchardist __complete` where the command takes them.
_BASH_POSITIONALS = """    for ((i++; i < COMP_CWORD; i++)); do  # positionals before this word
        word="${COMP_WORDS[i]}"
        if [[ "$word" == -C ]]; then ((i++)); repo="${COMP_WORDS[i]}"
        elif [[ "$takes" == *" $word "* ]]; then ((i++))
        elif [[ "$word" != -* ]]; then ((n++)); [[ $n == 1 ]] && run="$word"
        fi
    done
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    elif [[ "$files" == 1 ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    elif [[ -n "$ids" ]]; then
        set -- $ids
        word="${@:n+1:1}"
        [[ -z "$word" && "$ids" == *task ]] && word=task  # retry RUN TASK TASK ...
        case "$word" in
            run) word=$(orchardist __complete run -C "$repo" 2>/dev/null) ;;
            task) word=$(orchardist __complete task "$run" -C "$repo" 2>/dev/null) ;;
            *) word="" ;;
        esac
        COMPREPLY=($(compgen -W "$word" -- "$cur"))
    fi
"""


def _bash(top: list[Option], cmds: list[Command]) -> str:
    names = " ".join(c.name for c in cmds)
    globals_ = " ".join(f for o in top for f in o.flags)
    cases = []
    for c in cmds:
        flags = " ".join(f for o in c.options for f in o.flags)
        choice_cases = "".join(
            f'                {"|".join(o.flags)}) COMPREPLY=($(compgen -W "{" ".join(o.choices)}" '
            f'-- "$cur")); return ;;\n'
            for o in c.options
            if o.choices
        )
        value_flags = "|".join(
            f for o in c.options if o.takes_value and not o.choices for f in o.flags
        )
        value_case = f"                {value_flags}) return ;;\n" if value_flags else ""
        takes = " ".join(f for o in c.options if o.takes_value for f in o.flags)
        cases.append(
            f"        {c.name})\n"
            f'            case "$prev" in\n{choice_cases}{value_case}            esac\n'
            f'            opts="{flags}"; files={int(c.files)}; ids="{" ".join(c.ids)}"; '
            f'takes=" {takes} " ;;\n'
        )
    return f"""# bash completion for orchardist: source <(orchardist completion bash)
_orchardist() {{
    local cur prev cmd i opts files ids takes word repo=. n=0 run=""
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -C) ((i++)); repo="${{COMP_WORDS[i]}}" ;;
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    COMPREPLY=()
    case "$cmd" in
        "")
            COMPREPLY=($(compgen -W "{names} {globals_}" -- "$cur"))
            return ;;
{"".join(cases)}        *) return ;;
    esac
{_BASH_POSITIONALS}}}
complete -o filenames -F _orchardist orchardist
"""


def _zsh_spec(o: Option) -> str:
    flags = o.flags
    help_ = _short(o.help)
    value = ""
    if o.choices:
        value = f":value:({' '.join(o.choices)})"
    elif o.takes_value:
        value = ":value:"
    if len(flags) == 1:
        return f"'{flags[0]}[{help_}]{value}'"
    return f"'({' '.join(flags)})'{{{','.join(flags)}}}'[{help_}]{value}'"


def _zsh(top: list[Option], cmds: list[Command]) -> str:
    described = "\n".join(f"        '{c.name}:{_short(c.help)}'" for c in cmds)
    cases = []
    for c in cmds:
        specs = " ".join(_zsh_spec(o) for o in c.options)
        rest = "'*:file:_files'" if c.files else _zsh_ids(c.ids)
        cases.append(
            f"        {c.name}) shift words; (( CURRENT-- )); _arguments {specs} {rest} ;;\n"
        )
    globals_ = " ".join(_zsh_spec(o) for o in top)
    return f"""#compdef orchardist
# zsh completion for orchardist: source <(orchardist completion zsh), after compinit
_orchardist() {{
    local -a commands
    commands=(
{described}
    )
    local i cmd=""
    for ((i = 2; i < CURRENT; i++)); do
        if [[ "$words[i]" != -* ]]; then cmd="$words[i]"; break; fi
    done
    if [[ -z "$cmd" ]]; then
        _arguments {globals_} '*:: :->cmd'
        _describe 'command' commands
        return
    fi
    case "$cmd" in
{"".join(cases)}    esac
}}
_orchardist_runs() {{
    local -a found; found=(${{(f)"$(orchardist __complete run 2>/dev/null)"}}); compadd -- $found
}}
_orchardist_tasks() {{
    local -a found
    found=(${{(f)"$(orchardist __complete task "$line[1]" 2>/dev/null)"}}); compadd -- $found
}}
if (( $+functions[compdef] )); then
    compdef _orchardist orchardist
fi
"""


def _zsh_ids(ids: tuple[str, ...]) -> str:
    """The positional specs of a command taking a run, then a task (or tasks)."""
    specs = {"run": "'1:run:_orchardist_runs'", "task": "'2:task:_orchardist_tasks'"}
    return " ".join(specs[i] for i in ids) or "'*: :'"


def _fish_ids(c: Command) -> list[str]:
    """Run ids where ``c`` takes its run, the run's task ids where it takes a task."""
    seen = f"__fish_seen_subcommand_from {c.name}"
    count = "test (count (__orchardist_positionals))"
    lines = []
    if c.ids[:1] == ("run",):
        ask = "(orchardist __complete run)"
        lines.append(f"complete -c orchardist -n '{seen}; and {count} -eq 0' -xa '{ask}'")
    if c.ids[1:2] == ("task",):
        ask = "(orchardist __complete task (__orchardist_positionals)[1])"
        lines.append(f"complete -c orchardist -n '{seen}; and {count} -ge 1' -xa '{ask}'")
    return lines


FISH_POSITIONALS = """function __orchardist_positionals
    set -l words (commandline -opc)
    set -e words[1..2]
    string match -v -- '-*' $words
end"""


def _fish(top: list[Option], cmds: list[Command]) -> str:
    lines = [
        "# fish completion for orchardist: orchardist completion fish | source",
        "complete -c orchardist -f",
        FISH_POSITIONALS,
    ]
    for o in top:
        lines.append(f"complete -c orchardist -n __fish_use_subcommand {_fish_flags(o)}")
    for c in cmds:
        lines.append(
            f"complete -c orchardist -n __fish_use_subcommand -a {c.name} -d '{_short(c.help)}'"
        )
    for c in cmds:
        seen = f"-n '__fish_seen_subcommand_from {c.name}'"
        if c.files:
            lines.append(f"complete -c orchardist {seen} -F")
        lines += _fish_ids(c)
        for o in c.options:
            lines.append(f"complete -c orchardist {seen} {_fish_flags(o)}")
    return "\n".join(lines) + "\n"


def _fish_flags(o: Option) -> str:
    parts = []
    for flag in o.flags:
        if flag.startswith("--"):
            parts.append(f"-l {flag[2:]}")
        elif len(flag) == 2:
            parts.append(f"-s {flag[1]}")
        else:
            parts.append(f"-o {flag[1:]}")
    if o.choices:
        parts.append(f"-xa '{' '.join(o.choices)}'")
    elif o.takes_value:
        parts.append("-r")
    parts.append(f"-d '{_short(o.help)}'")
    return " ".join(parts)
