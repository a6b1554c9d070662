"""Code embeddings: device code chunked by the model's own tokenizer window, chunk embeddings
mean-pooled and re-normalised (docs/embeddings.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from builder import config
from builder.embed.code_text import chunk_spans


class CodeEmbedder:
    """Embeds texts of any length with a sentence-transformers model.

    `model` needs `tokenizer` (a fast tokenizer), `max_seq_length` and `encode(...)`; tests count calls
    to `encode` to prove that incremental runs embed only new rows.
    """

    def __init__(
        self,
        model: Any,
        model_id: str,
        batch_size: int = config.EMBED_BATCH_SIZE,
        overlap: int = config.EMBED_CHUNK_OVERLAP,
        max_chunks: int = config.EMBED_MAX_CHUNKS,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch size must be at least 1")
        self.model = model
        self.model_id = model_id
        self.batch_size = batch_size
        self.overlap = overlap
        self.max_chunks = max_chunks
        # The window excludes the special tokens ([CLS] ... [SEP]) the model adds to every chunk.
        special = model.tokenizer.num_special_tokens_to_add(pair=False)
        self.window = max(8, int(model.max_seq_length) - special)
        self.chunks_embedded = 0

    def chunk(self, text: str) -> list[str]:
        """Split one text into overlapping pieces of at most `window` tokens (character-exact slices)."""
        encoded = self.model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        offsets = encoded["offset_mapping"]
        if not offsets:
            return [text]
        spans = chunk_spans(len(offsets), self.window, self.overlap, self.max_chunks)
        return [text[offsets[start][0] : offsets[end - 1][1]] for start, end in spans]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row L2-normalised."""
        dimension = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dim = dimension()
        if not texts:
            return np.zeros((0, dim or 0), dtype=np.float32)
        owners: list[int] = []
        unique: dict[str, int] = {}  # identical chunks (shared helpers, copies) are embedded once
        chunk_index: list[int] = []
        for row, text in enumerate(texts):
            for piece in self.chunk(text):
                owners.append(row)
                chunk_index.append(unique.setdefault(piece, len(unique)))
        vectors = self.model.encode(
            list(unique),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        self.chunks_embedded += len(unique)
        vectors = np.asarray(vectors, dtype=np.float32)[chunk_index]
        pooled = np.zeros((len(texts), vectors.shape[1]), dtype=np.float64)
        np.add.at(pooled, np.asarray(owners), vectors)
        counts = np.bincount(owners, minlength=len(texts)).reshape(-1, 1)
        pooled /= np.maximum(counts, 1)
        return normalise_rows(pooled).astype(np.float32)


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)
