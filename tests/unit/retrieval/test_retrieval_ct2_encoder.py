"""The CTranslate2 encoder against sentence-transformers (the reference) on the embedded
MiniLM: same vectors (float32) or nearly (int8), input order kept despite length sorting, the
converted model cached, unsupported module stacks refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from searchrl.config.retrieval import DEFAULT_ENCODER, DenseConfig
from searchrl.retrieval import ct2_encoder
from searchrl.retrieval.ct2_encoder import CT2Encoder, EncoderUnavailable, read_pooling
from searchrl.retrieval.dense import encode_texts, encoder_path, load_encoder

pytest.importorskip("ctranslate2")
pytest.importorskip("sentence_transformers")

TEXTS = [
    "how do plants turn sunlight into food",
    "Paris",
    '"Eiffel Tower"\nThe Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in '
    "Paris, France. It is named after the engineer Gustave Eiffel, whose company designed it.",
    "tallest peak in the world",
    "Johann Sebastian Bach composed the Brandenburg Concertos around 1721.",
]


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    config = DenseConfig(engine="torch", torch_threads=1)
    return encode_texts(load_encoder(config), config, TEXTS, passages=True)


@pytest.mark.parametrize(("compute", "tolerance"), [("float32", 1e-4), ("int8", 0.01)])
def test_vectors_match_sentence_transformers(reference, compute: str, tolerance: float) -> None:
    config = DenseConfig(engine="ct2", ct2_compute_type=compute, torch_threads=1)  # type: ignore[arg-type]
    encoder = load_encoder(config)
    assert isinstance(encoder, CT2Encoder)
    vectors = encode_texts(encoder, config, TEXTS, passages=True)
    assert vectors.shape == reference.shape and vectors.dtype == np.float32
    cosine = (vectors * reference).sum(axis=1)  # both unit length
    assert np.all(cosine > 1 - tolerance), cosine
    # batches of 2 are cut from length-sorted texts: the rows must still follow the input
    small = encoder.encode(TEXTS, batch_size=2, normalize_embeddings=True)
    assert np.allclose(small, vectors, atol=2e-3)  # int8 kernels vary a little with padding


def test_the_converted_model_is_cached(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    model_dir = Path(encoder_path(DEFAULT_ENCODER))
    first = ct2_encoder.converted_model(model_dir, "int8")
    assert first.is_relative_to(tmp_path) and (first / "model.bin").is_file()
    stamp = (first / "model.bin").stat().st_mtime_ns
    assert ct2_encoder.converted_model(model_dir, "int8") == first
    assert (first / "model.bin").stat().st_mtime_ns == stamp
    assert not list(first.parent.glob(".converting-*"))


def test_unsupported_pooling_is_refused(tmp_path: Path) -> None:
    (tmp_path / "1_Pooling").mkdir()
    kinds = [("", "Transformer"), ("1_Pooling", "Pooling")]
    modules = [{"path": p, "type": f"sentence_transformers.models.{k}"} for p, k in kinds]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_max_tokens": True})
    )
    with pytest.raises(EncoderUnavailable, match="unsupported pooling"):
        read_pooling(tmp_path)
    assert read_pooling(Path(encoder_path(DEFAULT_ENCODER))) == "mean"
