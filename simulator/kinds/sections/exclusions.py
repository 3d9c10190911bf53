"""How every decision kind shows refusals and invalid answers (``analysis.stats.refusals``):
the validity test and the exclusion bounds per case, declared once in its codebook
(``exclusions.tables.yaml``: console, page, CSV file and the summary's schema alike)."""

from __future__ import annotations

from biasim.simulator.kinds.sections.codebook import tables_of

#: The table of refusals and invalid answers, declared in exclusions.tables.yaml.
EXCLUSIONS = tables_of(__name__)["exclusions"]
