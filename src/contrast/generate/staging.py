"""Changed resource files written while `generate` still works, put in place at the end.

Writing a file means waiting for its fsync (2 ms or more on a VM's disk): for a hundred files
that was a tenth of a run, with the processor idle. `generate` may replace no file before
everything is computed, but it may write the new text beside each file as soon as that text is
known, while the workers still derive the other policies, and sync it; at the end only the
renames are left (`write`). A file's staged text is used only while the file's content is still
the content it was written for (checked again at the end), so a change made after staging is
written the usual way; a run that fails removes what it staged (`discard`), so it leaves the
files as they were, and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from contrast.files import StagedFile, sync_directory
from contrast.kuberesource import yamlio
from contrast.kuberesource.yamlmemo import YamlMemo

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

# Files written at once: each mostly waits for its fsync.
WRITERS = 8


class StagedWrites:
    """The texts of changed files, staged in threads; `write` or `discard` ends them."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None  # `_threads()`
        # id(file) → (content digest, text, the staging)
        self._staged: dict[int, tuple[str, str, Future[StagedFile]]] = {}
        # id(document) → its fingerprint, of the documents of staged texts put in place
        self._written: dict[int, str] = {}

    def __enter__(self) -> StagedWrites:
        return self

    def __exit__(self, *_: object) -> None:
        self.discard()  # after `write`: nothing is left; after an error: everything staged

    def _threads(self) -> ThreadPoolExecutor:
        """The writer threads, started on first use: a run that writes nothing (an unchanged
        re-run) does not even import `concurrent.futures` (11 ms)."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - see above

            self._pool = ThreadPoolExecutor(max_workers=WRITERS)
        return self._pool

    def stage(self, file: yamlio.ResourceFile, content: str, text: str) -> None:
        """Start writing `text` beside `file`, if it changed (stdin is written at the end).

        `content` and `text`: `file.dumped()`, as the worker process that made the text had it.
        Whether that is still this file's content is found out once, in `write`.
        """
        if content and not file.is_stdio:
            future = self._threads().submit(yamlio.stage_file, file.path, text)
            self._staged[id(file)] = (content, text, future)

    def write(
        self, files: Sequence[yamlio.ResourceFile], memo: YamlMemo | None = None
    ) -> list[bool]:
        """`file.write(memo=memo)` for each file, by putting its staged text in place where
        that is still its text; whether each was written. Ends the staging."""
        try:
            # Which staged texts are still current is decided here, before any thread renames.
            jobs = [(file, self._current(file)) for file in files]
            written = (
                list(self._threads().map(lambda job: self._write(job[0], job[1], memo), jobs))
                if jobs
                else []
            )
            changed = [file for file, wrote in zip(files, written, strict=True) if wrote]
            for directory in sorted({file.path.parent for file in changed}):
                _sync(directory)
        finally:
            self.discard()  # what is left: all of it after an error, else nothing
        return written

    def _current(
        self, file: yamlio.ResourceFile
    ) -> tuple[str, list[str], Future[StagedFile]] | None:
        """The file's staging if its text is still the file's text (else it is discarded)."""
        staged = self._staged.pop(id(file), None)
        if staged is None:
            return None
        content, text, future = staged
        now, _, fingerprints = file.dumped_with_fingerprints()
        if now == content:
            self._written.update(zip(map(id, file.documents), fingerprints, strict=True))
            return text, fingerprints, future
        future.add_done_callback(_discard)  # changed after it was staged: written as it is now
        return None

    @staticmethod
    def _write(
        file: yamlio.ResourceFile,
        staged: tuple[str, list[str], Future[StagedFile]] | None,
        memo: YamlMemo | None,
    ) -> bool:
        if staged is None:
            return file.write(memo=memo)
        text, fingerprints, future = staged
        yamlio.put_in_place(future.result(), sync=False)  # each directory once, in `write`
        if memo is not None:
            file.remember_written(memo, text, fingerprints)
        return True

    def written_fingerprints(self) -> dict[int, str]:
        """`id(document)` → `fingerprint`, of each document of the staged texts `write` put in
        place, made as it decided that they still were the files' texts (after the last change)."""
        return dict(self._written)

    def discard(self) -> None:
        """Remove every text still staged (all of them in a failed run); ends the staging."""
        futures = [future for _, _, future in self._staged.values()]
        self._staged.clear()
        for future in futures:
            future.exception()  # waits for it
            _discard(future)
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _discard(future: Future[StagedFile]) -> None:
    if future.exception() is None:
        future.result().discard()


def _sync(directory: Path) -> None:
    try:
        sync_directory(directory)
    except OSError as error:
        raise yamlio.YamlError(f"cannot write in {directory}: {error.strerror}") from error
