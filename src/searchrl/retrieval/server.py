"""The `/retrieve` HTTP server, wire-compatible with Search-R1's retrieval server.

Differences from the original, on purpose: no globals (`create_app` builds everything), binds
127.0.0.1 unless told otherwise, answers `return_scores: false` instead of crashing, validates
input with 4xx messages, reports `/health` only once the index is loaded, and micro-batches
concurrent requests into one `search` call (dense encoders are far cheaper per query in a batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    create_model,
)

from searchrl.config.retrieval import RetrievalConfig, ServerConfig
from searchrl.retrieval.base import RetrievalError, Retriever
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


def request_model(config: ServerConfig) -> type[BaseModel]:
    """The pydantic model of a `/retrieve` body under this server's limits; it validates
    every request and is the request schema `/openapi.json` publishes."""
    query = Annotated[str, StringConstraints(max_length=config.max_query_chars, strict=True)]
    return create_model(
        "RetrieveRequest",
        __config__=ConfigDict(extra="ignore"),
        queries=(
            list[query],
            Field(max_length=config.max_queries, description="One search per string."),
        ),
        topk=(
            int | None,
            Field(
                default=None,
                ge=1,
                le=config.max_topk,
                strict=True,
                description=f"Passages per query (default {config.default_topk}).",
            ),
        ),
        return_scores=(
            bool,
            Field(default=False, strict=True, description="Add each passage's score."),
        ),
    )


class RetrievedDocument(BaseModel):
    """One passage as Search-R1 returns it (`contents` = `"Title"\ntext`)."""

    id: str
    contents: str


class RetrievedItem(BaseModel):
    """One hit; `score` only when the request asked for scores."""

    document: RetrievedDocument
    score: float | None = None


class RetrieveResponse(BaseModel):
    """One ranked list per query, in request order."""

    result: list[list[RetrievedItem]]


def _message(error: dict[str, Any], config: ServerConfig) -> str:
    """One pydantic error as the sentence a client sees (naming the field and the rule)."""
    loc, kind, value = error["loc"], error["type"], error.get("input")
    if not loc:
        return "request body must be a JSON object with a 'queries' list"
    field = loc[0]
    if field == "queries" and kind == "too_long" and len(loc) == 1:
        return f"{len(value)} queries in one request; the limit is {config.max_queries}"
    if field == "queries" and kind == "string_too_long":
        return (
            f"queries[{loc[1]}] has {len(value)} characters; the limit is {config.max_query_chars}"
        )
    if field == "queries":
        return "'queries' is required and must be a list of strings"
    if field == "topk":
        return f"'topk' must be an integer from 1 to {config.max_topk}, got {value!r}"
    return f"'{field}' must be true or false, got {value!r}"


def parse_request(
    body: bytes, model: type[BaseModel], config: ServerConfig
) -> tuple[list[str], int, bool]:
    """Validate a `/retrieve` body with `model`; every failure names the field and the rule
    it broke (400 for a body that is not JSON, 422 for JSON that breaks the schema)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRequest(400, f"request body is not valid UTF-8 (byte {err.start})") from None
    try:
        request = model.model_validate_json(body)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            reason = first.get("ctx", {}).get("error", first["msg"])
            raise BadRequest(400, f"request body is not valid JSON: {reason}") from None
        raise BadRequest(422, _message(first, config)) from None
    topk = config.default_topk if request.topk is None else request.topk  # type: ignore[attr-defined]
    return request.queries, topk, request.return_scores  # type: ignore[attr-defined]


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


async def _search_in_parts(
    batcher: MicroBatcher, queries: list[str], topk: int, config: ServerConfig
) -> list[list[Hit]]:
    """Search a large request (Search-R1 posts a whole rollout step, 512 prompts × 5 samples)
    `max_batch_queries` at a time, so one request never holds more than that many queries'
    encodings and hits in flight, and other requests get their turn in between."""
    step = config.max_batch_queries
    results: list[list[Hit]] = []
    for start in range(0, len(queries), step):
        results += await batcher.search(queries[start : start + step], topk)
    return results


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

    model = request_model(state.config)
    schema = {"application/json": {"schema": model.model_json_schema()}}

    @app.post(
        "/retrieve",
        response_model=None,
        responses={200: {"model": RetrieveResponse, "description": "Ranked passages"}},
        openapi_extra={"requestBody": {"required": True, "content": schema}},
    )
    async def retrieve(request: Request) -> Response:
        """Search-R1's endpoint: top-k passages for each query of the batch."""
        with state.stats.timed() as record:
            try:
                if state.batcher is None:
                    raise BadRequest(503, state.load_error or "the index is still loading")
                body = await _read_body(request, state.config.max_body_bytes)
                queries, topk, return_scores = parse_request(body, model, state.config)
                results = await _search_in_parts(state.batcher, queries, topk, state.config)
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


