"""The `/retrieve` HTTP server, wire-compatible with Search-R1's retrieval server.

Differences from the original, on purpose: no globals (`create_app` builds everything), binds
127.0.0.1 unless told otherwise, answers `return_scores: false` instead of crashing, validates
input with 4xx messages, reports `/health` only once the index is loaded, and micro-batches
concurrent requests into one `search` call (dense encoders are far cheaper per query in a batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from searchrl.config.retrieval import RetrievalConfig, ServerConfig
from searchrl.retrieval.base import Retriever
from searchrl.retrieval.manifest import read_manifest
from searchrl.retrieval.microbatch import MicroBatcher, RequestStats
from searchrl.types import Hit

log = logging.getLogger("searchrl.retrieval.server")


class BadRequest(Exception):
    """A client error: the status code and the message sent back as `{"detail": message}`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ServerState:
    """Everything one app instance owns (kept on `app.state`, never at module level)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.retriever: Retriever | None = None
        self.batcher: MicroBatcher | None = None
        self.load_error: str | None = None
        self.stats = RequestStats(config.latency_window, config.log_every)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body of {declared} bytes exceeds the {limit}-byte limit")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise BadRequest(413, f"request body exceeds the {limit}-byte limit")
    return bytes(body)


def parse_request(body: bytes, config: ServerConfig) -> tuple[list[str], int, bool]:
    """Validate a `/retrieve` body; every failure names the field and the rule it broke."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRequest(400, f"request body is not valid UTF-8 (byte {err.start})") from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as err:
        raise BadRequest(
            400, f"request body is not valid JSON: {err.msg} (line {err.lineno}, col {err.colno})"
        ) from None
    if not isinstance(payload, dict):
        raise BadRequest(422, "request body must be a JSON object with a 'queries' list")
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest(422, "'queries' is required and must be a list of strings")
    if len(queries) > config.max_queries:
        raise BadRequest(
            422, f"{len(queries)} queries in one request; the limit is {config.max_queries}"
        )
    for i, query in enumerate(queries):
        if len(query) > config.max_query_chars:
            raise BadRequest(
                422,
                f"queries[{i}] has {len(query)} characters; the limit is {config.max_query_chars}",
            )
    topk = payload.get("topk")
    topk = config.default_topk if topk is None else topk
    if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= config.max_topk:
        raise BadRequest(
            422, f"'topk' must be an integer from 1 to {config.max_topk}, got {topk!r}"
        )
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise BadRequest(422, f"'return_scores' must be true or false, got {return_scores!r}")
    return queries, topk, return_scores


def render(results: list[list[Hit]], return_scores: bool) -> dict[str, Any]:
    """The Search-R1 response shape: one list per query of {"document": {id, contents}[, score]}."""

    def item(hit: Hit) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "document": {"id": hit.document.id, "contents": hit.document.contents}
        }
        if return_scores:
            entry["score"] = hit.score
        return entry

    return {"result": [[item(hit) for hit in hits] for hits in results]}


def _lifespan(
    source: Retriever | Callable[[], Retriever], state: ServerState
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    async def load() -> None:
        try:
            retriever = source if isinstance(source, Retriever) else await asyncio.to_thread(source)
        except Exception as err:
            state.load_error = f"{type(err).__name__}: {err}"
            log.error("index failed to load: %s", state.load_error)
            return
        state.batcher = MicroBatcher(retriever, state.config, state.stats)
        state.retriever = retriever
        log.info("index loaded; serving /retrieve")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(load())
        try:
            yield
        finally:
            loading.cancel()
            if state.batcher is not None:
                await state.batcher.close()

    return lifespan


def create_app(
    retriever: Retriever | Callable[[], Retriever], config: ServerConfig | None = None
) -> FastAPI:
    """A FastAPI app serving `retriever`, or the retriever a zero-argument loader returns; the
    loader runs in a thread after startup, and `/health` answers 503 until it is done."""
    state = ServerState(config or ServerConfig())
    app = FastAPI(title="searchrl retrieval server", lifespan=_lifespan(retriever, state))
    app.state.searchrl = state

    @app.get("/health")
    async def health() -> JSONResponse:
        if state.retriever is not None:
            return JSONResponse({"status": "ok", "requests": state.stats.requests})
        if state.load_error is not None:
            return JSONResponse({"status": "error", "detail": state.load_error}, status_code=503)
        return JSONResponse({"status": "loading"}, status_code=503)

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return state.stats.summary()

    @app.post("/retrieve")
    async def retrieve(request: Request) -> JSONResponse:
        with state.stats.timed() as record:
            try:
                if state.batcher is None:
                    raise BadRequest(503, state.load_error or "the index is still loading")
                body = await _read_body(request, state.config.max_body_bytes)
                queries, topk, return_scores = parse_request(body, state.config)
                results = await state.batcher.search(queries, topk)
            except BadRequest as err:
                record(err.status, 0)
                return JSONResponse({"detail": err.message}, status_code=err.status)
            except Exception as err:
                log.exception("search failed")
                record(500, 0)
                return JSONResponse(
                    {"detail": f"search failed: {type(err).__name__}: {err}"}, status_code=500
                )
            record(200, len(queries))
            # orjson: the stdlib encoder took ~0.35 ms for 16 queries × 3 passages, orjson ~0.03
            body = orjson.dumps(render(results, return_scores))
            return Response(body, media_type="application/json")

    return app


def serve(index_dir: str | Path, config: RetrievalConfig | None = None) -> None:
    """Serve an index directory with uvicorn until interrupted. The manifest is checked before
    binding, so a wrong path fails at once rather than as a 503 later."""
    import uvicorn

    from searchrl.retrieval.index import load_index

    config = config or RetrievalConfig()
    read_manifest(index_dir)
    app = create_app(lambda: load_index(index_dir, config=config), config.server)
    uvicorn.run(
        app, host=config.server.host, port=config.server.port, log_level="info", access_log=False
    )
