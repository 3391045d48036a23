"""The dashboard's ASGI app: pages, JSON, a live event stream and metrics, all read-only.

Everything shown comes from the store and the event log (opened read-only), so the dashboard
works for live runs, finished runs and runs whose orchestrator died. Every request needs the
token (from ``?token=`` once, then an HttpOnly cookie, or an ``Authorization: Bearer`` header);
the ``Host`` header must name the address the server was started on, which defeats DNS
rebinding. Agents' output is hostile input: the pages only ever put it in as text.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from ..errors import OrchardistError
from ..runs.tail import event_json
from ..safeio import read_tail
from ..state.records import RunState
from ..state.store import Store
from .decisions import decision_of, pending_rows, record
from .metrics import prometheus_text
from .reads import LOG_TAIL_BYTES, Reads, Settings
from .watch import StoreWatcher, Streams

COOKIE = "orchardist_token"
ACTION_HEADER = "x-orchardist-action"  # required on POSTs: see _same_site
KEEPALIVE_S = 15.0
RESUMABLE = (RunState.AWAITING_REVIEW, RunState.INTERRUPTED, RunState.STOPPED)
KEEPALIVE = ": keep-alive\n\n"  # an SSE comment: keeps idle connections (and proxies) open


def _static(name: str) -> bytes:
    return resources.files("orchardist.web").joinpath("static", name).read_bytes()


def _same_site(request: Request, settings: Settings) -> bool:
    """A request that changes something must carry our header (which a cross-site form or
    simple request cannot send without a preflight we never allow) and, if the browser names
    its origin, come from the dashboard's own."""
    if request.headers.get(ACTION_HEADER) != "1":
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    scheme, _, host = origin.partition("://")
    return scheme in ("http", "https") and host in settings.allowed_hosts


