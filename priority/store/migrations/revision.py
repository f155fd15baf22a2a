"""Developer helper: autogenerate a new migration from the models against a scratch database.

``python -m hai_slurm.priority.store.migrations.revision "add foo"`` migrates a throwaway SQLite
file to head, compares it with the models and writes the difference as a new revision file.
Review the result before adding it: autogenerate misses renames and server defaults.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from alembic import command
from alembic.script import ScriptDirectory

from hai_slurm.priority.store.engine import alembic_config, make_engine, upgrade


def main(argv: list[str]) -> int:
    """Write a new revision named by ``argv[0]``; returns the exit code."""
    if len(argv) != 1:
        print("usage: python -m hai_slurm.priority.store.migrations.revision MESSAGE")
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        engine = upgrade(make_engine(f"sqlite:///{Path(scratch) / 'scratch.db'}"))
        config = alembic_config()
        heads = ScriptDirectory.from_config(config).get_heads()
        rev_id = f"{int(heads[0]) + 1:04d}" if heads else "0001"
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.revision(config, message=argv[0], autogenerate=True, rev_id=rev_id)
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
