"""The installed ``dr`` entry point: dr_core's commands plus the Prefect-orchestrated ones.

    dr --help
"""

from __future__ import annotations

from dr_core.cli import app


def main() -> None:
    app()


if __name__ == "__main__":
    main()