def _orchardist(repo_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """An orchardist command on the repository, to its end (the CLI is the one implementation
    of what the dashboard's buttons do)."""
    return subprocess.run(
        [sys.executable, "-m", "orchardist", *args, "-C", str(repo_root)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def _orchardist_detached(repo_root: Path, logs: Path, *args: str) -> int:
    """An orchardist command started in its own session, outliving the request (and the
    dashboard); its output goes to a file in the state folder's ``web`` logs. Its pid."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{args[0]}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchardist", *args, "-C", str(repo_root)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    threading.Thread(target=proc.wait, name="reaper", daemon=True).start()  # no zombie
    return proc.pid


def _authorized(request: Request, token: str) -> bool:
    given = request.cookies.get(COOKIE) or ""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        given = header[7:].strip()
    return hmac.compare_digest(given.encode(), token.encode())


class _Endpoints:
    """The dashboard's pages, API, streams and request guard, over one repository's store."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.data = Reads(settings)
        self.watcher = StoreWatcher(settings.store_path.parent)
        self.streams = Streams()

    async def page(self, request: Request) -> Response:
        return Response(_static("index.html"), media_type="text/html; charset=utf-8")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        kinds = {
            "app.js": "text/javascript",
            "review.js": "text/javascript",
            "style.css": "text/css",
            "favicon.svg": "image/svg+xml",
        }
        if name not in kinds:
            return PlainTextResponse("not found", status_code=404)
        return Response(_static(name), media_type=f"{kinds[name]}; charset=utf-8")

    async def favicon(self, request: Request) -> Response:
        return Response(_static("favicon.svg"), media_type="image/svg+xml")

    async def api_changes(self, request: Request) -> Response:
        """An event each time the store changes (any run's): the Review page follows it."""
        return StreamingResponse(
            _change_stream(self.watcher, request.is_disconnected),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def api_runs(self, request: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(self.data.runs))

    async def api_run(self, request: Request) -> Response:
        run = await asyncio.to_thread(self.data.run, request.path_params["run"])
        if run is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        page = await asyncio.to_thread(self.data.run_page, run)
        return Response(page, media_type="application/json")

    async def api_task(self, request: Request) -> Response:
        run = await asyncio.to_thread(self.data.run, request.path_params["run"])
        if run is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        task = await asyncio.to_thread(self.data.task_doc, run, request.path_params["task"])
        if task is None:
            return JSONResponse({"error": "no such task"}, status_code=404)
        return JSONResponse(task)

    async def api_events(self, request: Request) -> Response:
        run = await asyncio.to_thread(self.data.run, request.path_params["run"])
        if run is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        after = _last_event_id(request)
        return StreamingResponse(
            _event_stream(self.data.store, self.watcher, run.id, after, request.is_disconnected),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def api_log(self, request: Request) -> Response:
        run = await asyncio.to_thread(self.data.run, request.path_params["run"])
        task, n = request.path_params["task"], request.path_params["n"]
        records = await asyncio.to_thread(self.data.store.attempts, run.id, task) if run else []
        attempt = next((a for a in records if a.n == n), None)
        if run is None or attempt is None or not attempt.log_path:
            return JSONResponse({"error": "no such attempt"}, status_code=404)

        def ended() -> bool:
            return any(
                a.n == n and a.ended_at is not None for a in self.data.store.attempts(run.id, task)
            )

        return StreamingResponse(
            _log_stream(Path(attempt.log_path), ended, request.is_disconnected, self.streams),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def cancel(self, request: Request) -> Response:
        run = await asyncio.to_thread(self.data.run, request.path_params["run"])
        if run is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        out = await asyncio.to_thread(
            _orchardist, self.settings.repo_root, "cancel", run.id, "--no-wait"
        )
        status = 202 if out.returncode == 0 else 409
        return JSONResponse(
            {"exit_code": out.returncode, "output": out.stdout + out.stderr}, status
        )

    async def retry(self, request: Request) -> Response:
        run = await asyncio.to_thread(self.data.run, request.path_params["run"])
        if run is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        try:
            body = await request.json()
        except ValueError:
            body = {}
        tasks = body.get("tasks", []) if isinstance(body, dict) else []
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            return JSONResponse({"error": "tasks: a list of task ids"}, status_code=400)
        known = {t.task_id for t in await asyncio.to_thread(self.data.store.tasks, run.id)}
        if unknown := [t for t in tasks if t not in known]:
            return JSONResponse({"error": f"unknown tasks: {', '.join(unknown)}"}, 400)
        if run.state not in (RunState.FAILED, RunState.CANCELLED):
            return JSONResponse({"error": f"run {run.id} is {run.state.value}"}, status_code=409)
        pid = await asyncio.to_thread(
            _orchardist_detached,
            self.settings.repo_root,
            self.data.log_folder(),
            "retry",
            run.id,
            *tasks,
        )
        return JSONResponse({"started": pid}, status_code=202)

    async def resume(self, request: Request) -> Response:
        """``orchardist resume RUN`` in its own session: what acts on review decisions when
        no orchestrator runs (a run that ended awaiting review, or was interrupted)."""
        run = await asyncio.to_thread(self.data.run, request.path_params["run"])
        if run is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        if run.state not in RESUMABLE:
            return JSONResponse({"error": f"run {run.id} is {run.state.value}"}, status_code=409)
        logs = self.data.log_folder()
        pid = await asyncio.to_thread(
            _orchardist_detached, self.settings.repo_root, logs, "resume", run.id
        )
        return JSONResponse({"started": pid}, status_code=202)

    async def api_review(self, request: Request) -> Response:
        if not await asyncio.to_thread(self.data.has_store):
            return JSONResponse([])
        return JSONResponse(await asyncio.to_thread(pending_rows, self.data.store))

    async def review(self, request: Request) -> Response:
        """A person's decision on a task's pending patch (see decisions.py)."""
        try:
            decision = decision_of(await request.json())
        except ValueError as exc:  # not JSON, or BadDecision
            return JSONResponse({"error": str(exc)}, status_code=400)
        run, task = request.path_params["run"], request.path_params["task"]
        try:
            woke = await asyncio.to_thread(record, self.settings.store_path, run, task, decision)
        except OrchardistError as exc:  # a ReviewError: not awaiting review, a bad line...
            return JSONResponse({"error": str(exc)}, status_code=409)
        return JSONResponse({"recorded": decision.verdict.value, "woke": woke}, 202)

    async def metrics(self, request: Request) -> Response:
        text = await asyncio.to_thread(
            prometheus_text, self.data.store if self.data.has_store() else None
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def guard(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if request.headers.get("host", "") not in self.settings.allowed_hosts:
            return PlainTextResponse("unknown host", status_code=400)
        token = request.query_params.get("token")
        if token is not None:
            if not hmac.compare_digest(token.encode(), self.settings.token.encode()):
                return PlainTextResponse("bad token", status_code=401)
            # Taken from the URL once, then kept in a cookie scripts on the page cannot read.
            response: Response = RedirectResponse(
                str(request.url.remove_query_params("token")), 303
            )
            response.set_cookie(COOKIE, self.settings.token, httponly=True, samesite="strict")
            return response
        if not _authorized(request, self.settings.token):
            return PlainTextResponse("token required: open the URL orchardist serve printed", 401)
        if request.method != "GET" and not _same_site(request, self.settings):
            return PlainTextResponse("cross-site request refused", status_code=403)
        return await call_next(request)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with self.streams.watching(self.watcher):
            yield


@dataclass(frozen=True)
class App:
    """The dashboard's ASGI app, and what its server calls as it begins to stop: the live
    streams never end by themselves, and a stopping server waits for every response to end
    (with a tab open, ``orchardist serve`` ignored Ctrl-C until the tab was closed)."""

    asgi: Starlette
    end_streams: Callable[[], Awaitable[None]]


def create_app(settings: Settings) -> App:
    """The dashboard for one repository."""
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware

    ends = _Endpoints(settings)
    routes = [
        Route("/", ends.page),
        Route("/runs/{run}", ends.page),
        Route("/runs/{run}/tasks/{task}", ends.page),
        Route("/review", ends.page),
        Route("/favicon.ico", ends.favicon),
        Route("/static/{name}", ends.asset),
        Route("/api/changes", ends.api_changes),
        Route("/api/runs", ends.api_runs),
        Route("/api/runs/{run}", ends.api_run),
        Route("/api/runs/{run}/tasks/{task}", ends.api_task),
        Route("/api/runs/{run}/events", ends.api_events),
        Route("/api/runs/{run}/tasks/{task}/attempts/{n:int}/log", ends.api_log),
        Route("/api/runs/{run}/cancel", ends.cancel, methods=["POST"]),
        Route("/api/runs/{run}/retry", ends.retry, methods=["POST"]),
        Route("/api/runs/{run}/resume", ends.resume, methods=["POST"]),
        Route("/api/review", ends.api_review),
        Route("/api/runs/{run}/tasks/{task}/review", ends.review, methods=["POST"]),
        Route("/metrics", ends.metrics),
    ]
    asgi = Starlette(
        routes=routes,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=ends.guard)],
        lifespan=ends.lifespan,
    )
    return App(asgi, ends.streams.end)


def _last_event_id(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


async def _event_stream(
    store: Store,
    watcher: StoreWatcher,
    run_id: str,
    after: int,
    disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """Server-sent events: every event with ``seq > after``, then each new one as it lands."""
    yield "retry: 1000\n\n"
    seen = watcher.generation
    while True:
        events = await asyncio.to_thread(store.events, run_id, after)
        for event in events:
            yield f"id: {event.seq}\nevent: {event.kind}\ndata: {event_json(event)}\n\n"
            after = event.seq
        if await disconnected():
            return
        newer = await watcher.wait_newer(seen, KEEPALIVE_S)
        if watcher.ended:
            return
        if newer == seen:
            yield KEEPALIVE
        seen = newer


async def _change_stream(
    watcher: StoreWatcher, disconnected: Callable[[], Awaitable[bool]]
) -> AsyncIterator[str]:
    """Server-sent ``change`` events, one per burst of writes to the store's folder."""
    yield "retry: 1000\n\n"
    seen = watcher.generation
    while not await disconnected():
        newer = await watcher.wait_newer(seen, KEEPALIVE_S)
        if watcher.ended:
            return
        yield KEEPALIVE if newer == seen else f"event: change\ndata: {newer}\n\n"
        seen = newer


async def _log_stream(
    path: Path,
    ended: Callable[[], bool],
    disconnected: Callable[[], Awaitable[bool]],
    streams: Streams,
) -> AsyncIterator[str]:
    """A log's tail, then every byte appended to it, until its attempt has ended (or the
    server stops)."""
    async with streams.watching(StoreWatcher(path.parent)) as watcher:
        offset = max(0, _size(path) - LOG_TAIL_BYTES)
        seen = watcher.generation
        while True:
            # Asked before reading: all the attempt wrote before it ended is read below.
            finished = await asyncio.to_thread(ended)
            chunk, offset = await asyncio.to_thread(_read_from, path, offset)
            if chunk:
                yield f"data: {json.dumps(chunk)}\n\n"
            if finished:
                yield "event: end\ndata: {}\n\n"
                return
            if await disconnected():
                return
            newer = await watcher.wait_newer(seen, KEEPALIVE_S)
            if watcher.ended:
                return
            if newer == seen:
                yield KEEPALIVE
            seen = newer


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> tuple[str, int]:
    tail = read_tail(path, offset, LOG_TAIL_BYTES)
    return tail.text(), tail.end
