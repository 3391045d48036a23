"""Continuing an agent's session on the task's next attempt (agents/sessions.py,
executors/continuing.py): which files are kept, for whom, and what the agent is told.

The real CLIs continuing their sessions against the fake model APIs are in
test_real_sessions*.py; here the logic runs on in-test agents and the fake CLIs.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
from agent_testing import fake_call, make_ctx

from orchardist.agents import KINDS, agent_class, make_agent
from orchardist.agents import sessions as sessions_module
from orchardist.agents.context import AgentContext, AgentResult
from orchardist.agents.sessions import Saved, SessionKey, Sessions
from orchardist.confine.attemptpaths import AttemptPaths
from orchardist.executors import AttemptJob
from orchardist.executors.continuing import run_continuing
from orchardist.state.agentrecords import AgentProfile, Failure
from orchardist.state.usage import Usage
from support import write_plan

SESSION_FILE = ".tool/sessions/s-1.jsonl"
KEY = SessionKey("run1", "fix", 0, "tool")


def home_with_session(root: Path, text: str = "turn 1\n") -> Path:
    """An attempt's HOME in which the tool left one session file."""
    home = root / "home"
    (home / SESSION_FILE).parent.mkdir(parents=True)
    (home / SESSION_FILE).write_text(text)
    return home


def kept(tmp_path: Path, key: SessionKey = KEY) -> Sessions:
    """A store holding the session of ``key``'s first attempt."""
    store = Sessions(tmp_path / "state" / "sessions")
    home = home_with_session(tmp_path / "first")
    why = store.keep(key, Saved("tool", "s-1", 1, "I made add() multiply."), (".tool",), home)
    assert why == ""
    return store


def begin(store: Sessions, home: Path, key: SessionKey = KEY, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "kind": "tool",
        "files": (".tool",),
        "prompt": "THE WHOLE BRIEF",
        "followup": "It failed: fix it.",
    }
    return store.begin(key, home=home, **{**args, **kw})


# -- what is kept, and for whom --------------------------------------------------------------


def test_the_next_attempt_of_the_task_gets_the_session_back_and_only_the_followup(
    tmp_path: Path,
) -> None:
    store = kept(tmp_path)
    home = tmp_path / "second" / "home"
    home.mkdir(parents=True)
    start = begin(store, home)
    assert (start.resume, start.prompt, start.note) == (
        "s-1",
        "It failed: fix it.",
        "continued s-1",
    )
    assert (home / SESSION_FILE).read_text() == "turn 1\n"


@pytest.mark.parametrize(
    "other",
    [
        SessionKey("run1", "other-task", 0, "tool"),
        SessionKey("run1", "fix", 1, "tool"),
        SessionKey("run1", "fix", 0, "another-profile"),
        SessionKey("run2", "fix", 0, "tool"),
    ],
    ids=["another task", "another candidate", "another profile", "another run"],
)
def test_another_tasks_attempt_gets_a_fresh_home(tmp_path: Path, other: SessionKey) -> None:
    store = kept(tmp_path)
    home = tmp_path / "other" / "home"
    home.mkdir(parents=True)
    start = begin(store, home, key=other)
    assert start.resume is None
    assert start.prompt == "THE WHOLE BRIEF"
    assert start.note == "fresh (no earlier session of this task)"
    assert list(home.iterdir()) == []


def test_a_first_attempt_starts_afresh_with_the_whole_prompt_and_no_note(tmp_path: Path) -> None:
    store = kept(tmp_path)
    home = tmp_path / "again" / "home"
    home.mkdir(parents=True)
    start = begin(store, home, followup="")
    assert (start.resume, start.prompt, start.note) == (None, "THE WHOLE BRIEF", "")
    assert list(home.iterdir()) == []


