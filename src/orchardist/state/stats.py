"""Numbers across runs: which agent profiles and settings pay off.

Everything here is computed from the store (runs, attempts) and the event log, so it works for
finished runs, live runs and runs whose orchestrator died. Phase durations come from the event
log: an attempt's agent phase runs from its ``running`` event to its ``verifying`` event (or its
end), its verify phase from ``verifying`` to its end; a task's merge from ``merging`` to
``done``. A task is green at first shot when it ended done without a retry.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .eventlog import Event
from .events import AttemptEvent, Kind, RoundEvent
from .records import AttemptRecord, AttemptState, Run, TaskState
from .store import Store

_ENDED = {
    AttemptState.PASSED,
    AttemptState.FAILED,
    AttemptState.CANCELLED,
    AttemptState.INTERRUPTED,
}


@dataclass(frozen=True)
class Durations:
    """Median and 90th percentile of a phase, in seconds; None when nothing was measured."""

    count: int
    median_s: float | None
    p90_s: float | None


@dataclass(frozen=True)
class ProfileStats:
    """What one agent profile did."""

    profile: str
    attempts: int
    passed: int
    merged: int
    failures: dict[str, int]
    cost_usd: float
    input_tokens: int
    output_tokens: int
    cost_per_merged_usd: float | None
    round_wins: int  # rounds of two or more candidates won by this profile
    agent: Durations
    verify: Durations


@dataclass(frozen=True)
class Totals:
    """Figures over every task of the runs looked at."""

    runs: int
    tasks: int
    done: int
    green_first: int
    green_first_pct: float | None
    attempts: int
    attempts_per_task: float | None
    retries: int
    retries_by_failure: dict[str, int]
    fallbacks: int
    candidate_rounds: int
    candidates_per_win: float | None
    cost_usd: float
    input_tokens: int
    output_tokens: int
    cost_per_merged_usd: float | None
    agent: Durations
    verify: Durations
    merge: Durations


@dataclass(frozen=True)
class SlowTask:
    run_id: str
    task_id: str
    duration_s: float  # from ready to its end


@dataclass(frozen=True)
class Stats:
    """The report of ``orchardist stats``."""

    since_s: float | None
    totals: Totals
    profiles: list[ProfileStats]
    slowest: list[SlowTask]
    previous: Totals | None = None  # the window of the same length just before
    run_ids: list[str] = field(default_factory=list)


def durations(values: Sequence[float]) -> Durations:
    """Median and p90 (nearest rank) of ``values``."""
    if not values:
        return Durations(0, None, None)
    ordered = sorted(values)
    rank = max(0, -(-len(ordered) * 9 // 10) - 1)
    return Durations(len(ordered), round(statistics.median(ordered), 3), round(ordered[rank], 3))


def select_runs(
    runs: Iterable[Run], now: float, since_s: float | None, plan: str | None = None
) -> tuple[list[Run], list[Run]]:
    """The runs of the window ``[now - since_s, now]`` and of the window just before it."""
    current, previous = [], []
    for run in runs:
        if plan is not None and run.plan_path != plan:
            continue
        if since_s is None or run.created_at >= now - since_s:
            current.append(run)
        elif run.created_at >= now - 2 * since_s:
            previous.append(run)
    return current, previous


@dataclass
class _Phases:
    """Phase times, retries and round winners read from one run's event log."""

    agent: dict[tuple[str, str, int], float] = field(default_factory=dict)
    verify: dict[tuple[str, str, int], float] = field(default_factory=dict)
    merge: list[float] = field(default_factory=list)
    retries: Counter[str] = field(default_factory=Counter)  # by the failure that caused them
    retried: set[str] = field(default_factory=set)
    won: list[tuple[str, int]] = field(default_factory=list)  # (task, attempt) of round winners
    ready_to_end: dict[str, float] = field(default_factory=dict)


