"""The review page for recorded flagged conversations (`deltaguard review`, `serve --record`).

An operator lists what the gateway flagged or blocked, reads each transcript with the
items that raised a flag highlighted, and marks each flag confirmed or false positive;
the marks live in the recording store (`labels` table) and export as a labelled
transcript file that `deltaguard eval` reads and `deltaguard calibrate` uses directly.
"""

from __future__ import annotations

from deltaguard.recording.labels import export_reviewed, reviewed_lines
from deltaguard.review.api import ReviewApi, review_routes
from deltaguard.review.server import review_app, serve_review

__all__ = ["ReviewApi", "export_reviewed", "review_app", "review_routes", "reviewed_lines", "serve_review"]
