"""`python -m groundstate.cli ...` runs the command line."""

from groundstate.cli import main

main()