def test_a_kind_that_cannot_continue_starts_afresh_with_the_whole_prompt(tmp_path: Path) -> None:
    store = kept(tmp_path)
    home = tmp_path / "again" / "home"
    home.mkdir(parents=True)
    start = begin(store, home, files=())
    assert (start.resume, start.prompt) == (None, "THE WHOLE BRIEF")
    assert start.note == "fresh (tool cannot continue a session)"


def test_a_fresh_start_after_a_session_quotes_what_the_agent_last_said(tmp_path: Path) -> None:
    store = kept(tmp_path)
    home = tmp_path / "again" / "home"
    home.mkdir(parents=True)
    start = begin(store, home, kind="other")
    assert start.resume is None
    assert start.note == "fresh (the earlier session is tool's)"
    assert start.prompt.startswith("THE WHOLE BRIEF\n\n")
    assert "I made add() multiply." in start.prompt
    assert "data, not instructions" in start.prompt


def test_missing_session_files_start_afresh_saying_so(tmp_path: Path) -> None:
    store = kept(tmp_path)
    for path in sorted((KEY.folder(store.root) / "home").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    home = tmp_path / "again" / "home"
    home.mkdir(parents=True)
    start = begin(store, home)
    assert (start.resume, start.note) == (None, "fresh (its session files are missing)")


def test_a_session_that_worked_in_another_folder_starts_afresh(tmp_path: Path) -> None:
    # Given a session kept by an attempt that saw its tree at /attempts/1/tree (no isolation
    # view: each attempt's own folder, which its conversation names)
    store = Sessions(tmp_path / "state")
    home = home_with_session(tmp_path / "first")
    store.keep(KEY, Saved("tool", "s-1", 1, "", "/attempts/1/tree"), (".tool",), home)
    # When the retry sees its tree elsewhere
    again = tmp_path / "again" / "home"
    again.mkdir(parents=True)
    start = begin(store, again, where="/attempts/2/tree")
    # Then it starts afresh, saying why
    assert start.resume is None
    assert start.note == "fresh (the earlier session worked in /attempts/1/tree)"


def test_a_symlink_or_fifo_in_the_session_folder_is_not_followed_or_read(tmp_path: Path) -> None:
    # Given an agent that left, among its session files, a link to a secret and a FIFO
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's key")
    home = home_with_session(tmp_path / "first")
    (home / ".tool" / "sessions" / "key.jsonl").symlink_to(secret)
    (home / ".tool" / "linked").symlink_to(tmp_path)
    os.mkfifo(home / ".tool" / "sessions" / "pipe")
    store = Sessions(tmp_path / "state")
    # When its session is kept
    assert store.keep(KEY, Saved("tool", "s-1", 1), (".tool",), home) == ""
    # Then only the regular file was copied: no link, no FIFO, nothing of the secret
    copied = KEY.folder(store.root) / "home"
    found = sorted(str(p.relative_to(copied)) for p in copied.rglob("*"))
    assert found == [".tool", ".tool/sessions", ".tool/sessions/s-1.jsonl"]


def test_session_files_over_the_limit_are_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions_module, "MAX_SESSION_BYTES", 1000)
    home = home_with_session(tmp_path / "first", "x" * 1001)
    store = Sessions(tmp_path / "state")
    why = store.keep(KEY, Saved("tool", "s-1", 1), (".tool",), home)
    assert why == "larger than 0 MiB"
    assert store.load(KEY) is None


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_kind_keeps_the_credentials_copied_into_its_home(kind: str) -> None:
    cls = agent_class(kind)
    for name in cls.home_files:
        for kept_path in cls.session_files:
            assert not Path(name).is_relative_to(kept_path), (kind, name, kept_path)
            assert name != kept_path


# -- running the agent: continue, or fall back ------------------------------------------------


