"""`python -m harness …`: one module per subcommand, plus the machine check, the change map
and docker runs."""
