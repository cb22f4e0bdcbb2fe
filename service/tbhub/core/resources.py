"""Files tbhub ships beside the package (the Alembic migrations, the nginx template) and in it
(the web pages' templates and static files).

They live at the top of the source tree (alembic/, nginx/) so that operators find them;
tbhub runs from that tree (`pip install -e .`, as the Makefile and the image do).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOT = PACKAGE_ROOT.parents[1]


def alembic_dir() -> Path:
    return SOURCE_ROOT / "alembic"


def nginx_template() -> Path:
    return SOURCE_ROOT / "nginx" / "tbhub.conf.j2"


def web_templates() -> Path:
    return PACKAGE_ROOT / "web" / "templates"


def web_static() -> Path:
    return PACKAGE_ROOT / "web" / "static"
