"""The harness: exhaustive exact checkers, and the `georecall` command line."""
