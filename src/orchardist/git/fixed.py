"""The settings every git orchardist runs gets, outranking the repository's own config too: no
command git would run on its own. A module of its own, importing nothing, so that a scan the
cache answers (``scan.hit``, which loads almost nothing) runs git as the rest of orchardist does."""

FIXED_CONFIG = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.attributesFile", "/dev/null"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
