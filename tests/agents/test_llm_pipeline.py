"""The ``llm`` agent drives a whole debug pipeline through ``orchardist debug``, against a local
OpenAI-compatible server whose "model" knows the bug but learns *how to hand over* only from
each stage's prompt: the stage's name, the variable naming the output file and the handoff's
keys are read from the prompt, never hard-coded here."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from modelapi.server import ModelServer, Reply, Request
from run_support import orchardist
from support import git, make_repo

PY = "python"  # this interpreter, without pytest's plugins: conftest
REPRO_TEST = "tests/test_feb30.py"
# the reproduction is a test that runs as a module too: no check here is about how pytest judges
# it (8 pytest runs were most of this test's CPU)
REPRO_CMD = f"{PY} -m tests.test_feb30"
REPORT = "parse_date('2024-02-30') returns a date instead of raising ValueError"
# The run's verify is the suite's one assertion run by python -c, not pytest: no check here is
# about how a suite is judged
SUITE_CMD = (
    f"{PY} -c \"from dates import parse_date; assert parse_date('2024-01-31') == (2024, 1, 31)\""
)

DATES = """\
MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def parse_date(text):
    \"\"\"'YYYY-MM-DD' as (year, month, day); ValueError for a date that does not exist.\"\"\"
    year, month, day = (int(part) for part in text.split("-"))
    if not 1 <= month <= 12 or not 1 <= day <= 31:
        raise ValueError(f"no such date: {text}")
    return year, month, day
"""
TESTS = """\
from dates import parse_date


def test_a_real_date():
    assert parse_date("2024-01-31") == (2024, 1, 31)
"""
REPRO = """\
from dates import parse_date


def test_feb_30_is_rejected():
    try:
        parse_date("2024-02-30")
    except ValueError:
        return
    raise AssertionError("parse_date('2024-02-30') returned a date")


if __name__ == "__main__":
    test_feb_30_is_rejected()
"""
FIX = (
    "sed -i 's/day <= 31:/day <= MONTH_DAYS[month - 1] + (month == 2 and year % 4 == 0):/' dates.py"
)


def bash(thought: str, command: str) -> str:
    return f"{thought}\n\n```bash\n{command}\n```\n"


class DebuggingModel(ModelServer):
    """Chat completions from a model that follows each stage prompt's handoff instructions."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[str] = []  # the stage of each conversation's first request
        self.confused: list[str] = []  # what it could not find in a prompt

    def answer(self, request: Request) -> Reply:
        messages = request.body["messages"]
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        turn = sum(1 for m in messages if m["role"] == "assistant")
        stage = re.search(r"^## Pipeline stage: (\w+)", prompt, re.M)
        if stage is None:
            text = self.confusion("no pipeline stage in the prompt")
        else:
            if turn == 0:
                self.stages.append(stage.group(1))
            text = self.step(stage.group(1), turn, prompt, messages[-1]["content"])
        choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
        body = {"id": f"chat-{len(self.requests)}", "choices": [choice], "usage": usage}
        return Reply.json(body)

    def confusion(self, what: str) -> str:
        self.confused.append(what)
        return "ORCHARDIST_DONE"

    def step(self, stage: str, turn: int, prompt: str, observation: str) -> str:
        if stage == "reproduce":
            script = [
                bash(
                    "A test for the report.",
                    f"mkdir -p tests && cat > {REPRO_TEST} <<'EOF'\n{REPRO}EOF",
                ),
                bash("It must fail now.", REPRO_CMD),
                lambda: self.handoff(prompt, observation),
            ]
        elif stage == "audit":
            script = [
                bash("What was handed over?", 'cat "$ORCHARDIST_INPUTS"'),
                lambda: self.handoff(prompt, observation),
            ]
        elif stage == "localize":
            script = [
                bash("Where is it?", "grep -rl --include='*.py' 'def parse_date' ."),
                lambda: self.handoff(prompt, observation),
            ]
        elif stage == "fix":
            given = re.search(r"reproduction `([^`]+)` must pass", prompt)
            if given is None:
                return self.confusion("the fix prompt names no reproduction")
            script = [bash("Check the day per month.", FIX), bash("Does it pass?", given.group(1))]
        else:
            return self.confusion(f"unknown stage {stage}")
        if turn >= len(script):
            return "Done.\nORCHARDIST_DONE"
        step = script[turn]
        return step if isinstance(step, str) else step()

    def handoff(self, prompt: str, observation: str) -> str:
        """Write the handoff where and as the prompt's "Your handoff" section says."""
        section = prompt.split("## Your handoff", 1)[-1] if "## Your handoff" in prompt else ""
        variable = re.search(r"\b(ORCHARDIST_[A-Z_]+)\b", section)
        example = re.search(r'(\{"handoff": \{.*?\}\})', section, re.S)
        if variable is None or example is None:
            return self.confusion(f"no handoff instructions in: {prompt[-600:]}")
        keys = json.loads(example.group(1))["handoff"]
        handoff = {key: self.knows(key, observation) for key in keys}
        text = json.dumps({"handoff": handoff, "summary": "handed over"}, indent=1)
        return bash("My handoff.", f"cat > \"${variable.group(1)}\" <<'EOF'\n{text}\nEOF")

    def knows(self, key: str, observation: str) -> Any:
        """What the model would say for a key, from the bug and the last command's output."""
        if key == "repro_cmd":
            inputs = re.search(r"<output>\n(\{.*\})\s*</output>", observation, re.S)
            if inputs is not None:  # the audit keeps the command it was handed
                return json.loads(inputs.group(1))["reproduce"]["repro_cmd"]
            return REPRO_CMD
        if key == "files":  # the localize stage's grep output
            found = re.search(r"<output>\n(.*?)</output>", observation, re.S)
            lines = found.group(1).split() if found else []
            return [line.removeprefix("./") for line in lines]
        known = {
            "failing_test": f"{REPRO_TEST}::test_feb_30_is_rejected",
            "verdict": "ok",
            "symbols": ["parse_date"],
            "notes": "the day is checked against 31 whatever the month",
        }
        return known.get(key, "")


