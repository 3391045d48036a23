"""The one rule for ``{name}`` placeholders in the commands a plan gives: agent commands, verify
and check commands, regression commands.

Every ``{...}`` is a placeholder, as in :meth:`str.format`; ``{{`` and ``}}`` are literal braces
(``awk '{{print $1}}'``, ``${{HOME}}``). A name the command's kind does not fill is a problem
reported when the plan is read, never a command run with the braces left in. Values are
shell-quoted.
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Collection, Mapping

AGENT_PLACEHOLDERS = ("task", "candidate", "attempt", "prompt_file", "worktree", "run")
VERIFY_PLACEHOLDERS = ("task",)  # verify and check commands: filled when the plan is read


def placeholder_problems(template: str, allowed: Collection[str], kind: str) -> list[str]:
    """Why ``template`` cannot be filled with the placeholders ``allowed`` in ``kind``
    commands (e.g. "verify and check"): bad brace syntax, or names not filled there."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return [f"bad placeholder syntax: {exc} (write {{{{ and }}}} for literal braces)"]
    problems: list[str] = []
    for name in dict.fromkeys(names):
        if name in allowed:
            continue
        if name in AGENT_PLACEHOLDERS and not allowed:
            problems.append(f"{{{name}}} is not filled in {kind} commands")
        elif name in AGENT_PLACEHOLDERS:
            filled = ", ".join("{" + p + "}" for p in allowed) or "none"
            problems.append(
                f"{{{name}}} is only filled in agent commands; {kind} commands get {filled}"
            )
        else:
            known = ", ".join("{" + p + "}" for p in allowed) or "none"
            problems.append(
                f"unknown placeholder {{{name}}}; known: {known} "
                "(write {{ and }} for literal braces)"
            )
    return problems


def fill(template: str, values: Mapping[str, str]) -> str:
    """``template`` with each placeholder replaced by its value, shell-quoted, and ``{{``/``}}``
    by single braces; call only on a template without :func:`placeholder_problems`."""
    return template.format_map({k: shlex.quote(v) for k, v in values.items()})
