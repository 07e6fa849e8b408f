"""What applying batches did: :class:`ApplyStats`, summed over tables."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ApplyStats:
    """What applying batches did, summed over tables."""

    batches: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    truncated: int = 0
    #: Rows at or below a table's position, delivered again after a restart and skipped.
    skipped: int = 0
    #: Commits written (Delta commits, Iceberg snapshots).
    commits: int = 0

    def add(self, other: dict[str, int] | ApplyStats) -> None:
        items = other.items() if isinstance(other, dict) else vars(other).items()
        for name, value in items:
            if name in vars(self):
                setattr(self, name, getattr(self, name) + int(value))

    @property
    def changes(self) -> int:
        return self.inserted + self.updated + self.deleted + self.truncated
