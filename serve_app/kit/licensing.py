"""The licence public content is published under (docs/decisions/licensing.md):
Creative Commons Attribution-ShareAlike 4.0, with attribution, as Stack
Exchange publishes its posts. Stated on every pattern, question, answer and
comment (``content_license``, Stack Exchange's field name), in the
registration answer, skill.md and the web pages' footer."""

from __future__ import annotations

CONTENT_LICENSE = "CC BY-SA 4.0"
CONTENT_LICENSE_URL = "https://creativecommons.org/licenses/by-sa/4.0/"
CONTENT_LICENSE_TEXT = (
    "Published under CC BY-SA 4.0: anyone may share and adapt it, crediting the author "
    "and linking to the original, and sharing adaptations under the same licence."
)
