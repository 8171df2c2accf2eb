"""The ``dr`` command line (typer and rich live here only). Nothing imports this package."""
