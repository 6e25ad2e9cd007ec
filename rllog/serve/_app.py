"""The dashboard's ASGI app (starlette): a JSON API over :class:`Catalog` plus the page's own files.

Endpoints are plain functions: starlette runs them in its thread pool, so reading a
slow bucket never blocks the event loop.

Safety, by construction:

- GET (and HEAD) only: starlette answers 405 to any other method.
- Runs are named by id, iterations by number, evaluators by name; every file read goes
  through :class:`rllog.Run`, whose names come from listing the run. No request path
  ever becomes a file path; the page's own files are a fixed table.
- Every response carries a Content-Security-Policy that allows only the app's own
  scripts (``script-src 'self'``), no remote loads, no framing by others; an iteration
  report (HTML written by a training job) is served sandboxed with no scripts at all.
- The Host header must be the bound host (no DNS rebinding); with an access token,
  every request must carry it (``?token=`` once sets a same-site cookie).
"""

from __future__ import annotations

import contextlib
import hmac
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from rllog._format.layout import CODE_DIFF_FILE
from rllog._format.vocab import KEY_METRICS
from rllog._read.search import compile_pattern, search_run
from rllog.serve._catalog import Catalog, RunEntry, threshold_value

__all__ = ["create_app", "CSP"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'self'"
)
#: an iteration report: no script of any kind, no loads, no forms, no navigation of the page
REPORT_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_MAX_POINTS = 5000


def _plotly_js() -> Path:
    """plotly.min.js as shipped in the ``plotly`` Python package (no CDN, nothing copied)."""
    try:
        import plotly
    except ImportError:
        raise ImportError("rllog serve needs plotly: pip install 'rllog[serve]'") from None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise ImportError(f"the installed plotly package has no {path}; reinstall plotly")
    return path


def _static(name: str) -> Path:
    return Path(str(resources.files("rllog.serve") / "static" / name))


class _Json(JSONResponse):
    """JSON with NaN/Infinity as null (the browser's JSON.parse knows no NaN)."""

    def render(self, content: Any) -> bytes:
        from rllog._format.codec import encode_json

        return encode_json(content, strict_json=True)


def _int(request: Request, name: str, default: int | None = None) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise _BadRequest(f"query parameter {name} must be an integer, got {value!r}") from None


def _float(request: Request, name: str) -> float | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    try:
        out = float(value)
    except ValueError:
        out = math.nan
    if not math.isfinite(out):
        raise _BadRequest(f"query parameter {name} must be a finite number, got {value!r}")
    return out


class _BadRequest(Exception):
    pass


