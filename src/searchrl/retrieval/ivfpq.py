"""Compressed dense indexes built in a stream: faiss IVF-PQ.

A Flat index of wiki-18 with MiniLM is 21M × 384 × 4 bytes = 32 GB (64 GB for E5's 768
dimensions), more than this machine's RAM. IVF-PQ keeps a code of half the dimension in bytes
per passage by default (4 GB for MiniLM) plus its 8-byte id, and scans only `nprobe` of
`nlist` clusters per query.

The build never holds more than one part of vectors:

1. a uniform sample of `train_size` rows trains the coarse k-means and the PQ codebooks
   (its vectors are kept in the work directory and not encoded again when added);
2. the vectors are produced part by part (`ivf_part_rows`), each part added to a copy of the
   trained, empty index and written to disk (a finished part is kept, so a restarted build
   with the same work directory resumes after it);
3. the parts are joined. 8-bit codes: faiss's `merge_ondisk` concatenates their inverted
   lists into one `faiss.ivfdata` file (`OnDiskInvertedLists`), which `faiss.index` refers
   to, and serving maps it read-only (`IO_FLAG_ONDISK_SAME_DIR`), so RAM holds only the
   centroids and codebooks and an index larger than RAM still serves, at the speed of the
   disk. 4-bit fast-scan codes (the default, 35× faster to search): merged in memory and
   saved whole; faiss reads them into RAM when it opens them.
"""

from __future__ import annotations

import hashlib
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from searchrl.config.retrieval import DenseConfig
from searchrl.retrieval.base import RetrievalError

FAISS_FILE = "faiss.index"
IVF_DATA_FILE = "faiss.ivfdata"
SAMPLE_ROWS = "sample-rows.npy"
SAMPLE_VECTORS = "sample-vectors.npy"
MIN_POINTS_PER_CENTROID = 39
"""faiss warns below 39 training points per centroid; k-means is unreliable there."""
FAST_SCAN_BITS = 4
"""The code width faiss's fast-scan kernels take (`fast_scan`)."""


