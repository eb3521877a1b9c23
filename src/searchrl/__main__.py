"""`python -m searchrl …` runs the `searchrl` command."""

from searchrl.cli import main

main()