def create_app(catalog: Catalog, *, token: str | None = None, hosts: list[str] | None = None) -> Starlette:
    """The app for ``catalog``. ``token``: required on every request when set. ``hosts``: allowed Host names."""
    plotly_js = _plotly_js()
    files = {
        "/": ("index.html", "text/html; charset=utf-8"),
        "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
        "/static/app.css": ("app.css", "text/css; charset=utf-8"),
    }

    def run_or_404(request: Request) -> RunEntry:
        entry = catalog.get(request.path_params["run_id"])
        if entry is None:
            raise _NotFound(f"no run with id {request.path_params['run_id']!r}")
        if entry.run is None:
            raise _NotFound(entry.error or f"run {entry.name!r} could not be read")
        return entry

    def one_run(handler: Callable[[Request, RunEntry], Response]) -> Callable[[Request], Response]:
        """``handler`` with its run held: a :class:`rllog.Run` parses its rows on first use and
        is not safe to read from two threads (the worker, other requests) at once."""

        def endpoint(request: Request) -> Response:
            entry = run_or_404(request)
            with entry.lock:
                return handler(request, entry)

        endpoint.__name__ = handler.__name__
        return endpoint

    def page(request: Request) -> Response:
        name, media = files[request.url.path]
        return FileResponse(_static(name), media_type=media)

    def plotly(request: Request) -> Response:
        return FileResponse(plotly_js, media_type="text/javascript; charset=utf-8")

    def runs(request: Request) -> Response:
        out = []
        for entry in catalog.runs():
            entry.refresh()
            out.append(entry.summary())
        return _Json(
            {
                "runs": out,
                "roots": catalog.roots,
                "problems": catalog.problems,
                "key_metrics": list(KEY_METRICS),
            }
        )

    @one_run
    def metrics(request: Request, entry: RunEntry) -> Response:
        return _Json(
            {
                "id": entry.id,
                "metrics": entry.metric_names(),
                "x": entry.x_options(),
                "version": entry.version,
            }
        )

    @one_run
    def series(request: Request, entry: RunEntry) -> Response:
        key = request.query_params.get("key", "")
        if key not in entry.metric_names():
            raise _NotFound(f"run {entry.name!r} has no numeric metric {key!r}")
        points = min(max(_int(request, "points", 2000) or 2000, 10), _MAX_POINTS)
        x = request.query_params.get("x") or (entry.require().step_key or "row")
        smooth = _float(request, "smooth") or 0.0
        if not 0.0 <= smooth < 1.0:
            raise _BadRequest(f"query parameter smooth must be in [0, 1), got {smooth}")
        x0, x1 = _float(request, "x0"), _float(request, "x1")
        if x0 is not None and x1 is not None and x0 > x1:
            raise _BadRequest(f"query parameters x0 <= x1 expected (a zoom window), got x0={x0}, x1={x1}")
        out = entry.series(key, x, points, x0, x1, smooth=smooth)
        out["findings"] = [
            {**f, "threshold_value": threshold_value(f["threshold"])}
            for f in entry.findings() or []  # None while the doctor has not reported yet
            if f["metric"] == key
        ]
        out["version"] = entry.version
        return _Json(out)

    @one_run
    def detail(request: Request, entry: RunEntry) -> Response:
        run = entry.require()
        diff = None
        if run.metrics_name == "metrics.jsonl":
            try:
                diff = run.storage.read(CODE_DIFF_FILE)[:2_000_000].decode("utf-8", "replace")
            except (OSError, FileNotFoundError):
                diff = None
        return _Json(
            {
                **entry.summary(),
                "config_tree": run.config,
                "checkpoints": run.checkpoints,
                "code_diff": diff,
                "warnings": run.warnings,
                "findings": entry.findings() if entry.findings() is not None else entry.compute_findings(),
                "files": run.files(),
            }
        )

    @one_run
    def iterations(request: Request, entry: RunEntry) -> Response:
        out = []
        run = entry.require()
        for it in run.iterations:
            splits = []
            for ev in [None, *it.eval_names]:
                has = {a.kind for a in it.artifacts if a.eval_name == ev}
                item: dict[str, Any] = {
                    "eval": ev,
                    "label": "train" if ev is None else run.eval_display_name(ev),
                    "kinds": sorted(has),
                    "report": next(  # served at files/<report>, so its relative links work
                        (a.name for a in it.artifacts if a.eval_name == ev and a.kind == "html"), None
                    ),
                }
                if "rollout_summaries" in has:
                    item.update(_reward_stats(run.rollout_summaries(it.iteration, ev)))
                splits.append(item)
            out.append({"iteration": it.iteration, "splits": splits})
        return _Json({"iterations": out})

    @one_run
    def rollouts(request: Request, entry: RunEntry) -> Response:
        iteration = _int(request, "iteration")
        if iteration is None:
            raise _BadRequest("query parameter iteration is required")
        ev = request.query_params.get("eval") or None
        try:
            records = entry.require().rollout_summaries(iteration, ev)
        except FileNotFoundError as exc:
            raise _NotFound(str(exc)) from None
        return _Json(
            {"iteration": iteration, "eval": ev, "groups": _groups(records), **_reward_stats(records)}
        )

    @one_run
    def report(request: Request, entry: RunEntry) -> Response:
        iteration = _int(request, "iteration")
        if iteration is None:
            raise _BadRequest("query parameter iteration is required")
        try:
            html = entry.require().html(iteration, request.query_params.get("eval") or None)
        except FileNotFoundError as exc:
            raise _NotFound(str(exc)) from None
        return Response(
            html, media_type="text/html; charset=utf-8", headers={"Content-Security-Policy": REPORT_CSP}
        )

    @one_run
    def run_file(request: Request, entry: RunEntry) -> Response:
        """A page the run wrote (``index.html``, an iteration report), so the links between
        them work inside the report frame: only ``.html`` names the run's own listing has."""
        run = entry.require()
        name = request.path_params["name"]
        if not name.endswith(".html") or name not in {n for n, _ in run.files()}:
            raise _NotFound(f"run {entry.name!r} has no page {name!r}")
        try:
            html = run.storage.read(name)
        except FileNotFoundError as exc:
            raise _NotFound(str(exc)) from None
        return Response(
            html, media_type="text/html; charset=utf-8", headers={"Content-Security-Policy": REPORT_CSP}
        )

    def search(request: Request) -> Response:
        q = request.query_params.get("q", "")
        try:
            pattern = compile_pattern(
                q,
                regex=request.query_params.get("regex") == "1",
                ignore_case=request.query_params.get("case") != "1",
            )
        except ValueError as exc:
            raise _BadRequest(str(exc)) from None
        wanted = [r for r in request.query_params.get("runs", "").split(",") if r]
        entries = [e for e in catalog.runs() if not wanted or e.id in wanted]
        hits: list[dict[str, Any]] = []
        searched = 0
        for e in entries:
            if not e.load() or e.require().metrics_name != "metrics.jsonl":
                continue
            found, n = search_run(e.require().storage, pattern, limit=max(1, 300 - len(hits)))
            searched += n
            hits += [{**h, "run": e.id, "run_name": e.name} for h in found]
            if len(hits) >= 300:
                break
        return _Json({"hits": hits, "files": searched, "truncated": len(hits) >= 300})

    def favicon(request: Request) -> Response:
        return Response(status_code=204)  # none: the page declares none, this answers browsers that ask

    routes = [Route(path, page) for path in files]
    routes += [
        Route("/favicon.ico", favicon),
        Route("/static/plotly.min.js", plotly),
        Route("/api/runs", runs),
        Route("/api/runs/{run_id}/metrics", metrics),
        Route("/api/runs/{run_id}/series", series),
        Route("/api/runs/{run_id}/detail", detail),
        Route("/api/runs/{run_id}/iterations", iterations),
        Route("/api/runs/{run_id}/rollouts", rollouts),
        Route("/api/runs/{run_id}/report", report),
        Route("/api/runs/{run_id}/files/{name:path}", run_file),
        Route("/api/search", search),
    ]

    async def on_not_found(request: Request, exc: Exception) -> Response:
        return _Json({"error": str(exc)}, status_code=404)

    async def on_bad(request: Request, exc: Exception) -> Response:
        return _Json({"error": str(exc)}, status_code=400)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        catalog.close()  # stop the worker thread with the server

    return Starlette(
        lifespan=lifespan,
        routes=routes,
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=hosts or ["127.0.0.1", "localhost", "[::1]"]),
            Middleware(_Guard, token=token),
        ],
        exception_handlers={_NotFound: on_not_found, _BadRequest: on_bad},
    )


