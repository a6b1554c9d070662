"""`python -m builder ...` is `kernel-archive ...` (for machines where the console script is not installed)."""

from builder.cli import main

main()
