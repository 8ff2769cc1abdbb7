"""`python -m offload` runs the CLI, as the `offload` console script does."""
from offload.cli.app import main

main()
