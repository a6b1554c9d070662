"""Trusted parent: the verdict, from the two children's tensor files, the refereed timing window, the source text and
the built extension's imports. It imports nothing of the engine."""
