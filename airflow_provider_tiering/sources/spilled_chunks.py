"""A change set's chunks kept on local disk while a round's plan reads its slot, and read back one at a time when
the round writes them: the slot is read and decoded once however many keys it changes, in bounded memory."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import IO, Any


class SpilledChunks:
    """Chunks (any picklable objects), in order, in an anonymous temporary file: unlinked as it is created, it is
    gone when closed or when the process dies, and no other process can open it.

    pickle, because the chunks are this process's own plain tuples, dicts and strings, written and read by it alone
    (no trust boundary), and pickle stores them at C speed."""

    def __init__(self, directory: str | None = None) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="tiering-changes-", dir=directory)
        self.chunks = 0
        self.bytes = 0

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write(self, chunk: Any) -> None:
        pickle.dump(chunk, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.chunks += 1
        self.bytes = self._file.tell()

    def __iter__(self) -> Iterator[Any]:
        """The chunks in the order written; each iteration reads them again from the start."""
        self._file.flush()
        self._file.seek(0)
        for _ in range(self.chunks):
            yield pickle.load(self._file)  # this process's own file (see the class)
        self._file.seek(0, 2)

    def close(self) -> None:
        self._file.close()
