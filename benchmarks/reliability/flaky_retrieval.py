"""A `/retrieve` server that misbehaves on purpose: every second request is slow, answers
HTTP 500, or answers a body that is not JSON. Runs uvicorn in a thread on a free loopback port
over a real index, and counts what it did; the mode can be changed while it runs."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from searchrl.retrieval.index import load_index
from searchrl.retrieval.server import render

MODES = ("slow", "http500", "garbage")


def flaky_app(index: Path, slow_s: float, stats: dict[str, Any]) -> FastAPI:
    """The app; `stats` holds the fault `mode` and receives request and fault counts."""
    retriever = load_index(index)
    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Response:
        stats["requests"] += 1
        body = await request.json()
        if stats["requests"] % 2 == 0:
            stats["faults"] += 1
            mode = stats["mode"]
            if mode == "http500":
                return JSONResponse({"detail": "injected failure"}, status_code=500)
            if mode == "garbage":
                return Response(b"<html>upstream hiccup</html>", media_type="text/html")
            await asyncio.sleep(slow_s)
        hits = retriever.search(body["queries"], body.get("topk") or 3)
        return JSONResponse(render(hits, bool(body.get("return_scores"))))

    return app


@contextmanager
def flaky_server(index: Path, mode: str, slow_s: float) -> Iterator[tuple[str, dict[str, Any]]]:
    """Serve `flaky_app`; yields the `/retrieve` URL and the live counters (set
    `stats["mode"]` to change the fault)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    stats: dict[str, Any] = {"mode": mode, "requests": 0, "faults": 0}
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(flaky_app(index, slow_s, stats), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/retrieve", stats
    finally:
        server.should_exit = True
        thread.join(timeout=slow_s + 10)
        sock.close()
