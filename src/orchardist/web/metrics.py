"""``GET /metrics``: the store's numbers in the Prometheus text exposition format (0.0.4)."""

from __future__ import annotations

from collections import Counter

from ..state.records import Run, RunState, TaskState
from ..state.store import Store

DURATION_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


def _line(name: str, value: float, **labels: str) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        return f"{name}{{{inner}}} {value:g}"
    return f"{name} {value:g}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(store: Store | None) -> str:
    """Runs, tasks and attempts by state, attempt durations, cost, tokens and queue depth."""
    runs = store.runs() if store is not None else []
    run_states: Counter[str] = Counter(r.state.value for r in runs)
    task_states: Counter[str] = Counter()
    attempt_states: Counter[tuple[str, str]] = Counter()
    durations: list[tuple[str, float]] = []
    cost = 0.0
    tokens: Counter[str] = Counter()
    for run in runs:
        assert store is not None
        task_states.update(t.state.value for t in store.tasks(run.id))
        for a in store.attempts(run.id):
            attempt_states[(a.agent, a.state.value)] += 1
            if a.duration_s is not None:
                durations.append((a.agent, a.duration_s))
            cost += a.usage.cost_usd or 0.0
            tokens["input"] += a.usage.input_tokens or 0
            tokens["output"] += a.usage.output_tokens or 0
    out = [
        "# HELP orchardist_runs Runs in the store by state.",
        "# TYPE orchardist_runs gauge",
        *(_line("orchardist_runs", run_states[s.value], state=s.value) for s in RunState),
        "# HELP orchardist_tasks Tasks of all runs by state.",
        "# TYPE orchardist_tasks gauge",
        *(_line("orchardist_tasks", task_states[s.value], state=s.value) for s in TaskState),
        "# HELP orchardist_queue_depth Tasks ready and waiting for a slot in running runs.",
        "# TYPE orchardist_queue_depth gauge",
        _line("orchardist_queue_depth", _queue_depth(store, runs)),
        "# HELP orchardist_attempts Attempts by agent profile and state.",
        "# TYPE orchardist_attempts gauge",
    ]
    out += [
        _line("orchardist_attempts", n, agent=agent, state=state)
        for (agent, state), n in sorted(attempt_states.items())
    ]
    out += _durations(durations)
    out += [
        "# HELP orchardist_cost_usd_total Cost the agents reported, all runs.",
        "# TYPE orchardist_cost_usd_total counter",
        _line("orchardist_cost_usd_total", round(cost, 6)),
        "# HELP orchardist_tokens_total Tokens the agents reported, all runs.",
        "# TYPE orchardist_tokens_total counter",
        *(_line("orchardist_tokens_total", tokens[d], direction=d) for d in ("input", "output")),
    ]
    return "\n".join(out) + "\n"


def _durations(durations: list[tuple[str, float]]) -> list[str]:
    """The histogram of attempt durations, per agent profile."""
    out = [
        "# HELP orchardist_attempt_duration_seconds Wall time of ended attempts.",
        "# TYPE orchardist_attempt_duration_seconds histogram",
    ]
    for agent in sorted({a for a, _ in durations}):
        mine = [d for a, d in durations if a == agent]
        for bound in DURATION_BUCKETS_S:
            count = sum(d <= bound for d in mine)
            out.append(
                _line(
                    "orchardist_attempt_duration_seconds_bucket",
                    count,
                    agent=agent,
                    le=f"{bound:g}",
                )
            )
        out.append(
            _line("orchardist_attempt_duration_seconds_bucket", len(mine), agent=agent, le="+Inf")
        )
        out.append(
            _line("orchardist_attempt_duration_seconds_sum", round(sum(mine), 3), agent=agent)
        )
        out.append(_line("orchardist_attempt_duration_seconds_count", len(mine), agent=agent))
    return out


def _queue_depth(store: Store | None, runs: list[Run]) -> int:
    if store is None:
        return 0
    return sum(
        t.state is TaskState.READY
        for r in runs
        if r.state is RunState.RUNNING
        for t in store.tasks(r.id)
    )


__all__ = ["prometheus_text"]
