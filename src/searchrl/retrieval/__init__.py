"""retrieval layer: one `Retriever` interface (`search(queries, k)`) over BM25, dense, hybrid
and remote engines, index directories with manifests, and the `/retrieve` HTTP server.

Names are resolved lazily (PEP 562): modules that only need `searchrl.retrieval.base` (the
rollout engine, fakes in tests) do not pay for importing bm25s, scipy and urllib3.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from searchrl.retrieval.base import RetrievalError, Retriever

if TYPE_CHECKING:
    from searchrl.retrieval.corpus import CorpusError, CorpusReader, read_corpus
    from searchrl.retrieval.index import build_index, load_index
    from searchrl.retrieval.remote import RemoteRetriever

_LAZY = MappingProxyType(
    {
        "CorpusError": "searchrl.retrieval.corpus",
        "CorpusReader": "searchrl.retrieval.corpus",
        "read_corpus": "searchrl.retrieval.corpus",
        "build_index": "searchrl.retrieval.index",
        "load_index": "searchrl.retrieval.index",
        "RemoteRetriever": "searchrl.retrieval.remote",
    }
)

__all__ = [
    "CorpusError",
    "CorpusReader",
    "RemoteRetriever",
    "RetrievalError",
    "Retriever",
    "build_index",
    "load_index",
    "read_corpus",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'searchrl.retrieval' has no attribute {name!r}")