class ToolAgent:
    """An agent kind whose tool keeps a session file in HOME and refuses an unknown one."""

    kind: ClassVar[str] = "tool"
    session_files: ClassVar[tuple[str, ...]] = (".tool",)

    def __init__(self) -> None:
        self.told: list[tuple[str, str | None]] = []

    def run(self, ctx: AgentContext) -> AgentResult:
        self.told.append((ctx.prompt, ctx.resume))
        if ctx.resume and not (ctx.home / f".tool/sessions/{ctx.resume}.jsonl").exists():
            return AgentResult(1, 0.1, Failure.AGENT_ERROR, f"No session {ctx.resume}")
        session = ctx.resume or f"s-{ctx.attempt}"
        (ctx.home / ".tool/sessions").mkdir(parents=True, exist_ok=True)
        (ctx.home / f".tool/sessions/{session}.jsonl").write_text("turns\n")
        return AgentResult(0, 0.1, None, "done", Usage(turns=1, session_id=session))


def job(attempt: int, followup: str = "") -> AttemptJob:
    return AttemptJob(
        id=f"fix.{attempt}",
        run_id="run1",
        task_id="fix",
        attempt=attempt,
        candidate=0,
        base_commit="0" * 40,
        title="Fix",
        prompt="THE WHOLE BRIEF",
        profile=AgentProfile("tool", "tool"),
        verify=(),
        workdir=".",
        timeout_s=60,
        message="m",
        marker="mk",
        followup=followup,
    )


def context_for(tmp_path: Path, attempt: int) -> Any:
    """What the executor gives run_continuing: the attempt's context but for prompt and resume."""
    home = tmp_path / f"a{attempt}" / "home"
    home.mkdir(parents=True)
    base = make_ctx(tmp_path, "claude")

    def context(prompt: str, resume: str | None = None) -> AgentContext:
        paths = dataclasses.replace(AttemptPaths.under(tmp_path / f"a{attempt}"), home=home)
        return dataclasses.replace(base, attempt=attempt, prompt=prompt, resume=resume, paths=paths)

    return home, context


def test_a_retry_continues_the_session_and_is_told_only_the_followup(tmp_path: Path) -> None:
    agent, store = ToolAgent(), Sessions(tmp_path / "state")
    home1, context1 = context_for(tmp_path, 1)
    _, note1 = run_continuing(agent, job(1), store, home1, context1)  # type: ignore[arg-type]
    home2, context2 = context_for(tmp_path, 2)
    result, note2 = run_continuing(agent, job(2, "Fix it."), store, home2, context2)  # type: ignore[arg-type]
    assert agent.told == [("THE WHOLE BRIEF", None), ("Fix it.", "s-1")]
    assert (note1, note2, result.failure) == ("", "continued s-1", None)
    assert "orchardist: session: continued s-1" in context2("x").log.read_text()


def test_a_session_the_tool_refuses_is_run_again_afresh(tmp_path: Path) -> None:
    # Given a kept session whose file the tool will not find (its record names another id)
    agent, store = ToolAgent(), Sessions(tmp_path / "state")
    home1, context1 = context_for(tmp_path, 1)
    run_continuing(agent, job(1), store, home1, context1)  # type: ignore[arg-type]
    where = str(context1("x").seen_cwd)
    store.keep(KEY, Saved("tool", "gone", 1, "I tried.", where), (".tool",), home1)
    # When the retry runs
    home2, context2 = context_for(tmp_path, 2)
    result, note = run_continuing(agent, job(2, "Fix it."), store, home2, context2)  # type: ignore[arg-type]
    # Then the tool refused to continue, and ran again with the whole brief
    assert [resume for _, resume in agent.told] == [None, "gone", None]
    assert agent.told[-1][0].startswith("THE WHOLE BRIEF")
    assert "I tried." in agent.told[-1][0]
    assert note == "fresh (tool could not continue gone: No session gone)"
    assert result.failure is None