def _read_phases(run_id: str, events: Iterable[Event]) -> _Phases:
    phases = _Phases()
    started: dict[tuple[str, int], float] = {}
    verifying: dict[tuple[str, int], float] = {}
    merging: dict[str, float] = {}
    ready: dict[str, float] = {}
    last_failure: dict[str, str] = {}
    for event in events:
        state = event.data.get("state")
        task = event.task_id or ""
        if event.kind == Kind.ATTEMPT and event.attempt is not None:
            key = (task, event.attempt)
            if state == AttemptState.RUNNING:
                started[key] = event.ts
            elif state == AttemptEvent.VERIFYING and key in started:
                verifying[key] = event.ts
                phases.agent[(run_id, *key)] = event.ts - started[key]
            elif state in _ENDED and key in started:
                if key in verifying:
                    phases.verify[(run_id, *key)] = event.ts - verifying[key]
                else:
                    phases.agent[(run_id, *key)] = event.ts - started[key]
                if "failure" in event.data:
                    last_failure[task] = str(event.data["failure"])
        elif event.kind == Kind.TASK:
            if state == TaskState.READY:
                ready.setdefault(task, event.ts)
                if "retry" in event.data:
                    phases.retried.add(task)
                    phases.retries[last_failure.get(task, "unknown")] += 1
            elif state == TaskState.MERGING:
                merging[task] = event.ts
            elif state == TaskState.DONE and task in merging:
                phases.merge.append(event.ts - merging.pop(task))
            if state in {TaskState.DONE, TaskState.FAILED, TaskState.BLOCKED} and task in ready:
                phases.ready_to_end[task] = event.ts - ready[task]
        elif event.kind == Kind.ROUND and event.attempt is not None and state == RoundEvent.WON:
            phases.won.append((task, event.attempt))
    return phases


def _totals(store: Store, runs: Sequence[Run]) -> tuple[Totals, list[ProfileStats], list[SlowTask]]:
    all_attempts: list[tuple[str, AttemptRecord]] = []
    agent_s: dict[tuple[str, str, int], float] = {}
    verify_s: dict[tuple[str, str, int], float] = {}
    merge_s: list[float] = []
    retries: Counter[str] = Counter()
    slow: list[SlowTask] = []
    tasks = done = green = fallbacks = rounds = round_attempts = 0
    wins: Counter[str] = Counter()
    for run in runs:
        attempts = store.attempts(run.id)
        all_attempts += [(run.id, a) for a in attempts]
        phases = _read_phases(run.id, store.events(run.id))
        agent_s.update(phases.agent)
        verify_s.update(phases.verify)
        merge_s += phases.merge
        retries += phases.retries
        slow += [SlowTask(run.id, t, round(s, 3)) for t, s in phases.ready_to_end.items()]
        for record in store.tasks(run.id):
            tasks += 1
            if record.state is TaskState.DONE:
                done += 1
                green += record.task_id not in phases.retried
        fell_back, won, in_rounds, winners = _rounds(attempts, phases.won)
        fallbacks += fell_back
        rounds += won
        round_attempts += in_rounds
        wins += winners
    profiles = _profiles(all_attempts, agent_s, verify_s, wins)
    cost = sum(a.usage.cost_usd or 0.0 for _, a in all_attempts)
    totals = Totals(
        runs=len(runs),
        tasks=tasks,
        done=done,
        green_first=green,
        green_first_pct=round(100.0 * green / tasks, 1) if tasks else None,
        attempts=len(all_attempts),
        attempts_per_task=round(len(all_attempts) / tasks, 2) if tasks else None,
        retries=sum(retries.values()),
        retries_by_failure=dict(sorted(retries.items())),
        fallbacks=fallbacks,
        candidate_rounds=rounds,
        candidates_per_win=round(round_attempts / rounds, 2) if rounds else None,
        cost_usd=round(cost, 6),
        input_tokens=sum(a.usage.input_tokens or 0 for _, a in all_attempts),
        output_tokens=sum(a.usage.output_tokens or 0 for _, a in all_attempts),
        cost_per_merged_usd=round(cost / done, 6) if done else None,
        agent=durations(list(agent_s.values())),
        verify=durations(list(verify_s.values())),
        merge=durations(merge_s),
    )
    slow.sort(key=lambda s: -s.duration_s)
    return totals, profiles, slow[:5]


def _rounds(
    attempts: Sequence[AttemptRecord], won: Sequence[tuple[str, int]]
) -> tuple[int, int, int, Counter[str]]:
    """Of one run's attempts: the tasks whose first candidate fell back to another profile,
    the candidate rounds won, the attempts of those rounds, and each winner's profile."""
    by_task: dict[str, list[AttemptRecord]] = defaultdict(list)
    for a in attempts:
        by_task[a.task_id].append(a)
    fallbacks = 0
    for task_attempts in by_task.values():
        first = task_attempts[0].agent
        fallbacks += any(a.candidate == 0 and a.agent != first for a in task_attempts)
    # Rounds of several candidates: the tasks with a candidate beyond the first.
    multi = {t for t, rows in by_task.items() if any(a.candidate > 0 for a in rows)}
    agent_of = {(a.task_id, a.n): a.agent for a in attempts}
    rounds, wins = 0, Counter[str]()
    for task, n in won:
        if task in multi:
            rounds += 1
            wins[agent_of.get((task, n), "?")] += 1
    return fallbacks, rounds, sum(len(by_task[t]) for t in multi), wins