class VectorSource(Protocol):
    """Unit-length float32 vectors of corpus rows (row i = faiss id i), computed on demand:
    the encoder over passages, or synthetic vectors in the scale benchmark."""

    rows: int

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of `rows` (sorted row numbers), one per row, in that order."""
        ...


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as err:
        raise RetrievalError(
            f"compressed dense indexes need faiss ({err}); pip install 'searchrl[dense]'"
        ) from None
    return faiss


def auto_nlist(rows: int) -> int:
    """About √N clusters (a power of two: 4,096 at 21M passages), capped so each cluster gets
    at least 39 training points. faiss's guideline is 4-16·√N, but k-means over 16,384+
    centroids needs 640k+ training vectors and CPU-hours on this machine; √N keeps training
    to minutes and, with nprobe scaled to match, scans as many codes (docs/retrieval.md)."""
    guess = 2 ** round(math.log2(max(1.0, math.sqrt(rows))))
    return max(1, min(guess, rows // MIN_POINTS_PER_CENTROID))


def nlist_for(config: DenseConfig, rows: int) -> int:
    """`ivf_nlist`, or the automatic choice when it is 0, never above rows / 39."""
    return min(config.ivf_nlist or auto_nlist(rows), max(1, rows // MIN_POINTS_PER_CENTROID))


def effective_nbits(config: DenseConfig, train_rows: int) -> int:
    """PQ bits per code, lowered for small corpora so that each of the 2^nbits centroids of
    a sub-quantizer gets 39 training points (8 bits from ~10k passages up)."""
    nbits = config.pq_nbits
    while nbits > 1 and train_rows < (1 << nbits) * MIN_POINTS_PER_CENTROID:
        nbits -= 1
    return nbits


def fast_scan(config: DenseConfig, nbits: int) -> bool:
    """Whether the codes are scanned by faiss's "fast scan" kernels (lookup tables held in
    SIMD registers): 4-bit codes asked for as such (`pq_nbits=4`), not 8 bits lowered to 4 for
    a small corpus. On 234k real MiniLM passages, 192-byte codes as 384 × 4 bits answered 1,492
    queries/s at nprobe 128 against 42 for 192 × 8 bits, with the same answer recall@3 (within
    1.2 points of Flat), and trained in 30 s instead of 16 min (docs/retrieval.md). Their
    scores are coarser, so equal scores (ties) are more frequent."""
    return config.pq_nbits == nbits == FAST_SCAN_BITS


def sub_quantizers(config: DenseConfig, dim: int, nbits: int) -> int:
    """PQ sub-quantizers: `pq_m`, or by default as many as make codes of half the dimension
    in bytes (one per dimension at 4 bits, one per two dimensions at 8).

    Half the dimension in bytes, because the code size decides how much of Flat's top 3
    survives: on 20k real passages with MiniLM (384 dims) at 8 bits, 48 bytes kept 0.67 of
    it, 96 bytes 0.82, 192 bytes 0.93, while the clusters probed hardly mattered.
    """
    if config.pq_m:
        return config.pq_m
    return max(1, dim if fast_scan(config, nbits) else dim // 2)


def factory_string(config: DenseConfig, dim: int, rows: int) -> str:
    """The faiss `index_factory` description of the index `config` asks for."""
    nlist = nlist_for(config, rows)
    nbits = effective_nbits(config, min(rows, config.train_size))
    m = sub_quantizers(config, dim, nbits)
    if config.opq:
        if m > dim:
            raise RetrievalError(f"dense.pq_m={m} is larger than the encoder's dimension {dim}")
        rotation = f"OPQ{m}_{(dim // m) * m},"
    else:
        if dim % m:
            raise RetrievalError(
                f"dense.pq_m={m} does not divide the encoder's dimension {dim}: choose a "
                f"divisor of {dim}, or set dense.opq=true"
            )
        rotation = ""
    quantizer = "_HNSW32" if config.ivf_quantizer == "hnsw" else ""
    scan = "fs" if fast_scan(config, nbits) else ""
    return f"{rotation}IVF{nlist}{quantizer},PQ{m}x{nbits}{scan}"


def training_rows(rows: int, size: int, seed: int = 0) -> np.ndarray:
    """A sorted uniform sample of `size` rows (all rows when the corpus is smaller)."""
    if size >= rows:
        return np.arange(rows, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(rows, size=size, replace=False)).astype(np.int64)


def set_search_params(index: Any, config: DenseConfig) -> None:
    """Apply query-time knobs (nprobe; efSearch of an HNSW coarse quantizer) through any
    wrapper such as the OPQ rotation."""
    faiss = _faiss()
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = min(config.ivf_nprobe, ivf.nlist)
    quantizer = faiss.downcast_index(ivf.quantizer)
    if hasattr(quantizer, "hnsw"):
        quantizer.hnsw.efSearch = max(config.hnsw_ef_search, ivf.nprobe)


def read_index(path: str | Path) -> Any:
    """Open a saved IVF index with its inverted lists memory-mapped read-only: on-disk
    lists from the `faiss.ivfdata` next to it (wherever the directory was moved), lists
    saved inside the index file mapped in place. (faiss crashes on the two flags combined,
    so the file decides.)"""
    faiss = _faiss()
    path = Path(path)
    if (path.parent / IVF_DATA_FILE).exists():
        flags = faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY
    else:
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY
    return faiss.read_index(str(path), flags)


def copy_ondisk_lists(index: Any, out: Path) -> None:
    """Copy the `faiss.ivfdata` an index maps into `out`, unless it is already there (saving
    an index to another directory must take its on-disk lists along)."""
    faiss = _faiss()
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    if isinstance(lists, faiss.OnDiskInvertedLists):
        source = Path(lists.filename)
        target = out / IVF_DATA_FILE
        if not target.exists() or not source.samefile(target):
            shutil.copyfile(source, target)


def _fingerprint(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


class IVFPQBuilder:
    """Train → add in parts → merge, with every step's output on disk in `work` (see the
    module docstring). Parts from an earlier run are reused only if they were added to the
    same trained index."""

    def __init__(self, config: DenseConfig, source: VectorSource, work: Path) -> None:
        self.config = config
        self.source = source
        self.work = work
        self.faiss = _faiss()

    def train(self, progress: Callable[[str, int, int], None] | None = None) -> Path:
        """Train on a uniform sample of the source (or reuse `work/trained.index`); returns
        the trained, empty index's path. Shards of one corpus share it."""
        path = self.work / "trained.index"
        if path.exists():
            return path
        self.work.mkdir(parents=True, exist_ok=True)
        sample = training_rows(self.source.rows, self.config.train_size)
        parts = []
        for start in range(0, len(sample), self.config.ivf_part_rows):
            chunk = sample[start : start + self.config.ivf_part_rows]
            parts.append(self.source.vectors(chunk))
            if progress is not None:
                progress("train-sample", len(chunk), len(sample))
        vectors = np.concatenate(parts)
        self._keep_sample(sample, vectors)
        factory = factory_string(self.config, vectors.shape[1], self.source.rows)
        index = self.faiss.index_factory(vectors.shape[1], factory, self.faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        tmp = path.with_suffix(".tmp")
        self.faiss.write_index(index, str(tmp))
        tmp.replace(path)
        return path

    def _keep_sample(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Save the encoded training sample so that adding does not encode it again: the
        whole corpus below `train_size` passages (half the encoder time there), 1.2 % at 21M."""
        tmp = self.work / "sample-vectors.tmp.npy"
        np.save(tmp, vectors)
        np.save(self.work / SAMPLE_ROWS, rows)
        tmp.replace(self.work / SAMPLE_VECTORS)

    @staticmethod
    def _saved_sample(work: Path, first_row: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
        """The training sample kept in `work` (row numbers, memory-mapped vectors), if there
        is one, its rows renumbered for a source whose row 0 is the sampled corpus's
        `first_row` (a shard's own numbering)."""
        saved = work / SAMPLE_VECTORS
        if not saved.exists():
            return None
        return np.load(work / SAMPLE_ROWS) - first_row, np.load(saved, mmap_mode="r")

    def _part_vectors(
        self, rows: np.ndarray, sample: tuple[np.ndarray, np.ndarray] | None
    ) -> np.ndarray:
        """The vectors of `rows`, taking those of the kept training `sample` and encoding
        only the rest."""
        if sample is None:
            return self.source.vectors(rows)
        sample_rows, sample_vectors = sample
        at = np.minimum(np.searchsorted(sample_rows, rows), len(sample_rows) - 1)
        known = sample_rows[at] == rows
        out = np.empty((len(rows), sample_vectors.shape[1]), dtype=np.float32)
        out[known] = sample_vectors[at[known]]
        if not known.all():
            out[~known] = self.source.vectors(rows[~known])
        return out

    def build(
        self,
        out: Path,
        progress: Callable[[str, int, int], None] | None = None,
        trained: Path | None = None,
        first_row: int | None = None,
    ) -> Any:
        """Write `faiss.index` + `faiss.ivfdata` into `out`; return the merged index.
        `trained` = an already trained index to add to (else `train()` runs first); when this
        source is a shard of the corpus `trained` was trained on, starting at its row
        `first_row`, the vectors of the training sample kept beside it are reused instead of
        encoded again. `progress(stage, n, total)` hears of every sample chunk and part done."""
        self.work.mkdir(parents=True, exist_ok=True)
        if trained is None:
            trained = self.train(progress)
            sample = self._saved_sample(self.work)
        elif first_row is not None:
            sample = self._saved_sample(trained.parent, first_row)
        else:  # a trained index of unknown provenance: its sample's numbering is not ours
            sample = None
        key = _fingerprint(trained)
        step = self.config.ivf_part_rows
        part_files = []
        for number, start in enumerate(range(0, self.source.rows, step)):
            stop = min(start + step, self.source.rows)
            part = self.work / f"part-{key}-{number:05d}.index"
            if not part.exists():
                rows = np.arange(start, stop, dtype=np.int64)
                index = self.faiss.read_index(str(trained))
                index.add_with_ids(self._part_vectors(rows, sample), rows)
                tmp = part.with_suffix(".tmp")
                self.faiss.write_index(index, str(tmp))
                tmp.replace(part)
            part_files.append(str(part))
            if progress is not None:
                progress("add", stop - start, self.source.rows)
        merged = self.faiss.read_index(str(trained))
        ivf = self.faiss.downcast_index(self.faiss.extract_index_ivf(merged))
        if isinstance(ivf, self.faiss.IndexIVFFastScan):
            self._merge_in_memory(merged, ivf, part_files, out)
        else:
            from faiss.contrib.ondisk import merge_ondisk

            merge_ondisk(merged, part_files, str(out / IVF_DATA_FILE))
        if merged.ntotal != self.source.rows:
            raise RetrievalError(f"merged {merged.ntotal} vectors, expected {self.source.rows}")
        self.faiss.write_index(merged, str(out / FAISS_FILE))
        return merged

    def _merge_in_memory(self, merged: Any, ivf: Any, part_files: list[str], out: Path) -> None:
        """Fast-scan lists are packed in blocks that `merge_ondisk` cannot write: the parts
        are merged in memory (200 bytes a passage with its id: 4.2 GB at 21M) and the index
        is saved whole; faiss reads such lists into RAM when it opens them (measured: RSS
        grows by the file's size), so serving needs that memory too."""
        for part in part_files:
            index = self.faiss.read_index(part)  # held: the extracted IVF points into it
            other = self.faiss.extract_index_ivf(index)
            _append_at_block_boundaries(self.faiss, ivf.invlists, other.invlists)
            ivf.merge_from(other, 0)
        merged.ntotal = ivf.ntotal  # a wrapper (the OPQ rotation) counts separately
        (out / IVF_DATA_FILE).unlink(missing_ok=True)  # a stale file would redirect reads


def _append_at_block_boundaries(faiss: Any, into: Any, source: Any) -> None:
    """Move `source`'s entries of the lists whose length in `into` is a non-zero multiple of
    the block size in bytes, one entry at a time, leaving those lists empty in `source`.

    faiss 1.15's `BlockInvertedLists.add_entries` (what `merge_from` calls) copies whole
    blocks when `o % block_size == 0`, comparing the entry count `o` with a size in bytes
    (6,144 for 384 4-bit codes), and then copies the list's whole length to position `o`:
    past the end of both buffers. A 21M-passage build (lists of ~5k entries, some landing on
    6,144 exactly) died of the heap corruption; lists that start empty are copied correctly,
    and every other length takes faiss's entry-by-entry path, which this repeats."""
    into, source = faiss.downcast_InvertedLists(into), faiss.downcast_InvertedLists(source)
    packer = into.packer
    code = np.empty(packer.code_size, dtype=np.uint8)
    for j in range(into.nlist):
        o, n = into.list_size(j), source.list_size(j)
        if n == 0 or o == 0 or o % into.block_size:
            continue
        into.resize(j, o + n)
        ids = faiss.rev_swig_ptr(into.get_ids(j), o + n)
        ids[o:] = faiss.rev_swig_ptr(source.get_ids(j), n)
        codes, taken, buffer = into.get_codes(j), source.get_codes(j), faiss.swig_ptr(code)
        for i in range(n):  # the raw methods: faiss's wrappers want (blocks, size) arrays
            packer.unpack_1_c(taken, i, buffer)
            packer.pack_1_c(buffer, o + i, codes)
        source.resize(j, 0)


def build_ivfpq(
    config: DenseConfig,
    source: VectorSource,
    out: Path,
    work: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    trained: Path | None = None,
    first_row: int | None = None,
) -> Any:
    """Build an IVF-PQ index of `source` into directory `out` (see `IVFPQBuilder`), adding
    to `trained` when given (`first_row`: where this shard starts in the corpus it was
    trained on). Without `work` the parts go to a scratch folder inside `out` that is
    deleted afterwards."""
    scratch = work is None
    work = work if work is not None else out / ".ivfpq-parts"
    try:
        return IVFPQBuilder(config, source, work).build(out, progress, trained, first_row)
    finally:
        if scratch:
            shutil.rmtree(work, ignore_errors=True)
