"""Every tunable constant of the builder, in one namespace: `from builder import config`, then `config.NAME`.

Values here are defaults; CLI flags override some of them and every record stores the values it was
verified with (tolerances, trials, seeds, timing method). The constants live in four modules read as one:
`paths` (data and cache folders), `verification` (checks, timing, sandbox, engine, task checks), `archive`
(profiles, export, embeddings, generation, pipeline, re-verification) and `explorer` (the Streamlit app). Code
reads `config.NAME` from this package, so a test that sets `config.NAME` changes what every reader sees.
"""

from builder.config.archive import *  # noqa: F403
from builder.config.explorer import *  # noqa: F403
from builder.config.paths import *  # noqa: F403
from builder.config.verification import *  # noqa: F403
