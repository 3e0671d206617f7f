"""Changed resource files written while `generate` still works, put in place at the end.

`generate` may replace no file before everything is computed, but it may write the new text beside
each file as soon as that text is known, while the workers still derive the other policies; at
the end only the renames are left (`write`). A file's staged text is used only while the file's
content is still the content it was written for (checked again at the end), so a change made
after staging is written the usual way; a run that fails removes what it staged (`discard`), so it
leaves the files as they were, and nothing else.

Crash safety is that of `write_atomically` for each file (after a crash at any point, each file
holds its old or its new text), with one sync for all of them: the staged texts are written
unsynced, and `write` syncs their file systems once (`contrast.syncfs`: one `syncfs`, after a
descriptor on each was opened before its first staged write, so that a writeback error is
reported), then renames, then syncs each directory once. An `fsync` per staged file (1.4 ms
each here) was up to 4 % of generate's samples at 1000 workloads, and needed the writer threads
to overlap the waits. Where `syncfs` cannot report errors (Linux before 5.8) each text is synced
as it is staged, as before.

The renames stay in the writer threads: a rename over a file frees the replaced file's blocks,
and a file system mounted with `discard` and without a journal (this project's test machines)
discards them synchronously, in the rename (1 ms each; 30 us over a fresh name). Eight at once
take 0.2 s for 1000 files, one after the other 1.2 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from contrast import syncfs
from contrast.files import StagedFile, sync_directory
from contrast.generate.errors import CannotWriteResources
from contrast.kuberesource import yamlio
from contrast.kuberesource.yamlmemo import YamlMemo

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

# Files staged or put in place at once: each may wait for the disk (see `write`).
WRITERS = 8


class StagedWrites:
    """The texts of changed files, staged in threads; `write` or `discard` ends them."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None  # `_threads()`
        # id(file) → (content digest, text, the staging)
        self._staged: dict[int, tuple[str, str, Future[StagedFile]]] = {}
        # id(document) → its fingerprint, of the documents of staged texts put in place
        self._written: dict[int, str] = {}
        # The file systems of the staged texts, synced once before the renames (None: each
        # text is synced as it is staged).
        self._file_systems = syncfs.FileSystems() if syncfs.available() else None

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
            sync = self._file_systems is None
            if not sync:
                self._note_file_system(file.path.parent)
            future = self._threads().submit(yamlio.stage_file, file.path, text, sync=sync)
            self._staged[id(file)] = (content, text, future)

    def _note_file_system(self, directory: Path) -> None:
        assert self._file_systems is not None
        try:
            self._file_systems.add(directory)  # before the first write there (module doc)
        except OSError as error:
            raise CannotWriteResources(f"cannot write in {directory}: {error.strerror}") from error

    def write(
        self, files: Sequence[yamlio.ResourceFile], memo: YamlMemo | None = None
    ) -> list[bool]:
        """`file.write(memo=memo)` for each file, by putting its staged text in place where
        that is still its text; whether each was written. Ends the staging."""
        try:
            # Which staged texts are still current is decided here, before any rename.
            jobs = [(file, self._current(file)) for file in files]
            # Every staged text is written (a failure raises here, before any rename) and on
            # disk before the first rename (module doc).
            staged = [job[1][2].result() for job in jobs if job[1] is not None]
            if staged:
                self._sync()
            # In threads: a rename may wait for the discard of the replaced file (module doc).
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

    def _sync(self) -> None:
        """The staged texts' file systems synced (nothing to do if each text was synced)."""
        if self._file_systems is None:
            return
        try:
            self._file_systems.sync()
        except OSError as error:
            raise CannotWriteResources(
                f"cannot write the resource files: {error.strerror}",
                hint="check the disk (nothing was replaced)",
            ) from error

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
        yamlio.put_in_place(future.result(), sync=False)  # synced, each directory once: `write`
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
        if self._file_systems is not None:
            self._file_systems.close()


def _discard(future: Future[StagedFile]) -> None:
    if future.exception() is None:
        future.result().discard()


def _sync(directory: Path) -> None:
    try:
        sync_directory(directory)
    except OSError as error:
        raise CannotWriteResources(f"cannot write in {directory}: {error.strerror}") from error
