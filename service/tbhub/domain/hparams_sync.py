"""After a run's hyperparameters or metrics changed and that change committed: bring the
run's hparams event file (storage/hparams_file.py) up to date, and keep on the run why it
could not be (`hparams_file_error`, shown by the API and the run page). The API answers
2xx all the same: the registry holds the values, the file follows at the next change."""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import UnsafePath
from tbhub.core.models import RetentionState, Run
from tbhub.storage.hparams_file import NotOurs, write_hparams_file

log = logging.getLogger("tbhub.runs")


def sync_hparams_file(
    factory: sessionmaker[Session],
    *,
    storage_root: Path,
    project: str,
    run: Run,
    fresh: bool = False,
) -> str | None:
    """Write the file for `run` (as committed); the error kept on the run, or None. A
    `fresh` run was registered just now, in a directory made for it."""
    if run.retention_state != RetentionState.present:
        return run.hparams_file_error
    if fresh and not run.hparams and not run.metrics:
        return None  # a run just registered without values: no file to write or check
    try:
        write_hparams_file(
            storage_root,
            project,
            run.path,
            hparams=run.hparams,
            metrics=run.metrics,
            started=run.created_at.timestamp(),
            now=run.updated_at.timestamp(),
        )
        error = None
    except NotOurs as exc:
        error = str(exc)
    except UnsafePath:
        error = "the run's directory is behind a symlink"
    except OSError as exc:
        error = f"cannot write the hparams file: {exc.strerror or exc}"
    if error is not None:
        log.warning("%s/%s: %s", project, run.path, error)
    if error != run.hparams_file_error:
        with transaction(factory) as session:
            row = session.get(Run, run.id)
            if row is not None:
                row.hparams_file_error = error[:255] if error else None
        run.hparams_file_error = error
    return error
