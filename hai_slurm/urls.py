"""Service URLs in messages: :func:`mask_password`, standard library only.

The one masking function of the suite: ``hai-slurm config check`` (which must not need
SQLAlchemy) and the store's error messages (:func:`hai_slurm.priority.store.engine.masked`) both
use it, so a database or Redis password never reaches a terminal or a log.
"""

from __future__ import annotations

import re

MASK = "***"
_QUERY_PASSWORD = re.compile(r"([?&](?:password|pass|passwd)=)[^&#]*", re.IGNORECASE)


def mask_password(url: str) -> str:
    """``url`` with the password of its user part (``scheme://user:PASS@host``) and any
    ``password=`` query parameter replaced by ``***``; other URLs come back unchanged.

    A ``password=`` parameter is masked first; then the user part ends at the last ``@`` left,
    so a password holding an unescaped ``@``, ``?``, ``#`` or ``/`` (SQLAlchemy takes them
    raw) is masked whole; another query parameter holding an ``@`` makes it mask more than the
    password, never less. A path right after
    ``://`` (``sqlite:///x@y.db``) has no user part.
    """
    url = _QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, url)   # first: it may hold "@"
    scheme, sep, rest = url.partition("//")  # "//", not "://": a typo'd scheme is masked too
    if sep:
        at = rest.rfind("@")
        userinfo = rest[:at] if at >= 0 else ""
        if not userinfo.startswith("/") and ":" in userinfo:
            user = userinfo.partition(":")[0]
            url = f"{scheme}//{user}:{MASK}@{rest[at + 1:]}"
    return url


def has_password(url: str) -> bool:
    """True when :func:`mask_password` would hide something in ``url``."""
    return mask_password(url) != url
