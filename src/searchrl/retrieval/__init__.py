"""retrieval layer: one `Retriever` interface (`search(queries, k)`) over BM25, dense, hybrid
and remote engines, index directories with manifests, and the `/retrieve` HTTP server.

The heavy pieces (the server, faiss and sentence-transformers) are imported by their own
modules only, so `from searchrl.retrieval import load_index` stays light.
"""

from searchrl.retrieval.base import RetrievalError, Retriever
from searchrl.retrieval.corpus import CorpusError, CorpusReader, read_corpus
from searchrl.retrieval.index import build_index, load_index
from searchrl.retrieval.remote import RemoteRetriever

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
