"""A commit request: what the plan asks a commit mode (append or rotate) to write, and the steps both share.

Both modes start alike (the file must not have shrunk since the plan; the snapshot is parsed, reusing the
plan's reading, and checked) and end alike (an intent that fails is marked abandoned with its reason); one
request object carries the inputs and those steps so that the modes differ only where they really do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from compactd.commit.atomic import Abandon, FileSnapshot, current_transcript, os_reason
from compactd.commit.journal import Journal
from compactd.commit.successor import Entry, PlanError
from compactd.core.reader import Transcript
from compactd.datarecord import datarecord

__all__ = ["CommitRequest"]


@datarecord(frozen=True, slots=True)
class CommitRequest:
    """Everything one commit writes and checks, handed as one value to the commit's steps."""

    path: str
    compaction: Entry | None
    post: Entry | None
    replacements: Mapping[str, Entry]
    snapshot_size: int
    snapshot_leaf_id: str | None
    journal: Journal
    planned: Transcript | None = None
    check: Callable[[Transcript], str | None] | None = None

    @property
    def entries(self) -> tuple[Entry | None, Entry | None, Mapping[str, Entry]]:
        """The compaction, the post-compaction message and the replacements, in the plan builders' order."""
        return self.compaction, self.post, self.replacements

    def transcript(self, snap: FileSnapshot) -> Transcript:
        """``snap`` parsed and checked; Abandon if the file shrank since the plan or ``check`` has a reason."""
        if snap.cut < self.snapshot_size:
            raise Abandon("file shrank since the plan was made")
        return current_transcript(snap, self.planned, self.check)

    @contextmanager
    def abandoning(self, tx: str) -> Iterator[None]:
        """Mark the journal's intent ``tx`` abandoned, with the reason, if the block fails; the error goes on."""
        try:
            yield
        except (Abandon, PlanError) as exc:
            self.journal.try_done(tx, "abandoned", reason=exc.reason)
            raise
        except OSError as exc:
            self.journal.try_done(tx, "abandoned", reason=os_reason(exc))
            raise
