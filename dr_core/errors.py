"""The one base of every dynamicrubric error: ``DRError``.

Each error also keeps the built-in kind it was before (``DataError`` is a ``ValueError``, ``EngineError`` a
``RuntimeError``, ``OutputPathError`` an ``OSError``), so retry rules that read the built-in kinds
(``tasks.options.BAD_INPUT``) keep their meaning. The CLI prints any ``DRError`` as one line and exits 2
(``cli/output.py``); ``--debug`` shows its traceback instead.

    from dr_core.errors import DRError
    try:
        ...
    except DRError as exc:  # bad data, configuration, model, engine, store, query, service or launch
        print(exc)
"""

from __future__ import annotations


class DRError(Exception):
    """An error raised by dynamicrubric's own code, with a message meant for its user."""
