"""DeltaGuard's exception tree.

DeltaGuardError
├── ItemError                  an item has the wrong shape (names the field)
├── TranscriptError            a transcript line cannot be used (file, line, field)
├── PreviousResponseNotFound   a continuation can be neither resumed nor rebuilt
├── ModelArtifactError         a model artifact is missing or its hash is wrong
├── PolicyError                a policy file cannot be used (file, field)
├── LaneClosed                 work submitted to a lane that is shutting down
└── SinkFull                   a bounded sink or spool refused an event
"""

from __future__ import annotations


class DeltaGuardError(Exception):
    """Base class of every error DeltaGuard raises on purpose."""


class ItemError(DeltaGuardError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class TranscriptError(DeltaGuardError):
    def __init__(self, path: str, line: int, field: str, reason: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {reason}")
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason


class PreviousResponseNotFound(DeltaGuardError):
    code = "previous_response_not_found"

    def __init__(self, response_id: str) -> None:
        super().__init__(f"previous response {response_id!r} is unknown, expired, or its history was evicted")
        self.response_id = response_id


class ModelArtifactError(DeltaGuardError):
    pass


class PolicyError(DeltaGuardError):
    pass


class LaneClosed(DeltaGuardError):
    pass


class SinkFull(DeltaGuardError):
    pass