def _run(loader: Callable[[], Retriever], config: RetrievalConfig) -> None:
    import uvicorn

    app = create_app(loader, config.server)
    uvicorn.run(
        app, host=config.server.host, port=config.server.port, log_level="info", access_log=False
    )


def serve(index_dir: str | Path, config: RetrievalConfig | None = None) -> None:
    """Serve an index directory with uvicorn until interrupted. The manifest is checked before
    binding, so a wrong path fails at once rather than as a 503 later."""
    from searchrl.retrieval.index import load_index

    config = config or RetrievalConfig()
    read_manifest(index_dir)
    _run(lambda: load_index(index_dir, config=config), config)


def serve_shards(
    index_dirs: Sequence[str | Path],
    shard_urls: Sequence[str] = (),
    config: RetrievalConfig | None = None,
    shard_args: Sequence[str] = (),
) -> None:
    """Serve several indexes as one: each directory in its own `searchrl serve` process on
    127.0.0.1 (started with `shard_args`, e.g. the --config/--set options), plus shards
    already running at `shard_urls` (other machines); `/retrieve` merges their top k
    (`retrieval.shards`). `/health` turns ok once every local shard is ready."""
    from searchrl.retrieval.remote import RemoteRetriever
    from searchrl.retrieval.shards import ShardedRetriever, ShardServers

    config = config or RetrievalConfig()
    for directory in index_dirs:
        read_manifest(directory)
    scratch = Path(tempfile.mkdtemp(prefix="searchrl-shards-"))
    collection = bm25_collection(index_dirs, scratch) if not shard_urls else None
    if collection is not None:
        shard_args = [*shard_args, "--set", f"bm25.collection={collection}"]
    servers = ShardServers([Path(d) for d in index_dirs], shard_args)

    def loader() -> Retriever:
        servers.wait_ready(config.server.shard_ready_timeout_s)
        urls = [*servers.urls, *shard_urls]
        return ShardedRetriever([RemoteRetriever(replace(config.remote, url=u)) for u in urls])

    servers.start()
    try:
        _run(loader, config)
    finally:
        servers.close()
        shutil.rmtree(scratch, ignore_errors=True)


def bm25_collection(index_dirs: Sequence[str | Path], scratch: Path) -> Path | None:
    """For BM25 indexes built separately (each scored with its own passages' statistics),
    write the statistics of all their passages together into `scratch` and return the file,
    so each shard scores as one index of everything would (`bm25.collection`). None when
    there is nothing to do: not all BM25, or already built as shards of one corpus."""
    from searchrl.retrieval.bm25 import BM25S_DIR
    from searchrl.retrieval.bm25_build import LENGTHS_FILE, STATS_FILE, collection_of

    dirs = [Path(d) / BM25S_DIR for d in index_dirs]
    if len(dirs) < 2 or any(read_manifest(d.parent).kind != "bm25" for d in dirs):
        return None
    if not all((d / STATS_FILE).exists() and (d / LENGTHS_FILE).exists() for d in dirs):
        log.warning("BM25 shards built by an older searchrl: each scores with its own statistics")
        return None
    stats = [orjson.loads((d / STATS_FILE).read_bytes()) for d in dirs]
    total = sum(s["shard_passages"] for s in stats)
    if all(s["passages"] == total for s in stats):
        return None  # built by `searchrl index --shards`: whole-corpus statistics already
    path = scratch / "collection.json"
    path.write_bytes(orjson.dumps(collection_of(dirs)))
    log.info("BM25 shards built separately: scoring all %d passages as one collection", total)
    return path


def serve_faiss(
    faiss_index: str | Path, corpus: str | Path, config: RetrievalConfig | None = None
) -> None:
    """Serve a faiss index built by Search-R1 or FlashRAG and its JSONL corpus as they are,
    encoding queries with `config.dense.encoder` (see `retrieval.external`)."""
    from searchrl.retrieval.external import open_faiss_index

    config = config or RetrievalConfig()
    for path, what in ((faiss_index, "faiss index file"), (corpus, "corpus file")):
        if not Path(path).is_file():
            raise RetrievalError(f"{what} not found: {path}")
    _run(lambda: open_faiss_index(faiss_index, corpus, config.dense), config)
