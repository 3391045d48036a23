"""`orchardist schema`: a JSON Schema that every documented plan meets, built from the
validator's own tables so that the two cannot drift apart."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from orchardist.agents import KINDS, agent_class
from orchardist.cli import main
from orchardist.config import TRUST_KEY
from orchardist.errors import PlanError
from orchardist.plan.loading import PROFILE_KEYS, load_plan
from orchardist.plan.runtable import RUN_KEYS
from orchardist.plan.schema import kind_fields, plan_schema
from orchardist.plan.tasks import STAGE_KEYS, TASK_KEYS
from orchardist.scan.profiles import SCANNER_KEYS

ROOT = Path(__file__).resolve().parents[2]
PLAN_KEYS = {"run", "agents", "task", "tasks", "scanners"}
VALIDATOR = jsonschema.Draft202012Validator(plan_schema())


def schema_errors(data: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(data)
    ]


def documented_plans() -> list[tuple[str, Any]]:
    """Plan files in examples/, and plans in the TOML and YAML blocks of README.md and docs/
    (blocks with none of a plan's top-level keys, such as a Prometheus config, are not plans)."""
    found = []
    for path in sorted((ROOT / "examples").rglob("*")):
        if path.suffix == ".toml":
            found.append((str(path.relative_to(ROOT)), tomllib.loads(path.read_text())))
        elif path.suffix in (".yaml", ".yml"):
            found.append((str(path.relative_to(ROOT)), yaml.safe_load(path.read_text())))
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for block in re.finditer(r"```(toml|yaml|yml)\n(.*?)```", text, re.S):
            lang, body = block.groups()
            data = tomllib.loads(body) if lang == "toml" else yaml.safe_load(body)
            if isinstance(data, dict) and TRUST_KEY in data:  # the user's config file: its
                data.pop(TRUST_KEY)  # profiles are a plan's [agents]; this key is its own
            if isinstance(data, dict) and PLAN_KEYS & set(data):
                line = text[: block.start()].count("\n") + 1
                found.append((f"{doc.relative_to(ROOT)}:{line}", data))
    return found


def test_the_schema_is_valid_draft_2020_12() -> None:
    schema = plan_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_every_plan_in_the_examples_and_the_docs_meets_the_schema() -> None:
    plans = documented_plans()
    places = {where.split(":")[0] for where, _ in plans}
    # the quickstart, the plan reference and the pages that show plans are all among them
    assert {"examples/quickstart/plan.toml", "docs/plan.md", "docs/agents.md"} <= places
    assert len(plans) >= 10
    for where, data in plans:
        assert schema_errors(data) == [], where


def test_the_quickstart_plan_as_yaml_meets_the_schema_and_the_validator(repo: Path) -> None:
    # Given: the quickstart's plan written as YAML in a repository
    data = tomllib.loads((ROOT / "examples" / "quickstart" / "plan.toml").read_text())
    as_yaml = repo / "plan.yaml"
    as_yaml.write_text(yaml.safe_dump(data))
    # Then: both the schema and the validator accept it
    assert schema_errors(yaml.safe_load(as_yaml.read_text())) == []
    assert len(load_plan(as_yaml).tasks) == len(data["task"]) == 9


# -- the schema and the validator accept the same keys -------------------------------------------


def _props(ref: str) -> set[str]:
    return set(plan_schema()["$defs"][ref]["properties"])


def test_the_schema_names_exactly_the_keys_the_validator_accepts() -> None:
    schema = plan_schema()
    assert set(schema["properties"]["run"]["properties"]) == RUN_KEYS
    assert set(schema["properties"]) == PLAN_KEYS
    assert _props("profile") == PROFILE_KEYS
    assert _props("task") == TASK_KEYS
    assert _props("stage") == STAGE_KEYS
    assert _props("scanner") == SCANNER_KEYS
    for kind in KINDS:
        assert set(kind_fields(kind)) == set(agent_class(kind).profile_keys), kind


def _problems(tmp_path: Path, text: str) -> list[tuple[str | None, str]]:
    (tmp_path / "plan.toml").write_text(text)
    try:
        load_plan(tmp_path / "plan.toml")
    except PlanError as exc:
        return [(p.field, p.message) for p in exc.problems]
    return []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_key_of_a_kind_in_the_schema_is_known_to_the_validator(kind: str, repo: Path) -> None:
    # Given: a profile of this kind setting every key the schema allows it (to a value of the
    # wrong type on purpose, so that the validator looks at each)
    profile = plan_schema()["$defs"]["profile"]
    (branch,) = [b for b in profile["allOf"] if kind in json.dumps(b["if"])]
    keys = sorted(set(branch["then"]["properties"]) - {"kind"})
    lines = [f"[agents.p]\nkind = {json.dumps(kind)}"] + [f"{k} = {{}}" for k in keys]
    lines.append('[[task]]\nid = "a"\nagent = "p"')
    # When: the plan is validated
    problems = _problems(repo, "\n".join(lines) + "\n")
    # Then: none of those keys is unknown to it
    assert [m for _, m in problems if m.startswith("unknown key")] == []


def test_a_key_neither_knows_is_refused_by_both(repo: Path) -> None:
    text = '[run]\nmax_paralel = 2\n[agents.p]\ncommand = "true"\n[[task]]\nid = "a"\n'
    assert ("run.max_paralel", "unknown key 'max_paralel'; did you mean 'max_parallel'?") in (
        _problems(repo, text)
    )
    assert schema_errors(tomllib.loads(text)) != []


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[run]\nmax_parallel = 0\n", "run.max_parallel"),
        ('[run]\ndeadline = "soon"\n', "run.deadline"),
        ('[run]\nisolation = "maybe"\n', "run.isolation"),
        ('[agents.p]\nkind = "robot"\n', "agents.p.kind"),
        ('[agents.p]\nkind = "codex"\npermission = "everything"\n', "agents.p.permission"),
        ('[agents.p]\nkind = "codex"\nmax_turns = 3\n', "agents.p.max_turns"),
        ('[agents.p]\nkind = "gemini"\nmax_cost_usd = 3\n', "agents.p.max_cost_usd"),
        ('[[task]]\nid = "a b"\n', "id"),
        ('[[task]]\nid = "a"\nprompt = "x"\nprompt_file = "p.md"\n', "prompt_file"),
        ('[[task]]\nid = "a"\nretries = -1\n', "retries"),
        ('[[task]]\nid = "a"\npipeline = "deploy"\n', "pipeline"),
        ('[[task]]\nid = "a"\npipeline = "fix"\nstages = {review = {}}\n', "stages.review"),
        ('[scanners.s]\nformat = "xml"\n', "scanners.s.format"),
        ('task = [{id = "a"}]\ntasks = [{id = "b"}]\n', "tasks"),
    ],
)
def test_values_the_validator_refuses_are_refused_by_the_schema_too(
    text: str, field: str, repo: Path
) -> None:
    assert field in [f for f, _ in _problems(repo, text)]
    assert schema_errors(tomllib.loads(text)) != [], text


def test_orchardist_schema_prints_the_schema_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == plan_schema()


def test_the_editor_comments_the_plan_reference_shows_are_plain_comments_to_orchardist(
    repo: Path,
) -> None:
    body = '[agents.p]\ncommand = "true"\n\n[[task]]\nid = "a"\nagent = "p"\n'
    (repo / "plan.toml").write_text("#:schema ./plan.schema.json\n" + body)
    as_yaml = yaml.safe_dump(tomllib.loads(body))
    (repo / "plan.yaml").write_text(
        "# yaml-language-server: $schema=./plan.schema.json\n" + as_yaml
    )
    reference = (ROOT / "docs" / "plan.md").read_text()
    assert "#:schema ./plan.schema.json" in reference
    assert "# yaml-language-server: $schema=./plan.schema.json" in reference
    for name in ("plan.toml", "plan.yaml"):
        assert [t.id for t in load_plan(repo / name).tasks] == ["a"]
