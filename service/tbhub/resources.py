"""Files tbhub ships beside the package: the Alembic migrations and the nginx template.

They live at the top of the source tree (alembic/, nginx/) so that operators find them;
tbhub runs from that tree (`pip install -e .`, as the Makefile and the image do).
"""

from __future__ import annotations

from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[2]


def alembic_dir() -> Path:
    return SOURCE_ROOT / "alembic"


def nginx_template() -> Path:
    return SOURCE_ROOT / "nginx" / "tbhub.conf.j2"
