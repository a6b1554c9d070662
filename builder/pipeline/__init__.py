"""Build pipeline: orchestration (build.py), DuckDB store, Parquet export, dataset card, Hub publishing."""
