"""``rllog serve``: a live local dashboard over runs on disk or in a bucket.

Runs table (status, key metrics, doctor), charts (smoothing, hover, zoom, log scale,
outlier clipping, downsampled on the server), run detail (config diff, checkpoints,
code.diff, warnings, findings), rollouts (iteration reports, GRPO groups, reward
histograms) and search over completions. Reads runs only through :mod:`rllog._read`;
never writes into a run. Needs the ``serve`` extra: ``pip install 'rllog[serve]'``.
"""

from __future__ import annotations

import ipaddress
import secrets
from typing import Any

from rllog._format.terminal import escape_controls

__all__ = ["create_app", "serve", "is_loopback", "url_host"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8 or ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as it goes in a URL or a Host header: an IPv6 address in brackets (``[::1]``)."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host.strip("[]")).version == 6 else host
    except ValueError:
        return host


def create_app(
    paths: list[str],
    *,
    token: str | None = None,
    hosts: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Any:
    """The dashboard as an ASGI app over the runs under ``paths`` (folders, files, bucket URLs).

    ``token``: required on every request when set; ``hosts``: the Host header values
    accepted (default loopback names); ``storage_options``: passed to fsspec for bucket
    URLs (e.g. ``{"token": "anon"}``).

    Raises:
        FileNotFoundError: a local path does not exist.
        ImportError: starlette or plotly is missing (install ``rllog[serve]``).
    """
    from rllog.serve._app import create_app as _create
    from rllog.serve._catalog import Catalog

    return _create(Catalog(list(paths), storage_options), token=token, hosts=hosts)


def serve(
    paths: list[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    echo: Any = print,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Serve the dashboard until interrupted; prints the URL first.

    A non-loopback ``host`` needs an access token: pass ``token`` or ``token="auto"`` to
    make one (it is printed, and required on every request).

    Raises:
        ValueError: a non-loopback host without a token; a port outside 0-65535.
        FileNotFoundError: a local path does not exist.
    """
    import uvicorn

    if not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0-65535, got {port}")
    if token == "auto":
        token = secrets.token_urlsafe(18)
    if not is_loopback(host) and not token:
        raise ValueError(
            f"--host {host} is not a loopback address: anyone who can reach it could read your runs. "
            "Pass --token TOKEN (or --token auto) to require an access token, or bind 127.0.0.1"
        )
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else url_host(host)
    # the Host header a browser sends for the URL printed: the bound address itself
    # (127.0.0.2, [::1]) besides the loopback names; any host with a token
    hosts = ["127.0.0.1", "localhost", "[::1]", shown.lower()] + ([] if is_loopback(host) else ["*"])
    app = create_app(paths, token=token, hosts=hosts, storage_options=storage_options)
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    echo(escape_controls(f"rllog serve: {url}  (Ctrl-C to stop)"))
    uvicorn.run(app, host=host.strip("[]"), port=port, log_level="warning")
