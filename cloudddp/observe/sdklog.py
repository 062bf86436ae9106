"""Quiet SDKs: what the clouds' SDKs say on their own goes to a log file, so an attached submit shows cloudddp's
lines and the script's output only.

The SDKs speak through :mod:`logging` and :mod:`warnings`, and some install their own handlers when first
imported: azure-ai-ml gives its ``azure.ai.ml`` logger a stream handler to stderr with ``propagate = False``
("Proceeding with no tenant id appended to studio URL", "Class X: This is an experimental class ..."), and
mlflow configures its ``mlflow`` logger the same way. A handler on the root logger would not see those, and the
SDKs are imported lazily, after this runs. So :func:`divert` installs a logger class (``logging.setLoggerClass``,
logging's own hook for this) whose loggers under the SDKs' names put the file's handler in place of any handler
that writes to the terminal, and redirects the loggers that exist already. Warnings are captured
into the same file, but for cloudddp's own. cloudddp's own messages do not go through these loggers.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import TextIO

SDK_LOGGERS = ("azure", "mlflow", "msal", "msrest", "urllib3", "botocore", "boto3", "s3transfer", "py.warnings")
"""The loggers (and their children) whose messages go to the file."""


class _Diversion:
    """Where the SDKs' messages go while diverted, and whether any came."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.handler: logging.Handler | None = None

    def written(self) -> bool:
        return self.path is not None and self.path.is_file() and self.path.stat().st_size > 0


_DIVERSION = _Diversion()


def _is_sdk(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in SDK_LOGGERS)


def _to_terminal(handler: logging.Handler) -> bool:
    stream = getattr(handler, "stream", None)
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and (stream in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__))
    )


class _DivertingLogger(logging.Logger):
    """A logger that, under an SDK's name while diverted, writes to the file instead of the terminal."""

    def addHandler(self, hdlr: logging.Handler) -> None:
        if _DIVERSION.handler is not None and _is_sdk(self.name) and _to_terminal(hdlr):
            _redirect(self)
            return
        super().addHandler(hdlr)


def _redirect(logger: logging.Logger) -> None:
    """``logger`` writes to the file, not to the terminal (its other handlers are kept)."""
    handler = _DIVERSION.handler
    assert handler is not None
    for old in [h for h in logger.handlers if _to_terminal(h)]:
        logging.Logger.removeHandler(logger, old)
    if handler not in logger.handlers:
        logging.Logger.addHandler(logger, handler)
    logger.propagate = False


def divert(path: Path) -> None:
    """From now on, the SDKs' log messages and Python warnings go to ``path`` (appended, created on the first
    message), not to the terminal."""
    if _DIVERSION.handler is not None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    _DIVERSION.path, _DIVERSION.handler = path, handler
    logging.setLoggerClass(_DivertingLogger)
    _divert_warnings()
    for name in SDK_LOGGERS:
        _redirect(logging.getLogger(name))
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if _is_sdk(name) and isinstance(logger, logging.Logger) and logger.handlers:
            _redirect(logger)


def _divert_warnings() -> None:
    """Python warnings raised outside cloudddp (an SDK's deprecation and experimental notices) go to the file;
    cloudddp's own stay on the terminal."""
    shown = warnings.showwarning
    own = str(Path(__file__).resolve().parents[1])
    sdk = logging.getLogger("py.warnings")

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if str(Path(filename).resolve()).startswith(own):
            shown(message, category, filename, lineno, file, line)
        else:
            sdk.warning("%s", warnings.formatwarning(message, category, filename, lineno).rstrip())

    warnings.showwarning = show


def diverted_to() -> Path | None:
    """The file the SDKs' messages went to, when any did since :func:`divert`; None otherwise."""
    return _DIVERSION.path if _DIVERSION.written() else None