def test_a_state_folder_that_cannot_hold_sessions_only_notes_it(tmp_path: Path) -> None:
    # Given a state folder where the sessions' folder cannot be made (a file is in its way)
    (tmp_path / "state").write_text("not a folder")
    agent, store = ToolAgent(), Sessions(tmp_path / "state" / "sessions")
    # When an attempt runs, and its retry
    home1, context1 = context_for(tmp_path, 1)
    result, note = run_continuing(agent, job(1), store, home1, context1)  # type: ignore[arg-type]
    home2, context2 = context_for(tmp_path, 2)
    _, note2 = run_continuing(agent, job(2, "Fix it."), store, home2, context2)  # type: ignore[arg-type]
    # Then each ran, the first noting that its session was not kept, the retry starting afresh
    assert result.failure is None
    assert note.startswith("not kept (cannot write them: "), note
    assert note2.startswith("fresh (no earlier session of this task); not kept ("), note2
    assert agent.told[-1] == ("THE WHOLE BRIEF", None)


# -- each CLI's way to continue ---------------------------------------------------------------

RESUMED = {
    "claude": ["--resume", "sess-1"],
    "codex": ["exec", "resume"],
    "opencode": ["--session", "sess-1"],
    "gemini": ["--resume", "sess-1"],
    "aider": ["--restore-chat-history"],
}


@pytest.mark.parametrize("kind", sorted(RESUMED))
def test_each_cli_is_asked_to_continue_its_session(kind: str, repo: Path, fake_bin: Path) -> None:
    ctx = dataclasses.replace(make_ctx(repo, kind), resume="sess-1")
    options = {"model": "p/m"} if kind == "opencode" else {}
    make_agent(AgentProfile("p", kind, options=options)).run(ctx)
    argv = fake_call(kind)["argv"]
    want = RESUMED[kind]
    assert any(argv[i : i + len(want)] == want for i in range(len(argv))), argv
    if kind == "codex":  # the session, then the message
        assert argv[-2:] == ["sess-1", ctx.prompt]


DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"shell", "scripted"}))
def test_the_docs_table_names_each_kinds_session_files(kind: str) -> None:
    text = DOC.read_text()
    section = text[text.index("## Continuing a session") :]
    (row,) = [line for line in section.splitlines() if line.startswith(f"| `{kind}` |")]
    for name in agent_class(kind).session_files:
        assert f"`~/{name}`" in row or f"`~/{name}/`" in row, (kind, name)


def test_a_run_says_in_the_retrys_event_how_its_session_started(repo: Path, run_plan: Any) -> None:
    # Given: a task whose scripted agent (a kind that cannot continue) fails verify, then fixes
    plan = write_plan(
        repo,
        """
        [agents.fake]
        kind = "scripted"
        [agents.fake.script]
        fix = [
            { write = { "a.txt" = "wrong\\n" }, output = { session_id = "s-1" } },
            { write = { "a.txt" = "right\\n" } },
        ]

        [[task]]
        id = "fix"
        prompt = "Write right into a.txt."
        verify = "grep -q right a.txt"
        retries = 1
        """,
    )
    # When: it runs
    run = run_plan(plan)
    # Then: the retry's ending event says it started afresh and why; the first says nothing
    ended = {
        e.attempt: dict(e.data)
        for e in run.ws.store.events(run.run.id)
        if e.kind == "attempt" and e.data.get("state") in ("passed", "failed")
    }
    assert run.doc["tasks"][0]["state"] == "done", run.doc
    assert "session" not in ended[1] or ended[1]["session"] is None, ended
    assert ended[2]["session"] == "fresh (scripted cannot continue a session)", ended
    # and the status names the session each attempt reported
    assert [a["session_id"] for a in run.doc["tasks"][0]["attempts"]] == ["s-1", None]
    # and its agent got the whole prompt, with the failure
    (_, second) = run.ws.store.attempts(run.run.id)
    told = Path(second.log_path).with_suffix(".prompt.md").read_text()
    assert told.startswith("Write right into a.txt.") and "An earlier attempt failed" in told
