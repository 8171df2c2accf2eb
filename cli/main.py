"""The installed ``dr`` entry point (pyproject: ``dr = "cli.main:main"``): the app of cli/app.py, every command
registered, with SIGTERM turned into a clean exit.

    dr --help
    dr round --preset tiny --store ./store --run-id demo
"""

from __future__ import annotations

from cli.app import app, install_signal_handlers

__all__ = ["app", "main"]


def main() -> None:
    install_signal_handlers()
    app()


if __name__ == "__main__":
    main()
