"""The name DESIGN.md gives the HTTP client module (`retrieval/client`); the client itself
lives in `remote.py` and is the same class."""

from searchrl.retrieval.remote import RemoteRetriever

__all__ = ["RemoteRetriever"]
