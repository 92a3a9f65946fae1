"""One module per CLI verb; each has `name`, `help`, `prepare_parser(parser)` and `run(args) -> exit code`."""
