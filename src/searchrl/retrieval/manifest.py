"""`manifest.json`: what an index directory holds and what it was built from, so loading can
refuse an index built from another corpus or encoder instead of returning wrong passages."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from searchrl.retrieval.base import RetrievalError
from searchrl.retrieval.corpus import CorpusFingerprint

MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class CorpusInfo:
    """The corpus an index was built from (`path` is None for documents built in memory)."""

    sha256: str
    rows: int
    path: str | None = None

    @classmethod
    def of(cls, fingerprint: CorpusFingerprint, path: str | Path | None = None) -> CorpusInfo:
        """Combine a fingerprint with where it came from. The path is stored absolute, so the
        manifest means the same file whatever directory it is read from; the sha256 names the
        content wherever the file moves."""
        where = None if path is None else str(Path(path).resolve())
        return cls(fingerprint.sha256, fingerprint.rows, where)


@dataclass(frozen=True)
class Manifest:
    """The parsed manifest of one index directory."""

    kind: str
    corpus: CorpusInfo
    params: dict[str, Any] = field(default_factory=dict)
    encoder: str | None = None
    searchrl_version: str = ""
    created: str = ""
    format: int = FORMAT_VERSION


def _version() -> str:
    try:
        return metadata.version("searchrl")
    except metadata.PackageNotFoundError:
        return "unknown"


def write_manifest(
    directory: str | Path,
    kind: str,
    corpus: CorpusInfo,
    params: dict[str, Any],
    encoder: str | None = None,
) -> Manifest:
    """Write `manifest.json` last, so a directory with a manifest is a complete index."""
    manifest = Manifest(
        kind=kind,
        corpus=corpus,
        params=params,
        encoder=encoder,
        searchrl_version=_version(),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    path = Path(directory) / MANIFEST_FILE
    path.write_text(json.dumps(asdict(manifest), indent=2, ensure_ascii=False) + "\n")
    return manifest


def read_manifest(directory: str | Path) -> Manifest:
    """Parse `manifest.json`, with a message that says what is wrong with the directory."""
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        raise RetrievalError(
            f"{directory}: not an index directory (no {MANIFEST_FILE}); build one with "
            "`searchrl index`"
        )
    try:
        raw = json.loads(path.read_text())
        raw["corpus"] = CorpusInfo(**raw["corpus"])
        manifest = Manifest(**raw)
    except (ValueError, TypeError, KeyError) as err:
        raise RetrievalError(f"{path}: unreadable manifest ({err})") from None
    if manifest.format != FORMAT_VERSION:
        raise RetrievalError(
            f"{path}: manifest format {manifest.format}, this searchrl reads {FORMAT_VERSION}"
        )
    return manifest
