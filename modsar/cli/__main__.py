"""`python -m modsar.cli`: the same as the `modsar` command."""

from modsar.cli import main

main()
