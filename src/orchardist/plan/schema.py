"""The plan file's JSON Schema (draft 2020-12), for editors: ``orchardist schema``.

Built from the validator's own tables (``runtable.RUN_KEYS``, ``PROFILE_KEYS``, ``TASK_KEYS``,
``STAGE_KEYS``, each agent kind's ``profile_keys``, ``scan.profiles.SCANNER_KEYS``): every key
the validator accepts must have a shape here and every shape a key there, or building the schema
fails (and ``tests/plan/test_schema.py`` with it). The schema only helps an editor; ``orchardist
validate`` stays the judge, with located problems and "did you mean".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..agents import KINDS, agent_class
from ..agents.claude import PERMISSION_MODES
from ..agents.codex import SANDBOX_MODES
from ..agents.gemini import APPROVAL_MODES
from ..agents.opencode import _ACTIONS as OPENCODE_ACTIONS
from ..agents.scripted import STEP_KEYS
from ..confine.isolation import Policy
from ..executors import EXECUTORS
from ..scan.profiles import FINDING_FIELDS, SCANNER_KEYS, Format, Scope
from ..specs import MAX_TASK_ID, Reverify, Review
from .fields import SELECT_RULES
from .loading import PROFILE_KEYS
from .runtable import RUN_KEYS
from .tasks import PIPELINES, STAGE_KEYS, STAGE_NAMES, TASK_KEYS

REVIEW_MODES = tuple(r.value for r in Review)

Schema = dict[str, Any]
DRAFT = "https://json-schema.org/draft/2020-12/schema"

# -- shapes ------------------------------------------------------------------------------------


def _doc(schema: Schema, text: str) -> Schema:
    return {**schema, "description": text}


STRING: Schema = {"type": "string"}
NONEMPTY: Schema = {"type": "string", "minLength": 1}
BOOL: Schema = {"type": "boolean"}
STR_LIST: Schema = {"type": "array", "items": STRING}
STR_OR_LIST: Schema = {"anyOf": [STRING, STR_LIST]}
POSITIVE_INT: Schema = {"type": "integer", "minimum": 1}
COUNT: Schema = {"type": "integer", "minimum": 0}
POSITIVE: Schema = {"type": "number", "exclusiveMinimum": 0}
NON_NEGATIVE: Schema = {"type": "number", "minimum": 0}
# 90, "90s", "5m", "1h30m", "250ms" (units ms, s, m, h, d; the validator ignores case and spaces)
DURATION: Schema = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0, "maximum": 366 * 86400},
        {
            "type": "string",
            "pattern": r"^ *([0-9]+(\.[0-9]+)? *([mM][sS]|[sSmMhHdD]) *)+$|^ *[0-9]+(\.[0-9]+)? *$",
        },
    ],
    "description": 'seconds, or a duration such as "90s", "5m", "1h30m" (units ms, s, m, h, d)',
}
COMMANDS: Schema = _doc(
    {"anyOf": [STRING, STR_LIST]},
    'a command (run with /bin/sh -c) or a list of them; "none" for no commands',
)
# A path inside the repository (no absolute path; the validator also refuses "..").
WORKDIR: Schema = {"type": "string", "not": {"pattern": "^/"}}


def _choice(values: Iterable[str], text: str = "") -> Schema:
    schema: Schema = {"enum": list(values)}
    return _doc(schema, text) if text else schema


# -- tables ------------------------------------------------------------------------------------

RUN_FIELDS: dict[str, Schema] = {
    "base": _doc(STRING, "the commit the run starts from (default HEAD)"),
    "branch": _doc(NONEMPTY, 'the run branch; {run} is the run id (default "orchardist/{run}")'),
    "max_parallel": _doc(POSITIVE_INT, "attempts running at once"),
    "verify": _doc(COMMANDS, "every task's verify commands unless the task sets its own"),
    "repo": _doc(STRING, "the repository, relative to the plan file"),
    "workdir": _doc(WORKDIR, "where commands run, relative to the repository"),
    "deadline": _doc(DURATION, "wall time for the whole run"),
    "max_cost_usd": _doc(POSITIVE, "stop launching once agents reported this much"),
    "retry_backoff": _doc(DURATION, "first retry's delay; doubles per failure"),
    "candidates": _doc(POSITIVE_INT, "attempts per task round"),
    "select": _choice(SELECT_RULES, "which passing candidate wins"),
    "review": _choice(REVIEW_MODES, "human: verified patches wait for a person (default auto)"),
    "regression": _doc(COMMANDS, "commands run on the run branch after merges"),
    "regression_every": _doc(POSITIVE_INT, "merges between regression checks"),
    "reverify": _choice(
        [r.value for r in Reverify], "verify a merged patch again: always, or on shared files"
    ),
    "max_patch_mb": _doc(POSITIVE, "a patch with a larger file fails"),
    "guard_checkout": _doc(BOOL, "fail an attempt during which the user's checkout changed"),
    "sandbox": _doc(BOOL, 'false: the same as isolation = "off"'),
    "isolation": _choice([p.value for p in Policy], "how attempts are confined"),
    "network": _doc(BOOL, "verify commands, checks and baselines may use the network"),
    "workspace": _doc(NONEMPTY, "root of the attempt folders, outside the repository"),
    "environment": _doc(STR_LIST, "untracked folders of the checkout shown read-only in attempts"),
    "executor": _choice(sorted(EXECUTORS), "where attempts run"),
    "ray_address": _doc(NONEMPTY, "the Ray cluster of executor ray: host:port, or auto"),
    "notify": _doc(NONEMPTY, "a command or an http(s) URL told when the run ends (JSON)"),
    "notify_timeout": _doc(DURATION, "then the notify command is killed (default 30s)"),
}

PROFILE_FIELDS: dict[str, Schema] = {
    "kind": _choice(sorted(KINDS), 'the kind of agent (default "shell")'),
    "timeout": _doc(DURATION, "per attempt"),
    "max_parallel": _doc(POSITIVE_INT, "attempts of this profile running at once"),
    "env": _doc(STR_OR_LIST, "the caller's environment variables the agent may see"),
    "launch_interval": _doc(DURATION, "least time between two launches"),
    "fallback": _doc(STRING, "the profile to use while this one's breaker is open"),
    "circuit_breaker": _doc(COUNT, "consecutive failures that open the breaker; 0: off"),
    "cooldown": _doc(DURATION, "how long an open breaker stays open"),
    "num_cpus": _doc(POSITIVE, "CPUs one attempt holds on its Ray node (default 1; executor ray)"),
    "memory_mb": _doc(
        POSITIVE, "MiB of memory one attempt reserves on its Ray node (executor ray)"
    ),
}

_CLI_COMMON: dict[str, Schema] = {
    "command": _doc(NONEMPTY, "the executable to run"),
    "model": _doc(NONEMPTY, "the model name"),
    "args": _doc(STR_LIST, "extra arguments"),
    "max_turns": _doc(POSITIVE_INT, "turn limit"),
    "max_cost_usd": _doc(POSITIVE, "US dollars one attempt may spend"),
    "permission": _doc(STRING, "the tool's permission mode"),
    "price_in": _doc(NON_NEGATIVE, "US dollars per million input tokens (with price_out)"),
    "price_out": _doc(NON_NEGATIVE, "US dollars per million output tokens (with price_in)"),
}
_TOOLS = _doc(STR_LIST, "tools the agent may use")


def _unsupported(why: str) -> Schema:
    return {"not": {}, "description": why}


def _cli_kind(extra: Mapping[str, Schema], permission: Schema | None = None) -> dict[str, Schema]:
    fields = dict(_CLI_COMMON)
    if permission is not None:
        fields["permission"] = permission
    return {**fields, **extra}


def kind_fields(kind: str) -> dict[str, Schema]:
    """The shapes of one agent kind's own keys (its ``profile_keys``)."""
    cls: Any = agent_class(kind)
    unsupported = {key: _unsupported(why) for key, why in getattr(cls, "unsupported", {}).items()}
    by_kind: dict[str, dict[str, Schema]] = {
        "shell": {"command": _doc(NONEMPTY, "the command line; {task}, {prompt_file}, ...")},
        "scripted": {
            "script": _doc(
                {
                    "type": "object",
                    "additionalProperties": {
                        "anyOf": [
                            {"$ref": "#/$defs/scripted_step"},
                            {"type": "array", "items": {"$ref": "#/$defs/scripted_step"}},
                        ]
                    },
                },
                '"task/candidate", "task" or "*" -> a step, or a list of steps per attempt',
            )
        },
        "claude": _cli_kind({"allowed_tools": _TOOLS}, _choice(PERMISSION_MODES)),
        "gemini": _cli_kind({"allowed_tools": _TOOLS}, _choice(APPROVAL_MODES)),
        "codex": _cli_kind({}, _choice(SANDBOX_MODES)),
        "opencode": _cli_kind(
            {},
            _doc(
                {
                    "type": "object",
                    "additionalProperties": {
                        "anyOf": [
                            _choice(OPENCODE_ACTIONS),
                            {"type": "object", "additionalProperties": _choice(OPENCODE_ACTIONS)},
                        ]
                    },
                },
                'permission -> allow, ask or deny, e.g. {edit = "allow", bash = "allow"}',
            ),
        ),
        "aider": _cli_kind({}),
        "llm": {
            "base_url": _doc({"type": "string", "pattern": "^https?://"}, "the API's base URL"),
            "api_key_env": _doc(
                {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                "the environment variable holding the API key",
            ),
            "model": _doc(NONEMPTY, "the model name the API expects"),
            "max_turns": _doc(POSITIVE_INT, "turn limit"),
            "max_cost_usd": _doc(NON_NEGATIVE, "US dollars one attempt may spend"),
            "price_in": _CLI_COMMON["price_in"],
            "price_out": _CLI_COMMON["price_out"],
            "command_timeout": _doc(DURATION, "per shell command the model runs"),
            "temperature": _doc(NON_NEGATIVE, "sampling temperature"),
        },
    }
    fields = by_kind.get(kind)
    if fields is None:
        raise KeyError(f"no schema for agent kind {kind!r}: add it to schema.kind_fields")
    fields = {**fields, **{k: v for k, v in unsupported.items() if k in fields}}
    return _exactly(fields, cls.profile_keys, f"agents.<{kind}>")


STAGE_FIELDS: dict[str, Schema] = {
    "agent": _doc(STR_OR_LIST, "the profile(s) for this stage"),
    "timeout": _doc(DURATION, "per attempt of this stage"),
    "retries": _doc(COUNT, "retries of this stage"),
    "candidates": _doc(POSITIVE_INT, "attempts per round of this stage"),
}

TASK_FIELDS: dict[str, Schema] = {
    "id": _doc(
        {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$", "maxLength": MAX_TASK_ID},
        "unique within the plan",
    ),
    "title": _doc(STRING, "one line (default: the id)"),
    "prompt": _doc(STRING, "what the agent is asked to do"),
    "prompt_file": _doc(STRING, "the prompt, from a file relative to the plan"),
    "agent": _doc(
        {"anyOf": [STRING, {"type": "array", "items": STRING, "minItems": 1}]},
        "a profile name, or one per candidate",
    ),
    "depends_on": _doc(STR_OR_LIST, "tasks that must be done first"),
    "verify": _doc(COMMANDS, '"auto": tests discovered from the changed files'),
    "retries": _doc(COUNT, "attempts after the first"),
    "timeout": _doc(DURATION, "per attempt, agent and verify together"),
    "priority": _doc({"type": "integer"}, "higher first among equals"),
    "estimate": _doc(DURATION, "expected duration, for the critical path"),
    "workdir": _doc(WORKDIR, "where commands run, relative to the repository"),
    "candidates": _doc(POSITIVE_INT, "attempts per round"),
    "select": _choice(SELECT_RULES, "which passing candidate wins"),
    "review": _choice(REVIEW_MODES, "human: its verified patch waits for a person"),
    "check": _doc(STRING, "a reproduction: must fail on the base and pass on the candidate"),
    "max_cost_usd": _doc(POSITIVE, "this task's budget"),
    "network": _doc(BOOL, "its verify commands and check may use the network"),
    "allow_empty": _doc(BOOL, "an attempt that changes nothing may pass"),
    "pipeline": _choice(PIPELINES, "run the task as stages"),
    "stages": _doc(
        {
            "type": "object",
            "properties": {
                name: (
                    {"anyOf": [{"$ref": "#/$defs/stage"}, BOOL]}
                    if name == "audit"
                    else {"$ref": "#/$defs/stage"}
                )
                for name in STAGE_NAMES
            },
            "additionalProperties": False,
        },
        "per-stage routing of a pipeline task; stages.audit = false skips the audit",
    ),
}

SCANNER_FIELDS: dict[str, Schema] = {
    "command": _doc(STRING, "the scanner's command, with {files} (and {output})"),
    "format": _choice([f.value for f in Format], "how it reports"),
    "scope": _choice([s.value for s in Scope], "what one cached result covers"),
    "include": _doc(STR_OR_LIST, "globs of files to scan"),
    "exclude": _doc(STR_OR_LIST, "globs of files to leave out"),
    "config": _doc(STR_OR_LIST, "globs of files whose content is part of every cache key"),
    "version": _doc(STRING, "a command whose output is part of the cache key"),
    "timeout": _doc(DURATION, "per run of the scanner"),
    "env": _doc(STR_OR_LIST, "the caller's environment variables it may see"),
    "fields": _doc(
        {
            "type": "object",
            "propertyNames": _choice(FINDING_FIELDS),
            "additionalProperties": STRING,
        },
        "finding field -> key in the scanner's JSON",
    ),
    "agent": _doc(STRING, 'the agent profile (format = "agent")'),
    "prompt": _doc(STRING, 'what the agent should review (format = "agent")'),
}


def _exactly(fields: dict[str, Schema], keys: Iterable[str], where: str) -> dict[str, Schema]:
    """``fields`` when it names exactly ``keys``; a KeyError naming the difference otherwise."""
    keys = set(keys)
    missing, extra = sorted(keys - set(fields)), sorted(set(fields) - keys)
    if missing or extra:
        raise KeyError(f"{where}: keys without a schema {missing}, schemas without a key {extra}")
    return dict(sorted(fields.items()))


def _object(fields: dict[str, Schema], **more: Any) -> Schema:
    return {"type": "object", "properties": fields, "additionalProperties": False, **more}


def _profile() -> Schema:
    """``[agents.NAME]``: the common keys plus those of its kind (``shell`` when absent)."""
    common = _exactly(PROFILE_FIELDS, PROFILE_KEYS, "agents.<profile>")
    branches: list[Schema] = []
    for kind in sorted(KINDS):
        own = kind_fields(kind)
        when: Schema = {"properties": {"kind": {"const": kind}}, "required": ["kind"]}
        if kind == "shell":
            when = {"anyOf": [when, {"not": {"required": ["kind"]}}]}
        branches.append({"if": when, "then": _object({**common, **own})})
    return {"type": "object", "properties": common, "allOf": branches}


def plan_schema() -> Schema:
    """The whole plan file's schema."""
    task = _object(
        _exactly(TASK_FIELDS, TASK_KEYS, "task"),
        required=["id"],
        **{"not": {"required": ["prompt", "prompt_file"]}},
    )
    step = _object({key: {} for key in sorted(STEP_KEYS)})
    return {
        "$schema": DRAFT,
        "title": "orchardist plan",
        "description": "A plan file (TOML or YAML): [run], [agents.NAME], [[task]] and "
        "[scanners.NAME]. `orchardist validate PLAN` checks what a schema cannot.",
        "type": "object",
        "properties": {
            "run": _object(_exactly(RUN_FIELDS, RUN_KEYS, "run")),
            "agents": {"type": "object", "additionalProperties": {"$ref": "#/$defs/profile"}},
            "task": {"type": "array", "items": {"$ref": "#/$defs/task"}},
            "tasks": {"type": "array", "items": {"$ref": "#/$defs/task"}},
            "scanners": {
                "type": "object",
                "propertyNames": {"pattern": "^[A-Za-z0-9_.-]+$"},
                "additionalProperties": {"$ref": "#/$defs/scanner"},
            },
        },
        "additionalProperties": False,
        "not": {"required": ["task", "tasks"]},
        "$defs": {
            "profile": _profile(),
            "task": task,
            "stage": _object(_exactly(STAGE_FIELDS, STAGE_KEYS, "stages.<stage>")),
            "scanner": _object(_exactly(SCANNER_FIELDS, SCANNER_KEYS, "scanners.<name>")),
            "scripted_step": step,
        },
    }