class _Guard(BaseHTTPMiddleware):
    """Checks the access token (when set) and adds the security headers to every response."""

    def __init__(self, app: Any, token: str | None) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        token = self.token
        set_cookie = False
        if token is not None:
            given = request.query_params.get("token") or request.cookies.get("rllog_token") or ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                return PlainTextResponse(
                    "rllog serve: open the URL with ?token=... printed at start", status_code=403
                )
            set_cookie = "token" in request.query_params
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        if set_cookie:
            response.set_cookie("rllog_token", token or "", httponly=True, samesite="strict")
        return response


class _NotFound(Exception):
    pass


def _reward_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean reward, accuracy (mean of a step metric ``correct``/``accuracy`` when logged), count, rewards."""
    rewards = [r.get("total_reward") for r in records]
    finite = [float(x) for x in rewards if isinstance(x, (int, float)) and math.isfinite(x)]
    acc: list[float] = []
    for r in records:
        for step in r.get("steps") or ():
            m = step.get("metrics") or {}
            v = m.get("correct", m.get("accuracy"))
            if isinstance(v, (int, float)):
                acc.append(float(v))
    return {
        "n": len(records),
        "reward_mean": sum(finite) / len(finite) if finite else None,
        "accuracy": sum(acc) / len(acc) if acc else None,
        "rewards": finite,
    }


def _groups(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records grouped by ``group_idx``: the prompt once, each sample with reward, advantage and length.

    Advantage is the reward minus its group's mean, as tinker-cookbook's
    ``compute_advantages`` (tinker_cookbook/rl/data_processing.py) computes it for GRPO-style
    groups; a group whose samples all got the same reward has no learning signal
    (``same_reward``).
    """
    by: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(int(r.get("group_idx", 0)), []).append(r)
    out = []
    for g, recs in sorted(by.items()):
        recs.sort(key=lambda r: r.get("traj_idx", 0))
        rewards = [r.get("total_reward") for r in recs]
        finite = [float(x) for x in rewards if isinstance(x, (int, float)) and math.isfinite(x)]
        mean = sum(finite) / len(finite) if finite else math.nan
        prompt = None
        samples = []
        for r in recs:
            steps = r.get("steps") or []
            logs: dict[str, Any] = {}
            for s in steps:
                logs.update({k: v for k, v in (s.get("logs") or {}).items()})
            if prompt is None and isinstance(logs.get("prompt"), str):
                prompt = logs["prompt"]
            reward = r.get("total_reward")
            samples.append(
                {
                    "traj": r.get("traj_idx"),
                    "reward": reward,
                    "advantage": (reward - mean)
                    if isinstance(reward, (int, float)) and math.isfinite(mean)
                    else None,
                    "ac_len": sum(int(s.get("ac_len") or 0) for s in steps),
                    "ob_len": sum(int(s.get("ob_len") or 0) for s in steps),
                    "logs": {k: v for k, v in logs.items() if k != "prompt"},
                    "metrics": [s.get("metrics") or {} for s in steps],
                }
            )
        out.append(
            {
                "group": g,
                "tags": recs[0].get("tags") or [],
                "prompt": prompt,
                "samples": samples,
                "same_reward": len(recs) > 1 and len(set(finite)) == 1 and len(finite) == len(recs),
            }
        )
    return out
