"""Configuration of the search pieces: plain frozen dataclasses, cheap to
import and to pickle into Serve deployments."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_MODEL = "all-MiniLM-L6-v2"
KINDS = ("pattern", "agent", "question")
# Names of tuned model versions stored in the database (embeddings/modelstore.py).
TUNED_PREFIX = "tuned-"


@dataclass(frozen=True)
class IndexConfig:
    """FaissIndex: exact up to ``flat_max`` vectors, an HNSW graph up to
    ``hnsw_max``, IVF beyond (embeddings/faiss_index.py)."""

    flat_max: int = 20_000
    hnsw_max: int = 2_000_000
    # Links a graph node keeps, candidates explored while adding and searching.
    hnsw_m: int = 32
    hnsw_ef_construction: int = 40
    hnsw_ef_search: int = 256
    # ... and at least one candidate per this many nodes: a graph's search
    # must widen as it grows to keep its recall (at 1,000,000 real vectors,
    # recall@10 against exact was 0.893 at ef 256, 0.941 at 512, 0.965 at
    # 1,024; docs/decisions/search-at-scale.md, "HNSW search breadth at a million").
    hnsw_nodes_per_ef: int = 1000
    # The graph's vectors: float (exact scores) or sq8 (8-bit codes, a
    # quarter of the memory, scores within ~1e-3): the Api replicas' copies
    # use sq8 (docs/decisions/search-at-scale.md, "Replica memory at a million patterns").
    hnsw_codes: str = "float"
    nprobe: int = 64
    # Vectors per list used to train the coarse quantiser.
    train_per_list: int = 64


@dataclass(frozen=True)
class IndexerConfig:
    database_url: str
    model: str = DEFAULT_MODEL
    batch_size: int = 64
    poll_s: float = 5.0
    embed_timeout_s: float = 120.0
    # A query's embedding; the Api falls back to full text when it runs out.
    query_timeout_s: float = 1.0
    index: IndexConfig = field(default_factory=IndexConfig)
    kinds: tuple[str, ...] = KINDS


@dataclass(frozen=True)
class EmbedderConfig:
    model: str = DEFAULT_MODEL
    # cpu, cuda, or auto: CUDA where Ray gave the replica a GPU.
    device: str = "auto"
    max_batch_size: int = 64
    # torch threads of a CPU replica's bulk calls (embed_many of BULK_MIN
    # texts or more); 0: every core of the node. Queries run on one thread.
    threads: int = 0
    # onnx (ONNX Runtime), torch, or auto: ONNX Runtime on the CPU, PyTorch
    # on a GPU (embeddings/encoder.py); the ONNX graph's precision and where
    # the exported graph is cached ("": $CAIRN_STATE_DIR/models).
    backend: str = "auto"
    precision: str = "fp32"
    cache_dir: str = ""
    # Where a tuned model version is read from (embeddings/modelstore.py).
    database_url: str = ""