def _profiles(
    attempts: Sequence[tuple[str, AttemptRecord]],
    agent_s: dict[tuple[str, str, int], float],
    verify_s: dict[tuple[str, str, int], float],
    wins: Counter[str],
) -> list[ProfileStats]:
    grouped: dict[str, list[tuple[str, AttemptRecord]]] = defaultdict(list)
    for run_id, a in attempts:
        grouped[a.agent].append((run_id, a))
    out = []
    for profile, rows in sorted(grouped.items()):
        merged = sum(a.state is AttemptState.MERGED for _, a in rows)
        cost = sum(a.usage.cost_usd or 0.0 for _, a in rows)
        keys = [(r, a.task_id, a.n) for r, a in rows]
        out.append(
            ProfileStats(
                profile=profile,
                attempts=len(rows),
                passed=sum(a.state in (AttemptState.PASSED, AttemptState.MERGED) for _, a in rows),
                merged=merged,
                failures=dict(
                    sorted(Counter(a.failure.value for _, a in rows if a.failure).items())
                ),
                cost_usd=round(cost, 6),
                input_tokens=sum(a.usage.input_tokens or 0 for _, a in rows),
                output_tokens=sum(a.usage.output_tokens or 0 for _, a in rows),
                cost_per_merged_usd=round(cost / merged, 6) if merged else None,
                round_wins=wins[profile],
                agent=durations([agent_s[k] for k in keys if k in agent_s]),
                verify=durations([verify_s[k] for k in keys if k in verify_s]),
            )
        )
    return out


def compute(
    store: Store, now: float, since_s: float | None = None, plan: str | None = None
) -> Stats:
    """The stats of the runs created in the last ``since_s`` seconds (all runs if None)."""
    current, previous = select_runs(store.runs(), now, since_s, plan)
    totals, profiles, slowest = _totals(store, current)
    before = _totals(store, previous)[0] if since_s is not None else None
    return Stats(since_s, totals, profiles, slowest, before, [r.id for r in current])


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _fmt_d(d: Durations) -> str:
    return f"median {_fmt_s(d.median_s)}  p90 {_fmt_s(d.p90_s)}  (n={d.count})"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def render(stats: Stats) -> str:
    """The human-readable report."""
    t = stats.totals
    lines = [
        f"{t.runs} run(s), {t.tasks} task(s), {t.done} done; "
        f"green at first shot {t.green_first}/{t.tasks} ({_pct(t.green_first_pct)})",
        f"attempts {t.attempts} ({t.attempts_per_task or 0:.2f} per task), retries {t.retries}"
        + (
            " (" + ", ".join(f"{k} {v}" for k, v in t.retries_by_failure.items()) + ")"
            if t.retries_by_failure
            else ""
        )
        + f", fallbacks {t.fallbacks}",
        f"candidate rounds {t.candidate_rounds}"
        + (f", {t.candidates_per_win:.2f} candidates per win" if t.candidates_per_win else ""),
        f"cost {_usd(t.cost_usd)}, per merged task {_usd(t.cost_per_merged_usd)}; "
        f"tokens in {t.input_tokens}, out {t.output_tokens}",
        f"agent   {_fmt_d(t.agent)}",
        f"verify  {_fmt_d(t.verify)}",
        f"merge   {_fmt_d(t.merge)}",
    ]
    if stats.profiles:
        lines += [
            "",
            f"{'PROFILE':<16} {'ATTEMPTS':>8} {'PASSED':>6} {'MERGED':>6} "
            f"{'WINS':>4} {'COST/MERGED':>11}  {'AGENT MEDIAN':>12}  FAILURES",
        ]
        for p in stats.profiles:
            failures = ", ".join(f"{k} {v}" for k, v in p.failures.items()) or "-"
            lines.append(
                f"{p.profile:<16} {p.attempts:>8} {p.passed:>6} {p.merged:>6} {p.round_wins:>4} "
                f"{_usd(p.cost_per_merged_usd):>11}  {_fmt_s(p.agent.median_s):>12}  {failures}"
            )
    if stats.slowest:
        lines += ["", "slowest tasks (ready to end):"]
        lines += [f"  {s.run_id} {s.task_id}  {_fmt_s(s.duration_s)}" for s in stats.slowest]
    if stats.previous is not None:
        b = stats.previous
        lines += [
            "",
            "compared with the window before: "
            f"tasks {b.tasks} -> {t.tasks}, green at first shot {_pct(b.green_first_pct)} -> "
            f"{_pct(t.green_first_pct)}, cost per merged task {_usd(b.cost_per_merged_usd)} -> "
            f"{_usd(t.cost_per_merged_usd)}, agent median {_fmt_s(b.agent.median_s)} -> "
            f"{_fmt_s(t.agent.median_s)}",
        ]
    return "\n".join(lines)