def test_the_llm_agent_drives_a_debug_pipeline_writing_its_handoffs_from_its_prompts(
    tmp_path: Path,
) -> None:
    # Given: a repository with a real test suite and the bug, and a config profile of kind llm
    repo = make_repo(
        tmp_path / "repo",
        {"dates.py": DATES, "tests/test_dates.py": TESTS, ".gitignore": "__pycache__/\n"},
    )
    with DebuggingModel() as model:
        (repo / ".orchardist.toml").write_text(
            f'[agents.model]\nkind = "llm"\nbase_url = "{model.url}/v1"\nmodel = "fake"\n'
        )

        # When
        out = orchardist(repo, "debug", REPORT, "--verify", SUITE_CMD, timeout_s=600)

    # Then: every stage ran once, through the model, and the run is done
    assert model.confused == []
    assert out.returncode == 0, out.stdout + out.stderr
    assert model.stages == ["reproduce", "audit", "localize", "fix"]
    run_id = re.search(r"^run (\S+): done", out.stdout, re.M).group(1)  # type: ignore[union-attr]
    branch = f"orchardist/{run_id}"

    # the stages' handoffs are in the status, as the model wrote them
    shown = orchardist(repo, "status", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    handoffs = {
        t["id"]: [a["handoff"] for a in t["attempts"] if a.get("handoff")] for t in status["tasks"]
    }
    assert handoffs["debug.reproduce"] == [
        {
            "repro_cmd": REPRO_CMD,
            "failing_test": f"{REPRO_TEST}::test_feb_30_is_rejected",
            "notes": "the day is checked against 31 whatever the month",
        }
    ]
    assert handoffs["debug.audit"][0]["verdict"] == "ok"
    assert handoffs["debug.localize"][0]["files"] == ["dates.py"]

    # one commit holds the reproduction test and the fix
    base = git(repo, "rev-parse", "HEAD")
    assert git(repo, "rev-list", "--count", f"{base}..{branch}") == "1"
    changed = git(repo, "diff", "--name-only", base, branch).split()
    assert sorted(changed) == ["dates.py", REPRO_TEST]

    # and the reproduction fails on the base and passes on the run branch
    checkout = tmp_path / "checkout"
    git(repo, "worktree", "add", "-q", "--detach", str(checkout), branch)
    assert _run(REPRO_CMD, checkout) == 0
    assert _run(SUITE_CMD, checkout) == 0
    git(checkout, "checkout", "-q", base, "--", "dates.py")
    failed = _run_out(REPRO_CMD, checkout)
    assert failed.returncode != 0
    assert "AssertionError: parse_date('2024-02-30') returned a date" in failed.stderr


def _run(command: str, cwd: Path) -> int:
    return _run_out(command, cwd).returncode


def _run_out(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=120,
    )
