"""`python -m offload` runs the CLI, as the `offload` console script does."""
from offload.cli import main

main()
