"""Errors trace_diagnose raises for bad input or a stopped run.

Every error is a `DiagnoseError`; the CLI prints its message on one line and exits non-zero
(set `TRACE_DEBUG=1` for the traceback). Messages name the file and the problem, and where
there is one, the way out.
"""

from __future__ import annotations


class DiagnoseError(Exception):
    """Base class: a problem the user can fix (exit code 1)."""

    exit_code = 1


class IngestError(DiagnoseError):
    """A trajectory file that is missing, unreadable or broken."""


class UnknownFormatError(IngestError):
    """A file whose format could not be recognised."""


class ConfigError(DiagnoseError):
    """Conflicting or invalid options, or a missing run-directory artifact."""


class LLMError(DiagnoseError):
    """The LLM layer could not be set up (missing litellm, unknown pricing, ...)."""


class LLMUnavailable(LLMError):
    """The model cannot be used at all: bad credentials, unknown model, unreachable endpoint.

    Retrying would not help and going on would label nothing, so the command stops at once
    (exit code 3) with the cause and the option to change."""

    exit_code = 3


class IncompleteDiagnosis(DiagnoseError):
    """Too many trajectories stayed unlabelled for the diagnosis to mean anything (exit code
    4). The label runs and, when something was labelled, the report are still written."""

    exit_code = 4


class BudgetExceeded(DiagnoseError):
    """`--max-cost` reached. Finished calls are cached; rerun with a higher cap to resume."""

    exit_code = 2


class CacheMiss(DiagnoseError):
    """`--cache-only` needed a call that is not in the cache (resumable, exit code 2)."""

    exit_code = 2
